"""The kernel manager of every grading kernel: started through the launcher (:mod:`judge.sandbox`).

:class:`judge.preprocessors.IsolatedExecute` hands this class to nbgrader's ``Execute`` as its
``kernel_manager_class`` (nbclient's own setting): nothing of nbgrader or jupyter_client is patched.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import weakref

from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.manager import AsyncKernelManager
from traitlets import Integer, default

from . import sandbox, zygote
from .sandbox import (DEFAULT_MEM_MB, DEFAULT_TASKS, DEFAULT_TMP_MB, IPC_ENV, MEM_ENV, REFUSED, TASKS_ENV, TMP_ENV,
                      _int_env, sandbox_status)


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
                why = getattr(self.parent, "stop_reason", lambda: "")()
                raise RuntimeError("Kernel died before replying to kernel_info" + (f": {why}" if why else ""))
            if time.time() > deadline:
                raise RuntimeError(f"Kernel didn't respond in {timeout} seconds")

    wait_for_ready = _async_wait_for_ready


def env_limits(environ=None) -> dict:
    """A kernel's limits as this process's environment (or ``environ``) sets them (``ATTNCOURSE_KERNEL_*``), else
    the defaults: the defaults of :class:`SandboxedKernelManager`'s settings."""
    return {"mem_mb": _int_env(MEM_ENV, DEFAULT_MEM_MB, environ), "tmp_mb": _int_env(TMP_ENV, DEFAULT_TMP_MB, environ),
            "tasks": _int_env(TASKS_ENV, DEFAULT_TASKS, environ)}


def configured_limits(config=None, environ=None) -> dict:
    """A grading kernel's limits as its kernel manager will have them: ``c.SandboxedKernelManager.*`` of ``config``
    (the course's nbgrader_config.py) where set, else :func:`env_limits` of ``environ``."""
    limits = env_limits(environ)
    if config is not None and "SandboxedKernelManager" in config:
        for name, value in config.SandboxedKernelManager.items():
            if name in limits:
                limits[name] = int(value)
    return limits


def fork_server(sandboxed: bool | None = None, limits: dict | None = None, environ=None):
    """The fork server this process's next sandboxed kernel comes from (:func:`judge.zygote.get`: started now if
    it is not yet, and probed with a real grading kernel), for this process's environment (or ``environ``, the one
    its kernels will be started in) and ``limits`` (a kernel manager's; default :func:`env_limits`); None where
    kernels are not sandboxed or the server does not hold.  A grading run calls it as it starts, to have its server
    ready before the first notebook (:func:`instructor.task.run_fork_server`)."""
    environ = os.environ if environ is None else environ
    if sandboxed is None:
        sandboxed = sandbox_status(environ)[0]
    if not sandboxed:
        return None
    limits = limits or env_limits(environ)
    return zygote.get(*_server_settings(limits, environ), kernel_check=lambda zyg: kernel_starts(zyg, limits=limits))


def fork_server_key(limits: dict | None = None, environ=None) -> str:
    """The key (:func:`judge.zygote.server_key`) of the server :func:`fork_server` gives for these ``limits`` and
    ``environ``: what a grading run compares to learn whether a server it started early is the one its kernels
    need."""
    environ = os.environ if environ is None else environ
    return zygote.server_key(*_server_settings(limits or env_limits(environ), environ))


def _server_settings(limits: dict, environ) -> tuple:
    """(the kernels' environment, tmp_mb, mem_mb, tasks): what a fork server is started with and kept by."""
    return sandbox.kernel_env(environ, "/tmp"), limits["tmp_mb"], limits["mem_mb"], limits["tasks"]


_FRESH: dict = {}   # settings -> '' (a fresh sandbox's kernel answers) or why not


def fresh_kernels_fail(limits: dict | None = None) -> str:
    """Where the fork server does not hold: '' when a kernel of a fresh sandbox (the launcher's) answers here, else
    the one line that says why not (then no kernel starts: grading is refused by name). Asked once per process
    and settings."""
    limits = limits or env_limits()
    key = json.dumps([sandbox.kernel_env(os.environ, "/tmp"), limits], sort_keys=True)
    if key not in _FRESH:
        _FRESH[key] = kernel_starts(FRESH, limits=limits)
    return _FRESH[key]


FRESH = "fresh"   # kernel_starts(FRESH): a kernel of a fresh sandbox, not of a fork server


