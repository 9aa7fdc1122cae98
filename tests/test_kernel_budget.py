"""Each grading kernel's budget of what the machine shares: tasks and memory, as root and as an unprivileged grader.

A red team's notebook made 2,991 threads in 0.57 s (nothing limited them: no pids cgroup, and RLIMIT_NPROC does not
hold where the grader is root), and every student graded beside it scored 0; another held 3 GB under a 512 MB
limit with ``memfd_create`` and shared anonymous mappings (RLIMIT_DATA counts private memory only) and the OOM
killer took two Dask workers, never the kernel.  Here each attack runs in a kernel of each path (a fork server's
child, a fresh sandbox through its launcher) beside an honest kernel, and is paired with the same code where no
budget applies (the dangerous answer).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from judge import sandbox, zygote

pytestmark = pytest.mark.xdist_group("sandbox")

NOBODY = 65534
ENV = sandbox.kernel_env({}, "/tmp")
TASKS = 128
MEM_MB = 2048   # (a forked kernel starts with the fork server's preloaded torch: ~0.5 GB of it)
CAP = 3000   # the attack's own bound (nothing else would stop it where no budget applies)

# as many threads as it can get (stopping at CAP), held for HOLD seconds: what a sibling must survive
THREADS = r"""
import json, sys, threading, time
threading.stack_size(65536)
ev, n, err = threading.Event(), 0, ""
try:
    while n < %(cap)d:
        threading.Thread(target=ev.wait, daemon=True).start()
        n += 1
except Exception as exc:
    err = type(exc).__name__
print(json.dumps({"threads": n, "refused": err}), flush=True)
time.sleep(%(hold)s)
ev.set()
"""
# an honest kernel's threads: a pool of 16 doing work, as torch's or ipykernel's would
HONEST = r"""
import json, threading
from concurrent.futures import ThreadPoolExecutor
with ThreadPoolExecutor(16) as pool:
    total = sum(pool.map(lambda i: sum(range(10000 + i)), range(64)))
print(json.dumps({"ok": total > 0, "threads": threading.active_count()}))
"""
# memory no RLIMIT_DATA counts, each way up to 256 MB touched (MB held per way), then what the kernel is to the OOM killer
SHARED = r"""
import ctypes, json, mmap, os
MB = 1 << 20
libc = ctypes.CDLL(None, use_errno=True)
def touch(m, n):
    for i in range(0, n * MB, 4096):
        m[i] = 1
    return n
def hold(make):
    try:
        return make()
    except (OSError, ValueError, MemoryError) as exc:
        return type(exc).__name__
def memfd():
    fd = os.memfd_create("hog")
    os.ftruncate(fd, 256 * MB)
    return touch(mmap.mmap(fd, 256 * MB), 256)
def shared_anonymous():
    return touch(mmap.mmap(-1, 256 * MB), 256)
def dev_zero():
    with open("/dev/zero", "r+b") as f:
        return touch(mmap.mmap(f.fileno(), 256 * MB), 256)
def sysv(call, *args):
    rc = getattr(libc, call)(*args)
    return rc if rc < 0 else "made"
def private():   # counted by RLIMIT_DATA: 4 GB of address space (not touched) is over it
    mmap.mmap(-1, 4096 * MB, flags=mmap.MAP_PRIVATE)
    return "mapped"
held = {"memfd": hold(memfd), "shared_anonymous": hold(shared_anonymous), "dev_zero": hold(dev_zero),
        "shmget": sysv("shmget", 0, 256 * MB, 0o1600), "msgget": sysv("msgget", 0, 0o1600),
        "semget": sysv("semget", 0, 100, 0o1600), "private_4096": hold(private)}
held["oom_score_adj"] = int(open("/proc/self/oom_score_adj").read())
print(json.dumps(held))
"""
REFUSED = {"memfd": "PermissionError", "shared_anonymous": "PermissionError", "dev_zero": "PermissionError",
           "shmget": -1, "msgget": -1, "semget": -1, "private_4096": "OSError", "oom_score_adj": 1000}


def _need_bwrap():
    ok, why = sandbox.bwrap_works()
    if not ok:
        pytest.skip(f"sandbox unavailable here: {why}")


def _last(text: str) -> dict:
    return json.loads(text.strip().splitlines()[-1])


def _launched(code: str, tasks: int = TASKS, mem_mb: int = MEM_MB, python: str = sys.executable,
              launcher: str = sandbox.__file__) -> dict:
    """``code`` run in a fresh sandbox by the kernels' launcher (judge/sandbox.py --bwrap), which keeps what a
    kernel prints to itself: the code's last line comes back as the kernel's last words (it exits 3)."""
    work, why = tempfile.mkdtemp(), tempfile.mktemp()
    try:
        p = subprocess.run([python, launcher, "--tasks", str(tasks), "--mem-mb", str(mem_mb), "--why", why,
                            "--bwrap", "--", python, "-S", "-c", code + "\nimport sys; sys.exit(3)\n"],
                           cwd=work, capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin"})
        assert p.returncode == 3, p.stderr
        line = Path(why).read_text()
        return json.loads(line[line.index("{"):line.rindex("}") + 1])
    finally:
        os.rmdir(work)
        if os.path.exists(why):
            os.unlink(why)


@pytest.fixture(scope="module")
def zyg():
    _need_bwrap()
    z = zygote.get(ENV, 64, MEM_MB, TASKS)
    assert z is not None, zygote.why_not()
    return z


def _beside(attack, honest):
    """The attack running (holding its threads), and meanwhile the honest code: (attack's answer, honest's)."""
    box = {}
    t = threading.Thread(target=lambda: box.update(attack=attack()))
    t.start()
    time.sleep(2)   # the attack holds every thread it could get for 4 s
    got = honest()
    t.join()
    return box["attack"], got


def test_a_kernels_threads_are_capped_and_a_kernel_beside_it_works(zyg):
    """A forked kernel gets at most its budget of tasks (its PID namespace's pid_max, and RLIMIT_NPROC where the
    grader is not root); a kernel started beside it while it holds them runs 16 threads; the same code in a kernel
    with no budget gets every thread it asks for."""
    attack = lambda tasks: _last(zyg.run(THREADS % {"cap": CAP, "hold": 4}, 64, MEM_MB, ENV, tasks=tasks)[1])  # noqa
    held, honest = _beside(lambda: attack(TASKS), lambda: _last(zyg.run(HONEST, 64, MEM_MB, ENV, tasks=TASKS)[1]))
    assert honest["ok"] and held["refused"] == "RuntimeError", (held, honest)
    assert held["threads"] <= TASKS + 300, held   # pid_max = 300 + budget: at most that many at once
    free = _last(zyg.run(THREADS % {"cap": CAP, "hold": 0}, 64, MEM_MB, ENV, tasks=0)[1])
    assert free == {"threads": CAP, "refused": ""}, free


def test_a_fresh_sandboxs_threads_are_capped_too():
    """The fresh sandbox's launcher caps its PID namespace from outside before anything runs in it."""
    _need_bwrap()
    held, honest = _beside(lambda: _launched(THREADS % {"cap": CAP, "hold": 4}), lambda: _launched(HONEST))
    assert honest["ok"] and held["refused"] == "RuntimeError" and held["threads"] <= TASKS + 300, (held, honest)
    assert _launched(THREADS % {"cap": CAP, "hold": 0}, tasks=0) == {"threads": CAP, "refused": ""}


