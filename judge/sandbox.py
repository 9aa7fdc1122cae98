"""How grading kernels are launched: resource limits and a bubblewrap sandbox, required unless turned off by name.

nbgrader's ``Execute`` preprocessor, as the course runs it (:class:`judge.preprocessors.IsolatedExecute`, whose
kernel manager is :class:`judge.kernels.SandboxedKernelManager`), starts every kernel through this file run as
a script::

    python judge/sandbox.py --mem-mb 4096 --tmp-mb 256 [--bwrap --bind-rw DIR] -- <kernel command>

The launcher sets ``RLIMIT_DATA`` (a memory hog gets ``MemoryError`` instead of
taking the machine down), ``RLIMIT_FSIZE`` and no core files, gives the kernel an
allow-listed environment (:func:`kernel_env`: no secret such as ``PGPASSWORD``, no
variable naming the course folder), then ``exec``s the kernel inside ``bwrap``:

* no privilege, whoever starts it (root included): uid/gid 65534 in a user namespace of
  its own, no capability, ``no_new_privs``, no further user namespace (``--disable-userns``);
  every bind stays read-only (the probe tries a remount and refuses a sandbox where it works);
  where the grader is root, what other users may not read under ``/etc`` is hidden;
* a read-only Python installation and course package (bound at their real paths
  *and* at the paths Python was started from, so a symlinked or relocated ``.venv``
  works), no network, its own PID namespace, no other file of the course;
* size-limited writable mounts only: a private ``/tmp`` and, as its working folder, a
  tmpfs at the scratch folder's path holding the hidden-inputs file read-only
  (:class:`judge.preprocessors.IsolatedExecute`), each ``ATTNCOURSE_KERNEL_TMP_MB``;
  a 64 MB ``/dev/shm``; ``/dev`` and the sandbox's root read-only; nothing the kernel writes
  survives it, and nothing it could leave behind is ever read by the grader (the one
  host folder it may write, the kernel's socket folder, is removed when it stops);
* a seccomp filter built with libseccomp (:func:`seccomp_program`, names resolved for the
  machine's architecture): new processes (``fork``, ``vfork``, ``clone`` without
  ``CLONE_THREAD`` or with a namespace flag), mounts, namespaces, io_uring, bpf,
  perf_event_open, keyrings, ptrace and the machine's own controls are refused; threads
  work, a fork bomb or a shell does not.  Where the filter cannot be built no kernel starts;
* GPUs: ``/dev/nvidia*`` is bound when present, so CUDA kernels work sandboxed.

Before the first kernel, :func:`bwrap_works` starts a Python in exactly this sandbox and asks it
(:data:`PROBE`): any privilege, process, remount, namespace or writable root it finds refuses grading.

By default the launcher above is the fallback: each grading process forks its kernels from a preloaded fork
server (:mod:`judge.zygote`), whose children enter a sandbox of the same kind (their own namespaces, tmpfs,
no privilege, this filter) before any student code runs, and which is asked the same probe first.

Environment (read by the nbgrader process):

* ``ATTNCOURSE_SANDBOX`` — ``auto`` (the default) and ``1``: kernels run sandboxed,
  and where bubblewrap cannot run no kernel starts (:func:`sandbox_status` says why
  and what to do); ``0``: the instructor asked for no sandbox (``./course grade
  --unsandboxed``; every report says so, in red); ``self``: the self-study check on a
  learner's own machine, sandboxed where bubblewrap works, else not, and it says so;
* ``ATTNCOURSE_KERNEL_MEM_MB`` — memory limit per kernel (default 4096; 0 = none);
* ``ATTNCOURSE_KERNEL_TMP_MB`` — size of the sandbox's ``/tmp`` and of its working
  folder, each (default 256);
* ``ATTNCOURSE_BWRAP`` — the bubblewrap program to use (default: ``bwrap`` on ``PATH``).

This file imports only the standard library at module level: it runs as the
launcher before the kernel exists.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import glob
import os
import platform
import shutil
import struct
import subprocess
import sys
import tempfile

MEM_ENV = "ATTNCOURSE_KERNEL_MEM_MB"
TMP_ENV = "ATTNCOURSE_KERNEL_TMP_MB"
SANDBOX_ENV = "ATTNCOURSE_SANDBOX"
BWRAP_ENV = "ATTNCOURSE_BWRAP"      # the bubblewrap program (default: bwrap on PATH)
IPC_ENV = "ATTNCOURSE_KERNEL_IPC"  # 0: unsandboxed kernels talk TCP (jupyter's default) instead of unix sockets
DEFAULT_MEM_MB = 4096
DEFAULT_TMP_MB = 256
FSIZE_BYTES = 512 * 1024 * 1024

# What a grading kernel may see of the grader's environment (values copied when set).
KERNEL_ENV_ALLOW = (
    "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_NUMERIC", "TZ",
    "PYTHONWARNINGS", "MPLBACKEND", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TOKENIZERS_PARALLELISM",
    "OMP_NUM_THREADS", "OMP_WAIT_POLICY", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
    "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "LD_LIBRARY_PATH",
    "ATTNCOURSE_CHECK_TIMEOUT", "ATTNCOURSE_DEVICE",
    "NBGRADER_EXECUTION", "NBGRADER_VALIDATING", "PYDEVD_DISABLE_FILE_VALIDATION",
)
KERNEL_PATH = "/usr/local/bin:/usr/bin:/bin"


def kernel_env(environ, home: str) -> dict:
    """The kernel's whole environment: the allow-listed variables of ``environ`` and a fixed PATH/HOME/TMPDIR."""
    env = {k: environ[k] for k in KERNEL_ENV_ALLOW if k in environ}
    env.update({"PATH": KERNEL_PATH, "HOME": home, "TMPDIR": home if home != "/tmp" else "/tmp",
                "MPLCONFIGDIR": os.path.join(home, ".mpl"), "PYTHONNOUSERSITE": "1",
                "PYTHONDONTWRITEBYTECODE": "1"})
    return env


