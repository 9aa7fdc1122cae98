"""Preloaded, sandboxed grading kernels: one fork server per grading process, one forked kernel per notebook.

A fresh sandboxed kernel (:mod:`judge.sandbox`) pays for a Python start, ``import torch`` and ipykernel on
every notebook. Here the grading process starts, once, a *fork server* (:mod:`attncourse.kernel.forkserver`)
inside a bubblewrap sandbox built like a kernel's; it imports torch, numpy, ipykernel and the course package,
then forks one kernel per notebook. Each kernel enters a sandbox of its own before any student code runs: its
own mount, PID, network, IPC and UTS namespaces, fresh size-capped ``/tmp``, ``/dev/shm`` and working
folder, no capability, ``no_new_privs``, the same syscall filter. A kernel is never reused. Anchors:
CJWorkbench's ``cjwkernel`` (a preloaded fork server whose children enter new namespaces and seccomp per run),
Chromium's zygote, Python's ``forkserver`` start method.

Before the first kernel, the server is asked the sandbox probe's questions (:data:`judge.sandbox.PROBE`) through
exactly the kernel's path, plus what only a fork could get wrong (:data:`FORK_PROBE`: other processes, files
left by an earlier child); any wrong answer and this process grades with the classic launcher instead.

The kernel manager (:class:`judge.kernels.SandboxedKernelManager`) starts this file as "the kernel"::

    python -S -I judge/zygote.py SOCKET CONNECTION_FILE MEM_MB TMP_MB FSIZE

a client that hands the request (the connection file, the regular files of its working folder, its stdout
and stderr) to the server and exits with the kernel's exit status; stopping or killing it kills the kernel.
``ATTNCOURSE_FORKSERVER=0`` turns the fork server off (every kernel a fresh sandbox, as before).

Standard library only at module level: the client runs before anything else.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import threading

FORKSERVER_ENV = "ATTNCOURSE_FORKSERVER"
MAX_FILES = 16   # as attncourse.kernel.forkserver.MAX_FILES
START_TIMEOUT = 300   # seconds a fork server may take to import torch and ipykernel


def _request_fds(work: str) -> tuple[list[str], list[int]]:
    names, fds = [], []
    for name in sorted(os.listdir(work)):
        path = os.path.join(work, name)
        if os.path.isfile(path) and not os.path.islink(path) and len(names) < MAX_FILES:
            names.append(name)
            fds.append(os.open(path, os.O_RDONLY | os.O_NOFOLLOW))
    return names, fds


def send_request(sock_path: str, req: dict, stdio: tuple[int, int, int], work: str | None = None) -> socket.socket:
    """Connect to the server and hand it one kernel's request (files of ``work`` read-only in its working folder)."""
    names, fds = _request_fds(work) if work else ([], [])
    req = dict(req, files=names)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(sock_path)
    socket.send_fds(s, [json.dumps(req).encode()], list(stdio) + fds)
    for fd in fds:
        os.close(fd)
    return s


def wait_exit(s: socket.socket) -> int:
    """The kernel's exit status, once it has stopped (1 when the server went away first)."""
    try:
        msg = s.recv(1 << 12)
        return int(json.loads(msg)["exit"]) if msg else 1
    except (OSError, ValueError, KeyError):
        return 1


def _client(argv) -> int:
    sock_path, connection_file, mem_mb, tmp_mb, fsize = argv
    with open(connection_file) as f:
        connection = json.load(f)
    kernel_dir = os.path.basename(os.path.dirname(os.path.abspath(connection_file)))
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from sandbox import kernel_env   # standard library only, as this file

    env = kernel_env(os.environ, "/tmp")
    req = {"connection": connection, "kernel_dir": kernel_dir, "mem_mb": int(mem_mb), "tmp_mb": int(tmp_mb),
           "fsize": int(fsize), "env": env}
    s = send_request(sock_path, req, (0, 1, 2), work=os.getcwd())
    return wait_exit(s)


