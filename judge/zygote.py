"""Preloaded, sandboxed grading kernels: one fork server per grading process, one forked kernel per notebook.

A fresh sandboxed kernel (:mod:`judge.sandbox`) pays for a Python start, ``import torch`` and ipykernel on
every notebook. Here the grading process starts, once, a *fork server* (:mod:`judge.forkserver`)
inside a bubblewrap sandbox built like a kernel's; it imports torch, numpy, ipykernel and the course package,
then forks one kernel per notebook. Each kernel enters a sandbox of its own before any student code runs: its
own mount, PID, network, IPC and UTS namespaces, fresh size-capped ``/tmp``, ``/dev/shm`` and working
folder, no capability, ``no_new_privs``, the same syscall filter. A kernel is never reused. Anchors:
CJWorkbench's ``cjwkernel`` (a preloaded fork server whose children enter new namespaces and seccomp per run),
Chromium's zygote, Python's ``forkserver`` start method.

Before the first kernel, the server is asked the sandbox probe's questions (:data:`judge.sandbox.PROBE`) through
exactly the kernel's path, plus what only a fork could get wrong (:data:`FORK_PROBE`: other processes, files
left by an earlier child), then starts a real grading kernel that must answer ``kernel_info``
(:func:`judge.kernels.kernel_starts`); any wrong answer and this process grades with fresh sandboxes instead,
saying why.

The kernel manager (:class:`judge.kernels.SandboxedKernelManager`) starts this file as "the kernel"::

    python -S -I judge/zygote.py SOCKET CONNECTION_FILE MEM_MB TMP_MB FSIZE TASKS WHY_FILE SOCKETS [ARGS…]

a client that dies with the grading process, hands the request (the connection file, the listening sockets the
kernel manager made for the kernel's channels, the regular files of its working folder, and a pipe for the
kernel's stdout and stderr) to the server, drains that pipe keeping its last lines, and exits with the kernel's
exit status — saying why, in one line, when the kernel stopped by itself; stopping or killing it kills the
kernel. ``ATTNCOURSE_FORKSERVER=0`` turns the fork server off (every kernel a fresh sandbox).

Standard library only at module level: the client runs before anything else.
"""
from __future__ import annotations

import json
import os
import socket
import sys
import threading

FORKSERVER_ENV = "ATTNCOURSE_FORKSERVER"
# The grading run's own fork server, for the Dask workers of a local cluster (instructor.engine): JSON
# {"key": its settings, "sock": its socket}. A worker whose kernels' settings are the same takes its kernels from it
# instead of starting a server of its own (a second torch import and the probes); any other settings, or a socket
# that is not there, and the worker starts its own as before.
SHARED_ENV = "ATTNCOURSE_SHARED_FORKSERVER"
MAX_FILES = 16   # as judge.forkserver.MAX_FILES
START_TIMEOUT = 300   # seconds a fork server may take to import torch and ipykernel


def _request_fds(work: str) -> tuple[list[str], list[int]]:
    names, fds = [], []
    for name in sorted(os.listdir(work)):
        path = os.path.join(work, name)
        if os.path.isfile(path) and not os.path.islink(path) and len(names) < MAX_FILES:
            names.append(name)
            fds.append(os.open(path, os.O_RDONLY | os.O_NOFOLLOW))
    return names, fds


def send_request(sock_path: str, req: dict, stdio: tuple[int, int, int], sockets: dict | None = None,
                 work: str | None = None) -> socket.socket:
    """Connect to the server and hand it one kernel's request: its stdio, the listening sockets of its channels
    (``{channel: fd}``, made by the grader) and the files of ``work`` read-only in its working folder."""
    names, fds = _request_fds(work) if work else ([], [])
    sockets = sockets or {}
    req = dict(req, files=names, sockets=list(sockets))
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(sock_path)
    socket.send_fds(s, [json.dumps(req).encode()], list(stdio) + list(sockets.values()) + fds)
    for fd in fds:
        os.close(fd)
    return s


def wait_exit(s: socket.socket, out: int | None = None, tail=None, timeout: float | None = None) -> int:
    """The kernel's exit status, once it has stopped (1 when the server went away first or ``timeout`` ran out);
    meanwhile what it writes on ``out`` (its stdout and stderr) is drained into ``tail``."""
    import select
    import time

    code = None
    deadline = None if timeout is None else time.monotonic() + timeout
    while code is None:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return 1
        ready, _, _ = select.select([s] + ([out] if out is not None else []), [], [], left)
        if out is not None and out in ready:
            chunk = os.read(out, 1 << 16)
            if chunk:
                tail.add(chunk)
            else:
                out = None
        if s in ready:
            try:
                msg = s.recv(1 << 12)
                code = int(json.loads(msg)["exit"]) if msg else 1
            except (OSError, ValueError, KeyError):
                code = 1
    while out is not None and select.select([out], [], [], 1)[0]:   # its last words (it is gone)
        chunk = os.read(out, 1 << 16)
        if not chunk:
            break
        tail.add(chunk)
    return code


