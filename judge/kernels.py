"""The kernel manager of every grading kernel: started through the launcher (:mod:`judge.sandbox`).

:class:`judge.preprocessors.IsolatedExecute` hands this class to nbgrader's ``Execute`` as its
``kernel_manager_class`` (nbclient's own setting): nothing of nbgrader or jupyter_client is patched.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import weakref

from jupyter_client.manager import AsyncKernelManager

from . import sandbox
from .sandbox import DEFAULT_MEM_MB, DEFAULT_TMP_MB, IPC_ENV, MEM_ENV, TMP_ENV, _int_env, sandbox_status


class SandboxedKernelManager(AsyncKernelManager):
    """Starts the kernel as ``python judge/sandbox.py --mem-mb M --tmp-mb T [--bwrap --bind-rw DIR] -- <kernel>``.

    The sandbox's status is read at every kernel start (a Dask worker grades for several runs, each with its own
    settings); where grading is refused (:func:`judge.sandbox.sandbox_status` is None) the "kernel" is a Python that
    exits with the reason, so no student code runs.
    """

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
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
        wrap = [sys.executable, os.path.abspath(sandbox.__file__), "--mem-mb", str(self._mem_mb),
                "--tmp-mb", str(self._tmp_mb)]
        if self._sandboxed:
            wrap += ["--bwrap", "--bind-rw", self._ipc_dir]
        return wrap + ["--"] + cmd
