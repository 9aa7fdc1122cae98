"""What a grading run hands its tasks (instructor.task, judge.zygote, judge.kernels): the kernels' environment the same
on either executor, and the run's one fork server handed to a local cluster's workers only when it is the one their
kernels need.  Unit tests: nothing here starts a process."""
from __future__ import annotations

import json
import os

from traitlets.config import Config

from instructor.task import TaskSettings, kernels_environ, settings_environ
from judge import zygote
from judge.kernels import configured_limits, env_limits
from judge.sandbox import KERNEL_THREADS, kernel_env


def test_a_kernel_runs_one_thread_unless_the_grading_environment_says_how_many():
    env = kernel_env({"LANG": "C.UTF-8"}, "/tmp")
    assert all(env[k] == "1" for k in KERNEL_THREADS)
    env = kernel_env({"OMP_NUM_THREADS": "4"}, "/tmp")
    assert env["OMP_NUM_THREADS"] == "4" and env["MKL_NUM_THREADS"] == "1"


def test_a_dask_nannys_threads_never_reach_a_task_but_the_runs_do():
    """A Dask nanny starts its workers with OMP_NUM_THREADS=1 (and MKL, OpenBLAS): a task's environment keeps only
    what the run says, so the kernels are the same on the serial executor and on Dask."""
    nanny = {"PATH": "/usr/bin", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "ATTNCOURSE_KERNEL_MEM_MB": "99"}
    plain = settings_environ(TaskSettings(env={"ATTNCOURSE_CHECK_TIMEOUT": "5"}), nanny)
    assert not set(KERNEL_THREADS) & set(plain)
    assert "ATTNCOURSE_KERNEL_MEM_MB" not in plain and plain["ATTNCOURSE_CHECK_TIMEOUT"] == "5"
    told = settings_environ(TaskSettings(env={"OMP_NUM_THREADS": "3"}), nanny)
    assert told["OMP_NUM_THREADS"] == "3" and "MKL_NUM_THREADS" not in told
    # the same environment whether the task's process had the nanny's settings or none
    assert kernel_env(settings_environ(TaskSettings(), nanny), "/tmp") == kernel_env(
        settings_environ(TaskSettings(), {"PATH": "/usr/bin"}), "/tmp")


def test_the_kernels_environment_is_an_autogrades():
    env = kernels_environ(TaskSettings(env={"ATTNCOURSE_CHECK_TIMEOUT": "5"}), {"PATH": "/usr/bin"})
    assert env["NBGRADER_EXECUTION"] == "autograde" and env["ATTNCOURSE_CHECK_TIMEOUT"] == "5"


def test_a_kernels_limits_are_the_courses_where_it_sets_them():
    env = {"ATTNCOURSE_KERNEL_MEM_MB": "1000", "ATTNCOURSE_KERNEL_TASKS": "64"}
    assert configured_limits(None, env) == env_limits(env) == {"mem_mb": 1000, "tmp_mb": env_limits({})["tmp_mb"],
                                                             "tasks": 64}
    cfg = Config()
    cfg.SandboxedKernelManager.mem_mb = 2048
    assert configured_limits(cfg, env) == {**env_limits(env), "mem_mb": 2048}


def _spec(tmp_path, key="K", pid=None):
    sock = tmp_path / "zygote.sock"
    sock.write_text("")
    return json.dumps({"key": key, "sock": str(sock), "pid": os.getpid() if pid is None else pid}), sock


def test_a_worker_takes_the_runs_fork_server_only_for_the_same_settings(tmp_path, monkeypatch):
    spec, sock = _spec(tmp_path)
    monkeypatch.setenv(zygote.SHARED_ENV, spec)
    got = zygote.shared("K")
    assert got is not None and got.shared and got.sock == str(sock) and got.alive()
    assert zygote.shared("other settings") is None          # kernels of other settings: a server of its own
    got.stop()                                                # another process's server: never stopped here
    assert sock.exists()
    sock.unlink()                                             # the run's server stopped (its folder removed)
    assert not got.alive() and zygote.shared("K") is None
    sock.write_text("")
    monkeypatch.setenv(zygote.SHARED_ENV, _spec(tmp_path, pid=_gone_pid())[0])
    assert zygote.shared("K") is None                         # its process died: a server of its own
    for bad in ("not json", "[]", "{}", json.dumps({"key": "K"}), json.dumps({"key": "K", "sock": str(sock)})):
        monkeypatch.setenv(zygote.SHARED_ENV, bad)
        assert zygote.shared("K") is None
    monkeypatch.delenv(zygote.SHARED_ENV)
    assert zygote.shared("K") is None


def _gone_pid() -> int:
    """A pid no process has (above every pid in use, below the kernel's limit)."""
    with open("/proc/sys/kernel/pid_max") as f:
        top = int(f.read())
    return next(p for p in range(top - 1, 1, -1) if not os.path.exists(f"/proc/{p}"))


def test_a_server_whose_process_is_gone_is_not_running():
    assert zygote.running(os.getpid()) and not zygote.running(_gone_pid()) and not zygote.running(None)


def test_the_shared_servers_spec_names_its_settings_socket_and_process():
    class Proc:
        pid = 1234

    z = zygote.Zygote("/nonexistent", "/nonexistent/zygote.sock", Proc(), "KEY")
    assert json.loads(z.spec()) == {"key": "KEY", "sock": "/nonexistent/zygote.sock", "pid": 1234}
    assert not z.shared