# -- the grading process's side (imports beyond the standard library inside) ---------------------------------
FORK_PROBE = r"""
import json, os
print(json.dumps({
    "pid": os.getpid(),
    "processes": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
    "tmp": sorted(os.listdir("/tmp")), "shm": sorted(os.listdir("/dev/shm")),
    "pts": sorted(os.listdir("/dev/pts")),
    "work": sorted(os.listdir(".")),
    "leave": [open(p, "w").write("x") for p in ("/tmp/left-behind", "/dev/shm/left-behind")],
}))
"""


class Zygote:
    """One fork server: its socket folder (``root``), its socket and its process (bwrap)."""

    def __init__(self, root, sock_path, proc, key):
        self.root, self.sock, self.proc, self.key = root, sock_path, proc, key

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self):
        if self.alive():
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.root, ignore_errors=True)

    def run(self, code: str, tmp_mb: int, mem_mb: int, env: dict, timeout: float = 120) -> tuple[int, str, str]:
        """Run ``code`` in a child sandboxed exactly as a kernel is (the probe's way in): (exit, stdout, stderr).
        For short outputs (a pipe's buffer): they are read once the child has stopped."""
        import tempfile

        from .sandbox import FSIZE_BYTES

        kdir = tempfile.mkdtemp(dir=self.root)
        pipes = [os.pipe(), os.pipe()]
        null = os.open(os.devnull, os.O_RDONLY)
        try:
            req = {"connection": {}, "kernel_dir": os.path.basename(kdir), "mem_mb": mem_mb, "tmp_mb": tmp_mb,
                   "fsize": FSIZE_BYTES, "env": env, "probe": code}
            with send_request(self.sock, req, (null, pipes[0][1], pipes[1][1])) as s:
                for _, w in pipes:
                    os.close(w)
                s.settimeout(timeout)
                rc = wait_exit(s)
            texts = []
            for r, _ in pipes:
                chunks = []
                while data := os.read(r, 1 << 16):
                    chunks.append(data)
                texts.append(b"".join(chunks).decode(errors="replace"))
            return rc, texts[0], texts[1]
        finally:
            for r, _ in pipes:
                os.close(r)
            os.close(null)
            shutil.rmtree(kdir, ignore_errors=True)


_ZYGOTES: dict = {}   # settings -> Zygote, oldest first
_WHY: dict = {}
_LOCK = threading.Lock()
_SPAWN = None         # the spawner thread's executor (below)
_MAX = 3              # fork servers one process keeps (a Dask worker grading runs with other settings)


def _spawner():
    """One thread that lives as long as the process (a one-thread executor never retires its thread): bwrap's
    --die-with-parent follows the thread that started it, so every fork server is started there."""
    global _SPAWN
    if _SPAWN is None:
        from concurrent.futures import ThreadPoolExecutor

        _SPAWN = ThreadPoolExecutor(max_workers=1, thread_name_prefix="attncourse-zygote-spawner")
    return _SPAWN


def _start(key, env: dict, tmp_mb: int, mem_mb: int) -> Zygote:
    import subprocess
    import tempfile
    import time

    from attncourse.kernel import forkserver

    from . import sandbox

    fd = sandbox._seccomp_fd()
    if fd is None:
        raise RuntimeError(sandbox.seccomp_program()[1])
    root = tempfile.mkdtemp(prefix="attncourse-zygote-")   # 0700: this account's alone
    sock_path = os.path.join(root, "zygote.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        listener.bind(sock_path)
        listener.listen(64)
        # (-m: where the kernels' Python cannot import the course package, neither can the server: no kernel
        # starts from it, and the classic launcher's kernels fail as they would without it — the canary says so)
        cmd = [sys.executable, "-Xfrozen_modules=off", "-m", "attncourse.kernel.forkserver",
               str(listener.fileno()), str(fd), root]
        args = sandbox.bwrap_command(cmd, rw=[root], env=env, tmp_mb=tmp_mb, zygote_dirs=forkserver.DIRS)
        proc = _spawner().submit(lambda: subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, pass_fds=(listener.fileno(), fd),
            env={"PATH": os.environ.get("PATH", sandbox.KERNEL_PATH)}, cwd="/")).result()
    finally:
        listener.close()
        os.close(fd)
    zyg = Zygote(root, sock_path, proc, key)
    line = first_line(proc.stdout, time.monotonic() + START_TIMEOUT)   # "ready" once it has imported torch, ipykernel
    if line.strip() != b"ready":
        zyg.stop()
        raise RuntimeError(f"the fork server did not start (exit {proc.poll()})")
    return zyg


