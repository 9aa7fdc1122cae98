"""The grading engine's one task (:mod:`instructor.engine`): one submission graded in a scratch course of its own,
on a Dask worker or in the grader's process (nothing it does touches the course folder or its gradebook)."""
from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from judge.environment import GRADING_KEEP as KEEP_ENV, grading_env, with_python_bin
from judge.files import read_tree
from judge.sandbox import KERNEL_THREADS, sandbox_status
from judge.scratch import keep_engines, memory_folder, new_gradebook, tree_hash, write_course

from .capture import CappedSink
from .config import load_config
from .gradebook import gradebook_entry

DEFAULT_TASK_TIMEOUT = 900
DIE_ENV = "ATTNCOURSE_CLASSGRADE_DIE_FOR"   # test hook: the worker grading these students dies (os._exit)
_TEMPLATES: dict = {}
_TASK_FOLDER: list = []   # this process's scratch course folder (task_folder)


@dataclass(frozen=True)
class TaskSettings:
    """How every task of one grading run grades; sent to the workers with each task."""
    timeout: int | None = None                 # seconds one cell may run (None: the course's nbgrader_config.py)
    task_timeout: float = DEFAULT_TASK_TIMEOUT  # seconds one submission may take, all cells together
    env: dict = field(default_factory=dict)    # the run's settings for nbgrader and its kernels (task_environment)
    feedback: bool = False                     # also generate the feedback HTML
_LOCK = threading.Lock()


def scratch_api(folder: Path, timeout: int | None):
    """nbgrader's API on a scratch course, with the course's config (judge, sandbox, limits) and its own gradebook."""
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    cfg = load_config(folder)
    cfg.CourseDirectory.root = str(folder)
    cfg.CourseDirectory.db_url = f"sqlite:///{folder / 'gradebook.db'}"
    if timeout:
        cfg.Execute.timeout = int(timeout)
    cfg.Exchange.root = str(folder / "exchange")  # never look at a shared exchange from a worker
    cd = CourseDirectory(config=cfg)
    return NbGraderAPI(cd, config=cfg), cd


TEMPLATE_PARTS = ("nbgrader_config.py", "source", "graders", "gradebook.db")   # what a task's scratch course takes


def generate_template(kit: dict) -> dict:
    """The scratch course of a kit with its assignment generated (nbgrader's ``generate_assignment``), as files:
    the parts a task's scratch course takes (:data:`TEMPLATE_PARTS`).  Built in a private folder deleted at once."""
    folder = Path(tempfile.mkdtemp(prefix=f"attncourse-kit-{kit['section']}-"))
    try:
        write_course(folder, kit["files"], kit["section"])
        new_gradebook(folder / "gradebook.db")   # scratch_api's db_url
        api, _ = scratch_api(folder, None)
        res = api.generate_assignment(kit["section"], force=True, create=True)
        if not res.get("success"):
            raise RuntimeError("generate_assignment failed in the scratch course:\n"
                               + (res.get("log") or "") + (res.get("error") or ""))
        tree = read_tree(folder, max_file_bytes=1 << 30, max_files=10_000)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return {k: v for k, v in tree.files.items() if k.split("/")[0] in TEMPLATE_PARTS}


def task_folder() -> Path:
    """A new, empty folder (0700) for one task's scratch course: the same path for every task of this process
    (in /dev/shm where it can, :func:`judge.scratch.memory_folder`), so that nbgrader's gradebook there keeps its
    engine and compiled statements from task to task (:func:`judge.scratch.keep_engines`).  The name holds a
    random part chosen once per process; where the path is taken (a task of another thread, or someone else's
    folder), a fresh temporary folder instead."""
    base = memory_folder() or tempfile.gettempdir()
    if not _TASK_FOLDER or _TASK_FOLDER[0].parent != Path(base):
        _TASK_FOLDER[:] = [Path(base) / f"attncourse-task-{os.getpid()}-{secrets.token_hex(8)}"]
    try:
        os.mkdir(_TASK_FOLDER[0], 0o700)
    except FileExistsError:
        return Path(tempfile.mkdtemp(prefix="attncourse-task-", dir=base))
    return _TASK_FOLDER[0]


