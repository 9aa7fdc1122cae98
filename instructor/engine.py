"""The one grading engine (``./course grade``, with or without ``--serial``): one task function, one of two
executors, one writer.

* **One task.**  Every submission and both canaries (:mod:`instructor.canary`) are results of
  :func:`instructor.task.grade_task`: one submission autograded by nbgrader's own ``Autograde`` in a scratch course
  of its own, returning the autograded files, what nbgrader stored, its log and timings.  Why a notebook could not
  be graded is read from that result (:func:`instructor.outcome.why_not_graded`), never from a second nbgrader run.
* **The canary in the stream.**  The canary's two notebooks (:class:`instructor.canary.Gate`) are the stream's
  first tasks; the students' are sent beside them and their results wait until it has passed.
* **Two executors, one loop.**  :class:`Serial` is a plain map: each task runs here, in this process, one after the
  other (``--serial``; the tests' corpus batches).  :class:`OnDask` submits the same tasks to a Dask cluster, local
  or given by address (:mod:`instructor.cluster`), at most one in flight per worker thread.  :func:`run_tasks`
  drives either: a notebook the machine may have kept from being graded is graded again alone once the others are
  done, and "not graded" (never 0) where that fails for the machine's reason.
* **One writer.**  Each result, as it arrives, is recorded into the course's gradebook by nbgrader's own record step
  (:func:`instructor.gradebook.record_result`: ``SaveAutoGrades`` and ``AssignLatePenalties`` on the autograded
  notebook), and ``autograded/<student>/<section>/`` is written.
* **Incremental.**  ``.classgrade/state.json`` (:mod:`instructor.state`) remembers, per section and student, the hash
  of the submission's files and of the kit: a re-run grades only new or changed submissions, and everyone again when
  the tests changed; ``force`` regrades all.
"""
from __future__ import annotations

import contextlib
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from judge.environment import with_python_bin
from judge.sandbox import sandbox_status
from judge.scratch import keep_engines, tree_hash
from judge.zygote import SHARED_ENV

from . import canary as canaries
from .cluster import SCHEDULER_ENV
from .config import CourseError, load_config, ready, release_notebook, submitted_students
from .gradebook import duedate, graded_students, record_result
from .kit import make_kit, submission_files, with_template
from .outcome import NOT_GRADED, alone_verdict, retry_alone, section_report, why_not_graded
from .prescan import prescan_class
from .state import load_state, record_sandbox, save_state
from .task import (DEFAULT_TASK_TIMEOUT, DIE_ENV, TaskSettings, grade_task, kernels_environ, run_fork_server,
                   task_environment)

# -- the executors ---------------------------------------------------------------------------------------------------
class Serial:
    """The plain map: each task runs in this process, one after the other, when its result is asked for.  The
    task's settings enter this process's environment for its run only (a test's process keeps its own)."""

    name = "serial"

    def __init__(self, kits: dict, task: Callable = grade_task):
        self.kits, self.task = kits, task
        self.queue: list = []

    def slots(self) -> int:
        return 1

    def submit(self, section: str, *args, key: str) -> str:
        self.queue.append((key, section, args))
        return key

    def in_flight(self) -> int:
        return len(self.queue)

    def next(self, freed: Callable = lambda: None):
        """(key, result, None) or (key, None, the exception the task raised), for the next task.  (``freed``: see
        :meth:`OnDask.next`; here nothing runs beside the task, so it is called when the task has run.)"""
        key, section, args = self.queue.pop(0)
        saved = dict(os.environ)
        try:
            return key, self.task(self.kits[section], *args), None
        except Exception as exc:  # noqa: BLE001 - the task's failure is its result
            return key, None, exc
        finally:
            os.environ.clear()
            os.environ.update(saved)
            freed()

    def kit_lost(self, section: str, exc: BaseException) -> bool:
        return False

    def cancel(self):
        """The tasks not run yet are dropped."""
        self.queue.clear()

    def describe(self) -> str:
        return "one after the other in this process"


