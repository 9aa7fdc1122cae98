"""The grading kernels' fork server ("zygote"): a Python that has imported torch and ipykernel once, and forks
one never-reused kernel per notebook, each sandboxed before any student code runs.

Trusted code, run only by the grader (:mod:`judge.zygote` starts it inside bubblewrap, by its path); a student's
kernel never talks to it. It is the judge's: the sandbox binds this one file read-only beside the course package
(:func:`judge.sandbox.bwrap_command`), never the rest of the judge.

The zygote runs in a bubblewrap sandbox built like a kernel's (:func:`judge.sandbox.bwrap_command`: read-only
system, Python and course package, no network, its own PID namespace, uid 65534 in a user namespace of its own
that may make no further user namespace) except that it keeps its capabilities *inside* that namespace and has
no syscall filter: it needs them to build each kernel's sandbox. It never runs anything a request sends. Per
request (one connection on its unix socket, from the client the kernel manager starts as "the kernel"):

* ``C`` (a fork) unshares mount, PID, network, IPC and UTS namespaces: a kernel sees no other kernel's
  processes, files, sockets or shared memory; it reports the kernel's exit status on the connection and, when
  the connection closes (the client was stopped or killed), kills the kernel's whole PID namespace;
* ``I`` (pid 1 of the new namespace) mounts a fresh ``/proc``, caps its PID namespace's tasks (``pid_max``),
  mounts fresh size-capped tmpfs at ``/tmp`` (binding back what the server sees under ``/tmp``: a course or a
  Python installed there), ``/dev/shm`` and the working folder (holding the request's files read-only), hides
  ``/dev/pts``, then forks the kernel and waits for it;
* ``K`` (the kernel, pid 2) takes its resource limits and environment, asks the OOM killer to take it first,
  starts a new session, drops every capability (effective, permitted, inheritable, ambient and the bounding
  set), keeps ``no_new_privs``, enters the sandbox's syscall filter (:func:`judge.sandbox.seccomp_program`,
  handed over by the grader at start), closes every other descriptor, and only then starts ipykernel with the
  request's connection file, on the listening sockets the grader made (:func:`start_ipykernel`): a kernel
  writes no file outside its own tmpfs.

Standard library only at module level, besides what :data:`PRELOAD` names.
"""
from __future__ import annotations

import ctypes
import gc
import importlib
import json
import os
import re
import resource   # (a kernel sets its limits after its fresh /tmp is mounted: nothing is imported from disk then)
import select
import signal
import socket
import struct
import sys
import traceback

PRELOAD = ("numpy", "torch", "torch.nn", "torch.nn.functional", "ipykernel.kernelapp", "ipykernel.ipkernel",
           "ipykernel.zmqshell", "ipykernel.debugger", "IPython.core.interactiveshell", "IPython.core.history",
           "pdb", "sqlite3", "attncourse", "attncourse.teach.checks", "attncourse.teach.devices",
           "attncourse.teach.plots", "attncourse.kernel", "attncourse.kernel.grader",
           # what ipykernel's initialize imports on its own (listed by comparing sys.modules around it)
           "IPython.core.completerlib", "IPython.core.debugger", "IPython.core.oinspect",
           "IPython.extensions.storemagic", "IPython.utils.wildcard", "faulthandler", "tornado.platform.asyncio",
           # torch imports its compiler stack (sympy, mpmath: ~820 modules, 1.8 s) at the first operation on the
           # meta device or the first call of a function it guards against compilation: every section's notebook
           # makes one, in a graded check or a demo
           "torch._dynamo")