def template(kit: dict) -> dict:
    """The kit's generated scratch course, as files in this worker's memory.

    A run generates it once per section and sends it inside the kit (``kit["template"]``,
    :func:`instructor.kit.with_template`: the grader's process with ``--serial``, the kit's own task on one Dask
    worker otherwise); a kit without it (a test) is generated here once per kit and process.  Nothing on disk is reused between tasks: each task writes fresh copies from
    memory, so nothing a kernel could reach (an unsandboxed one can reach this account's files) can change how a
    later submission is judged.
    """
    if kit.get("template"):
        return kit["template"]
    with _LOCK:
        hit = _TEMPLATES.get(kit["hash"])
        if hit is not None:
            return hit[1]
        files = generate_template(kit)
        for key in [k for k, v in _TEMPLATES.items() if v[0] == kit["section"]]:
            del _TEMPLATES[key]   # one kit per section at a time is plenty
        _TEMPLATES[kit["hash"]] = (kit["section"], files)
        return files


@contextlib.contextmanager
def kernel_output_to(path: Path):
    """Kernels inherit the worker's stdout/stderr: while grading, both go to a capped file (the first and last MiB:
    :class:`instructor.capture.CappedSink`), never the worker's memory, its terminal or an unbounded file."""
    saved = []
    sink = None
    try:
        sink = CappedSink(path)
        for n in (1, 2):
            saved.append((n, os.dup(n)))
            os.dup2(sink.fd, n)
        sink.close_writer()
    except OSError:
        pass
    try:
        yield
    finally:
        for n, old in saved:
            os.dup2(old, n)
            os.close(old)
        if sink is not None:
            sink.close(wait=1.0)   # (a fork server started during this task keeps a copy: not waited for)


def kernel_processes() -> list:
    """This worker's kernels, by their launchers: what the watchdog stops.  A kernel from the fork server (the
    default) is forked by the server, and this worker's own child for it is the client ``judge/zygote.py``, which
    takes its kernel with it when stopped; a kernel from the classic launcher runs ``judge/sandbox.py`` (bubblewrap
    after it), or ipykernel itself where kernels are not sandboxed.  The fork server
    (``judge/forkserver.py``) is left alone: it serves the next notebook."""
    import psutil

    from judge import sandbox, zygote

    launchers = {os.path.abspath(zygote.__file__), os.path.abspath(sandbox.__file__)}
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if any(part in launchers or "ipykernel" in part for part in p.cmdline()):
                out.append(p)
        except psutil.Error:
            pass
    return out


def kill_kernels(flag: dict):
    """The watchdog: stop every kernel of this worker (nbgrader then records the notebook as failed)."""
    flag["fired"] = True
    for p in kernel_processes():
        with contextlib.suppress(Exception):
            p.kill()