def _client(argv) -> int:
    sock_path, connection_file, mem_mb, tmp_mb, fsize, tasks, why_file, sockets, *extra = argv
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from sandbox import NOFILE, Tail, die_with_parent, kernel_env, parse_sockets, report_stop   # stdlib only

    die_with_parent()
    with open(connection_file) as f:
        connection = json.load(f)
    env = kernel_env(os.environ, "/tmp")
    req = {"connection": connection, "mem_mb": int(mem_mb), "tmp_mb": int(tmp_mb), "fsize": int(fsize),
           "tasks": int(tasks), "nofile": NOFILE, "env": env, "argv": extra}
    fds = parse_sockets(sockets)
    out_r, out_w = os.pipe()
    null = os.open(os.devnull, os.O_RDONLY)
    s = send_request(sock_path, req, (null, out_w, out_w), sockets=fds, work=os.getcwd())
    for fd in (out_w, null, *fds.values()):
        os.close(fd)
    tail = Tail()
    code = wait_exit(s, out_r, tail)
    report_stop(code, tail, why_file)
    return code


# -- the grading process's side (imports beyond the standard library inside) ---------------------------------
FORK_PROBE = r"""
import json, os
mounts = [line.split()[4] for line in open("/proc/self/mountinfo")]
def made(folder):   # what is in a folder, but the way to what the server bound there (a course under /tmp)
    return sorted(n for n in os.listdir(folder) if not any(m == os.path.join(folder, n) or
                                                          m.startswith(os.path.join(folder, n) + "/") for m in mounts))
print(json.dumps({
    "pid": os.getpid(),
    "processes": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
    "tmp": made("/tmp"), "shm": sorted(os.listdir("/dev/shm")),
    "pts": sorted(os.listdir("/dev/pts")),
    "work": sorted(os.listdir(".")),
    "leave": [open(p, "w").write("x") for p in ("/tmp/left-behind", "/dev/shm/left-behind")],
}))
"""


class Zygote:
    """One fork server: the folder of its listening socket (``root``, this account's alone), its socket and its
    process (bwrap)."""

    def __init__(self, root, sock_path, proc, key, pid: int | None = None):
        self.root, self.sock, self.proc, self.key = root, sock_path, proc, key
        self.pid = proc.pid if proc is not None else pid   # (bwrap's: it exits when the server does)

    @property
    def shared(self) -> bool:
        """Another process's server (the grading run's, :data:`SHARED_ENV`): used here, never stopped here."""
        return self.proc is None

    def spec(self) -> str:
        """What :data:`SHARED_ENV` says to hand this server to the grading run's workers."""
        return json.dumps({"key": self.key, "sock": self.sock, "pid": self.pid})

    def alive(self) -> bool:
        if self.shared:   # the run's server: its socket there (removed when it is stopped) and its process running
            return os.path.exists(self.sock) and running(self.pid)
        return self.proc.poll() is None

    def stop(self):
        from .sandbox import remove_tree

        if self.shared:
            return
        if self.alive():
            self.proc.kill()
            self.proc.wait()
        remove_tree(self.root)

    def run(self, code: str, tmp_mb: int, mem_mb: int, env: dict, timeout: float = 60,
            tasks: int = 0) -> tuple[int, str, str]:
        """Run ``code`` in a child sandboxed exactly as a kernel is (the probe's way in): (exit, stdout, stderr).
        For short outputs (a pipe's buffer): they are read once the child has stopped."""
        from .sandbox import FSIZE_BYTES, NOFILE

        pipes = [os.pipe(), os.pipe()]
        null = os.open(os.devnull, os.O_RDONLY)
        try:
            req = {"connection": {}, "mem_mb": mem_mb, "tmp_mb": tmp_mb, "fsize": FSIZE_BYTES, "tasks": tasks,
                   "nofile": NOFILE, "env": env, "probe": code}
            with send_request(self.sock, req, (null, pipes[0][1], pipes[1][1])) as s:
                for _, w in pipes:
                    os.close(w)
                rc = wait_exit(s, timeout=timeout)
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

    from . import forkserver, sandbox

    fd = sandbox._seccomp_fd()
    if fd is None:
        raise RuntimeError(sandbox.seccomp_program()[1])
    root = sandbox.socket_folder("attncourse-zygote-")   # 0700: this account's alone; no sandbox sees it
    sock_path = os.path.join(root, "zygote.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    started = False
    try:
        listener.bind(sock_path)
        listener.listen(64)
        # (by its path, the one file of the judge the sandbox binds: it imports the course package first, and
        # where the kernels' Python cannot, no kernel starts from it — the canary says so)
        cmd = [sys.executable, "-Xfrozen_modules=off", sandbox.forkserver_file(), str(listener.fileno()), str(fd)]
        args = sandbox.bwrap_command(cmd, env=env, tmp_mb=tmp_mb, zygote_dirs=forkserver.DIRS)
        err = tempfile.TemporaryFile()   # what the server says (a file: a pipe no one reads could stop it)
        try:
            proc = _spawner().submit(lambda: subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err,
                pass_fds=(listener.fileno(), fd, *args.fds), env={"PATH": os.environ.get("PATH", sandbox.KERNEL_PATH)},
                cwd="/")).result()
        finally:
            args.close()
        started = True
    finally:
        listener.close()
        os.close(fd)
        if not started:
            sandbox.remove_tree(root)
    zyg = Zygote(root, sock_path, proc, key)
    line = first_line(proc.stdout, time.monotonic() + START_TIMEOUT)   # "ready" once it has imported torch, ipykernel
    if line.strip() != b"ready":
        zyg.stop()
        err.seek(max(0, err.seek(0, 2) - 4096))
        raise RuntimeError(sandbox.why_line(proc.returncode if proc.returncode is not None else 1, err.read())
                           .replace("grading kernel", "fork server"))
    err.close()
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


