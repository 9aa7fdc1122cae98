"""Sandboxed grading: kernels under bubblewrap see only the submission and Python: no reference data."""
from __future__ import annotations

import pytest

from judge.sandbox import KERNEL_ENV_ALLOW
from tests.harness import CORPUS_CELL, CORPUS_SECTION, Course, cell_by_id, slim, total_points, with_cells

pytestmark = pytest.mark.xdist_group("sandbox")


def _need_bwrap():
    from judge.sandbox import bwrap_works

    ok, why = bwrap_works()
    if not ok:
        pytest.skip(f"sandbox unavailable here: {why}")


# kernel code: how many MB a folder took before it refused (shared with test_sandbox_privilege)
FILL = r'''
def _fill(path, mb):
    done = 0
    try:
        with open(path, "wb") as f:
            for done in range(1, mb + 1):
                f.write(b"\0" * (1 << 20))
                f.flush()
    except OSError:
        done -= 1
    return done
'''
SPY = FILL + '''
import json as _json, os as _os, socket as _socket
def _spy(course_paths):
    seen = {"paths": {p: _os.path.exists(p) for p in course_paths}}
    try:
        _socket.create_connection(("1.1.1.1", 53), timeout=2)
        seen["network"] = True
    except OSError:
        seen["network"] = False
    try:
        pid = _os.fork()
        if pid == 0:
            _os._exit(0)
        seen["fork"] = True
    except OSError:
        seen["fork"] = False
    seen["env"] = dict(_os.environ)
    seen["cwd"], seen["cwd_files"] = _os.getcwd(), sorted(_os.listdir("."))
    seen["tmp_mb"] = _fill("/tmp/fill.bin", 400)
    seen["cwd_mb"] = _fill("fill.bin", 400)
    for p in ("/tmp/fill.bin", "fill.bin"):
        try:
            _os.unlink(p)
        except OSError:
            pass
    _os.symlink("/etc/passwd", "02_qkv_by_hand.ipynb.link")
    open("left_behind.txt", "w").write("kernel files never come back")
    print("SEEN " + _json.dumps(seen))
'''


@pytest.mark.slow
def test_sandboxed_kernel_sees_only_its_submission(tmp_path):
    """From inside a sandboxed grading kernel: no course file, no network, no new process, no secret in the
    environment, size-limited /tmp and working folder, and nothing it writes comes back to the grader."""
    _need_bwrap()
    import json

    from instructor.engine import grade_section as grade

    section = CORPUS_SECTION
    course = Course(tmp_path / "c", [section])
    course.generate(section)
    src = slim(course.source_nb(section))
    paths = [str(course.root / p) for p in ("source", "gradebook.db", "submitted", "graders/data", "autograded")]
    spy = cell_by_id(src, CORPUS_CELL).source + SPY + f"_spy({paths!r})\n"
    course.submit("spy", section, with_cells(src, {CORPUS_CELL: spy}))
    report = grade(section, course.root, log=lambda *a: None,
                   extra_env={"ATTNCOURSE_SANDBOX": "1", "PGPASSWORD": "s3cret-pg", "GITHUB_TOKEN": "s3cret-gh"})
    e = report["students"]["spy"]
    assert e["score"] == e["max_score"] and e["max_score"], e
    text = "\n".join(o.get("text", "") for c in course.autograded_nb(section, "spy").cells
                     for o in c.get("outputs", []) if o.get("output_type") == "stream")
    seen = json.loads(text.split("SEEN ", 1)[1].split("\n", 1)[0])
    assert seen["paths"] == {p: False for p in paths}, seen["paths"]
    assert seen["network"] is False and seen["fork"] is False
    assert not [v for v in seen["env"].values() if "s3cret" in v or str(course.root) in v], seen["env"]
    fixed = {"PATH", "HOME", "TMPDIR", "MPLCONFIGDIR", "PYTHONNOUSERSITE", "PYTHONDONTWRITEBYTECODE"}
    by_ipykernel = {"TERM", "CLICOLOR", "CLICOLOR_FORCE", "FORCE_COLOR", "PAGER", "GIT_PAGER", "PYDEVD_USE_FRAME_EVAL",
                    "PWD"}
    assert set(seen["env"]) <= set(KERNEL_ENV_ALLOW) | fixed | by_ipykernel, sorted(seen["env"])
    assert seen["cwd_files"] == [".attncourse-inputs.pt"], seen["cwd_files"]
    assert 100 <= seen["tmp_mb"] < 300 and 100 <= seen["cwd_mb"] < 300, (seen["tmp_mb"], seen["cwd_mb"])
    folder = course.root / "autograded" / "spy" / section
    assert sorted(p.name for p in folder.iterdir()) == [f"{section}.ipynb", "timestamp.txt"]
    print("a sandboxed kernel sees:", {k: v for k, v in seen.items() if k != "paths"})


