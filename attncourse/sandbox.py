"""How grading kernels are launched: resource limits, and optionally a bubblewrap sandbox.

``nbgrader_config.py`` calls :func:`configure_nbgrader`, which makes nbgrader's
``Execute`` preprocessor start every kernel through this file run as a script::

    python attncourse/sandbox.py --mem-mb 4096 [--bwrap --bind-ro PATH ... --bind-rw DIR] -- <kernel command>

The launcher sets ``RLIMIT_DATA`` (a memory hog gets ``MemoryError`` instead of
taking the machine down; the cell scores zero and grading goes on) and
``RLIMIT_FSIZE`` (no multi-gigabyte files), then ``exec``s the kernel, inside
``bwrap`` when sandboxing is on.  The sandboxed kernel sees a read-only Python
installation and course package, the submission's own folder read-write, a private
``/tmp``, no network and no other file of the course (the reference data, other
students' submissions, the gradebook, source/).  The kernel needs no reference data:
the autograder shares only the hidden inputs, in the submission's folder, and judges
outside the kernel (attncourse/preprocessors.py).

Environment (read by the nbgrader process):

* ``ATTNCOURSE_KERNEL_MEM_MB`` — memory limit per kernel (default 4096; 0 = none);
* ``ATTNCOURSE_SANDBOX`` — ``auto`` (the default) runs kernels under bubblewrap
  wherever ``bwrap`` works here and says so when it cannot (:func:`sandbox_status`);
  ``1`` requires it (no kernel starts without it); ``0`` turns it off.

This file imports only the standard library at module level: it runs as the
launcher before the kernel exists.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile

MEM_ENV = "ATTNCOURSE_KERNEL_MEM_MB"
SANDBOX_ENV = "ATTNCOURSE_SANDBOX"
IPC_ENV = "ATTNCOURSE_KERNEL_IPC"  # 0: unsandboxed kernels talk TCP (jupyter's default) instead of unix sockets
DEFAULT_MEM_MB = 4096
FSIZE_BYTES = 512 * 1024 * 1024


# -- the launcher (runs as a script) -------------------------------------------------------
def _launch(argv):
    import resource

    mem_mb, use_bwrap, ro, rw, i = DEFAULT_MEM_MB, False, [], [], 0
    while i < len(argv) and argv[i] != "--":
        a = argv[i]
        if a == "--mem-mb":
            mem_mb, i = int(argv[i + 1]), i + 2
        elif a == "--bwrap":
            use_bwrap, i = True, i + 1
        elif a == "--bind-ro":
            ro.append(argv[i + 1]); i += 2
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
    if use_bwrap:  # the kernel's working folder (the submission's own folder) stays writable
        cmd = bwrap_command(cmd, ro, rw + [os.getcwd()], cwd=os.getcwd())
    os.execvp(cmd[0], cmd)


# -- bubblewrap ------------------------------------------------------------------------------
def _system_ro_paths():
    paths = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc"]
    for p in {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}:
        paths.append(p)
    import site

    # (editable installs point a .pth at the course checkout: only the package folder is bound, below)
    paths += site.getsitepackages()
    return [p for p in dict.fromkeys(paths) if os.path.exists(p)]


def package_dir():
    return os.path.dirname(os.path.abspath(__file__))


def bwrap_command(cmd, ro=(), rw=(), cwd=None):
    """``cmd`` wrapped in bwrap: system and Python read-only, ``rw`` writable, nothing else of the host."""
    args = ["bwrap", "--die-with-parent", "--unshare-all", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
            "--setenv", "HOME", "/tmp", "--setenv", "MPLCONFIGDIR", "/tmp/mpl",
            # in its own PID namespace the kernel's parent is bwrap's pid 1: ipykernel would read that
            # as "parent died" and quit; --die-with-parent already ties it to the grader
            "--unsetenv", "JPY_PARENT_PID"]
    binds = [(os.path.realpath(p), "--ro-bind") for p in _system_ro_paths() + [package_dir()]]
    binds += [(os.path.realpath(p), "--ro-bind") for p in ro if os.path.exists(p)]
    binds += [(os.path.realpath(p), "--bind") for p in rw if os.path.exists(p)]
    # parents before children, so that a later bind is not hidden by an earlier one
    for path, how in sorted(dict(binds).items(), key=lambda kv: (kv[0].count("/"), kv[0])):
        args += [how, path, path]
    for p in _system_ro_paths():  # /bin -> usr/bin, /lib64 -> usr/lib64 (the ELF interpreter lives there)
        if os.path.islink(p) and p.count("/") == 1:
            args += ["--symlink", os.readlink(p), p]
    if cwd:
        args += ["--chdir", cwd]
    return args + ["--"] + list(cmd)


@functools.lru_cache(maxsize=1)
def bwrap_works() -> tuple[bool, str]:
    """(True, '') when a bubblewrap sandbox can start here, else (False, the reason)."""
    exe = shutil.which("bwrap")
    if not exe:
        return False, "bubblewrap (bwrap) is not installed: apt-get install bubblewrap"
    cmd = bwrap_command([sys.executable, "-S", "-c", "print('ok')"])
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"bwrap could not run: {exc}"
    if p.returncode != 0 or "ok" not in p.stdout:
        return False, f"bwrap fails here (exit {p.returncode}): {p.stderr.strip()[:300]}"
    return True, ""


# -- nbgrader side -------------------------------------------------------------------------------
def _mode(env=None) -> str:
    mode = (env if env is not None else os.environ).get(SANDBOX_ENV, "auto").strip().lower() or "auto"
    return "off" if mode in ("0", "no", "off", "false") else "auto" if mode == "auto" else "required"


def sandbox_status(env=None) -> tuple[bool, str]:
    """(whether grading kernels run sandboxed, one line for the instructor's report) under ``env``."""
    mode = _mode(env)
    if mode == "off":
        return False, (f"kernels NOT sandboxed ({SANDBOX_ENV}=0): student code could read any file this account "
                       "can read, including the reference data in graders/data")
    ok, why = bwrap_works()
    if ok:
        return True, "kernels sandboxed with bubblewrap (no course files, no network)"
    if mode == "required":
        return False, f"{SANDBOX_ENV}=1 but {why}: no kernel starts"
    return False, (f"kernels NOT sandboxed: {why}; student code could read any file this account can read, "
                   "including the reference data in graders/data")


def _sandbox_wanted():
    mode = _mode()
    if mode == "off":
        return False
    if mode == "auto":
        return bwrap_works()[0]
    ok, why = bwrap_works()
    if not ok:
        # nbgrader ignores a config file that raises: refuse to start kernels instead
        print(f"{SANDBOX_ENV}={mode} but {why}: no kernel will start", file=sys.stderr)
        return "broken"
    return True


def configure_nbgrader(c, root):
    """Make nbgrader's Execute preprocessor start kernels through the launcher (limits, sandbox)."""
    try:
        import nbgrader.preprocessors.execute as nbexec
        from jupyter_client.manager import AsyncKernelManager
    except ImportError:  # pragma: no cover - config loaded outside nbgrader
        return
    if getattr(nbexec.AsyncKernelManager, "_attncourse", False):
        return
    mem_mb = int(os.environ.get(MEM_ENV, DEFAULT_MEM_MB) or 0)
    sandbox = _sandbox_wanted()

    class LimitedKernelManager(AsyncKernelManager):
        _attncourse = True

        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            if sandbox or os.environ.get(IPC_ENV, "1") != "0":
                # unix sockets: the sandbox has its own network namespace, and kernels started in parallel
                # (./course grade on Dask) never race for the same free TCP port
                self._ipc_dir = tempfile.mkdtemp(prefix="attncourse-kernel-")
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
            if sandbox and spec is not None:
                # a SIGINT sent from outside does not reach a kernel inside bwrap's PID namespace:
                # interrupt it (nbgrader's cell timeout) with a message on its control channel instead
                spec.interrupt_mode = "message"
            return spec

        def format_kernel_cmd(self, extra_arguments=None):
            cmd = super().format_kernel_cmd(extra_arguments)
            if sandbox == "broken":
                return [sys.executable, "-c", "raise SystemExit('sandbox requested but bwrap does not work here')"]
            wrap = [sys.executable, os.path.abspath(__file__), "--mem-mb", str(mem_mb)]
            if sandbox:
                wrap += ["--bwrap", "--bind-rw", self._ipc_dir]
            return wrap + ["--"] + cmd

    nbexec.AsyncKernelManager = LimitedKernelManager


if __name__ == "__main__":
    _launch(sys.argv[1:])
