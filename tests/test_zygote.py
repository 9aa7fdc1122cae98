"""Preloaded kernels (judge/zygote.py, judge/forkserver.py): each forked kernel is as isolated as a
fresh sandbox, and as isolated from its siblings as from anything else.

Every question is asked of a child of one fork server and paired with the same question asked of a fresh sandbox
(``sandbox.run_sandboxed``) or of the fork server's own process, where the answer is the dangerous one.
The tamper and fault corpora (tests/test_tamper.py, test_faults.py) grade through this path too: it is the
default for every sandboxed kernel.
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


@pytest.fixture(scope="module")
def zyg():
    ok, why = sandbox.bwrap_works()
    if not ok:
        pytest.skip(f"sandbox unavailable here: {why}")
    z = zygote.get(ENV, 64, 2048)
    assert z is not None, zygote.why_not()
    return z


def _json(z, code, env=ENV, **kw):
    rc, out, err = z.run(code, 64, 2048, env, **kw)
    assert rc == 0, err
    return json.loads(out.strip().splitlines()[-1])


def test_a_forked_kernel_answers_the_probe_as_a_fresh_sandbox_does(zyg):
    """uid 65534, no capability, no_new_privs, the filter; no process, remount, namespace or writable root."""
    seen = _json(zyg, sandbox.PROBE)
    fresh = json.loads(sandbox.run_sandboxed(sandbox.PROBE).stdout.strip().splitlines()[-1])
    assert seen == fresh
    assert seen["uid"] == NOBODY and {k: seen[k] for k in sandbox.PROBE_WANTS} == sandbox.PROBE_WANTS, seen


def test_the_fork_server_itself_would_give_the_dangerous_answers(zyg):
    """The pairing: what the children drop is really there before (the server holds capabilities in its
    namespace and may mount): the probe's checks can fail."""
    code = ("import json, ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "st = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines() if ':' in l)\n"
            "print(json.dumps({'caps': int(st['CapEff'], 16), 'seccomp': st['Seccomp'].strip()}))\n")
    # a sandbox built like the server's, running the same question instead of the server
    fd = sandbox._seccomp_fd()
    os.close(fd)
    args = sandbox.bwrap_command([sys.executable, "-S", "-c", code], env=ENV,
                                 zygote_dirs=("/run/attncourse/work",))
    p = subprocess.run(args, capture_output=True, text=True, timeout=60, pass_fds=args.fds)
    args.close()
    seen = json.loads(p.stdout.strip().splitlines()[-1])
    assert seen["caps"] != 0 and seen["seccomp"] == "0"
    child = _json(zyg, code)
    assert child == {"caps": 0, "seccomp": "2"}


def test_siblings_share_nothing(zyg):
    """Two kernels of one server running at once: the second sees none of the first's files, processes,
    shared memory or sockets; a later one neither."""
    first = r"""
import json, os, socket, time
for p in ("/tmp/secret", "/dev/shm/secret", "secret"):
    open(p, "w").write("answer")
a = socket.socket(socket.AF_UNIX); a.bind("\0attncourse-sibling"); a.listen()
t = socket.socket(); t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    t.bind(("127.0.0.1", 47321)); t.listen(); tcp = True
except OSError:
    tcp = False
print(json.dumps({"ready": True, "pid": os.getpid(), "tcp": tcp}), flush=True)
time.sleep(6)
"""
    second = r"""
import json, os, socket
def reach(addr, family):
    s = socket.socket(family)
    try:
        s.connect(addr); return True
    except OSError:
        return False
print(json.dumps({
    "files": [p for p in ("/tmp/secret", "/dev/shm/secret", "secret") if os.path.exists(p)],
    "processes": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
    "abstract": reach("\0attncourse-sibling", socket.AF_UNIX),
    "tcp": reach(("127.0.0.1", 47321), socket.AF_INET),
}))
"""
    box = {}
    t = threading.Thread(target=lambda: box.update(first=_json(zyg, first)))
    t.start()
    time.sleep(2.5)    # the first is up and holding its files and sockets (it sleeps 6 s)
    during = _json(zyg, second)
    t.join()
    after = _json(zyg, second)
    assert box["first"]["ready"]
    for seen in (during, after):
        assert seen == {"files": [], "processes": [1, 2], "abstract": False, "tcp": False}, seen
    # the pairing: the same question inside the first kernel itself finds all of it
    both = _json(zyg, first.replace("time.sleep(6)", "") + second.replace("import json, os, socket", ""))
    assert both["files"] == ["/tmp/secret", "/dev/shm/secret", "secret"] and both["abstract"]