class OnDask:
    """The same tasks on a Dask cluster: each section's kit sent once (:class:`instructor.kit.KitFutures`), every
    submit ``pure=False``, results as they complete."""

    name = "dask"

    def __init__(self, client, kits: dict, task: Callable = grade_task, build: Callable | None = None):
        """``build``: the task that makes a section's kit on a worker (default: with its generated scratch course,
        :func:`instructor.kit.kit_with_template`, what :func:`instructor.task.grade_task` needs)."""
        from distributed import as_completed

        from .kit import KitFutures, kit_with_template

        self.client, self.task = client, task
        self.kit_futures = KitFutures(client, kits, build=build or kit_with_template)
        self.done = as_completed([])
        self.placed: dict = {}   # task key -> the worker it was sent to
        self.futures: dict = {}  # task key -> its future, while in flight

    def slots(self) -> int:
        try:
            return max(1, sum(self.client.nthreads().values()))
        except Exception:  # noqa: BLE001
            return 1

    def free_worker(self) -> str | None:
        """The worker with the most threads this run has not given a task, or None when none has one free.

        Each task is placed by the engine, not by the scheduler: Dask sends a task where its inputs are, and the
        kit (with its scratch course) is on the worker that made it, so every task went there, one at a time,
        while the other workers waited."""
        try:
            threads = self.client.nthreads()   # {worker: its threads}, asked of the scheduler now
        except Exception:  # noqa: BLE001
            return None
        busy: dict = {}
        for addr in self.placed.values():
            busy[addr] = busy.get(addr, 0) + 1
        free = sorted(((n - busy.get(addr, 0), addr) for addr, n in threads.items()), reverse=True)
        return free[0][1] if free and free[0][0] > 0 else None

    def submit(self, section: str, *args, key: str) -> str:
        worker = self.free_worker()
        where = {"workers": [worker], "allow_other_workers": True} if worker else {}   # (it may die meanwhile)
        fut = self.client.submit(self.task, self.kit_futures.get(section), *args, pure=False,
                                 key=f"{key}-{os.urandom(4).hex()}", **where)
        if worker:
            self.placed[fut.key] = worker
        self.futures[fut.key] = fut
        self.done.add(fut)
        return fut.key

    def in_flight(self) -> int:
        return self.done.count()

    def next(self, freed: Callable = lambda: None):
        """As :meth:`Serial.next`, for the next task to complete.  ``freed`` is called once the task has completed
        and before its result is fetched from its worker: the engine sends that worker its next task first, so the
        worker grades while the result travels here and is recorded."""
        fut = next(self.done)
        self.placed.pop(fut.key, None)
        self.futures.pop(fut.key, None)
        freed()
        try:
            return fut.key, fut.result(), None
        except Exception as exc:  # noqa: BLE001 - KilledWorker, a lost scheduler, a broken task
            return fut.key, None, exc
        finally:
            fut.release()

    def kit_lost(self, section: str, exc: BaseException) -> bool:
        return self.kit_futures.lost(section, exc)

    def cancel(self):
        """The tasks in flight are cancelled (their kernels stop with their worker's task)."""
        futures = list(self.futures.values())
        self.futures.clear()
        self.placed.clear()
        self.done.clear()
        try:
            self.client.cancel(futures)
        except Exception:  # noqa: BLE001 - a lost scheduler: nothing left to cancel
            pass

    def describe(self) -> str:
        n = len(self.client.scheduler_info().get("workers", {}))
        return f"on {n} Dask worker(s) ({self.client.scheduler.address.split(':')[0]}; no dashboard)"