def kernel_starts(how, timeout: float = 60, limits: dict | None = None) -> str:
    """'' when a real grading kernel — started as grading starts it, by the fork server ``how`` or in a fresh
    sandbox (:data:`FRESH`) — answers ``kernel_info``; else the one line that says why not (its exit status and
    last lines: a course or a Python under /tmp hidden by a kernel's fresh /tmp made every kernel exit 71)."""
    import asyncio
    import threading

    box = {}

    async def ask():
        km = SandboxedKernelManager(kernel_name="python3", start_how=how, **(limits or env_limits()))
        if km._sandboxed is None:
            box["why"] = km._line
            return
        work = tempfile.mkdtemp(prefix="attncourse-probe-")   # an empty working folder, as IsolatedExecute's
        try:
            await km.start_kernel(cwd=work)
            kc = km.client()
            kc.start_channels()
            try:
                await kc.wait_for_ready(timeout=timeout)
            finally:
                kc.stop_channels()
        except Exception as exc:  # noqa: BLE001 - the probe says why, whatever it was
            box["why"] = f"{type(exc).__name__}: {exc}" if not isinstance(exc, RuntimeError) else str(exc)
        finally:
            try:
                await km.shutdown_kernel(now=True)
            except Exception:  # noqa: BLE001
                pass
            os.rmdir(work)

    # in a thread of its own: the caller may be inside a running event loop (nbclient creating its manager)
    t = threading.Thread(target=lambda: asyncio.run(ask()), name="attncourse-kernel-probe")
    t.start()
    t.join()
    return box.get("why", "")


def listen(ip: str, ports: dict) -> dict:
    """{channel: listening unix socket at ``IP-PORT``} for a kernel's channels, made here in the kernel manager's
    own folder: the kernel only listens on them (:func:`judge.forkserver.start_ipykernel`)."""
    import socket

    out = {}
    try:
        for channel, port in ports.items():
            path = f"{ip}-{port}"
            if os.path.lexists(path):
                os.unlink(path)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            out[channel] = s
            s.bind(path)
            s.listen(64)
            s.setblocking(False)
    except OSError:
        for s in out.values():
            s.close()
        raise
    return out