# Every section plots; matplotlib takes its backend from $MPLBACKEND once, at its import, so it is preloaded only
# where the environment (the kernels' own: the server runs in it) names one — where it does not, ipykernel names
# its inline backend in each kernel before the first import, and a preloaded matplotlib would have missed it.
PRELOAD_PLOTS = ("matplotlib", "matplotlib.pyplot")
WORK = "/run/attncourse/work"       # the kernel's working folder (a tmpfs of its own)
CONF_DIR = "/run/attncourse/conf"     # a small tmpfs holding the connection file, read-only once written
CONNECTION = CONF_DIR + "/connection.json"
DIRS = (WORK, CONF_DIR)     # made by the zygote's bubblewrap (its root is read-only after)
DEV_SHM_MB = 64
MAX_FILES = 16
# The kernel's five channels (ipykernel binds "ipc://IP-PORT" for each; the grader made and bound those sockets
# in a folder of its own, and the kernel only listens on them).
CHANNELS = ("shell", "iopub", "stdin", "control", "hb")
RESERVED_PIDS = 300   # Linux's: once a PID namespace's numbers wrap, they start again from here

_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = (
    0x1, 0x2, 0x4, 0x8, 0x20, 0x1000, 0x4000, 0x40000)
_CLONE_NEWNS, _CLONE_NEWUTS, _CLONE_NEWIPC, _CLONE_NEWUSER, _CLONE_NEWPID, _CLONE_NEWNET = (
    0x00020000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)
SANDBOX_ID = 65534   # the kernel's uid and gid in its own user namespace (as judge.sandbox.SANDBOX_UID)
_IDS = (os.getuid(), os.getgid())   # the fork server's (0 in its user namespace)
_PR_CAPBSET_DROP, _PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _PR_CAP_AMBIENT = 24, 38, 22, 47
_PR_CAP_AMBIENT_CLEAR_ALL, _SECCOMP_MODE_FILTER = 4, 2
_libc = ctypes.CDLL(None, use_errno=True)


def _check(rc, what):
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source, target, fstype, flags, data=None):
    _check(_libc.mount(source and source.encode(), target.encode(), fstype and fstype.encode(),
                       ctypes.c_ulong(flags), data and data.encode()), f"mount {target}")


def _tmpfs(target, mb, mode="0755", ro=False):
    _mount("tmpfs", target, "tmpfs", _MS_NOSUID | _MS_NODEV | (_MS_RDONLY if ro else 0),
           f"size={max(1, mb) * 1024 * 1024},mode={mode}")


def _bind_ro(path):
    _mount(path, path, None, _MS_BIND)
    _mount(None, path, None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)


def _drop_privileges():
    """No capability of any kind, no way back (the bounding set is emptied), no_new_privs."""
    last = int(open("/proc/sys/kernel/cap_last_cap").read())
    for cap in range(last + 1):
        _check(_libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0), "drop a capability from the bounding set")
    _check(_libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear ambient capabilities")

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    data = (ctypes.c_uint32 * 6)()    # _LINUX_CAPABILITY_VERSION_3: two sets of (effective, permitted, inheritable)
    _check(_libc.capset(ctypes.byref(Header(0x20080522, 0)), data), "capset")
    _check(_libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


def _enter_filter(program: bytes):
    """The sandbox's seccomp filter (classic BPF, 8 bytes per instruction) on this thread, for good."""

    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    buf = ctypes.create_string_buffer(program, len(program))
    prog = Fprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    _check(_libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0), "seccomp")


def _status_of(pid):
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


# -- a kernel's budget of what the machine shares --------------------------------------------------------
def limit_tasks(tasks: int) -> bool:
    """In a PID namespace's process that may (pid 1 of a kernel's, with the capabilities of the user namespace
    that owns it): at most about ``tasks`` processes and threads in this namespace, whoever runs the grader.

    Linux (6.14 and later) keeps ``pid_max`` per PID namespace: no task of the namespace gets a number at or above
    it, so at most ``RESERVED_PIDS + tasks`` live at once (at least ``tasks`` once the numbers have wrapped).
    ``RLIMIT_NPROC`` cannot do this where the grader is root: the kernel's uid maps to root outside, which Linux
    never holds to that limit (checked on Linux 6.18). False where this Linux keeps one ``pid_max`` for the
    machine (the kernel then keeps only ``RLIMIT_NPROC``, which holds for a grader that is not root)."""
    if tasks <= 0:
        return True
    try:
        with open("/proc/sys/kernel/pid_max", "w") as f:
            f.write(str(RESERVED_PIDS + tasks))
        return True
    except OSError:
        return False


def kernel_limits(mem_mb: int, fsize: int, tasks: int, nofile: int):
    """In the kernel, before any student code: its memory (private: ``RLIMIT_DATA``; what is shared cannot be made,
    :data:`judge.sandbox.DENIED_SYSCALLS`), file sizes, no core file, open files, tasks (``RLIMIT_NPROC``, on top of
    :func:`limit_tasks`), and the OOM killer takes it before anything else of the machine."""
    if mem_mb > 0:
        resource.setrlimit(resource.RLIMIT_DATA, (mem_mb * 1024 * 1024, mem_mb * 1024 * 1024))
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if nofile > 0:
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        n = nofile if hard == resource.RLIM_INFINITY else min(nofile, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))
    if tasks > 0:
        resource.setrlimit(resource.RLIMIT_NPROC, (tasks, tasks))
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass


# -- the kernel itself ------------------------------------------------------------------------------------
def start_ipykernel(connection_file: str, sockets: dict, argv=()):
    """ipykernel on the listening sockets the grader made: for each channel, ipykernel's ``bind("ipc://IP-PORT")``
    takes the grader's socket (zmq's ``ZMQ_USE_FD``) instead of making a file. The kernel creates no socket file,
    so it needs no folder of the host's: nothing it writes can outlive it (the grader's folder holding the
    sockets is the grader's alone). Never returns: a kernel that cannot start leaves its traceback on its stderr
    (ipykernel takes fd 2 over once it runs: a copy is kept for this) and exits 71."""
    report = os.dup(2)
    try:
        _start_ipykernel(connection_file, sockets, argv)
    except BaseException:
        os.write(report, traceback.format_exc().encode(errors="replace"))
        os._exit(71)
    os._exit(0)


def _start_ipykernel(connection_file, sockets, argv):
    import zmq

    with open(connection_file) as f:
        info = json.load(f)
    given = {f"ipc://{info['ip']}-{info[ch + '_port']}": fd for ch, fd in sockets.items()}
    plain_bind = zmq.Socket.bind

    def bind(self, addr):
        fd = given.pop(addr, None)
        if fd is not None:
            self.setsockopt(zmq.USE_FD, fd)
        return plain_bind(self, addr)

    zmq.Socket.bind = bind
    from ipykernel.kernelapp import IPKernelApp

    sys.argv = ["ipykernel_launcher", "-f", connection_file, *argv]
    app = IPKernelApp.instance()
    app.initialize(sys.argv[1:])
    app.start()


# -- one request ------------------------------------------------------------------------------------------
def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _mounts_under(top: str) -> list[tuple[str, bool]]:
    """(mount point, read-only) of every mount strictly below ``top`` that no other of them contains, from this
    mount namespace's table."""
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            point = _unescape(fields[4])
            if point.startswith(top.rstrip("/") + "/"):
                found.append((point, "ro" in fields[5].split(",")))
    found.sort(key=lambda pr: pr[0].count("/"))
    outer = []
    for point, ro in found:
        if not any(point.startswith(p + "/") for p, _ in outer):
            outer.append((point, ro))
    return outer