class RunStart:
    """What a run starts before its first task, each in a thread of its own as soon as the run knows it will grade,
    so that it runs beside everything else the run does first (the course's nbgrader_config.py with nbgrader's
    import, the gradebook, the prescan, the kits):

    * the run's fork server (:func:`instructor.task.run_fork_server`: its imports in its sandbox, the longest part
      of the start), for the kernels of a local run (``local``);
    * the local Dask cluster (:func:`instructor.cluster.local_cluster`: its workers' imports), unless ``serial``.

    Started before the course's configuration is read, the server is for the kernels' environment and limits as the
    grading environment has them; :meth:`server` starts another where the configuration makes them otherwise.
    Nothing else runs in the server's thread (nbgrader's generate_assignment changes this process's working folder
    while it runs: a process started meanwhile would start in a folder about to be deleted)."""

    def __init__(self, settings: TaskSettings, local: bool, serial: bool, workers: int | None):
        self.settings, self.local, self.serial, self.workers = settings, local, serial, workers
        self.pools, self.stack = [], contextlib.ExitStack()
        self.server_future = self.kernels = self.cluster_future = None

    def begin(self, config=None) -> "RunStart":
        """Start whatever of the two this run has and has not started yet (``config``: see :meth:`server`)."""
        if self.local and self.server_future is None:
            self.kernels = self.for_kernels(config)   # (imports, here, what the thread imports)
            self.server_future = self.thread("fork-server").submit(run_fork_server, self.settings, config)
        if self.local and not self.serial and self.cluster_future is None:
            import distributed  # noqa: F401 - here, not in two threads at once

            from .cluster import local_cluster

            self.cluster_future = self.thread("cluster").submit(self.stack.enter_context,
                                                                local_cluster(self.workers or os.cpu_count() or 1))
        return self

    def thread(self, name: str):
        from concurrent.futures import ThreadPoolExecutor

        self.pools.append(ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"attncourse-run-{name}"))
        return self.pools[-1]

    def for_kernels(self, config) -> str:
        """The key of the server the tasks' kernels need (their environment, their limits with ``config``)."""
        from judge.kernels import configured_limits, fork_server_key

        env = kernels_environ(self.settings)
        return fork_server_key(configured_limits(config, env), env)

    def server(self, config):
        """The fork server for the kernels the tasks will start, with the course's ``config`` (a
        :class:`judge.zygote.Zygote`), or None where it did not start: another one where what they get is not what
        the early one was started for (that one is stopped with the process, :mod:`judge.zygote`)."""
        if self.server_future is not None and self.kernels != self.for_kernels(config):
            self.server_future = None
        return self.begin(config).server_future.result()

    def cluster(self):
        """A client of the local cluster (a failed start raises here), made in this thread: Dask's client keeps
        itself as the current one in this thread's context, for as long as it is open."""
        from distributed import Client

        return self.stack.enter_context(Client(self.begin().cluster_future.result()))

    def close(self):
        """Stop the cluster (once it has started) and let the threads go."""
        if self.cluster_future is not None:
            with contextlib.suppress(Exception):   # (a start that failed has nothing to stop)
                self.cluster_future.result()
        self.stack.close()
        for pool in self.pools:
            pool.shutdown(wait=True)


def failed_result(section: str, student: str, files: dict, kit_hash: str, exc: BaseException) -> dict:
    """A task that raised instead of returning (its worker died, the scheduler was lost), as a result."""
    name = type(exc).__name__
    why = "grading failed: worker died" if name == "KilledWorker" else f"grading failed: {name}: {exc}"
    return {"section": section, "student": student, "hash": tree_hash(files), "kit": kit_hash, "success": False,
            "faults": [why], "files": {}, "gradebook": None, "log": ""}


# -- one run ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ClassRun:
    """One grading run: where its results go and how its tasks grade."""
    root: Path
    settings: TaskSettings
    db_url: str
    course_id: str
    config: object               # the course's nbgrader_config.py (nbgrader's record step reads its settings)
    log: Callable = print


def quiet() -> bool:
    """No progress bar under CI or when stderr is not a terminal."""
    return bool(os.environ.get("CI")) or not sys.stderr.isatty()


