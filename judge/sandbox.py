"""How grading kernels are launched: each with its own budget, in a bubblewrap sandbox required unless turned off by name.

nbgrader's ``Execute`` preprocessor, as the course runs it (:class:`judge.preprocessors.IsolatedExecute`, whose
kernel manager is :class:`judge.kernels.SandboxedKernelManager`), starts every kernel from a preloaded fork server
(:mod:`judge.zygote`) or, where that is off or does not hold, through this file run as a script::

    python judge/sandbox.py --mem-mb 4096 --tmp-mb 256 --tasks 512 --why FILE
        [--bwrap --connection FILE --sockets shell=FD,…] -- <kernel command>

The launcher (:func:`_launch`) dies with the grading process, gives the kernel its limits (:func:`kernel_side`'s
``kernel_limits``: ``RLIMIT_DATA``, ``RLIMIT_FSIZE``, no core file, 1024 open files, the OOM killer's first
choice), an allow-listed environment (:func:`kernel_env`: no secret such as ``PGPASSWORD``, no variable naming the
course folder), its stdout and stderr as a pipe it drains keeping the last lines (:class:`Tail`; nothing reaches
a terminal or the grader's memory), and starts it inside ``bwrap``; it caps the sandbox's tasks before anything
runs in it (:func:`limit_tasks_of`) and exits with the kernel's status, writing one inert line to ``--why`` and
stderr when the kernel stopped by itself (:func:`report_stop`). In the sandbox the kernel has:

* no privilege, whoever starts it (root included): uid/gid 65534 in a user namespace of
  its own, no capability, ``no_new_privs``, no further user namespace (``--disable-userns``);
  every bind stays read-only (the probe tries a remount and refuses a sandbox where it works);
  where the grader is root, what other users may not read under ``/etc`` is left out
  (:func:`_etc_view`, built so that no file appearing or vanishing meanwhile fails a start);
* a read-only Python installation and course package (bound at their real paths
  *and* at the paths Python was started from, so a symlinked or relocated ``.venv``
  works), no network, its own PID namespace, no other file of the course;
* no folder of the host writable: its channels are listening sockets the kernel manager made and hands over as
  descriptors (the connection file read-only at :data:`KERNEL_CONNECTION`); size-limited tmpfs only: a
  private ``/tmp`` and, as its working folder, a tmpfs at the scratch folder's path holding the hidden-inputs
  file read-only (:class:`judge.preprocessors.IsolatedExecute`), each ``ATTNCOURSE_KERNEL_TMP_MB``; a 64 MB
  ``/dev/shm``; ``/dev`` and the sandbox's root read-only, ``/dev/zero`` is ``/dev/null``; nothing the kernel
  writes survives it;
* a seccomp filter built with libseccomp (:func:`seccomp_program`, names resolved for the
  machine's architecture): new processes (``fork``, ``vfork``, ``clone`` without
  ``CLONE_THREAD`` or with a namespace flag), mounts, namespaces, io_uring, bpf,
  perf_event_open, keyrings, ptrace, the machine's own controls, and memory no limit counts
  (``memfd_create``, shared anonymous mappings, System V IPC, POSIX message queues) are refused;
  threads work (at most its budget of them), a fork bomb or a shell does not.  Where the filter cannot be built
  no kernel starts;
* GPUs: ``/dev/nvidia*`` is bound when present, so CUDA kernels work sandboxed.

Before the first kernel, :func:`bwrap_works` starts a Python in exactly this sandbox and asks it
(:data:`PROBE`): any privilege, process, remount, namespace or writable root it finds refuses grading.

Environment (read by the nbgrader process):

* ``ATTNCOURSE_SANDBOX`` — ``auto`` (the default) and ``1``: kernels run sandboxed,
  and where bubblewrap cannot run no kernel starts (:func:`sandbox_status` says why
  and what to do); ``0``: the instructor asked for no sandbox (``./course grade
  --unsandboxed``; every report says so, in red); ``self``: the self-study check on a
  learner's own machine, sandboxed where bubblewrap works, else not, and it says so;
* ``ATTNCOURSE_KERNEL_MEM_MB`` — memory limit per kernel (default 4096; 0 = none);
* ``ATTNCOURSE_KERNEL_TMP_MB`` — size of the sandbox's ``/tmp`` and of its working
  folder, each (default 256);
* ``ATTNCOURSE_KERNEL_TASKS`` — processes and threads per kernel (default 512; 0 = no cap);
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
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile

MEM_ENV = "ATTNCOURSE_KERNEL_MEM_MB"
TMP_ENV = "ATTNCOURSE_KERNEL_TMP_MB"
SANDBOX_ENV = "ATTNCOURSE_SANDBOX"
BWRAP_ENV = "ATTNCOURSE_BWRAP"      # the bubblewrap program (default: bwrap on PATH)
IPC_ENV = "ATTNCOURSE_KERNEL_IPC"  # 0: unsandboxed kernels talk TCP (jupyter's default) instead of unix sockets
TASKS_ENV = "ATTNCOURSE_KERNEL_TASKS"   # processes and threads per kernel
DEFAULT_MEM_MB = 4096
DEFAULT_TMP_MB = 256
DEFAULT_TASKS = 512   # an honest kernel runs ~10 threads plus torch's, one per core
FSIZE_BYTES = 512 * 1024 * 1024
NOFILE = 1024         # open files per kernel (each pipe or socket holds kernel memory no other limit counts)

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
# A grading kernel's maths libraries run one thread each, unless the grading environment sets these: a class is
# graded side by side (Dask workers, one kernel each), and a graded cell's tensors are small (training runs are
# demonstrations, not run when grading).  Set here, for every kernel of every path (the fork server's, a fresh
# sandbox's, serial or Dask): a Dask nanny's own setting of them never reaches a kernel (instructor.task).
KERNEL_THREADS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def kernel_env(environ, home: str) -> dict:
    """The kernel's whole environment: the allow-listed variables of ``environ`` and a fixed PATH/HOME/TMPDIR."""
    env = {k: environ[k] for k in KERNEL_ENV_ALLOW if k in environ}
    for k in KERNEL_THREADS:   # one thread each, unless the grading environment says how many
        env.setdefault(k, "1")
    env.update({"PATH": KERNEL_PATH, "HOME": home, "TMPDIR": home if home != "/tmp" else "/tmp",
                "MPLCONFIGDIR": os.path.join(home, ".mpl"), "PYTHONNOUSERSITE": "1",
                "PYTHONDONTWRITEBYTECODE": "1"})
    return env