def _int_env(name, default):
    try:
        return int(os.environ.get(name, default) or 0)
    except ValueError:
        return default


# -- the launcher (runs as a script) -------------------------------------------------------
def _launch(argv):
    import resource

    mem_mb, tmp_mb, use_bwrap, rw, i = DEFAULT_MEM_MB, DEFAULT_TMP_MB, False, [], 0
    while i < len(argv) and argv[i] != "--":
        a = argv[i]
        if a == "--mem-mb":
            mem_mb, i = int(argv[i + 1]), i + 2
        elif a == "--tmp-mb":
            tmp_mb, i = int(argv[i + 1]), i + 2
        elif a == "--bwrap":
            use_bwrap, i = True, i + 1
        elif a == "--bind-rw":
            rw.append(argv[i + 1]); i += 2
        else:
            raise SystemExit(f"sandbox: unknown option {a}")
    cmd = argv[i + 1:]
    if mem_mb > 0:
        limit = mem_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    resource.setrlimit(resource.RLIMIT_FSIZE, (FSIZE_BYTES, FSIZE_BYTES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    work = os.getcwd()   # the scratch folder IsolatedExecute made (the inputs file is in it)
    if not os.path.isabs(cmd[0]):
        cmd[0] = shutil.which(cmd[0]) or cmd[0]
    if not use_bwrap:
        os.execve(cmd[0], cmd, kernel_env(os.environ, work))
    seccomp = _seccomp_fd()
    if seccomp is None:
        raise SystemExit("sandbox: " + seccomp_program()[1])
    os.set_inheritable(seccomp, True)
    args = bwrap_command(cmd, rw=rw, work=work, env=kernel_env(os.environ, "/tmp"), tmp_mb=tmp_mb,
                         seccomp_fd=seccomp)
    os.execvpe(args[0], args, {"PATH": os.environ.get("PATH", KERNEL_PATH)})


# -- bubblewrap ------------------------------------------------------------------------------
def _system_ro_paths():
    paths = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc"]
    for p in {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(sys.executable)}:
        paths.append(p)
    import site

    # (editable installs point a .pth at the course checkout: only the package folder is bound, below)
    paths += site.getsitepackages()
    # site-packages folders a .pth put on the path (./course hub's shared venv adds the course venv's this way)
    paths += [p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages")]
    return [p for p in dict.fromkeys(paths) if os.path.exists(p)]


def package_dir():
    """The attncourse package beside this judge (this file is judge/sandbox.py): what the kernel imports the grader
    from, and the only part of the course a kernel sees (the judge is not bound). Where the course folder holds no
    attncourse (``./course hub``'s instructor copy: every user imports the shared environment's copy), the one
    this Python imports."""
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "attncourse")
    if os.path.isdir(here):
        return here
    import importlib.util

    spec = importlib.util.find_spec("attncourse")
    return os.path.dirname(spec.origin) if spec and spec.origin else here


def _seen_at(path: str) -> list[str]:
    """Where a path must appear inside the sandbox: its real path, and the path as given when that differs
    (a symlinked ``.venv``: Python's prefix and executable are found through the link)."""
    real, given = os.path.realpath(path), os.path.abspath(path)
    if real == given or (os.path.islink(given) and given.count("/") == 1):   # /bin -> usr/bin: a --symlink below
        return [real]
    return [real, given]


SANDBOX_UID = 65534   # the kernel's uid and gid inside its user namespace (nobody)
DEV_SHM_MB = 64       # /dev/shm inside the sandbox (POSIX shared memory; torch's DataLoader workers would use it)


def _private_entries(top: str = "/etc") -> list[tuple[str, bool]]:
    """(path, is_folder) of what under ``top`` other users may not read: hidden inside the sandbox.

    Where the grader runs as root, the kernel's uid maps to root outside its namespace, and file permissions
    are checked against that: ``/etc/shadow`` or an SSH host key would be readable. The sandbox shows only what
    any user of the machine may read.
    """
    out = []
    for folder, dirs, files in os.walk(top):
        for name in list(dirs):
            path = os.path.join(folder, name)
            try:
                if not os.path.islink(path) and os.lstat(path).st_mode & 0o005 != 0o005:
                    out.append((path, True))
                    dirs.remove(name)
            except OSError:
                dirs.remove(name)
        for name in files:
            path = os.path.join(folder, name)
            try:
                if not os.path.islink(path) and not os.lstat(path).st_mode & 0o004:
                    out.append((path, False))
            except OSError:
                pass
    return out


def bwrap_command(cmd, rw=(), work=None, env=None, tmp_mb=DEFAULT_TMP_MB, seccomp_fd=None, zygote_dirs=None):
    """``cmd`` wrapped in bwrap: system and Python read-only, ``rw`` writable, ``work`` a private tmpfs.

    The kernel runs as uid/gid 65534 in a user namespace of its own with no capability, ``no_new_privs`` and
    no right to make further user namespaces, whoever starts it (root included): its mounts stay as bound.
    ``work``: the kernel's working folder; inside the sandbox it is a tmpfs of ``tmp_mb`` MB at the same path
    holding each regular file of the host folder read-only (the hidden inputs), and nothing else of the host.
    ``/tmp`` is a tmpfs of ``tmp_mb`` MB, ``/dev/shm`` one of :data:`DEV_SHM_MB` MB; ``/dev`` and the
    sandbox's root are read-only. ``env``: the kernel's whole environment (``--clearenv``);
    ``seccomp_fd``: an open seccomp program (:func:`seccomp_program`).

    ``zygote_dirs``: the sandbox of the kernels' fork server (:mod:`judge.zygote`) instead of a kernel's: the same
    mounts plus these empty folders, and it keeps its capabilities *inside* its user namespace (it builds each
    kernel's namespaces and mounts, then drops them all in the kernel: :mod:`attncourse.kernel.forkserver`).
    """
    size = str(max(1, tmp_mb) * 1024 * 1024)
    uid = str(SANDBOX_UID)
    args = [bwrap_program() or "bwrap", "--die-with-parent", "--unshare-all", "--unshare-user",
            # the fork server's children mount a fresh /proc: that needs the user namespace that owns the mounts
            # (bwrap nests another for --disable-userns, and for any --uid but 0 when started by root); each kernel
            # then enters a user namespace of its own as uid 65534, where no further one may be made
            *(["--uid", "0", "--gid", "0", "--cap-add", "ALL"] if zygote_dirs is not None else
              ["--uid", uid, "--gid", uid, "--disable-userns", "--assert-userns-disabled", "--cap-drop", "ALL"]),
            "--new-session", "--proc", "/proc", "--dev", "/dev",
            "--size", size, "--tmpfs", "/tmp",
            # in its own PID namespace the kernel's parent is bwrap's pid 1: ipykernel would read that
            # as "parent died" and quit; --die-with-parent already ties it to the grader
            "--unsetenv", "JPY_PARENT_PID"]
    if env is not None:
        args += ["--clearenv"]
        for k, v in env.items():
            args += ["--setenv", k, v]
    binds = {}
    for p in _system_ro_paths() + [package_dir()]:
        for src_dst in _seen_at(p):
            binds[src_dst] = ("--ro-bind", os.path.realpath(p))
    for p in rw:
        if os.path.exists(p):
            binds[os.path.realpath(p)] = ("--bind", os.path.realpath(p))
    # parents before children, so that a later bind is not hidden by an earlier one
    for dst, (how, src) in sorted(binds.items(), key=lambda kv: (kv[0].count("/"), kv[0])):
        args += [how, src, dst]
    if os.path.realpath("/etc") in binds:
        for path, folder in _private_entries(os.path.realpath("/etc")):
            args += (["--perms", "0000", "--size", "4096", "--tmpfs", path, "--remount-ro", path] if folder
                     else ["--ro-bind", "/dev/null", path])
    for p in ("/bin", "/sbin", "/lib", "/lib32", "/lib64"):  # /bin -> usr/bin (the ELF interpreter lives there)
        if os.path.islink(p):
            args += ["--symlink", os.readlink(p), p]
    for dev in sorted(glob.glob("/dev/nvidia*")) + sorted(glob.glob("/dev/dri/*")):
        args += ["--dev-bind", dev, dev]
    args += ["--size", str(DEV_SHM_MB * 1024 * 1024), "--tmpfs", "/dev/shm", "--remount-ro", "/dev"]
    if work:
        args += ["--size", size, "--tmpfs", work]
        for name in sorted(os.listdir(work)):
            src = os.path.join(work, name)
            if os.path.isfile(src) and not os.path.islink(src):
                args += ["--ro-bind", src, src]
        args += ["--chdir", work]
    for d in zygote_dirs or ():
        args += ["--dir", d]
    args += ["--remount-ro", "/"]     # the sandbox's root (a tmpfs holding the mount points) stays as built
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    return args + ["--"] + list(cmd)


# -- the syscall filter ------------------------------------------------------------------------------
# Refused with EPERM inside the sandbox (names from the kernel's tables, resolved per architecture by libseccomp;
# anchors: Docker's default profile and Chromium's/Firejail's, which refuse the same families). A name the
# running architecture does not have is skipped.
DENIED_SYSCALLS = (
    # new processes (threads are clone with CLONE_THREAD, allowed below)
    "fork", "vfork",
    # mounts and the filesystem tree
    "mount", "umount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsconfig",
    "fsmount", "fspick", "mount_setattr",
    # namespaces
    "unshare", "setns",
    # kernel interfaces a grading kernel never needs, each a frequent source of privilege escalations
    "io_uring_setup", "io_uring_enter", "io_uring_register", "bpf", "perf_event_open", "userfaultfd",
    "keyctl", "add_key", "request_key",
    # other processes' memory
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    # the machine itself
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot", "swapon",
    "swapoff", "syslog", "acct", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "quotactl",
    "quotactl_fd", "open_by_handle_at", "name_to_handle_at", "fanotify_init", "lookup_dcookie", "personality",
    "vhangup", "iopl", "ioperm", "uselib", "nfsservctl", "_sysctl", "sysfs", "ustat", "create_module",
    "get_kernel_syms", "query_module", "vm86", "vm86old", "mknod", "mknodat",
)
# clone's flags that would make a new namespace (a thread may not ask for one)
CLONE_THREAD = 0x00010000
CLONE_NAMESPACES = (0x00000080, 0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000,
                    0x40000000)   # NEWTIME, NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET
_EPERM, _ENOSYS = 1, 38


class _ArgCmp(ctypes.Structure):   # libseccomp's struct scmp_arg_cmp
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                ("datum_b", ctypes.c_uint64)]


def _libseccomp():
    for name in ("libseccomp.so.2", ctypes.util.find_library("seccomp")):
        if name:
            try:
                return ctypes.CDLL(name, use_errno=True)
            except OSError:
                pass
    return None


def seccomp_program() -> tuple[bytes | None, str]:
    """(the sandbox's seccomp program as classic BPF for this machine, '') or (None, why it cannot be built).

    Built with libseccomp (its maintained syscall tables for every architecture it knows): everything is
    allowed but :data:`DENIED_SYSCALLS` (EPERM), ``clone`` without ``CLONE_THREAD`` or with a namespace flag
    (EPERM) and ``clone3`` (ENOSYS: its flags live in memory a filter cannot read; glibc then falls back to
    ``clone`` for threads). A system call of another architecture (i386's ``int 0x80``, x32) kills the kernel.
    """
    if platform.machine().lower().startswith("s390"):   # clone's flags are its second argument there
        return None, f"no syscall filter for {platform.machine()} (clone's flags are not its first argument)"
    lib = _libseccomp()
    if lib is None:
        return None, "libseccomp is not installed (Debian/Ubuntu: apt-get install libseccomp2)"
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                           ctypes.POINTER(_ArgCmp)]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    errno = lambda e: 0x00050000 | e   # SCMP_ACT_ERRNO(e)
    ctx = lib.seccomp_init(0x7FFF0000)  # SCMP_ACT_ALLOW
    if not ctx:
        return None, "libseccomp could not start a filter"
    try:
        def rule(action, name, *cmps):
            nr = lib.seccomp_syscall_resolve_name(name.encode())
            if nr == -1:            # __NR_SCMP_ERROR: no such call anywhere
                return
            arr = (_ArgCmp * max(1, len(cmps)))(*[_ArgCmp(0, op, a, b) for op, a, b in cmps])
            rc = lib.seccomp_rule_add_array(ctx, action, nr, len(cmps), arr)
            if rc < 0 and nr >= 0:   # a name that exists here must be filtered (pseudo-numbers < 0 may not)
                raise OSError(-rc, f"seccomp rule for {name}")
        masked_eq = 7               # SCMP_CMP_MASKED_EQ: (arg & a) == b
        for name in DENIED_SYSCALLS:
            rule(errno(_EPERM), name)
        rule(errno(_EPERM), "clone", (masked_eq, CLONE_THREAD, 0))
        for flag in CLONE_NAMESPACES:
            rule(errno(_EPERM), "clone", (masked_eq, flag, flag))
        rule(errno(_ENOSYS), "clone3")
        fd = os.memfd_create("attncourse-seccomp-build", 0)
        try:
            rc = lib.seccomp_export_bpf(ctx, fd)
            if rc < 0:
                raise OSError(-rc, "seccomp_export_bpf")
            os.lseek(fd, 0, os.SEEK_SET)
            chunks = []
            while chunk := os.read(fd, 1 << 16):
                chunks.append(chunk)
            return b"".join(chunks), ""
        finally:
            os.close(fd)
    except OSError as exc:
        return None, f"libseccomp could not build the filter ({exc})"
    finally:
        lib.seccomp_release(ctx)