def test_killing_the_client_kills_the_kernel(zyg, tmp_path):
    """The kernel manager's process handle is the client: stopping it (nbclient's shutdown, a timeout's kill)
    stops the kernel and its namespace; the server goes on forking."""
    r, w = os.pipe()
    null = os.open(os.devnull, os.O_RDONLY)
    req = {"connection": {}, "mem_mb": 2048, "tmp_mb": 64, "fsize": 1 << 20, "env": ENV,
           "probe": "import os, time\nprint(os.getpid(), flush=True)\nwhile True:\n    time.sleep(0.1)\n"}
    s = zygote.send_request(zyg.sock, req, (null, w, w))
    os.close(w), os.close(null)
    assert os.read(r, 64).strip() == b"2"          # running, as pid 2 of its namespace
    before = _kernel_children(zyg)
    s.close()                                       # the client goes away
    deadline = time.monotonic() + 30
    while os.read(r, 64) and time.monotonic() < deadline:   # EOF once every holder of the pipe is gone
        pass
    os.close(r)
    assert time.monotonic() < deadline
    assert len(_kernel_children(zyg)) < len(before)
    assert _json(zyg, "import json; print(json.dumps(1))") == 1


def _kernel_children(zyg) -> list[int]:
    """Every process below the fork server's bwrap (its pids as this machine sees them)."""
    out = subprocess.run(["ps", "-e", "-o", "pid=,ppid="], capture_output=True, text=True).stdout.split()
    kids = {}
    for pid, ppid in zip(out[::2], out[1::2]):
        kids.setdefault(int(ppid), []).append(int(pid))
    seen, todo = [], [zyg.proc.pid]
    while todo:
        p = todo.pop()
        seen.append(p)
        todo += kids.get(p, [])
    return seen


def test_a_kernel_limit_holds_in_a_forked_kernel(zyg):
    """The working folder and /tmp are capped at the size asked for (64 MB here), as in a fresh sandbox."""
    from tests.test_sandbox import FILL

    seen = _json(zyg, FILL + "import json\nprint(json.dumps([_fill('/tmp/f', 200), _fill('f', 200)]))\n")
    assert all(50 <= mb <= 64 for mb in seen), seen   # 200 asked for


PRELOADED = ("import sys, json\nseen = {'dynamo': 'torch._dynamo' in sys.modules, 'plots': 'matplotlib' in sys.modules}\n"
             "import torch\nn = len(sys.modules)\nx = torch.empty(2, 3, device='meta')\n(x @ x.T / 2).softmax(-1)\n"
             "seen['imported_on_meta'] = len(sys.modules) - n\n"
             "import matplotlib\nseen['backend'] = matplotlib.get_backend()\nprint(json.dumps(seen))\n")


def test_a_kernel_finds_torchs_compiler_stack_and_matplotlib_only_as_its_environment_says(zyg):
    """torch's compiler stack is preloaded (a notebook's first operation on the meta device imports it: 1.8 s in
    every kernel before); matplotlib only where the kernels' environment names a backend, and then that backend —
    the one a fresh import in that environment takes — not matplotlib's own choice."""
    seen = _json(zyg, PRELOADED)
    assert seen["dynamo"] and seen["imported_on_meta"] == 0 and not seen["plots"], seen   # no $MPLBACKEND
    env = dict(ENV, MPLBACKEND="svg")
    z = zygote.get(env, 64, 2048)
    assert z is not None, zygote.why_not()
    seen = _json(z, PRELOADED, env=env)
    assert seen["dynamo"] and seen["plots"] and seen["backend"] == "svg", seen


def test_as_a_normal_user_too():
    """The fork server started by an unprivileged account (uid 65534): its children answer the probe the same."""
    if os.getuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to run the grader as another account")
    ok, why = sandbox.bwrap_works()
    if not ok:
        pytest.skip(f"sandbox unavailable here: {why}")
    python = shutil.which("python3", path="/usr/bin:/bin")
    if not python:
        pytest.skip("no system python3 for the unprivileged account")
    root = Path(__file__).resolve().parents[1]
    copy = Path(tempfile.mkdtemp(prefix="attncourse-zy-", dir="/tmp"))
    for rel in ("judge/__init__.py", "judge/sandbox.py", "judge/zygote.py", "judge/forkserver.py"):
        (copy / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(root / rel, copy / rel)
    (copy / "attncourse" / "kernel").mkdir(parents=True)   # what the fork server imports first: here, nothing
    (copy / "attncourse" / "__init__.py").write_text("")
    (copy / "attncourse" / "kernel" / "__init__.py").write_text("")
    for p in [copy, *copy.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    script = (f"import sys, json; sys.path.insert(0, {str(copy)!r})\n"
              "from judge import sandbox, zygote\n"
              f"env = dict(sandbox.kernel_env({{}}, '/tmp'), PYTHONPATH={str(copy)!r})\n"
              "z = zygote.get(env, 64, 2048)\n"
              "if z is None: print(json.dumps(zygote.why_not())); sys.exit(0)\n"
              "print(z.run(sandbox.PROBE, 64, 2048, env)[1].strip().splitlines()[-1])\n")
    try:
        p = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", python, "-c",
                            script], capture_output=True, text=True, timeout=180, cwd="/")
    finally:
        shutil.rmtree(copy, ignore_errors=True)
    assert p.returncode == 0, p.stderr
    seen = json.loads(p.stdout.strip().splitlines()[-1])
    assert isinstance(seen, dict), seen
    assert seen["uid"] == NOBODY and {k: seen[k] for k in sandbox.PROBE_WANTS} == sandbox.PROBE_WANTS, seen