def test_memory_no_limit_counts_cannot_be_made(zyg):
    """memfd_create, shared anonymous mappings (MAP_SHARED|MAP_ANONYMOUS, or of /dev/zero), System V shared memory,
    message queues and semaphores: refused in a kernel of either path; private memory stops at RLIMIT_DATA; the
    OOM killer takes the kernel first. The same code outside any sandbox holds 256 MB each way and maps 4 GB."""
    forked = _last(zyg.run(SHARED, 64, MEM_MB, ENV, tasks=TASKS)[1])
    assert forked == REFUSED, forked
    assert _launched(SHARED) == REFUSED
    p = subprocess.run([sys.executable, "-S", "-c", SHARED], capture_output=True, text=True, timeout=120)
    outside = _last(p.stdout)
    assert outside == {"memfd": 256, "shared_anonymous": 256, "dev_zero": 256, "shmget": "made", "msgget": "made",
                       "semget": "made", "private_4096": "mapped", "oom_score_adj": outside["oom_score_adj"]}, outside


def test_as_a_normal_user_too():
    """An unprivileged grader (uid 65534): the same caps, through the fork server and the fresh sandbox's
    launcher. Needs root to switch, and a system python3 (a copy of the judge's files, readable by that account)."""
    if os.getuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to run the grader as another account")
    _need_bwrap()
    python = shutil.which("python3", path="/usr/bin:/bin")
    if not python:
        pytest.skip("no system python3 for the unprivileged account")
    root = Path(__file__).resolve().parents[1]
    copy = Path(tempfile.mkdtemp(prefix="attncourse-budget-", dir="/tmp"))
    for rel in ("judge/__init__.py", "judge/sandbox.py", "judge/zygote.py", "judge/forkserver.py",
                "tests/__init__.py", "tests/test_kernel_budget.py"):
        (copy / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(root / rel, copy / rel)
    for rel in ("attncourse/__init__.py", "attncourse/kernel/__init__.py"):
        (copy / rel).parent.mkdir(parents=True, exist_ok=True)
        (copy / rel).write_text("")
    (copy / "pytest.py").write_text("def skip(why): raise SystemExit(why)\nclass mark:\n    @staticmethod\n"
                                    "    def xdist_group(name): return None\ndef fixture(**kw): return lambda f: f\n")
    for p in [copy, *copy.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    script = ("import json, sys\n"
              f"sys.path.insert(0, {str(copy)!r})\n"
              "from judge import sandbox, zygote\n"
              "import tests.test_kernel_budget as t\n"
              f"env = dict(t.ENV, PYTHONPATH={str(copy)!r})\n"
              "z = zygote.get(env, 64, t.MEM_MB, t.TASKS)\n"
              "if z is None: print(json.dumps(zygote.why_not())); sys.exit(0)\n"
              "run = lambda code: t._last(z.run(code, 64, t.MEM_MB, env, tasks=t.TASKS)[1])\n"
              "print(json.dumps({'forked': [run(t.THREADS % {'cap': t.CAP, 'hold': 0}), run(t.SHARED)],\n"
              "                  'fresh': [t._launched(t.THREADS % {'cap': t.CAP, 'hold': 0}, python=sys.executable),\n"
              "                            t._launched(t.SHARED, python=sys.executable)]}))\n")
    try:
        p = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", python, "-c",
                            script], capture_output=True, text=True, timeout=300, cwd="/")
    finally:
        shutil.rmtree(copy, ignore_errors=True)
    assert p.returncode == 0, p.stderr
    seen = _last(p.stdout)
    assert isinstance(seen, dict), seen
    for path, (threads, shared) in seen.items():
        assert threads["refused"] == "RuntimeError" and threads["threads"] <= TASKS + 300, (path, threads)
        assert shared == REFUSED, (path, shared)