def _seccomp_fd():
    """An open memfd holding the seccomp program (not close-on-exec: bwrap reads it), or None."""
    prog, _ = seccomp_program()
    if prog is None or not hasattr(os, "memfd_create"):
        return None
    fd = os.memfd_create("attncourse-seccomp", 0)
    os.write(fd, prog)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


# What the probe asks a sandboxed Python (run exactly as a kernel is started, before any grading): every answer
# must be the refusal, or no kernel starts. Standard library only (-S: no site-packages needed).
PROBE = r"""
import ctypes, json, os, threading
libc = ctypes.CDLL(None, use_errno=True)
def works(action):
    try:
        action()
        return True
    except OSError:
        return False
def child():
    if os.fork() == 0:
        os._exit(0)
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
t = threading.Thread(target=lambda: None); t.start(); t.join()
print(json.dumps({
    "uid": os.getuid(),
    "caps": int(status["CapEff"], 16) | int(status["CapPrm"], 16) | int(status["CapBnd"], 16),
    "no_new_privs": status.get("NoNewPrivs", "").strip() == "1",
    "seccomp": status.get("Seccomp", "").strip() == "2",
    "fork": works(child),
    "remount": libc.mount(None, b"/usr", None, 0x20 | 0x1000, None) == 0,   # MS_REMOUNT|MS_BIND: read-write
    "unshare": libc.unshare(0x10000000 | 0x00020000) == 0,                   # CLONE_NEWUSER|CLONE_NEWNS
    "write_root": works(lambda: open("/attncourse-probe", "w").close()),
    "write_dev": works(lambda: open("/dev/attncourse-probe", "w").close()),
}))
"""
# the answers a sandbox must give (anything else: no kernel starts, and the line says which one failed)
PROBE_WANTS = {"caps": 0, "no_new_privs": True, "seccomp": True, "fork": False, "remount": False, "unshare": False,
               "write_root": False, "write_dev": False}