def grade_class(root: Path, sections: list, workers: int | None = None, scheduler: str | None = None,
                force: bool = False, timeout: int | None = None, task_timeout: float = DEFAULT_TASK_TIMEOUT,
                students=None, feedback: bool = False, extra_env: dict | None = None, log=print,
                client=None, canary: bool = True, security=None, insecure: bool = False, serial: bool = False,
                task: Callable = grade_task) -> dict:
    """Grade every (new or changed) submission of ``sections``; return {section: report} (:mod:`instructor.outcome`).

    ``serial``: the plain map in this process (:class:`Serial`); else Dask (``client``, or a cluster on
    ``scheduler``, or a local one of ``workers`` processes: :func:`instructor.cluster.cluster`).  When anything is
    to be graded, the canary (:class:`instructor.canary.Gate`) goes first in the same stream of tasks, the students
    beside it, and no grade is written before it passes: where the solution does not earn full marks or the blank
    release earns any, a CourseError and no grade written.  ``canary=False`` only for tests that grade the same
    class again and again."""
    root = Path(root)
    t0 = time.time()
    os.environ["PATH"] = with_python_bin()   # nbgrader runs alembic from PATH when it creates a gradebook
    env, task_env = task_environment(extra_env)
    if serial:
        task_env.pop(DIE_ENV, None)   # (the test hook kills a Dask worker; here it would be the grader itself)
    sandboxed, sandbox_line = sandbox_status(env)
    if sandboxed is None:
        raise CourseError(sandbox_line)
    settings = TaskSettings(timeout, task_timeout, task_env, feedback)
    local = serial or (client is None and not (scheduler or os.environ.get(SCHEDULER_ENV)))
    state = {} if force else load_state(root)
    # the submissions and kits as files (nothing of nbgrader yet): where one has changed since the last run, the run
    # will grade, and its fork server starts now, beside the rest of the start (nbgrader's import, the gradebook)
    kits, all_students, candidates = {}, {}, []
    for section in sections:
        names = all_students[section] = submitted_students(root, section, students)
        if names and (root / "source" / section / f"{section}.ipynb").is_file():
            kits[section] = make_kit(root, section)
            candidates += [(section, s, submission_files(root, s, section)) for s in names]
    fresh = {(section, s) for section, s, files in candidates if changed(state, kits, section, s, files)}
    with contextlib.closing(RunStart(settings, local, serial, workers)) as start:
        if fresh:
            start.begin()
        config = load_config(root)   # (nbgrader's import, about a second, beside the server's start)
        db_url, course_id = ready(root, sections)
        keep_engines(db_url)   # the one writer's three Gradebooks a notebook share one engine (judge.scratch)
        todo, pre = [], {}
        for section in sections:
            if all_students[section]:
                due = duedate(db_url, course_id, section)
                have = graded_students(db_url, course_id, section)
                todo += [(section, s, files, due) for sec, s, files in candidates
                         if sec == section and ((sec, s) in fresh or s not in have)]

        def prescan():   # every submission, as it was handed in: before any kernel runs
            for section in (x for x in sections if all_students[x]):
                pre[section] = prescan_class(root, section, all_students[section], release_notebook(root, section))

        results: dict = {sec: {} for sec in sections}
        run = ClassRun(root, settings, db_url, course_id, config, log)
        if not todo:
            prescan()
        else:
            to_grade = sorted({item[0] for item in todo}, key=sections.index)
            with executor(start, client, scheduler, security, insecure, run, kits, to_grade, task,
                          meanwhile=prescan) as (ex, run):
                gate = canaries.Gate(root, to_grade, run.settings, log) if canary else None
                run_tasks(ex, run, todo, {s: k["hash"] for s, k in kits.items()}, state, results, gate)
    reports, elapsed = {}, round(time.time() - t0, 1)
    for section in sections:
        reports[section] = section_report(root, section, all_students[section], results[section], state,
                                          db_url, course_id, sandboxed, sandbox_line, pre.get(section))
        reports[section]["engine"] = "serial" if serial else "dask"
        reports[section]["graded_now"] = sorted(results[section])
        reports[section]["seconds"] = elapsed   # the whole run's, all sections together
        reports[section]["run"] = {"sections": len(sections), "submissions": sum(len(all_students[x]) for x in sections)}
    return reports


def changed(state: dict, kits: dict, section: str, student: str, files: dict) -> bool:
    """Whether this submission, or its section's kit, is not what the last run graded (then it is graded now)."""
    prev = state.get(section, {}).get(student)
    return not (prev and prev.get("hash") == tree_hash(files) and prev.get("kit") == kits[section]["hash"])