def _int_env(name, default, environ=None):
    try:
        return int((os.environ if environ is None else environ).get(name, default) or 0)
    except ValueError:
        return default


# -- what every kernel may take of the machine, and what is left of it -----------------------------------
def die_with_parent():
    """This process is killed (SIGKILL) when the grading process that started it dies: a kernel never outlives its
    grader. The kernel manager's own process handle calls it first thing (``JPY_PARENT_PID``: jupyter_client's
    launcher names the grading process)."""
    expected = os.environ.get("JPY_PARENT_PID")
    ctypes.CDLL(None, use_errno=True).prctl(1, 9, 0, 0, 0)   # PR_SET_PDEATHSIG, SIGKILL
    if os.getppid() == 1 or (expected and expected.isdigit() and os.getppid() != int(expected)):
        os._exit(1)   # it died already


class Tail:
    """The last bytes a kernel wrote on its stdout and stderr (a pipe this process drains): what a kernel prints
    there reaches no terminal and no grader's memory, and the last lines say why a kernel stopped."""

    def __init__(self, keep: int = 4096):
        self.keep, self.data = keep, b""

    def add(self, chunk: bytes):
        self.data = (self.data + chunk)[-self.keep:]


_ESCAPES = re.compile(rb"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)?|P[^\x1b]*(\x1b\\)?|[@-Z\\-_])")


def why_line(status: int, tail: bytes) -> str:
    """One line that says why a kernel stopped: its exit status and its last lines (inert: no escape sequence or
    control character of the kernel's reaches a terminal), at most ~400 characters."""
    text = _ESCAPES.sub(b"", tail).decode("utf-8", "replace")
    text = "".join(ch if ch.isprintable() or ch == "\n" else " " for ch in text)
    lines = [" ".join(ln.split()) for ln in text.splitlines() if ln.strip()]
    last = " | ".join(lines[-3:])
    if len(last) > 400:
        last = "…" + last[-400:]
    how = f"killed by signal {-status}" if status < 0 else f"exit {status}"
    return f"the grading kernel stopped ({how})" + (f": {last}" if last else ", printing nothing")