def test_bwrap_command_hides_the_course(tmp_path):
    """The command binds system and Python read-only, the working folder as a tmpfs, no course folder, and
    nothing of the host writable (a kernel's sockets are the grader's, handed over as descriptors)."""
    from judge.sandbox import bwrap_command, kernel_env
    from tests.harness import ROOT

    (tmp_path / ".attncourse-inputs.pt").write_bytes(b"x")
    cmd = bwrap_command(["python"], work=str(tmp_path), env=kernel_env({}, "/tmp"))
    assert cmd[0].endswith("bwrap") and "--unshare-all" in cmd and "--clearenv" in cmd and cmd[-1] == "python"
    assert not {"--bind", "--bind-try", "--bind-fd"} & set(cmd)        # nothing of the host writable
    i = cmd.index("--tmpfs", cmd.index(str(tmp_path)) - 2)
    assert cmd[i + 1] == str(tmp_path) and cmd[i - 2] == "--size"     # the working folder: a size-limited tmpfs
    assert ["--ro-bind", str(tmp_path / ".attncourse-inputs.pt")] == cmd[i + 2:i + 4]
    bound = {cmd[j + 2] for j, a in enumerate(cmd) if a in ("--bind", "--ro-bind")}
    course_parts = [str(ROOT / p) for p in ("source", "graders", "submitted", "autograded", "gradebook.db")]
    assert not [b for b in bound if b in course_parts or b == str(ROOT)], bound


def _grade_cmd(root, *extra, env=None):
    import subprocess
    import sys

    from tests.harness import ROOT, course_env

    return subprocess.run([sys.executable, "-m", "instructor.grade", CORPUS_SECTION, "--root", str(root), *extra],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, env=course_env(env))


@pytest.mark.slow
def test_no_grading_without_the_sandbox_unless_asked_by_name(tmp_path):
    """Where bubblewrap cannot run, ./course grade refuses in one line (Dask and serial), plain nbgrader starts
    no kernel; --unsandboxed grades, and the report says so."""
    _need_bwrap()
    from tests.harness import Course

    course = Course(tmp_path / "c", [CORPUS_SECTION])
    course.generate(CORPUS_SECTION)
    course.submit("a", CORPUS_SECTION, slim(course.source_nb(CORPUS_SECTION)))
    broken = {"ATTNCOURSE_BWRAP": "/nonexistent/bwrap"}
    for extra in ((), ("--serial",)):
        p = _grade_cmd(course.root, *extra, env=broken)
        assert p.returncode == 2, (extra, p.stdout, p.stderr)
        lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("./course grade: grading refused") and "--unsandboxed" in lines[0]
        assert not (course.root / "autograded" / "a").exists()
    import subprocess
    import sys

    from tests.harness import course_env

    p = subprocess.run([sys.executable, "-m", "nbgrader", "autograde", CORPUS_SECTION, "--create", "--force"],
                       cwd=course.root, capture_output=True, text=True, timeout=600, env=course_env(broken))
    assert "grading refused" in p.stdout + p.stderr
    nb = course.root / "autograded" / "a" / CORPUS_SECTION / f"{CORPUS_SECTION}.ipynb"
    assert not nb.exists(), "a kernel ran without the sandbox"
    p = _grade_cmd(course.root, "--serial", "--unsandboxed", env=broken)
    assert p.returncode == 0, p.stderr
    assert "kernels NOT sandboxed (--unsandboxed" in p.stdout
    total = total_points(CORPUS_SECTION)
    assert [ln.split() for ln in p.stdout.splitlines() if ln.startswith("a ")] == [["a", f"{total:g}", "/", f"{total:g}"]], p.stdout
    # the class report, made later on a machine whose sandbox works, says how the class WAS graded (it read
    # "kernels sandboxed" when it asked the machine at report time)
    from instructor.report import collect
    from judge.sandbox import sandbox_status

    assert sandbox_status()[0] is True
    rep = collect(course.root, CORPUS_SECTION)["report"]
    assert rep["sandboxed"] is False and "1 of 1 graded submissions NOT sandboxed" in rep["sandbox"], rep["sandbox"]


def test_a_symlinked_venv_runs_sandboxed(tmp_path):
    """A .venv reached through a link (moved, or a shared environment) still starts the sandbox; binding only
    the real paths, as before, does not (the pairing shows the test can fail)."""
    _need_bwrap()
    import os
    import subprocess
    import sys

    link = tmp_path / "venv"
    link.symlink_to(os.path.realpath(sys.prefix))
    py = link / "bin" / os.path.basename(sys.executable)
    probe = ("import os, judge.sandbox as s\n"
             "{patch}print(s.bwrap_works()[0])\n")
    patch = "s._seen_at = lambda p: [os.path.realpath(p)]\n"
    env = {k: v for k, v in os.environ.items() if k != "ATTNCOURSE_BWRAP"}
    got = [subprocess.run([str(py), "-c", probe.format(patch=x)], capture_output=True, text=True, env=env,
                          timeout=120).stdout.strip() for x in ("", patch)]
    assert got == ["True", "False"], got