class SandboxedKernelManager(AsyncKernelManager):
    """Starts the kernel sandboxed: forked by this process's preloaded fork server (:mod:`judge.zygote`), or,
    where that is off or does not hold, in a fresh sandbox (``python judge/sandbox.py … --bwrap -- <kernel>``).

    Each kernel has a folder of the kernel manager's own (0700; no kernel sees it): its connection file, the
    listening sockets of its channels (made here, handed to the kernel as descriptors, so the kernel has no
    folder of the host's to write in), and ``why`` (the one line its launcher writes when the kernel stopped by
    itself). The kernel's stdout and stderr go to its launcher, which keeps the last lines and never passes them
    on (:class:`judge.sandbox.Tail`).

    The sandbox's status is read at every kernel start (a Dask worker grades for several runs, each with its own
    settings); where grading is refused (:func:`judge.sandbox.sandbox_status` is None, or neither the fork server
    nor a fresh sandbox starts a kernel here) the "kernel" is a Python that exits with the reason, so no student
    code runs. ``start_how``: the probe's (:func:`kernel_starts`): this fork server, or :data:`FRESH`.
    """

    # A kernel's budget, set in nbgrader_config.py (``c.SandboxedKernelManager.mem_mb = 2048``) or, by default, by
    # the environment the grading process runs in (``ATTNCOURSE_KERNEL_*``: ./course grade passes the instructor's
    # on to nbgrader and its Dask workers), else the course's defaults.
    mem_mb = Integer(help="memory per grading kernel, MB (0: no limit); default $ATTNCOURSE_KERNEL_MEM_MB, else "
                          f"{DEFAULT_MEM_MB}").tag(config=True)
    tmp_mb = Integer(help="size of a grading kernel's /tmp and working folder, MB; default "
                          f"$ATTNCOURSE_KERNEL_TMP_MB, else {DEFAULT_TMP_MB}").tag(config=True)
    tasks = Integer(help="processes and threads per grading kernel (0: no cap); default $ATTNCOURSE_KERNEL_TASKS, "
                         f"else {DEFAULT_TASKS}").tag(config=True)

    @default("mem_mb")
    def _mem_default(self):
        return env_limits()["mem_mb"]

    @default("tmp_mb")
    def _tmp_default(self):
        return env_limits()["tmp_mb"]

    @default("tasks")
    def _tasks_default(self):
        return env_limits()["tasks"]

    @default("client_factory")
    def _grading_client(self):
        return GradingKernelClient

    def __init__(self, *a, start_how=None, **kw):
        super().__init__(*a, **kw)
        self._sandboxed, self._line = sandbox_status()
        self._mem_mb, self._tmp_mb, self._tasks = self.mem_mb, self.tmp_mb, self.tasks
        limits = {"mem_mb": self._mem_mb, "tmp_mb": self._tmp_mb, "tasks": self._tasks}
        self._zygote, self._listeners, self._state = None, {}, None
        if self._sandboxed and start_how is None:
            self._zygote = fork_server(self._sandboxed, limits)
            if self._zygote is None and zygote.why_not():   # it was tried and does not hold: can a fresh one?
                why = fresh_kernels_fail(limits)
                if why:
                    why = (f"no grading kernel starts in it here: the fork server's: {'; '.join(zygote.why_not())}"
                           f"; a fresh sandbox's: {why}")
                    self._sandboxed, self._line = ((False, f"kernels not sandboxed on this machine ({why}); this "
                                                    "is your own check of your own work") if sandbox.mode() == "self"
                                                   else (None, REFUSED.format(why=why)))
        elif start_how is not None and start_how != FRESH:
            self._zygote = start_how
        if self._sandboxed is not None and (self._sandboxed or os.environ.get(IPC_ENV, "1") != "0"):
            # unix sockets: the sandbox has its own network namespace, and kernels started in parallel
            # (./course grade on Dask) never race for the same free TCP port
            self._state = sandbox.socket_folder("attncourse-kernel-")   # 0700: this account's alone
            # removed when the kernel stops (below), and in any case when this manager is gone
            weakref.finalize(self, sandbox.remove_tree, self._state)
            self.transport = "ipc"
            self.ip = os.path.join(self._state, "k")
            self.connection_file = os.path.join(self._state, "connection.json")

    def stop_reason(self) -> str:
        """The line the kernel's launcher wrote when the kernel stopped by itself ('' when it did not)."""
        try:
            with open(os.path.join(self._state, "why")) as f:
                return f.read(1000).strip()
        except (OSError, TypeError):
            return ""

    async def _async_wait(self, pollinterval: float = 0.1) -> None:
        """Wait for the kernel to stop, looking every 10 ms (jupyter_client's 100 ms cost 0.1 s per notebook:
        a killed kernel is never gone at the first look)."""
        await super()._async_wait(pollinterval=min(pollinterval, 0.01))

    async def _async_launch_kernel(self, kernel_cmd, **kw):
        """jupyter_client's launch, handing the kernel's listening sockets to its launcher (then closed here: the
        kernel holds them); the launcher's own stdout goes nowhere."""
        import subprocess

        if self._listeners:
            kw["pass_fds"] = tuple(s.fileno() for s in self._listeners.values())
        kw["stdout"] = subprocess.DEVNULL
        try:
            await super()._async_launch_kernel(kernel_cmd, **kw)
        finally:
            for s in self._listeners.values():
                s.close()
            self._listeners = {}

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart=restart)
        if not restart and self._state:
            sandbox.remove_tree(self._state)  # the sockets' folder, once the kernel is gone

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
        why = os.path.join(self._state, "why") if self._state else ""
        limits = [str(self._mem_mb), str(self._tmp_mb)]
        if not self._sandboxed:
            wrap = [sys.executable, os.path.abspath(sandbox.__file__), "--mem-mb", limits[0], "--tmp-mb", limits[1]]
            return wrap + (["--why", why] if why else []) + ["--"] + cmd
        # ipykernel's own arguments, after "-f CONNECTION_FILE" (nbgrader's --HistoryManager.hist_file=:memory:)
        extra = cmd[cmd.index("-f") + 2:] if "-f" in cmd else []
        self._listeners = listen(self.ip, {ch: getattr(self, f"{ch}_port") for ch in CHANNELS})
        fds = ",".join(f"{ch}={s.fileno()}" for ch, s in self._listeners.items())
        if self._zygote is not None and self._zygote.alive():
            return [sys.executable, "-S", "-I", os.path.abspath(zygote.__file__), self._zygote.sock,
                    self.connection_file, *limits, str(sandbox.FSIZE_BYTES), str(self._tasks), why, fds, *extra]
        # (the kernel side's file run by its path, the one file of the judge the sandbox binds: where the kernels'
        # Python cannot import the course package, the kernel still starts, and its notebook's setup cell says why)
        kernel = [cmd[0], sandbox.kernel_side().__file__, "kernel", sandbox.KERNEL_CONNECTION, str(self._tasks),
                  fds, *extra]
        return [sys.executable, os.path.abspath(sandbox.__file__), "--mem-mb", limits[0], "--tmp-mb", limits[1],
                "--tasks", str(self._tasks), "--why", why, "--bwrap", "--connection", self.connection_file,
                "--sockets", fds, "--"] + kernel


CHANNELS = ("shell", "iopub", "stdin", "control", "hb")   # as judge.forkserver.CHANNELS