def report_stop(status: int, tail: Tail, why_file: str | None):
    """A kernel that stopped by itself with a non-zero status: its line on stderr (inert) and in ``why_file``
    (the kernel manager's private folder), where the kernel manager reads it."""
    if status == 0:
        return
    line = why_line(status, tail.data)
    if why_file:
        try:
            with open(why_file, "w") as f:
                f.write(line)
        except OSError:
            pass
    print(f"attncourse: {line}", file=sys.stderr, flush=True)


def limit_tasks_of(pid: int, tasks: int) -> bool:
    """From outside: at most about ``tasks`` tasks in the PID namespace of process ``pid`` (a fresh sandbox's
    pid 1, held by bwrap's ``--block-fd`` before it runs anything): a helper process joins that namespace's
    owning user namespace (this account owns it: it made it) and the namespace itself, and sets its ``pid_max``
    (:func:`judge.forkserver.limit_tasks`: Linux 6.14 and later). False where that cannot be done."""
    import fcntl

    if tasks <= 0:
        return True
    try:
        pidns = os.open(f"/proc/{pid}/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        userns = fcntl.ioctl(pidns, 0xB701)   # NS_GET_USERNS: the user namespace that owns it
    except OSError:
        os.close(pidns)
        return False
    child = os.fork()
    if child == 0:
        code = 1
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.setns(userns, 0x10000000) == 0 and libc.setns(pidns, 0x20000000) == 0:   # USER, then PID
                helper = os.fork()        # the first process of this one's that lives in that PID namespace
                if helper == 0:
                    try:
                        os._exit(0 if kernel_side().limit_tasks(tasks) else 1)   # that namespace's own
                    except BaseException:
                        os._exit(1)
                code = os.waitstatus_to_exitcode(os.waitpid(helper, 0)[1])
        finally:
            os._exit(code)
    os.close(pidns)
    os.close(userns)
    return os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]) == 0


def socket_folder(prefix: str, longest: int = 16) -> str:
    """A new folder of this account's alone (0700) where unix sockets named up to ``longest`` characters fit the
    108 bytes a socket's path may have: in $TMPDIR, or in /tmp where $TMPDIR's path is too long for that."""
    folder = tempfile.mkdtemp(prefix=prefix)
    if len(os.fsencode(folder)) + 1 + longest < 108:
        return folder
    os.rmdir(folder)
    return tempfile.mkdtemp(prefix=prefix, dir="/tmp")


def remove_tree(path: str):
    """Remove ``path`` and everything below it whatever its depth, names or modes, never following a link and
    never raising (what cannot be removed stays). Iterative, with two descriptors open at most: a tree 1,200
    folders deep made ``shutil.rmtree`` raise RecursionError, which its ``ignore_errors`` does not catch."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError:
        try:
            os.unlink(path)
        except OSError:
            pass
        return
    depth, done = 0, set()
    try:
        while True:
            child = None
            try:
                names = os.listdir(fd)
            except OSError:
                names = []
            for name in names:
                for attempt in (1, 2):
                    try:
                        os.unlink(name, dir_fd=fd)
                        break
                    except IsADirectoryError:
                        try:
                            os.rmdir(name, dir_fd=fd)
                            break
                        except OSError:
                            pass
                        try:
                            sub = os.open(name, flags, dir_fd=fd)
                        except PermissionError:
                            try:
                                os.chmod(name, 0o700, dir_fd=fd)
                            except OSError:
                                break
                            continue
                        except OSError:
                            break
                        st = os.fstat(sub)
                        if (st.st_dev, st.st_ino) in done:
                            os.close(sub)
                        else:
                            child = sub
                        break
                    except PermissionError:   # this folder is not writable: make it so, once
                        try:
                            os.fchmod(fd, 0o700)
                        except OSError:
                            break
                    except OSError:
                        break
                if child is not None:
                    break
            if child is not None:
                try:
                    os.fchmod(child, 0o700)
                except OSError:
                    pass
                os.close(fd)
                fd, depth = child, depth + 1
                continue
            if depth == 0:
                break
            st = os.fstat(fd)
            done.add((st.st_dev, st.st_ino))   # what is left here stays: its parent tries it once more
            parent = os.open("..", flags, dir_fd=fd)
            os.close(fd)
            fd, depth = parent, depth - 1
    finally:
        os.close(fd)
    try:
        os.rmdir(path)
    except OSError:
        pass


def forkserver_file() -> str:
    """``judge/forkserver.py``, beside this file: the kernels' side of the sandbox (the fork server, a fresh sandbox's
    kernel, the kernel's limits), the one file of the judge every sandbox binds (read-only, :func:`bwrap_command`)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "forkserver.py")