@contextlib.contextmanager
def executor(start: RunStart, client, scheduler, security, insecure, run, kits, to_grade, task,
             meanwhile: Callable = lambda: None):
    """(the run's executor, the run as its tasks get it), once everything a task needs is ready.

    What the run starts (``start``, :class:`RunStart`: its fork server, its local cluster) has started already where
    the run knew it would grade before it read the gradebook (a submission changed since the last run), else it
    starts now:

    * ``--serial``: the kits' generated scratch courses (:func:`instructor.kit.with_template`) are made here, once,
      beside the server's start; the tasks' kernels come from the run's fork server.
    * Dask: a local cluster's workers are handed the run's fork server in the run's settings
      (:data:`judge.zygote.SHARED_ENV`): one server for the run, not one per worker.  Each section's kit, with its
      generated scratch course, is made by a task on one worker (:func:`instructor.kit.kit_with_template`) and sent
      to the others, so this process never imports torch.  A cluster given by address (or a client) has workers
      elsewhere: each starts its own fork server (:func:`warm_workers`).

    ``meanwhile`` (the prescan of every submission: a few seconds on a large class) runs here while the server and
    the kits are made elsewhere, before any task is sent."""
    import dataclasses

    start.begin(run.config)   # (where no submission had changed, the run learnt that it grades only now)
    if start.serial:
        meanwhile()
        for section in to_grade:
            kits[section] = with_template(kits[section])
        start.server(run.config)
        yield Serial(kits, task), run
        return
    from .cluster import check_private, cluster
    from .workerplugin import imports_first

    ctx = (contextlib.nullcontext(client) if client is not None
           else contextlib.nullcontext(start.cluster()) if start.local
           else cluster(None, scheduler, run.log, security=security, insecure=insecure))
    with ctx as cl:
        check_private(cl)   # no folder the coordinator or a worker imports from is another account's to write
        imports_first(cl)   # before any task: nbgrader imported in one thread (instructor/workerplugin.py)
        ex = OnDask(cl, kits, task)
        made = [ex.kit_futures.get(section) for section in to_grade]   # each section's scratch course, once
        warming = warm_workers(cl, run.settings, kits[to_grade[0]]["files"].get("nbgrader_config.py"),
                               own_server=not start.local)
        meanwhile()
        kits_ready(made)
        zyg = start.server(run.config) if start.local else None
        if zyg is not None:
            settings = run.settings
            run = dataclasses.replace(run, settings=dataclasses.replace(
                settings, env={**settings.env, SHARED_ENV: zyg.spec()}))
        try:
            yield ex, run
        finally:
            for fut in warming:
                fut.release()


def kits_ready(futures: list):
    """Wait for the kits' tasks (:func:`instructor.kit.kit_with_template`); a kit that could not be made is the run's
    failure, said in one line (a CourseError), as ``--serial`` says it."""
    from distributed import wait

    from .config import CourseError

    wait(futures)
    for fut in futures:
        if fut.status == "error":
            exc = fut.exception()
            raise CourseError(str(exc) if isinstance(exc, CourseError) else f"{type(exc).__name__}: {exc}")


def warm_workers(client, settings: TaskSettings, config: bytes | None, own_server: bool = True) -> list:
    """:func:`instructor.task.warm_up` on every worker (``own_server``: each starts its own fork server), not waited
    for (each worker's first task queues behind it); the futures are kept until the run ends."""
    from .task import warm_up

    try:
        workers = list(client.scheduler_info().get("workers", {}))
    except Exception:  # noqa: BLE001
        return []
    return [client.submit(warm_up, settings, config, own_server, workers=[w], allow_other_workers=False, pure=False,
                          key=f"warm-up-{os.urandom(4).hex()}") for w in workers]


