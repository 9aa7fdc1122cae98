"""The grading kernels' fork server ("zygote"): a Python that has imported torch and ipykernel once, and forks
one never-reused kernel per notebook, each sandboxed before any student code runs.

Trusted code, run only by the grader (:mod:`judge.zygote` starts it inside bubblewrap); a student's kernel never
talks to it. It lives in the course package because that is the one part of the course a sandbox sees.

The zygote runs in a bubblewrap sandbox built like a kernel's (:func:`judge.sandbox.bwrap_command`: read-only
system, Python and course package, no network, its own PID namespace, uid 65534 in a user namespace of its own
that may make no further user namespace) except that it keeps its capabilities *inside* that namespace and has
no syscall filter: it needs them to build each kernel's sandbox. It never runs anything a request sends. Per
request (one connection on its unix socket, from the client the kernel manager starts as "the kernel"):

* ``C`` (a fork) unshares mount, PID, network, IPC and UTS namespaces: a kernel sees no other kernel's
  processes, files, sockets or shared memory; it reports the kernel's exit status on the connection and, when
  the connection closes (the client was stopped or killed), kills the kernel's whole PID namespace;
* ``I`` (pid 1 of the new namespace) mounts a fresh ``/proc``, fresh size-capped tmpfs at ``/tmp``,
  ``/dev/shm`` and the working folder (holding the request's files read-only), hides ``/dev/pts`` and every
  other kernel's socket folder, then forks the kernel and waits for it;
* ``K`` (the kernel, pid 2) takes its resource limits and environment, starts a new session, drops every
  capability (effective, permitted, inheritable, ambient and the bounding set), keeps ``no_new_privs``, enters
  the sandbox's syscall filter (:func:`judge.sandbox.seccomp_program`, handed over by the grader at start),
  closes every other descriptor, and only then starts ipykernel with the request's connection file.

Standard library only at module level, besides what :data:`PRELOAD` names.
"""
from __future__ import annotations

import ctypes
import gc
import importlib
import json
import os
import select
import signal
import socket
import struct
import sys

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
KERNEL_DIR = "/run/attncourse/kernel"  # the kernel's socket folder (its own subfolder of the zygote's socket root)
CONF_DIR = "/run/attncourse/conf"     # a small tmpfs holding the connection file, read-only once written
CONNECTION = CONF_DIR + "/connection.json"
DIRS = (WORK, KERNEL_DIR, CONF_DIR)     # made by the zygote's bubblewrap (its root is read-only after)
DEV_SHM_MB = 64
MAX_FILES = 16

_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = (
    0x1, 0x2, 0x4, 0x20, 0x1000, 0x4000, 0x40000)
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


# -- one request ------------------------------------------------------------------------------------------
def _build_mounts(req, files, sockets_root):
    """In I (pid 1 of the new namespaces): everything this kernel sees that no other kernel sees."""
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | 0x8)   # MS_NOEXEC
    # the kernel's socket folder, then the socket root (every other kernel's folder, the zygote's socket) hidden
    _mount(os.path.join(sockets_root, os.path.basename(req["kernel_dir"])), KERNEL_DIR, None, _MS_BIND)
    tmp_mb = int(req["tmp_mb"])
    _tmpfs("/tmp", tmp_mb, "1777")
    if os.path.isdir(sockets_root):    # (under /tmp it is gone already)
        _tmpfs(sockets_root, 1, "0755", ro=True)
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
        info = dict(req["connection"])
        info["ip"] = os.path.join(KERNEL_DIR, os.path.basename(info.get("ip") or "k"))
        json.dump(info, f)
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


def _become_kernel(req, program, env):
    """In K: limits, environment, no privilege, the filter, no other descriptor; then ipykernel (never returns)."""
    import resource

    mem = int(req["mem_mb"])
    if mem > 0:
        resource.setrlimit(resource.RLIMIT_DATA, (mem * 1024 * 1024, mem * 1024 * 1024))
    fsize = int(req["fsize"])
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    os.environ.clear()
    os.environ.update(env)
    os.chdir(WORK)
    if sys.path and sys.path[0] == "/":   # the server's folder (python -m), as a kernel's is its own
        sys.path[0] = WORK
    os.setsid()
    _drop_privileges()
    _enter_filter(program)
    os.closerange(3, os.sysconf("SC_OPEN_MAX") if os.sysconf("SC_OPEN_MAX") > 0 else 65536)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if req.get("probe"):
        code = req["probe"]
        exec(compile(code, "<probe>", "exec"), {"__name__": "__main__"})
        sys.stdout.flush()
        os._exit(0)
    from ipykernel.kernelapp import IPKernelApp

    sys.argv = ["ipykernel_launcher", "-f", CONNECTION]
    app = IPKernelApp.instance()
    app.initialize(sys.argv[1:])
    app.start()
    os._exit(0)


def _serve_one(conn, req, fds, program, sockets_root):
    """In C: new namespaces, I, and the kernel's status on ``conn`` (or its death when ``conn`` closes)."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    stdio, files = fds[:3], fds[3:]
    _check(_libc.unshare(_CLONE_NEWNS | _CLONE_NEWPID | _CLONE_NEWNET | _CLONE_NEWIPC | _CLONE_NEWUTS),
           "unshare")
    init = os.fork()
    if init == 0:   # I
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_IGN)   # the kernel may signal its init: nothing happens
        try:
            conn.close()
            _build_mounts(req, files, sockets_root)
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
                _become_kernel(req, program, req["env"])
            os.close(ready_w), os.close(covered_r)
            if os.read(ready_r, 1) == b"1":
                _cover_proc()
                os.write(covered_w, b"1")
            os.close(covered_w)
            for fd in stdio:
                os.close(fd)
            os._exit(_status_of(kernel) & 0xFF)
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


def serve(listen_fd: int, program_fd: int, sockets_root: str):
    """The zygote's loop: preload, then one forked child per connection (never reused)."""
    with os.fdopen(program_fd, "rb") as f:
        program = f.read()
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
            msg, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3 + MAX_FILES)
            req = json.loads(msg)
            if len(fds) < 3:
                raise ValueError("a request carries stdin, stdout and stderr")
        except (OSError, ValueError):
            conn.close()
            continue
        pid = os.fork()
        if pid == 0:
            try:
                server.close()
                _serve_one(conn, req, fds, program, sockets_root)
            finally:
                os._exit(71)
        conn.close()
        for fd in fds:
            os.close(fd)


if __name__ == "__main__":
    serve(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