def dies_here(env: dict, student: str) -> bool:
    """The test hook :data:`DIE_ENV`: comma-separated students whose worker dies while grading them, each time
    (``name``), or only the first time (``name@FILE``: while FILE does not exist yet; it is made then), as a
    worker the machine's OOM killer ended while it graded beside another notebook."""
    for entry in (env.get(DIE_ENV) or "").split(","):
        name, _, flag = entry.partition("@")
        if name != student:
            continue
        if not flag:
            return True
        try:
            os.close(os.open(flag, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
            return True
        except FileExistsError:
            return False
    return False


# Threads of the kernels' maths libraries: what the grading run says (its own environment, task_environment; else
# one, judge.sandbox.KERNEL_THREADS), never what the process a task runs in happens to have (a Dask nanny sets all
# three to 1 in its workers): the same kernels, in the same environment, on either executor.
THREAD_ENV = KERNEL_THREADS


def settings_environ(settings: TaskSettings, base) -> dict:
    """``base`` (an environment) with this run's settings in it, as a task's process has it."""
    env = {k: v for k, v in base.items() if k not in KEEP_ENV and k not in THREAD_ENV}
    env.update({k: v for k, v in (settings.env or {}).items() if k != DIE_ENV})
    env["PATH"] = with_python_bin(env.get("PATH", ""))
    return env


def apply_settings(settings: TaskSettings):
    """This run's settings in the worker's environment (not those of an earlier run on the same worker)."""
    env = settings_environ(settings, os.environ)
    for k in set(os.environ) - set(env):
        del os.environ[k]
    os.environ.update(env)


def kernels_environ(settings: TaskSettings, base=None) -> dict:
    """The environment a task's kernels are started in: ``base`` (default: this process's) with the run's settings,
    and nbgrader's own mark of an autograde (set by its ``Autograde`` around its kernels)."""
    return {**settings_environ(settings, os.environ if base is None else base), "NBGRADER_EXECUTION": "autograde"}


def run_fork_server(settings: TaskSettings, config=None):
    """The grading run's fork server (:func:`judge.kernels.fork_server`), started and probed here for the kernels
    its tasks will start (their environment, :func:`kernels_environ`; their limits, the course's ``config`` or the
    environment's): in this process, its tasks' kernels come from it (:class:`instructor.engine.Serial`); the Dask
    workers of a local cluster are handed it (:data:`judge.zygote.SHARED_ENV` in the settings) rather than each
    starting one.  None where kernels are not sandboxed or the server does not hold (each then does as before)."""
    import sys

    from judge.kernels import configured_limits, fork_server

    env = kernels_environ(settings)
    try:
        return fork_server(limits=configured_limits(config, env), environ=env)
    except Exception as exc:  # noqa: BLE001 - (judge.zygote says why for what it expects: this is anything else)
        print(f"attncourse: the run's fork server did not start ({type(exc).__name__}: {exc}); each grading "
              "process starts its own at its first kernel", file=sys.stderr)
        return None


def warm_up(settings: TaskSettings, config: bytes | None = None, own_server: bool = True) -> float:
    """A worker's start, sent to every worker as a run begins: nbgrader's and the judge's imports and, with
    ``own_server``, the fork server of this run's kernels (:func:`run_fork_server`; a local cluster's workers are
    handed the run's own instead), so that its first notebook pays for neither.  ``config`` is the kit's
    nbgrader_config.py, loaded as a task loads it (it sets the kernels' environment), and the environment is the
    one nbgrader's autograde starts its kernels in: the first task then finds this fork server.  Returns its
    seconds."""
    t0 = time.time()
    apply_settings(settings)
    import judge.preprocessors  # noqa: F401

    cfg = None
    if config is not None:
        folder = Path(tempfile.mkdtemp(prefix="attncourse-warm-"))
        try:
            (folder / "nbgrader_config.py").write_bytes(config)
            cfg = load_config(folder)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    if own_server:
        run_fork_server(settings, cfg)   # for the kernels nbgrader's Autograde will start here
    return round(time.time() - t0, 2)


def grade_task(kit: dict, student: str, files: dict, duedate: str | None = None,
               settings: TaskSettings = TaskSettings()) -> dict:
    """Autograde one submission (a student's, or a canary's) in a scratch course of its own, by nbgrader's own
    ``Autograde`` with the course's configuration; return everything the one writer records
    (:func:`instructor.gradebook.record_result`) and why nothing could be graded, when nothing could (its log and
    faults)."""
    t0 = time.time()
    section = kit["section"]
    timeout, task_timeout, feedback = settings.timeout, settings.task_timeout, settings.feedback
    if dies_here(settings.env or {}, student):
        os._exit(70)  # test hook: a worker that dies while grading
    apply_settings(settings)
    out = {"section": section, "student": student, "hash": tree_hash(files), "kit": kit["hash"],
           "worker_pid": os.getpid(), "success": False, "faults": [], "files": {}, "feedback": {}}
    work = None
    try:
        sandboxed, line = sandbox_status()
        out["sandboxed"], out["sandbox"] = sandboxed, line
        if sandboxed is None:   # this worker cannot sandbox its kernels: it grades nothing
            import socket

            out["faults"].append(f"not graded on worker {socket.gethostname()}: {line}")
            return out
        tmpl = template(kit)
        t_setup = time.time()
        work = task_folder()
        keep_engines(f"sqlite:///{_TASK_FOLDER[0]}/")
        write_course(work, tmpl, section, {student: files})
        api, cd = scratch_api(work, timeout)
        if duedate:
            from nbgrader.api import Gradebook

            with Gradebook(cd.db_url) as gb:
                gb.update_or_create_assignment(section, duedate=duedate)
        flag = {"fired": False}
        dog = threading.Timer(task_timeout, kill_kernels, args=(flag,))
        dog.daemon = True
        dog.start()
        t_run = time.time()
        oom_before = oom_kills()
        try:
            with kernel_output_to(work / "kernel-output.txt"):
                res = api.autograde(section, student, force=True, create=True)
        finally:
            dog.cancel()
        t_done = time.time()
        oom_after = oom_kills()
        # how many processes the machine's OOM killer killed while this notebook ran (None: not known)
        out["oom_kills"] = None if oom_before is None or oom_after is None else oom_after - oom_before
        out["success"] = bool(res.get("success"))
        out["log"] = (res.get("log") or "")[-20000:] + (res.get("error") or "")[-5000:]
        if flag["fired"]:
            out["faults"].append(f"grading took longer than {task_timeout:g} s: its kernel was stopped")
        graded = work / "autograded" / student / section
        if graded.is_dir():   # written by nbgrader alone (the kernel worked elsewhere); read without following links
            out["files"] = read_tree(graded, max_file_bytes=64 << 20).files
        out["gradebook"] = gradebook_entry(cd.db_url, section, student)
        if feedback and out["files"]:
            fb = api.generate_feedback(section, student, force=True)
            fdir = work / "feedback" / student / section
            if fb.get("success") and fdir.is_dir():
                out["feedback"] = read_tree(fdir, max_file_bytes=64 << 20).files
        out["seconds"] = {"setup": round(t_setup - t0, 2), "autograde": round(t_done - t_run, 2),
                          "total": round(time.time() - t0, 2), "started_at": round(t0, 2)}
    except Exception:  # noqa: BLE001 - a result, never a crashed task
        out["log"] = out.get("log", "") + traceback.format_exc()
        out["faults"].append("grading failed: " + traceback.format_exc().strip().splitlines()[-1][:300])
    finally:
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
    return out


def oom_kills() -> int | None:
    """How many processes the kernel's OOM killer has killed on this machine since it booted (``oom_kill`` in
    /proc/vmstat: the whole machine's kills and every memory cgroup's), None where that cannot be read."""
    try:
        with open("/proc/vmstat", "rb") as f:
            for line in f:
                if line.startswith(b"oom_kill "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def task_environment(extra_env: dict | None = None) -> tuple[dict, dict]:
    """(the grading environment, the part of it a task sets on its worker)."""
    env = grading_env(keep=KEEP_ENV, extra=extra_env)
    task_env = {k: v for k, v in env.items() if k.startswith("ATTNCOURSE_") or k in THREAD_ENV or k in (
        "PYTHONWARNINGS", "MPLBACKEND", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TOKENIZERS_PARALLELISM",
        "OMP_WAIT_POLICY")}
    if extra_env and DIE_ENV in extra_env:
        task_env[DIE_ENV] = extra_env[DIE_ENV]
    return env, task_env