def first_line(stream, deadline: float) -> bytes:
    """The first line ``stream`` (a pipe) gives before ``deadline`` (time.monotonic()); b"" when none came by then: the
    deadline holds while it waits (a blocking readline would wait for ever on a server that hangs)."""
    import select
    import time

    fd, data = stream.fileno(), b""
    while b"\n" not in data:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return b""
        chunk = os.read(fd, 256)
        if not chunk:
            break
        data += chunk
    return data.split(b"\n", 1)[0] + (b"\n" if b"\n" in data else b"")


def _check(zyg: Zygote, env: dict, tmp_mb: int, mem_mb: int) -> str:
    """'' when two children of ``zyg`` answer the sandbox probe as a fresh sandbox does, else what is wrong."""
    from .sandbox import PROBE, PROBE_SAYS, PROBE_WANTS, SANDBOX_UID

    rc, out, err = zyg.run(PROBE, tmp_mb, mem_mb, env)
    try:
        seen = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return f"its probe failed (exit {rc}): {err.strip()[-300:]}"
    wrong = [PROBE_SAYS[k] for k, want in PROBE_WANTS.items() if seen.get(k) != want]
    if seen.get("uid") != SANDBOX_UID:
        wrong.insert(0, f"the kernel runs as uid {seen.get('uid')}")
    for attempt in (1, 2):   # the second child must not see what the first one left
        rc, out, err = zyg.run(FORK_PROBE, tmp_mb, mem_mb, env)
        try:
            seen = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return f"its probe failed (exit {rc}): {err.strip()[-300:]}"
        if seen["processes"] != [1, seen["pid"]]:
            wrong.append(f"a kernel sees other processes ({seen['processes']})")
        if seen["tmp"] or seen["shm"] or seen["pts"]:
            wrong.append(f"a kernel sees files it did not make ({seen['tmp'] + seen['shm'] + seen['pts']})")
        if seen["work"]:
            wrong.append(f"a kernel's working folder holds {seen['work']}")
    return "; ".join(dict.fromkeys(wrong))


def get(env: dict, tmp_mb: int, mem_mb: int) -> Zygote | None:
    """This process's fork server for kernels with this environment and these limits; None where it cannot
    start or does not hold (the kernel manager then starts a fresh sandbox per kernel; :func:`why_not` says
    why). Started at the first kernel, probed, kept for the life of the process."""
    if os.environ.get(FORKSERVER_ENV, "1").strip() == "0":
        return None
    with _LOCK:
        return _get(env, tmp_mb, mem_mb)


def _get(env, tmp_mb, mem_mb):
    key = json.dumps([env, tmp_mb, mem_mb], sort_keys=True)
    zyg = _ZYGOTES.get(key)
    if zyg is not None and zyg.alive():
        return zyg
    if key in _WHY:
        return None
    try:
        zyg = _start(key, env, tmp_mb, mem_mb)
        wrong = _check(zyg, env, tmp_mb, mem_mb)
    except (OSError, RuntimeError) as exc:
        wrong, zyg = str(exc), None
    if wrong:
        if zyg is not None:
            zyg.stop()
        _WHY[key] = wrong
        print(f"attncourse: the preloaded kernels' fork server does not hold ({wrong}); every kernel is a "
              "fresh sandbox instead", file=sys.stderr)
        return None
    _ZYGOTES.pop(key, None)
    while len(_ZYGOTES) >= _MAX:
        _ZYGOTES.pop(next(iter(_ZYGOTES))).stop()
    _ZYGOTES[key] = zyg
    import atexit

    atexit.register(zyg.stop)
    return zyg


def why_not() -> list[str]:
    return list(_WHY.values())


if __name__ == "__main__":
    sys.exit(_client(sys.argv[1:]))