PROBE_SAYS = {"caps": "the kernel keeps capabilities",
              "no_new_privs": "no_new_privs is not set", "seccomp": "the syscall filter is not in force",
              "fork": "the kernel can start processes", "remount": "the kernel can remount a read-only folder",
              "unshare": "the kernel can make namespaces", "write_root": "the sandbox's root is writable",
              "write_dev": "/dev is writable"}


def bwrap_program() -> str | None:
    """$ATTNCOURSE_BWRAP, else bwrap on PATH (None when there is none)."""
    exe = os.environ.get(BWRAP_ENV) or shutil.which("bwrap")
    return exe if exe and os.path.isfile(exe) and os.access(exe, os.X_OK) else None


def bwrap_works() -> tuple[bool, str]:
    """(True, '') when the kernels' sandbox starts here as the launcher starts it, else (False, the reason)."""
    return _probe(bwrap_program(), os.environ.get(BWRAP_ENV))


def run_sandboxed(code: str, timeout: float = 30) -> subprocess.CompletedProcess:
    """Run ``python -S -c code`` in the kernels' sandbox, started as the launcher starts a kernel (the probe's
    way in; the tests use it to list what a sandboxed process can do). Raises RuntimeError where no syscall
    filter can be built, OSError where bwrap cannot start."""
    fd = _seccomp_fd()
    if fd is None:
        raise RuntimeError(seccomp_program()[1] or "no memfd_create here")
    work = tempfile.mkdtemp(prefix="attncourse-probe-")
    try:
        cmd = bwrap_command([sys.executable, "-S", "-c", code], work=work, env=kernel_env({}, "/tmp"),
                            seccomp_fd=fd)
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, pass_fds=(fd,))
    finally:
        os.close(fd)
        shutil.rmtree(work, ignore_errors=True)


