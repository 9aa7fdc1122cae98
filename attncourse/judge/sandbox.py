"""How grading kernels are launched: resource limits and a bubblewrap sandbox, required unless turned off by name.

``nbgrader_config.py`` calls :func:`configure_nbgrader`, which makes nbgrader's
``Execute`` preprocessor start every kernel through this file run as a script::

    python attncourse/judge/sandbox.py --mem-mb 4096 --tmp-mb 256 [--bwrap --bind-rw DIR] -- <kernel command>

The launcher sets ``RLIMIT_DATA`` (a memory hog gets ``MemoryError`` instead of
taking the machine down), ``RLIMIT_FSIZE`` and no core files, gives the kernel an
allow-listed environment (:func:`kernel_env`: no secret such as ``PGPASSWORD``, no
variable naming the course folder), then ``exec``s the kernel inside ``bwrap``:

* a read-only Python installation and course package (bound at their real paths
  *and* at the paths Python was started from, so a symlinked or relocated ``.venv``
  works), no network, its own PID namespace, no other file of the course;
* a size-limited private ``/tmp`` and, as its working folder, a size-limited tmpfs at
  the scratch folder's path holding the hidden-inputs file read-only
  (:class:`attncourse.judge.preprocessors.IsolatedExecute`): nothing the kernel writes
  survives it, and nothing it could leave behind is ever read by the grader;
* a seccomp filter that refuses new processes (``fork``, ``vfork``, ``clone``
  without ``CLONE_THREAD``): threads work, a fork bomb or a shell does not;
* GPUs: ``/dev/nvidia*`` is bound when present, so CUDA kernels work sandboxed.

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

import functools
import glob
import os
import platform
import shutil
import struct
import subprocess
import sys
import tempfile
import weakref

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
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
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
    if seccomp is not None:
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
    """The attncourse package (this file is attncourse/judge/sandbox.py): what the kernel imports the grader from."""
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _seen_at(path: str) -> list[str]:
    """Where a path must appear inside the sandbox: its real path, and the path as given when that differs
    (a symlinked ``.venv``: Python's prefix and executable are found through the link)."""
    real, given = os.path.realpath(path), os.path.abspath(path)
    if real == given or (os.path.islink(given) and given.count("/") == 1):   # /bin -> usr/bin: a --symlink below
        return [real]
    return [real, given]


def bwrap_command(cmd, rw=(), work=None, env=None, tmp_mb=DEFAULT_TMP_MB, seccomp_fd=None):
    """``cmd`` wrapped in bwrap: system and Python read-only, ``rw`` writable, ``work`` a private tmpfs.

    ``work``: the kernel's working folder; inside the sandbox it is a tmpfs of ``tmp_mb`` MB at the same path
    holding each regular file of the host folder read-only (the hidden inputs), and nothing else of the host.
    ``env``: the kernel's whole environment (``--clearenv``); ``seccomp_fd``: an open seccomp program.
    """
    size = str(max(1, tmp_mb) * 1024 * 1024)
    args = [bwrap_program() or "bwrap", "--die-with-parent", "--unshare-all", "--new-session", "--proc", "/proc", "--dev", "/dev",
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
    for p in ("/bin", "/sbin", "/lib", "/lib32", "/lib64"):  # /bin -> usr/bin (the ELF interpreter lives there)
        if os.path.islink(p):
            args += ["--symlink", os.readlink(p), p]
    for dev in sorted(glob.glob("/dev/nvidia*")) + sorted(glob.glob("/dev/dri/*")):
        args += ["--dev-bind", dev, dev]
    if work:
        args += ["--size", size, "--tmpfs", work]
        for name in sorted(os.listdir(work)):
            src = os.path.join(work, name)
            if os.path.isfile(src) and not os.path.islink(src):
                args += ["--ro-bind", src, src]
        args += ["--chdir", work]
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    return args + ["--"] + list(cmd)


def seccomp_program() -> bytes | None:
    """A classic-BPF seccomp program that refuses new processes and allows threads (x86-64 and arm64).

    ``fork``/``vfork`` and ``clone`` without ``CLONE_THREAD`` get EPERM; ``clone3`` gets ENOSYS (its flags
    live in memory a filter cannot read; glibc then falls back to ``clone`` for threads); on x86-64 the x32
    and i386 entry points are refused too.  None on other architectures (no filter there).
    """
    m = platform.machine().lower()
    if m in ("x86_64", "amd64"):
        arch, denied, clone, clone3, x32 = 0xC000003E, (57, 58), 56, 435, True
    elif m in ("aarch64", "arm64"):
        arch, denied, clone, clone3, x32 = 0xC00000B7, (), 220, 435, False
    else:
        return None
    allow, eperm, enosys = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38
    prog = [("LD", 4), ("JEQ", arch, None, "deny"), ("LD", 0)]
    if x32:
        prog.append(("JGE", 0x40000000, "deny", None))
    prog += [("JEQ", n, "deny", None) for n in denied]
    prog += [("JEQ", clone3, "enosys", None), ("JEQ", clone, None, "allow"),
             ("LD", 16), ("JSET", 0x00010000, "allow", "deny"),      # args[0] = flags; CLONE_THREAD
             ("label", "allow"), ("RET", allow), ("label", "deny"), ("RET", eperm),
             ("label", "enosys"), ("RET", enosys)]
    labels, body = {}, []
    for ins in prog:
        if ins[0] == "label":
            labels[ins[1]] = len(body)
        else:
            body.append(ins)
    codes = {"LD": 0x20, "JEQ": 0x15, "JGE": 0x35, "JSET": 0x45, "RET": 0x06}   # BPF_LD|W|ABS, BPF_JMP|..|K
    out = b""
    for i, ins in enumerate(body):
        if ins[0] in ("LD", "RET"):
            out += struct.pack("=HBBI", codes[ins[0]], 0, 0, ins[1])
        else:
            jt = 0 if ins[2] is None else labels[ins[2]] - i - 1
            jf = 0 if ins[3] is None else labels[ins[3]] - i - 1
            out += struct.pack("=HBBI", codes[ins[0]], jt, jf, ins[1])
    return out


def _seccomp_fd():
    prog = seccomp_program()
    if prog is None or not hasattr(os, "memfd_create"):
        return None
    fd = os.memfd_create("attncourse-seccomp", 0)   # not close-on-exec: bwrap reads it
    os.write(fd, prog)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


PROBE = ("import os, threading\n"
         "t = threading.Thread(target=lambda: None); t.start(); t.join()\n"
         "try:\n    os.fork()\n    print('forked')\nexcept OSError:\n    print('ok')\n")


def bwrap_program() -> str | None:
    """$ATTNCOURSE_BWRAP, else bwrap on PATH (None when there is none)."""
    exe = os.environ.get(BWRAP_ENV) or shutil.which("bwrap")
    return exe if exe and os.path.isfile(exe) and os.access(exe, os.X_OK) else None


def bwrap_works() -> tuple[bool, str]:
    """(True, '') when the kernels' sandbox starts here as the launcher starts it, else (False, the reason)."""
    return _probe(bwrap_program(), os.environ.get(BWRAP_ENV))


@functools.lru_cache(maxsize=4)
def _probe(exe, asked) -> tuple[bool, str]:
    if not exe:
        where = f"{BWRAP_ENV}={asked} is not a program" if asked else "bubblewrap (bwrap) is not installed"
        return False, f"{where} (Debian/Ubuntu: apt-get install bubblewrap)"
    work = tempfile.mkdtemp(prefix="attncourse-probe-")
    fd = _seccomp_fd()
    try:
        cmd = bwrap_command([sys.executable, "-S", "-c", PROBE], work=work, env=kernel_env({}, "/tmp"),
                            seccomp_fd=fd)
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=30, pass_fds=(fd,) if fd else ())
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"bwrap could not run: {exc}"
    finally:
        if fd is not None:
            os.close(fd)
        shutil.rmtree(work, ignore_errors=True)
    if p.returncode != 0 or p.stdout.strip() not in ("ok", "forked"):
        return False, f"bwrap fails here (exit {p.returncode}): {p.stderr.strip()[:300]}"
    if p.stdout.strip() == "forked" and fd is not None:
        return False, "the sandbox's process limit (seccomp) did not hold"
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
        return True, ("kernels sandboxed with bubblewrap (no course files, no network, no new processes, "
                      "allow-listed environment)")
    if m == "self":
        return False, f"kernels not sandboxed on this machine ({why}); this is your own check of your own work"
    return None, REFUSED.format(why=why)


def configure_nbgrader(c, root):
    """Make nbgrader's Execute preprocessor start kernels through the launcher (limits, sandbox)."""
    try:
        import nbgrader.preprocessors.execute as nbexec
        from jupyter_client.manager import AsyncKernelManager
    except ImportError:  # pragma: no cover - config loaded outside nbgrader
        return
    if getattr(nbexec.AsyncKernelManager, "_attncourse", False):
        return
    class LimitedKernelManager(AsyncKernelManager):
        _attncourse = True

        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            # read at every kernel start: a Dask worker grades for several runs, each with its own settings
            self._sandboxed, self._line = sandbox_status()
            self._mem_mb, self._tmp_mb = _int_env(MEM_ENV, DEFAULT_MEM_MB), _int_env(TMP_ENV, DEFAULT_TMP_MB)
            if self._sandboxed is not None and (self._sandboxed or os.environ.get(IPC_ENV, "1") != "0"):
                # unix sockets: the sandbox has its own network namespace, and kernels started in parallel
                # (./course grade on Dask) never race for the same free TCP port
                self._ipc_dir = tempfile.mkdtemp(prefix="attncourse-kernel-")
                # removed when the kernel stops (below), and in any case when this manager is gone (a kernel
                # that died or never started skips the cleanup)
                weakref.finalize(self, shutil.rmtree, self._ipc_dir, True)
                self.transport = "ipc"
                self.ip = os.path.join(self._ipc_dir, "k")
                self.connection_file = os.path.join(self._ipc_dir, "connection.json")

        async def _async_cleanup_resources(self, restart: bool = False) -> None:
            await super()._async_cleanup_resources(restart=restart)
            if not restart and getattr(self, "_ipc_dir", None):
                shutil.rmtree(self._ipc_dir, ignore_errors=True)  # the sockets' folder, once the kernel is gone

        @property
        def kernel_spec(self):
            spec = super().kernel_spec
            if getattr(self, "_sandboxed", None) and spec is not None:
                # a SIGINT sent from outside does not reach a kernel inside bwrap's PID namespace:
                # interrupt it (nbgrader's cell timeout) with a message on its control channel instead
                spec.interrupt_mode = "message"
            return spec

        def format_kernel_cmd(self, extra_arguments=None):
            cmd = super().format_kernel_cmd(extra_arguments)
            if self._sandboxed is None:
                # nbgrader carries on without a config file that raises: refuse to start the kernel instead
                print(self._line, file=sys.stderr)
                return [sys.executable, "-c", f"raise SystemExit({self._line!r})"]
            wrap = [sys.executable, os.path.abspath(__file__), "--mem-mb", str(self._mem_mb),
                    "--tmp-mb", str(self._tmp_mb)]
            if self._sandboxed:
                wrap += ["--bwrap", "--bind-rw", self._ipc_dir]
            return wrap + ["--"] + cmd

    nbexec.AsyncKernelManager = LimitedKernelManager


if __name__ == "__main__":
    _launch(sys.argv[1:])