@functools.lru_cache(maxsize=1)
def kernel_side():
    """``judge/forkserver.py`` loaded by its path (standard library only at module level; this file also runs as a
    script, :func:`_launch`): the kernel's limits are set by that one code on every path, in the fork server's
    kernels and here."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("attncourse_kernel_side", forkserver_file())
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def parse_sockets(text: str) -> dict:
    """``shell=3,iopub=4,…`` (how the kernel manager names the listening sockets it hands over) as {channel: fd}."""
    return {k: int(v) for k, v in (item.split("=", 1) for item in text.split(",") if item)}


def _read_info(fd: int) -> dict:
    """bwrap's --info-fd JSON (its sandbox's pid 1 as this machine sees it), or {} when bwrap stopped first."""
    import json

    data = b""
    while True:
        chunk = os.read(fd, 4096)
        if not chunk:
            return {}
        data += chunk
        try:
            return json.loads(data)
        except ValueError:
            continue


# -- the launcher (runs as a script) -------------------------------------------------------
def _launch(argv):
    """The kernel manager's process handle for a kernel of a fresh sandbox (or, by the instructor's choice, of
    none): dies with the grading process, sets the kernel's limits, starts bwrap, caps the sandbox's tasks before
    it runs anything, drains the kernel's stdout and stderr (:class:`Tail`) and exits with the kernel's status,
    saying why when it stopped by itself (:func:`report_stop`)."""
    opts = {"--mem-mb": DEFAULT_MEM_MB, "--tmp-mb": DEFAULT_TMP_MB, "--tasks": DEFAULT_TASKS, "--why": None,
            "--connection": None, "--sockets": None}
    use_bwrap, i = False, 0
    while i < len(argv) and argv[i] != "--":
        a = argv[i]
        if a == "--bwrap":
            use_bwrap, i = True, i + 1
        elif a in opts:
            opts[a], i = argv[i + 1], i + 2
        else:
            raise RuntimeError(f"unknown option {a}")
    cmd = argv[i + 1:]
    die_with_parent()
    tasks = int(opts["--tasks"])
    limits = kernel_side().kernel_limits   # (loaded now: the kernel's limits are set in its process, below)
    work = os.getcwd()   # the scratch folder IsolatedExecute made (the inputs file is in it)
    if not os.path.isabs(cmd[0]):
        cmd[0] = shutil.which(cmd[0]) or cmd[0]
    keep, info, block = [], None, None
    if use_bwrap:
        seccomp = _seccomp_fd()
        if seccomp is None:
            raise RuntimeError(seccomp_program()[1])
        info, info_w = os.pipe()
        block_r, block = os.pipe()
        sockets = list(parse_sockets(opts["--sockets"] or "").values())
        files = [(opts["--connection"], KERNEL_CONNECTION)] if opts["--connection"] else []
        args = bwrap_command(cmd, work=work, env=kernel_env(os.environ, "/tmp"), tmp_mb=int(opts["--tmp-mb"]),
                             seccomp_fd=seccomp, files=files, info_fd=info_w, block_fd=block_r)
        keep = [seccomp, info_w, block_r, *sockets, *args.fds]
        env = {"PATH": os.environ.get("PATH", KERNEL_PATH)}
    else:
        args, env = cmd, kernel_env(os.environ, work)
    out_r, out_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0), os.dup2(out_w, 1), os.dup2(out_w, 2)
            for fd in keep:
                os.set_inheritable(fd, True)
            ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)   # PR_SET_PDEATHSIG: it dies with this process
            # (unsandboxed, RLIMIT_NPROC would count every process of this account: the sandbox's user namespace
            # counts the kernel's alone, where the kernel sets it itself)
            limits(int(opts["--mem-mb"]), FSIZE_BYTES, 0, NOFILE)
            os.execvpe(args[0], args, env)
        except BaseException as exc:
            try:
                os.write(2, f"cannot start {args[0]}: {type(exc).__name__}: {exc}\n".encode())
            finally:
                os._exit(127)
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # an interrupt is for the kernel (same process group), not us
    os.close(out_w)
    for fd in keep:
        os.close(fd)
    if use_bwrap:
        child = _read_info(info).get("child-pid")
        os.close(info)
        if child and not limit_tasks_of(int(child), tasks):
            pass   # this Linux keeps one pid_max for the machine: the kernel keeps RLIMIT_NPROC (not for root)
        try:
            os.write(block, b"1")   # the sandbox may run now
        except OSError:
            pass
        os.close(block)
    tail = Tail()
    while chunk := os.read(out_r, 1 << 16):
        tail.add(chunk)
    status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    report_stop(status, tail, opts["--why"])
    os._exit(status if status >= 0 else 128 - status)


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
    from, and with :func:`forkserver_file` the only part of the course a kernel sees (the rest of the judge is not
    bound). Where the course folder holds no
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


def _scan(top: str) -> dict:
    """{folder: [(name, kind, public)]} of every folder under ``top`` that other users may enter, from one
    ``lstat`` of each entry (kind: "link", "dir" or "file"; an entry gone before its ``lstat`` is left out)."""
    tree, todo = {}, [top]
    while todo:
        folder = todo.pop()
        entries = []
        try:
            with os.scandir(folder) as it:
                for e in it:
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if e.is_symlink():
                        entries.append((e.name, "link", True))
                    elif e.is_dir(follow_symlinks=False):
                        public = st.st_mode & 0o005 == 0o005
                        entries.append((e.name, "dir", public))
                        if public:
                            todo.append(os.path.join(folder, e.name))
                    else:
                        entries.append((e.name, "file", bool(st.st_mode & 0o004)))
        except OSError:
            pass
        tree[folder] = sorted(entries)
    return tree


class Command(list):
    """A bwrap command (a list of its arguments) and the descriptors it reads (``fds``): pass them to the process
    (``pass_fds``), then :meth:`close` them here."""
    fds: list

    def __init__(self, args=(), fds=()):
        super().__init__(args)
        self.fds = list(fds)

    def close(self):
        for fd in self.fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds = []


MAX_COPIED = 1 << 20   # an /etc file larger than this is bound by its path, not copied


def _etc_view(top: str = "/etc", fds: list | None = None) -> list[str]:
    """bwrap arguments that show ``top`` as any user of the machine may read it, built so that no file appearing
    or vanishing meanwhile can make the sandbox fail to start or show what others may not read.

    ``top`` is scanned once (:func:`_scan`); every folder holding something other users may not read, at any
    depth, is rebuilt in the sandbox's own root from that same scan: each regular file others may read is opened
    now, checked on the open descriptor, and *copied* into the sandbox by bwrap from that descriptor (``--file``;
    ``fds`` collects them): a file that vanishes or is replaced later changes nothing; each folder others may
    read is bound read-only (``--ro-bind-try``), each symbolic link made again with its target read now, and
    what others may not read is left out. A folder with nothing private below it is bound whole.

    Masking private files on a bound ``/etc``, as before, needed each of them to still be there when bwrap ran:
    a lock file of ``chsh`` that vanished meanwhile failed 12 sandbox starts of 100 ("Can't create file at
    /etc/passwd.lock"); binding each public file by its path left bwrap's own window between finding a file and
    binding it (1 start of 100 failed under a loop making and deleting files)."""
    import stat as st_

    tree = _scan(top)
    rebuilt = {top}
    for folder, entries in tree.items():
        if any(not public for _, _, public in entries):
            while folder.startswith(top) and folder not in rebuilt:
                rebuilt.add(folder)
                folder = os.path.dirname(folder)
    args = []
    for folder in sorted(rebuilt, key=lambda p: (p.count("/"), p)):
        args += ["--dir", folder]
        for name, kind, public in tree.get(folder, []):
            path = os.path.join(folder, name)
            if not public or path in rebuilt:
                continue
            if kind == "link":
                try:
                    args += ["--symlink", os.readlink(path), path]
                except OSError:
                    pass
            elif kind == "dir":
                args += ["--ro-bind-try", path, path]
            else:
                try:
                    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
                except OSError:
                    continue
                info = os.fstat(fd)
                if not st_.S_ISREG(info.st_mode) or not info.st_mode & 0o004 or info.st_size > MAX_COPIED or fds is None:
                    os.close(fd)   # (not a file others may read now, or too big to copy: bound by its path)
                    if st_.S_ISREG(info.st_mode) and info.st_mode & 0o004:
                        args += ["--ro-bind-try", path, path]
                    continue
                fds.append(fd)
                args += ["--perms", f"{info.st_mode & 0o755 | 0o444:o}", "--file", str(fd), path]
    return args


KERNEL_CONNECTION = "/run/attncourse/conf/connection.json"   # where a kernel reads its connection file


def bwrap_command(cmd, work=None, env=None, tmp_mb=DEFAULT_TMP_MB, seccomp_fd=None, zygote_dirs=None, files=(),
                  info_fd=None, block_fd=None):
    """``cmd`` wrapped in bwrap: system and Python read-only, ``work`` a private tmpfs; nothing of the host
    writable.

    The kernel runs as uid/gid 65534 in a user namespace of its own with no capability, ``no_new_privs`` and
    no right to make further user namespaces, whoever starts it (root included): its mounts stay as bound.
    ``work``: the kernel's working folder; inside the sandbox it is a tmpfs of ``tmp_mb`` MB at the same path
    holding each regular file of the host folder read-only (the hidden inputs), and nothing else of the host.
    ``/tmp`` is a tmpfs of ``tmp_mb`` MB, ``/dev/shm`` one of :data:`DEV_SHM_MB` MB; ``/dev`` and the
    sandbox's root are read-only, ``/dev/zero`` is ``/dev/null`` (a shared mapping of it would be memory no
    limit counts). ``env``: the kernel's whole environment (``--clearenv``); ``seccomp_fd``: an open seccomp
    program (:func:`seccomp_program`); ``files``: (host file, path inside) bound read-only (the connection
    file); ``info_fd``/``block_fd``: bwrap's, for the launcher (:func:`_launch`) to cap the sandbox's tasks
    before it runs anything. ``/etc``: :func:`_etc_view`. A :class:`Command`: pass its ``fds`` to bwrap.

    ``zygote_dirs``: the sandbox of the kernels' fork server (:mod:`judge.zygote`) instead of a kernel's: the same
    mounts plus these empty folders, and it keeps its capabilities *inside* its user namespace (it builds each
    kernel's namespaces and mounts, then drops them all in the kernel: :mod:`judge.forkserver`).
    """
    size = str(max(1, tmp_mb) * 1024 * 1024)
    uid = str(SANDBOX_UID)
    fds = []
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
    if info_fd is not None:
        args += ["--info-fd", str(info_fd)]
    if block_fd is not None:
        args += ["--block-fd", str(block_fd)]
    if env is not None:
        args += ["--clearenv"]
        for k, v in env.items():
            args += ["--setenv", k, v]
    binds = {}
    etc = os.path.realpath("/etc")
    for p in _system_ro_paths() + [package_dir()]:
        for src_dst in _seen_at(p):
            binds[src_dst] = ("--ro-bind", os.path.realpath(p))
    # parents before children, so that a later bind is not hidden by an earlier one
    for dst, (how, src) in sorted(binds.items(), key=lambda kv: (kv[0].count("/"), kv[0])):
        args += _etc_view(etc, fds) if dst == etc else [how, src, dst]
    # judge/forkserver.py, the one file of the judge a kernel sees: a copy from a descriptor this process opened,
    # at its own path (bwrap could not resolve it by path inside a course folder only its owner may enter: the
    # hub's instructor, mode 0700)
    side = forkserver_file()
    for dst in _seen_at(side) if os.path.isfile(side) else []:
        fd = os.open(side, os.O_RDONLY | os.O_CLOEXEC)   # one each: bwrap reads a --file's descriptor to its end
        fds.append(fd)
        args += ["--perms", "444", "--file", str(fd), dst]
    for p in ("/bin", "/sbin", "/lib", "/lib32", "/lib64"):  # /bin -> usr/bin (the ELF interpreter lives there)
        if os.path.islink(p):
            args += ["--symlink", os.readlink(p), p]
    for dev in sorted(glob.glob("/dev/nvidia*")) + sorted(glob.glob("/dev/dri/*")):
        args += ["--dev-bind", dev, dev]
    args += ["--ro-bind", "/dev/null", "/dev/zero"]
    args += ["--size", str(DEV_SHM_MB * 1024 * 1024), "--tmpfs", "/dev/shm", "--remount-ro", "/dev"]
    if work:
        args += ["--size", size, "--tmpfs", work]
        for name in sorted(os.listdir(work)):
            src = os.path.join(work, name)
            if os.path.isfile(src) and not os.path.islink(src):
                args += ["--ro-bind", src, src]
        args += ["--chdir", work]
    for src, dst in files:
        args += ["--ro-bind", src, dst]
    for d in zygote_dirs or ():
        args += ["--dir", d]
    args += ["--remount-ro", "/"]     # the sandbox's root (a tmpfs holding the mount points) stays as built
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    return Command(args + ["--"] + list(cmd), fds)


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
    # memory that RLIMIT_DATA does not count (it counts private memory only) and that is no file of a capped
    # tmpfs: anonymous files, System V shared memory, message queues and semaphore sets (shared anonymous
    # mappings: below). Together they held 3 GB under a 512 MB limit, and the OOM killer took Dask workers.
    "memfd_create", "memfd_secret", "shmget", "msgget", "semget", "mq_open",
)
MAP_SHARED, MAP_ANONYMOUS = 0x01, 0x20   # mmap's flags (MAP_SHARED_VALIDATE is 0x03): refused together
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


# where MAP_ANONYMOUS is 0x20 (not on alpha, mips, parisc, sparc, xtensa: there only /dev/zero is closed)
_MAP_ANONYMOUS_IS_0x20 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686", "aarch64", "arm64",
                                                        "armv7l", "armv8l", "riscv64", "ppc64le", "ppc64")


def seccomp_program() -> tuple[bytes | None, str]:
    """(the sandbox's seccomp program as classic BPF for this machine, '') or (None, why it cannot be built).

    Built with libseccomp (its maintained syscall tables for every architecture it knows): everything is
    allowed but :data:`DENIED_SYSCALLS` (EPERM), ``clone`` without ``CLONE_THREAD`` or with a namespace flag
    (EPERM) and ``clone3`` (ENOSYS: its flags live in memory a filter cannot read; glibc then falls back to
    ``clone`` for threads), ``mmap`` of shared anonymous memory (EPERM). A system call of another architecture
    (i386's ``int 0x80``, x32) kills the kernel.
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
        def rule(action, name, *cmps, arg=0):
            nr = lib.seccomp_syscall_resolve_name(name.encode())
            if nr == -1:            # __NR_SCMP_ERROR: no such call anywhere
                return
            arr = (_ArgCmp * max(1, len(cmps)))(*[_ArgCmp(arg, op, a, b) for op, a, b in cmps])
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
        if _MAP_ANONYMOUS_IS_0x20:
            for name in ("mmap", "mmap2"):   # MAP_SHARED|MAP_ANONYMOUS (flags are the 4th argument)
                rule(errno(_EPERM), name, (masked_eq, MAP_SHARED | MAP_ANONYMOUS, MAP_SHARED | MAP_ANONYMOUS), arg=3)
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
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, pass_fds=(fd, *cmd.fds))
        finally:
            cmd.close()
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
    try:
        _launch(sys.argv[1:])
    except Exception as exc:  # noqa: BLE001 - no kernel: say why, in the one line its manager reads
        why = sys.argv[sys.argv.index("--why") + 1] if "--why" in sys.argv[:-1] else None
        line = f"the grading kernel's launcher failed: {type(exc).__name__}: {exc}"
        if why:
            with open(why, "w") as f:
                f.write(line)
        print(f"attncourse: {line}", file=sys.stderr)
        sys.exit(70)
