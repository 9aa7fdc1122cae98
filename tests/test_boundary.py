"""The trust boundary in the tree: the student package (attncourse/) imports nothing of the judge's side, and the
package a student installs carries no judge (docs/GRADING.md, "The code, by zone")."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# the course checkout's packages that are not the student's: the judge, the instructor's tools, the build, the data
NOT_STUDENTS = ("judge", "instructor", "authoring", "graders", "deploy", "bench", "tests")


def arrows(source: str, name: str = "<module>") -> list[str]:
    """Every import in ``source`` (at any depth: one inside a function counts) of a package in :data:`NOT_STUDENTS`:
    ``import x``, ``from x import y``, and ``importlib.import_module("x")`` / ``__import__("x")`` with a literal name."""
    found = []
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mods = [node.module or ""] if node.level == 0 else []
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and ((isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                   or (isinstance(node.func, ast.Name) and node.func.id in ("__import__", "import_module")))):
            mods = [node.args[0].value]
        else:
            continue
        found += [f"{name}:{node.lineno}: {m}" for m in mods if m.split(".")[0] in NOT_STUDENTS]
    return found


def test_the_arrow_finder_sees_every_way_of_importing():
    """The finder itself: each way a module could reach the judge is found (inside a function too), and the honest
    base — the same imports of the student package's own modules — is not."""
    tricks = ("from judge.verdict import judge_record\n"
              "def later():\n    import judge.sandbox\n"
              "    import importlib; importlib.import_module('judge.verdict')\n"
              "    __import__('instructor.task')\n")
    honest = tricks.replace("judge.", "attncourse.").replace("instructor.", "attncourse.")
    assert [a.split(": ")[1] for a in arrows(tricks)] == ["judge.verdict", "judge.sandbox", "judge.verdict",
                                                          "instructor.task"]
    assert arrows(honest) == []
    assert arrows("from .verdicts import VerdictProcess\nfrom ..protocol import cases\n") == []


def test_the_student_package_imports_nothing_of_the_judge():
    """No module of attncourse/ imports judge/, instructor/ or the course's build (the kernel side is handed the
    judge, or asks it in a process of its own: attncourse/kernel/verdicts.py, `python -m judge.selfcheck`)."""
    modules = sorted((ROOT / "attncourse").rglob("*.py"))
    assert len(modules) > 10
    found = [a for p in modules for a in arrows(p.read_text(), str(p.relative_to(ROOT)))]
    assert not found, found


@pytest.mark.slow
def test_the_students_wheel_carries_no_judge(tmp_path):
    """The wheel built from the course's pyproject.toml (with every package of the checkout beside it) holds
    attncourse and its metadata, nothing of the judge: neither judge/ nor the sandbox's fork server."""
    import shutil
    import subprocess
    import sys
    import zipfile

    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for d in ROOT.iterdir():
        if d.is_dir() and (d / "__init__.py").is_file():
            shutil.copytree(d, src / d.name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.pt"))
    assert (src / "judge" / "forkserver.py").is_file()
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", str(src),
                        "-w", str(tmp_path / "dist")], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("attncourse-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"attncourse", next(t for t in tops if t.endswith(".dist-info"))}, tops
    assert "attncourse/kernel/grader.py" in names
    assert not [n for n in names if "judge" in n.split("/")[0] or n.endswith("forkserver.py")], names


def test_kernel_limits_are_settings_of_nbgraders_config(monkeypatch):
    """A grading kernel's budget is a traitlet of the kernel manager nbgrader's Execute makes (so nbgrader_config.py
    sets it: ``c.SandboxedKernelManager.mem_mb``); by default what the environment says (``./course grade`` passes
    the instructor's ``ATTNCOURSE_KERNEL_*`` on), else the course's defaults — and the kernel's launcher is given
    the configured value. (Unsandboxed, by name: no bubblewrap and no fork server are needed to read the settings.)"""
    from traitlets.config import Config

    from judge import kernels, sandbox

    monkeypatch.setenv(sandbox.SANDBOX_ENV, "off")
    for name in (sandbox.MEM_ENV, sandbox.TMP_ENV, sandbox.TASKS_ENV):
        monkeypatch.delenv(name, raising=False)
    km = kernels.SandboxedKernelManager(kernel_name="python3")
    assert (km.mem_mb, km.tmp_mb, km.tasks) == (sandbox.DEFAULT_MEM_MB, sandbox.DEFAULT_TMP_MB, sandbox.DEFAULT_TASKS)
    monkeypatch.setenv(sandbox.MEM_ENV, "3000")
    assert kernels.SandboxedKernelManager(kernel_name="python3").mem_mb == 3000      # the environment's, as before
    c = Config()
    c.SandboxedKernelManager.mem_mb = 1234
    c.SandboxedKernelManager.tasks = 64
    km = kernels.SandboxedKernelManager(kernel_name="python3", config=c)
    assert (km.mem_mb, km.tmp_mb, km.tasks) == (1234, sandbox.DEFAULT_TMP_MB, 64)     # the config's, over it
    cmd = km.format_kernel_cmd()
    assert cmd[cmd.index("--mem-mb") + 1] == "1234", cmd


def test_an_in_process_grader_asks_the_checkouts_judge_in_a_process_of_its_own(tmp_path, monkeypatch, capsys):
    """Grader(section) with no judge handed in (an instructor's source notebook, check_now) gets each verdict from
    ``python -m judge.selfcheck --verdicts`` in the course checkout: the same words as the judge's own function
    (a correct answer ✓, a known mistake named). A checkout whose judge does not answer is said so, with its last
    words, never judged here."""
    import shutil

    from attncourse.kernel.grader import Grader, GradingError
    from attncourse.kernel.verdicts import JudgeUnavailable, VerdictProcess
    from authoring.references import define
    from graders import load_section
    from judge.verdict import judge_record

    section = "02_qkv_by_hand"
    ex = load_section(section).exercise("softmax")
    case = ex.cases[0].name
    wrong = next(m for m in ex.mistakes)
    monkeypatch.setenv("ATTNCOURSE_ROOT", str(ROOT))
    asked, own = Grader(section), Grader(section, judge=judge_record)
    assert isinstance(asked._judge, VerdictProcess)
    try:
        asked.check(ex.name, case, define(ex, ex.reference))
        assert f"✓ {ex.name}" in capsys.readouterr().out
        said = []
        for grader in (own, asked):   # every known mistake on every case: the judge's words, from either
            for m in ex.mistakes:
                for c in ex.cases:
                    try:
                        grader.check(ex.name, c.name, define(ex, m.code))
                    except GradingError as err:
                        said.append(str(err))
        assert len(said) % 2 == 0 and said[:len(said) // 2] == said[len(said) // 2:], said
        assert any((wrong.shows or wrong.message) in s for s in said), said
    finally:
        asked._judge.close()

    course = tmp_path / "course"   # a checkout whose judge stops before it answers
    (course / "graders" / "data").mkdir(parents=True)
    shutil.copy(ROOT / "graders" / "data" / f"{section}.pt", course / "graders" / "data")
    (course / "nbgrader_config.py").write_text("")
    (course / "judge").mkdir()
    (course / "judge" / "__init__.py").write_text("")
    (course / "judge" / "selfcheck.py").write_text("raise SystemExit('this judge is broken')\n")
    monkeypatch.setenv("ATTNCOURSE_ROOT", str(course))
    broken = Grader(section)
    with pytest.raises(JudgeUnavailable, match=r"stopped \(exit 1\): this judge is broken"):
        broken.check(ex.name, case, define(ex, ex.reference))
