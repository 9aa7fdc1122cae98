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

from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.manager import AsyncKernelManager
from traitlets import default

from . import sandbox, zygote
from .sandbox import DEFAULT_MEM_MB, DEFAULT_TMP_MB, IPC_ENV, MEM_ENV, TMP_ENV, _int_env, sandbox_status


class GradingKernelClient(AsyncKernelClient):
    """jupyter_client's client, ready as soon as the kernel has answered ``kernel_info`` on the shell channel and
    IOPub is connected.  jupyter_client then drains IOPub until it has been quiet for 0.2 s — a fixed 0.2 s on
    every notebook, for status messages that nbclient skips anyway (it reads only the messages whose parent is
    one of its own requests).  Here there is no such wait."""

    async def _async_wait_for_ready(self, timeout=None):
        import time
        from queue import Empty

        deadline = time.time() + (float("inf") if timeout is None else timeout)
        while True:
            self.kernel_info()
            try:
                msg = await self.shell_channel.get_msg(timeout=1)
            except Empty:
                msg = None
            if msg is not None and msg["msg_type"] == "kernel_info_reply":
                try:   # IOPub connected: a message of ours has come through
                    await self.iopub_channel.get_msg(timeout=0.2)
                except Empty:
                    pass
                else:
                    self._handle_kernel_info_reply(msg)
                    break
            if not await self._async_is_alive():
                raise RuntimeError("Kernel died before replying to kernel_info")
            if time.time() > deadline:
                raise RuntimeError(f"Kernel didn't respond in {timeout} seconds")

    wait_for_ready = _async_wait_for_ready


def fork_server(sandboxed: bool | None = None):
    """The fork server this process's next sandboxed kernel comes from (:func:`judge.zygote.get`: started now if
    it is not yet), for this process's environment and limits; None where kernels are not sandboxed or the
    server does not hold.  A Dask worker calls it as a run starts, to have its server ready before the first
    notebook."""
    if sandboxed is None:
        sandboxed = sandbox_status()[0]
    if not sandboxed:
        return None
    return zygote.get(sandbox.kernel_env(os.environ, "/tmp"), _int_env(TMP_ENV, DEFAULT_TMP_MB),
                      _int_env(MEM_ENV, DEFAULT_MEM_MB))


class SandboxedKernelManager(AsyncKernelManager):
    """Starts the kernel sandboxed: forked by this process's preloaded fork server (:mod:`judge.zygote`), or,
    where that is off or does not hold, as ``python judge/sandbox.py --mem-mb M --tmp-mb T [--bwrap --bind-rw DIR]
    -- <kernel>``.

    The sandbox's status is read at every kernel start (a Dask worker grades for several runs, each with its own
    settings); where grading is refused (:func:`judge.sandbox.sandbox_status` is None) the "kernel" is a Python that
    exits with the reason, so no student code runs.
    """

    @default("client_factory")
    def _grading_client(self):
        return GradingKernelClient

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self._sandboxed, self._line = sandbox_status()
        self._mem_mb, self._tmp_mb = _int_env(MEM_ENV, DEFAULT_MEM_MB), _int_env(TMP_ENV, DEFAULT_TMP_MB)
        if self._sandboxed is not None and (self._sandboxed or os.environ.get(IPC_ENV, "1") != "0"):
            # unix sockets: the sandbox has its own network namespace, and kernels started in parallel
            # (./course grade on Dask) never race for the same free TCP port
            self._zygote = fork_server(self._sandboxed)
            # (a preloaded kernel's socket folder lives in its fork server's socket root: the server binds it in)
            self._ipc_dir = tempfile.mkdtemp(prefix="attncourse-kernel-",
                                             dir=self._zygote.root if self._zygote else None)
            # removed when the kernel stops (below), and in any case when this manager is gone (a kernel
            # that died or never started skips the cleanup)
            weakref.finalize(self, shutil.rmtree, self._ipc_dir, True)
            self.transport = "ipc"
            self.ip = os.path.join(self._ipc_dir, "k")
            self.connection_file = os.path.join(self._ipc_dir, "connection.json")

    async def _async_wait(self, pollinterval: float = 0.1) -> None:
        """Wait for the kernel to stop, looking every 10 ms (jupyter_client's 100 ms cost 0.1 s per notebook:
        a killed kernel is never gone at the first look)."""
        await super()._async_wait(pollinterval=min(pollinterval, 0.01))

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
        if getattr(self, "_zygote", None) is not None and self._zygote.alive():
            return [sys.executable, "-S", "-I", os.path.abspath(zygote.__file__), self._zygote.sock,
                    self.connection_file, str(self._mem_mb), str(self._tmp_mb), str(sandbox.FSIZE_BYTES)]
        wrap = [sys.executable, os.path.abspath(sandbox.__file__), "--mem-mb", str(self._mem_mb),
                "--tmp-mb", str(self._tmp_mb)]
        if self._sandboxed:
            wrap += ["--bwrap", "--bind-rw", self._ipc_dir]
        return wrap + ["--"] + cmd