@functools.lru_cache(maxsize=4)
def _probe(exe, asked) -> tuple[bool, str]:
    import json

    if not exe:
        where = f"{BWRAP_ENV}={asked} is not a program" if asked else "bubblewrap (bwrap) is not installed"
        return False, f"{where} (Debian/Ubuntu: apt-get install bubblewrap)"
    try:
        p = run_sandboxed(PROBE)
    except RuntimeError as exc:
        return False, str(exc)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"bwrap could not run: {exc}"
    try:
        seen = json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else None
    except (ValueError, IndexError):
        seen = None
    if not isinstance(seen, dict):
        return False, f"bwrap fails here (exit {p.returncode}): {p.stderr.strip()[:300]}"
    wrong = [PROBE_SAYS[k] for k, want in PROBE_WANTS.items() if seen.get(k) != want]
    if seen.get("uid") != SANDBOX_UID:
        wrong.insert(0, f"the kernel runs as uid {seen.get('uid')}, not {SANDBOX_UID}")
    if wrong:
        return False, "the sandbox does not hold: " + "; ".join(wrong)
    return True, ""


# -- nbgrader side -------------------------------------------------------------------------------
def mode(env=None) -> str:
    """``required`` (auto, 1: the default), ``off`` (0: the instructor said so) or ``self`` (self-study check)."""
    value = (env if env is not None else os.environ).get(SANDBOX_ENV, "auto").strip().lower() or "auto"
    if value in ("0", "no", "off", "false", "unsandboxed"):
        return "off"
    if value == "self":
        return "self"
    return "required"


REFUSED = ("grading refused: the sandbox cannot start here ({why}). Install bubblewrap where it can run (in a "
           "container, allow user namespaces), grade on Dask workers where it works (--scheduler), or grade without "
           "it by name: ./course grade --unsandboxed")


def sandbox_status(env=None) -> tuple[bool | None, str]:
    """(True: sandboxed / False: not, by the instructor's or learner's choice / None: refused, the line to show)."""
    m = mode(env)
    if m == "off":
        return False, (f"kernels NOT sandboxed (--unsandboxed / {SANDBOX_ENV}=0): student code could read and "
                       "write any file this account can, including the reference data in graders/data")
    ok, why = bwrap_works()
    if ok:
        return True, ("kernels sandboxed with bubblewrap (no privilege, no course files, no network, no new "
                      "processes, allow-listed environment)")
    if m == "self":
        return False, f"kernels not sandboxed on this machine ({why}); this is your own check of your own work"
    return None, REFUSED.format(why=why)


if __name__ == "__main__":
    _launch(sys.argv[1:])