def _check(zyg: Zygote, env: dict, tmp_mb: int, mem_mb: int, tasks: int) -> str:
    """'' when two children of ``zyg`` answer the sandbox probe as a fresh sandbox does, else what is wrong."""
    from .sandbox import PROBE, PROBE_SAYS, PROBE_WANTS, SANDBOX_UID

    rc, out, err = zyg.run(PROBE, tmp_mb, mem_mb, env, tasks=tasks)
    try:
        seen = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return f"its probe failed (exit {rc}): {err.strip()[-300:]}"
    wrong = [PROBE_SAYS[k] for k, want in PROBE_WANTS.items() if seen.get(k) != want]
    if seen.get("uid") != SANDBOX_UID:
        wrong.insert(0, f"the kernel runs as uid {seen.get('uid')}")
    for attempt in (1, 2):   # the second child must not see what the first one left
        rc, out, err = zyg.run(FORK_PROBE, tmp_mb, mem_mb, env, tasks=tasks)
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


def get(env: dict, tmp_mb: int, mem_mb: int, tasks: int = 0, kernel_check=None) -> Zygote | None:
    """This process's fork server for kernels with this environment and these limits; None where it cannot
    start or does not hold (the kernel manager then starts a fresh sandbox per kernel; :func:`why_not` says
    why). Started at the first kernel, probed (the sandbox's questions, then ``kernel_check(zygote)``: '' when a
    real grading kernel forked by it answers, else why not), kept for the life of the process."""
    if os.environ.get(FORKSERVER_ENV, "1").strip() == "0":
        return None
    with _LOCK:
        return _get(env, tmp_mb, mem_mb, tasks, kernel_check)


def server_key(env: dict, tmp_mb: int, mem_mb: int, tasks: int = 0) -> str:
    """What a fork server is kept by (in this process, and as the run's :data:`SHARED_ENV`): its kernels' environment
    and limits."""
    return json.dumps([env, tmp_mb, mem_mb, tasks], sort_keys=True)


def _get(env, tmp_mb, mem_mb, tasks, kernel_check):
    key = server_key(env, tmp_mb, mem_mb, tasks)
    zyg = _ZYGOTES.get(key)
    if zyg is not None and zyg.alive():
        return zyg
    zyg = shared(key)
    if zyg is not None:
        return zyg
    if key in _WHY:
        return None
    try:
        zyg = _start(key, env, tmp_mb, mem_mb)
        wrong = _check(zyg, env, tmp_mb, mem_mb, tasks)
        if not wrong and kernel_check is not None:
            wrong = kernel_check(zyg)
    except (OSError, RuntimeError) as exc:
        wrong = str(exc)
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


def running(pid) -> bool:
    """Whether process ``pid`` exists and has not exited (a process that exited and was not yet reaped by its parent
    is a zombie: it still answers ``kill(pid, 0)``)."""
    try:
        with open(f"/proc/{int(pid)}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, ValueError, TypeError, IndexError):
        return False


def shared(key: str) -> Zygote | None:
    """The grading run's fork server named by :data:`SHARED_ENV`, when its settings are ``key`` and it is alive (it
    was started and probed by the run, :func:`judge.kernels.fork_server`); else None."""
    try:
        spec = json.loads(os.environ.get(SHARED_ENV) or "null")
        if not spec or spec["key"] != key:
            return None
        zyg = Zygote(None, spec["sock"], None, key, pid=spec["pid"])
    except (ValueError, KeyError, TypeError):
        return None
    return zyg if zyg.alive() else None   # a server that died: this process starts its own


def why_not() -> list[str]:
    return list(_WHY.values())


if __name__ == "__main__":
    sys.exit(_client(sys.argv[1:]))
