"""Nothing a kernel writes outlives it: no folder of the host is writable from a kernel, and what the grader removes
cannot be kept by depth, names or modes.

A kernel's socket folder was a host folder under the grader's $TMPDIR bound read-write: a tree 1,200 folders deep
with the filesystem filled at its bottom survived ``shutil.rmtree(…, ignore_errors=True)`` (RecursionError), and
the next ``./course grade`` graded nobody. A kernel's channels are now listening sockets the kernel manager makes
in a folder of its own and hands over as descriptors (zmq's ZMQ_USE_FD): a kernel writes only its own tmpfs.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from judge import sandbox, zygote

pytestmark = pytest.mark.xdist_group("sandbox")

DEPTH = 1200
# every mount a kernel may write, and what it is (its own tmpfs, or the host's filesystem)
WRITABLE = r"""
import json, os, stat
rw = []
for line in open("/proc/self/mountinfo"):
    f = line.split()
    fstype = f[f.index("-") + 1]
    if "rw" in f[5].split(",") and fstype not in ("proc", "sysfs", "devpts", "mqueue"):
        try:
            if stat.S_ISCHR(os.stat(f[4]).st_mode):   # /dev/null, /dev/tty, a GPU: devices, no storage
                continue
        except OSError:
            pass
        rw.append([f[4], fstype])
print(json.dumps(rw))
"""
# the attack: a tree DEPTH folders deep in every folder the kernel may write (and the folder of its sockets, as
# zmq names it), the filesystem filled at its bottom (64 MB at most here)
DEEP_TREE = r'''
import os as _o
def _deep(top):
    try:
        here = _o.open(top, _o.O_RDONLY)
        for _i in range(''' + str(DEPTH) + r'''):
            _o.mkdir("d", dir_fd=here)
            nxt = _o.open("d", _o.O_RDONLY, dir_fd=here)
            _o.close(here)
            here = nxt
        with open(_o.open("bottom", _o.O_WRONLY | _o.O_CREAT, 0o600, dir_fd=here), "wb") as f:
            for _ in range(64):
                f.write(b"\0" * (1 << 20))
                f.flush()
    except OSError:
        pass
try:   # the folder of its sockets, as zmq names it (the grader's: in the kernel's view, a path under its own /tmp)
    import zmq as _z
    _sockets = _o.path.dirname(get_ipython().kernel.shell_stream.socket.getsockopt(_z.LAST_ENDPOINT).decode()[6:])
    _o.makedirs(_sockets, exist_ok=True)
except Exception:
    _sockets = "."
for _top in (".", "/tmp", "/dev/shm", _sockets):
    _deep(_top)
'''


def _need_bwrap():
    ok, why = sandbox.bwrap_works()
    if not ok:
        pytest.skip(f"sandbox unavailable here: {why}")


def _tree(top: Path, outside: Path, depth: int = DEPTH):
    """A tree ``depth`` folders deep under ``top`` (longer than a path may be) with odd names, a closed folder and
    links to ``outside``."""
    here = os.open(top, os.O_RDONLY)
    for i in range(depth):
        name = "d" if i % 3 else "a name\nwith -rf and ünïcode"
        os.mkdir(name, dir_fd=here)
        nxt = os.open(name, os.O_RDONLY, dir_fd=here)
        os.close(here)
        here = nxt
    with open(os.open("bottom", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=here), "wb") as f:
        f.write(b"\0" * 1024)
    os.symlink(outside, "link-out", dir_fd=here)
    os.close(here)
    (top / "link-out").symlink_to(outside)
    closed = top / "closed"
    closed.mkdir()
    (closed / "inside").write_text("x")
    closed.chmod(0)


def test_remove_tree_takes_any_depth_name_or_mode(tmp_path):
    """remove_tree removes a tree 1,200 folders deep with odd names, a closed folder and a link (not followed);
    shutil.rmtree(ignore_errors=True), which cleaned up before, raises RecursionError on the same tree."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("not the tree's")
    old, new = tmp_path / "old", tmp_path / "new"
    for top in (old, new):
        top.mkdir()
        _tree(top, outside)
    with pytest.raises(RecursionError):
        shutil.rmtree(old, ignore_errors=True)
    assert old.exists()
    for top in (new, old):
        sandbox.remove_tree(str(top))
        assert not os.path.lexists(top)
    assert (outside / "keep").read_text() == "not the tree's"


@pytest.fixture(scope="module")
def zyg():
    _need_bwrap()
    z = zygote.get(sandbox.kernel_env({}, "/tmp"), 64, 2048)
    assert z is not None, zygote.why_not()
    return z


def test_a_kernel_may_write_only_its_own_tmpfs(zyg):
    """Every mount a kernel may write is a tmpfs of its own, in a forked kernel and in a fresh sandbox; the
    pairing: the same question in a sandbox that binds a host folder read-write, as the socket folder was bound,
    names it."""
    env = sandbox.kernel_env({}, "/tmp")
    rc, out, err = zyg.run(WRITABLE, 64, 2048, env)
    assert rc == 0, err
    forked = json.loads(out.strip().splitlines()[-1])
    fresh = json.loads(sandbox.run_sandboxed(WRITABLE).stdout.strip().splitlines()[-1])
    for seen in (forked, fresh):
        assert seen and {fstype for _, fstype in seen} == {"tmpfs"}, seen
    host = Path(os.environ.get("TMPDIR", "/tmp"))
    cmd = sandbox.bwrap_command([sys.executable, "-S", "-c", WRITABLE], env=env)
    i = cmd.index("--remount-ro")
    cmd[i:i] = ["--bind", str(host), "/run/sockets"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, pass_fds=cmd.fds)
    cmd.close()
    assert "/run/sockets" in [m for m, _ in json.loads(p.stdout.strip().splitlines()[-1])], p.stderr


@pytest.mark.slow
def test_a_deep_tree_leaves_nothing_and_the_next_run_grades_everyone(tmp_path):
    """A notebook that builds a tree 1,200 folders deep in every folder it may write and fills it, graded beside
    an honest one, twice: both runs grade both, the honest one to full marks, and the grading runs leave nothing
    behind in the grader's temporary folder (a kernel's socket folder was there)."""
    _need_bwrap()
    import nbformat

    from tests.harness import CORPUS_SECTION, Course, course_env, slim

    section = CORPUS_SECTION
    course = Course(tmp_path / "c", [section])
    course.generate(section)
    course.submit("honest", section, slim(course.source_nb(section)))
    attack = slim(course.source_nb(section))
    attack.cells.insert(1, nbformat.v4.new_code_cell(DEEP_TREE))
    course.submit("attacker", section, attack)
    scratch = tmp_path / "grader-tmp"
    scratch.mkdir()
    env = course_env({"TMPDIR": str(scratch)})
    scores = []
    for _ in range(2):
        p = subprocess.run([sys.executable, "-m", "nbgrader", "autograde", section, "--create", "--force"],
                           cwd=course.root, env=env, capture_output=True, text=True, timeout=900)
        assert p.returncode == 0, p.stderr[-3000:]
        assert "does not hold" not in p.stderr, p.stderr[-2000:]   # (graded by the default path)
        scores.append({s: course.scores(section, s) for s in ("honest", "attacker")})
    for run in scores:
        assert all(got == full for got, full in run["honest"].values()), run
        assert set(run["attacker"]) == set(run["honest"]), run        # graded, cell by cell
    assert not list(scratch.iterdir()), list(scratch.iterdir())