def _fresh_tmp(mb: int):
    """A fresh size-capped tmpfs at /tmp, with what the server's sandbox bound below /tmp (a course, or a Python
    installed there) bound back over it as it was: read-only stays read-only."""
    keep = []
    for point, ro in _mounts_under("/tmp"):
        try:
            keep.append((point, ro, os.open(point, os.O_PATH | os.O_CLOEXEC)))
        except OSError:
            pass
    _tmpfs("/tmp", mb, "1777")
    for point, ro, fd in keep:
        try:
            if os.path.isdir(f"/proc/self/fd/{fd}"):
                os.makedirs(point, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(point), exist_ok=True)
                open(point, "a").close()
            _mount(f"/proc/self/fd/{fd}", point, None, _MS_BIND | _MS_REC)
            if ro:
                _mount(None, point, None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
        finally:
            os.close(fd)


def _build_mounts(req, files):
    """In I (pid 1 of the new namespaces): everything this kernel sees that no other kernel sees."""
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    limit_tasks(int(req.get("tasks", 0)))
    tmp_mb = int(req["tmp_mb"])
    _fresh_tmp(tmp_mb)
    _tmpfs("/dev/shm", DEV_SHM_MB, "1777")
    _tmpfs("/dev/pts", 1, "0755", ro=True)          # no pseudo-terminal shared with another kernel
    _tmpfs(WORK, tmp_mb, "0755")
    for name, fd in zip(req["files"], files):
        if "/" in name or name in (".", "..") or not name:
            continue
        path = os.path.join(WORK, name)
        with open(path, "wb") as out, os.fdopen(fd, "rb", closefd=True) as src:
            while chunk := src.read(1 << 20):
                out.write(chunk)
        _bind_ro(path)
    _tmpfs(CONF_DIR, 1, "0755")
    with open(CONNECTION, "w") as f:
        json.dump(req["connection"], f)
    _mount(None, CONF_DIR, None, _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)


def _cover_proc():
    """In I, once K has set its user namespace's limit: /proc's system controls read-only, as bubblewrap leaves them."""
    for sub in ("sys", "sysrq-trigger", "irq", "bus"):
        if os.path.exists("/proc/" + sub):
            _bind_ro("/proc/" + sub)


def _own_user_namespace():
    """In K: a user namespace of its own, as uid/gid 65534, in which no further user namespace may be made."""
    _check(_libc.unshare(_CLONE_NEWUSER), "unshare a user namespace")
    outer_uid, outer_gid = _IDS
    for name, text in (("setgroups", "deny"), ("uid_map", f"{SANDBOX_ID} {outer_uid} 1"),
                       ("gid_map", f"{SANDBOX_ID} {outer_gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)
    with open("/proc/sys/user/max_user_namespaces", "w") as f:
        f.write("0")


def _close_all_but(keep):
    """Close every descriptor from 3 up but those in ``keep``."""
    top = os.sysconf("SC_OPEN_MAX") if os.sysconf("SC_OPEN_MAX") > 0 else 65536
    low = 3
    for fd in sorted(set(keep)) + [top]:
        if fd >= low:
            os.closerange(low, fd)
            low = fd + 1


def _become_kernel(req, program, env, sockets):
    """In K: limits, environment, no privilege, the filter, no other descriptor; then ipykernel (never returns)."""
    kernel_limits(int(req["mem_mb"]), int(req["fsize"]), int(req.get("tasks", 0)), int(req.get("nofile", 0)))
    os.environ.clear()
    os.environ.update(env)
    os.chdir(WORK)
    if sys.path and sys.path[0] in ("/", os.path.dirname(os.path.abspath(__file__))):   # the server's, as a kernel's
        sys.path[0] = WORK                                                                # is its own folder
    os.setsid()
    _drop_privileges()
    _enter_filter(program)
    _close_all_but(sockets)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if req.get("probe"):
        code = req["probe"]
        exec(compile(code, "<probe>", "exec"), {"__name__": "__main__"})
        sys.stdout.flush()
        os._exit(0)
    start_ipykernel(CONNECTION, dict(zip(req["sockets"], sockets)), req.get("argv") or ())


def _serve_one(conn, req, fds, program):
    """In C: new namespaces, I, and the kernel's status on ``conn`` (or its death when ``conn`` closes)."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    n_sockets = len(req.get("sockets") or ())
    stdio, sockets, files = fds[:3], fds[3:3 + n_sockets], fds[3 + n_sockets:]
    _check(_libc.unshare(_CLONE_NEWNS | _CLONE_NEWPID | _CLONE_NEWNET | _CLONE_NEWIPC | _CLONE_NEWUTS),
           "unshare")
    init = os.fork()
    if init == 0:   # I
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_IGN)   # the kernel may signal its init: nothing happens
        try:
            conn.close()
            _build_mounts(req, files)
            ready_r, ready_w = os.pipe()
            covered_r, covered_w = os.pipe()
            kernel = os.fork()
            if kernel == 0:   # K
                try:
                    _own_user_namespace()
                    os.write(ready_w, b"1")
                    if os.read(covered_r, 1) != b"1":
                        raise OSError("the sandbox was not finished")
                    null = os.open("/dev/null", os.O_RDONLY)
                    os.dup2(null, 0)
                    os.dup2(stdio[1], 1)
                    os.dup2(stdio[2], 2)
                except BaseException as exc:
                    os.write(stdio[2], f"attncourse fork server: no kernel ({exc})\n".encode())
                    os._exit(70)
                _become_kernel(req, program, req["env"], sockets)
            os.close(ready_w), os.close(covered_r)
            if os.read(ready_r, 1) == b"1":
                _cover_proc()
                os.write(covered_w, b"1")
            os.close(covered_w)
            for fd in stdio + sockets:
                os.close(fd)
            code = _status_of(kernel)
            os._exit(128 - code if code < 0 else code & 0xFF)   # killed by signal N: 128 + N, as a shell says it
        except BaseException as exc:   # the sandbox could not be built: no kernel runs
            os.write(stdio[2], f"attncourse fork server: no kernel ({exc})\n".encode())
            os._exit(70)
    for fd in fds:
        os.close(fd)
    pidfd = os.pidfd_open(init)
    while True:
        ready, _, _ = select.select([conn, pidfd], [], [])
        if pidfd in ready:
            code = _status_of(init)
            break
        if not conn.recv(16):              # the client is gone: so is the kernel
            os.kill(init, signal.SIGKILL)
            code = _status_of(init)
            conn = None
            break
    if conn is not None:
        try:
            conn.send(json.dumps({"exit": code}).encode())
        except OSError:
            pass
    os._exit(0)


def serve(listen_fd: int, program_fd: int):
    """The zygote's loop: preload, then one forked child per connection (never reused)."""
    with os.fdopen(program_fd, "rb") as f:
        program = f.read()
    # where the kernels' Python cannot import the course package, neither can the server: no kernel starts from it
    # (the grader then says why, and the classic launcher's kernels fail as they would without it)
    importlib.import_module("attncourse.kernel")
    for name in PRELOAD + (PRELOAD_PLOTS if os.environ.get("MPLBACKEND") else ()):
        try:
            importlib.import_module(name)
        except Exception:   # a kernel imports it itself (and fails the same way)
            pass
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)   # the C children are reaped by the kernel
    # what the preload made stays shared with every child: the collector never walks it (a walk writes to every
    # object it visits, and each write copies a page into the child)
    gc.collect()
    gc.freeze()
    server = socket.socket(fileno=listen_fd)
    os.write(1, b"ready\n")
    while True:
        conn, _ = server.accept()
        try:
            msg, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3 + len(CHANNELS) + MAX_FILES)
            req = json.loads(msg)
            if len(fds) < 3 + len(req.get("sockets") or ()):
                raise ValueError("a request carries stdin, stdout, stderr and the kernel's sockets")
        except (OSError, ValueError):
            conn.close()
            continue
        pid = os.fork()
        if pid == 0:
            try:
                server.close()
                _serve_one(conn, req, fds, program)
            finally:
                os._exit(71)
        conn.close()
        for fd in fds:
            os.close(fd)


def fresh_kernel(argv):
    """A kernel of the fresh sandbox (:func:`judge.sandbox.bwrap_command`), run as ``python …/forkserver.py kernel
    CONNECTION TASKS shell=FD,iopub=FD,… [ARGS…]``: its tasks' limit in its user namespace (the launcher set the rest,
    and its PID namespace's), then ipykernel on the grader's sockets, with its working folder first on its path (as
    ``python -m ipykernel_launcher`` has it), not this file's."""
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        sys.path[0] = os.getcwd()
    connection, tasks, fds, *rest = argv
    if int(tasks) > 0:
        resource.setrlimit(resource.RLIMIT_NPROC, (int(tasks), int(tasks)))
    sockets = {k: int(v) for k, v in (item.split("=", 1) for item in fds.split(",") if item)}
    start_ipykernel(connection, sockets, rest)


if __name__ == "__main__":
    if sys.argv[1:2] == ["kernel"]:
        fresh_kernel(sys.argv[2:])
    else:
        serve(int(sys.argv[1]), int(sys.argv[2]))
