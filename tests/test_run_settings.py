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


def test_a_dead_kernel_is_graded_again_alone_only_where_the_oom_killer_may_have_killed_it(monkeypatch):
    """The machine's OOM kills as a task reads them (/proc/vmstat's ``oom_kill``: a count on Linux, None where it
    cannot be read), and what a dead kernel's result with each count gets: no kill while it ran — its own doing,
    graded once; a kill, or no count — graded again alone.  Paired with the same dead kernel's log where the
    machine ran out of processes: graded again alone whatever the count."""
    import builtins

    from instructor import task
    from instructor.outcome import retry_alone

    assert isinstance(task.oom_kills(), int)
    real_open = builtins.open
    monkeypatch.setattr(builtins, "open", lambda p, *a, **k: (_ for _ in ()).throw(PermissionError(p))
                        if p == "/proc/vmstat" else real_open(p, *a, **k))
    assert task.oom_kills() is None
    monkeypatch.undo()
    died = "[AutogradeApp | ERROR] nbclient.exceptions.DeadKernelError: Kernel died"
    assert not retry_alone({"log": died, "oom_kills": 0})
    assert retry_alone({"log": died, "oom_kills": 1}) and retry_alone({"log": died, "oom_kills": None})
    assert retry_alone({"log": died})
    out_of = died + "\n[AutogradeApp | ERROR] BlockingIOError: [Errno 11] Resource temporarily unavailable"
    assert retry_alone({"log": out_of, "oom_kills": 0})


# what the course's nbgrader_config.py sets in the grader's environment
CONFIG_SETS = ("PYTHONWARNINGS", "MPLBACKEND", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TOKENIZERS_PARALLELISM",
               "OMP_WAIT_POLICY")


def test_the_kernels_environment_is_the_same_before_the_course_config_is_read_and_after(monkeypatch):
    """A run starts its fork server before it reads nbgrader_config.py (instructor.engine.RunStart), and its
    workers look the server up by their kernels' environment after they have read it: the grading environment
    sets whatever the configuration sets, or no worker would find the run's server (each would start its own)."""
    from pathlib import Path

    from instructor.config import load_config
    from instructor.task import task_environment

    for name in CONFIG_SETS:
        monkeypatch.delenv(name, raising=False)
    settings = TaskSettings(env=task_environment({})[1])
    before = kernel_env(kernels_environ(settings), "/tmp")
    load_config(Path(__file__).resolve().parents[1])
    assert all(name in os.environ for name in CONFIG_SETS[:5])   # (the configuration did set them here)
    assert kernel_env(kernels_environ(settings), "/tmp") == before


def test_the_early_fork_server_is_replaced_only_where_the_course_sets_other_limits(monkeypatch):
    """RunStart starts the server with the environment's kernel limits; once the course's configuration is read,
    the tasks get the server for its limits: the early one where they are the same, a second one where not."""
    from instructor import engine

    started = []
    monkeypatch.setattr(engine, "run_fork_server", lambda settings, config: started.append(config) or len(started))
    same, other = Config(), Config()
    other.SandboxedKernelManager.mem_mb = 1234
    for config, servers in ((None, [None]), (same, [None]), (other, [None, other])):
        started.clear()
        start = engine.RunStart(TaskSettings(), local=True, serial=True, workers=None).begin()
        try:
            assert start.server(config) == len(servers)
            assert start.server(config) == len(servers)   # (asked again: the same one)
        finally:
            start.close()
        assert started == servers