def run_tasks(ex, run: ClassRun, todo, kit_hashes: dict, state, results, gate=None):
    """Submit the tasks (at most one per slot in flight), record each result as it arrives, keep the state.

    ``gate`` (:class:`instructor.canary.Gate`): its canaries are sent first, in the same stream, and no result is
    recorded before they pass (results that come back sooner wait); where one fails, the tasks in flight are
    cancelled, nothing is recorded and the run stops (a CourseError).

    At most one task per worker thread in flight: a worker that dies takes only its own task with it (tasks queued
    on it would be counted as killed too), and a slow class never floods the scheduler.  A slot is filled again as
    soon as its task has completed, before that task's result is fetched and recorded (:meth:`OnDask.next`), so
    the loop fills slots nowhere else but where it puts a task back in the queue.  A notebook the machine may have
    kept from being graded (its worker died, its kernel died or did not start, the grader failed:
    :func:`instructor.outcome.retry_alone`) waits until the others are done, then is graded again alone, so that a
    notebook which takes the machine's memory or processes cannot cost its neighbours their grades.  A kernel that
    died while the machine's OOM killer killed nothing died by its own doing and is not graded again (0 with its
    reason), on either executor."""
    from tqdm import tqdm

    root, log = run.root, run.log
    log(f"grading {len(todo)} submission(s) {ex.describe()}"
        + (", the canary first among them" if gate is not None else ""))
    args = {}

    def submit(item):
        section, student, files, due, canary = item
        settings = gate.settings if canary else run.settings
        key = ex.submit(section, student, files, due, settings,
                        key=f"{'canary' if canary else 'grade'}-{section}-{student}")
        args[key] = item

    pending = [(section, s, files, None, True) for section, s, files in (gate.items() if gate is not None else [])]
    pending += [(*item, False) for item in todo]
    later, retried, held = [], set(), []
    alone = False

    def fill():
        slots = 1 if alone else ex.slots()
        while pending and ex.in_flight() < slots:
            submit(pending.pop(0))

    fill()
    bar = tqdm(total=len(todo), desc="grading", unit="nb", disable=quiet(), file=sys.stderr, dynamic_ncols=True)
    failed = 0

    def finish(item, result):
        nonlocal failed
        section, student = item[0], item[1]
        try:
            record_result(root, run.db_url, run.course_id, result, run.config)
        except Exception as exc:  # noqa: BLE001
            result["faults"].append(f"could not write into the gradebook: {type(exc).__name__}: {exc}")
        if not result.get("success") or result.get("faults"):
            failed += 1
        results[section][student] = result
        came_back = ((result.get("gradebook") is not None or result.get("files"))
                     and not any(f.startswith(NOT_GRADED) for f in result.get("faults", [])))
        state.setdefault(section, {})[student] = {
            # a submission nothing came back for (or not graded) is graded again next time, whatever the gradebook
            "hash": result["hash"] if came_back else None, "kit": result["kit"],
            "success": result.get("success", False), "faults": result.get("faults", []),
            "reason": why_not_graded(result), "seconds": result.get("seconds"),
            "graded_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
        save_state(root, state)
        if came_back and result.get("sandboxed") is not None:
            record_sandbox(root, section, [student], result["sandboxed"], result.get("sandbox", ""))
        bar.update(1)
        bar.set_postfix(failed=failed)

    try:
        while True:
            if not ex.in_flight():
                if not later:
                    break
                pending.extend(later)
                later.clear()
                alone = True
                fill()
                continue
            key, result, exc = ex.next(freed=fill)
            item = args.pop(key)
            section, student, files, _, canary = item
            if exc is not None and ex.kit_lost(section, exc):
                pending.insert(0, item)   # the kit's own task failed (not this submission's): sent again, first
                fill()
                continue
            if canary:
                gate.add(section, student, result, exc)
                if gate.problems:
                    ex.cancel()
                    gate.refuse()
                if gate.passed():
                    for it, res in held:
                        finish(it, res)
                    held.clear()
                continue
            if exc is not None:
                result = failed_result(section, student, files, kit_hashes[section], exc)
            machines = retry_alone(result)
            if machines and (section, student) not in retried:
                retried.add((section, student))
                later.append(item)
                continue
            if machines:   # its second run, alone
                verdict = alone_verdict(result)   # "not graded: …", or None: its kernel died alone, its own doing
                if verdict:
                    result["faults"] = [f for f in result["faults"] if f != "grading failed: worker died"] + [verdict]
            if gate is not None and not gate.passed():
                held.append((item, result))   # recorded once the canary has passed
                continue
            finish(item, result)
    finally:
        bar.close()


def grade_section(section: str, root: Path, timeout: int | None = None, students=None, log=print,
                  extra_env: dict | None = None) -> dict:
    """Every submission of ``section`` graded again by the serial executor, no canary (the tests' corpus batches);
    its report printed by ``log``."""
    from .outcome import format_report

    if not submitted_students(root, section, students):   # nothing to grade: no course config needed
        return {"section": section, "students": {}, "engine": "serial", "seconds": 0.0}
    report = grade_class(root, [section], force=True, timeout=timeout, students=students, log=lambda *a: None,
                         extra_env=extra_env, canary=False, serial=True)[section]
    log(format_report(report, color=log is print and sys.stdout.isatty()))
    return report
