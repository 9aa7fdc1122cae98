"""Grading a whole class in parallel on Dask, into the course's one gradebook (``./course grade``).

Design (docs/GRADING.md, "Grading a class"):

* **One task per submission, self-contained and idempotent** (:func:`instructor.task.grade_task`).
  In: the section's *kit* (:mod:`instructor.kit`: nbgrader_config.py, source/<section>/,
  graders/data/<section>.pt, as bytes, sent once as a task of its own), the student id, the
  submission's files (read without following links) and the assignment's due date.  The task
  grades in a scratch course of its own and returns the autograded files, what nbgrader stored
  in its scratch gradebook, the log and timings.  Nothing on the worker touches the course.
* **One writer.**  The coordinator merges each result, as it arrives, into the course gradebook
  (:func:`instructor.gradebook.merge_result`) and writes ``autograded/<student>/<section>/``.
* **Dask's pitfalls.**  No per-task timeout in Dask: each task runs a watchdog.  The nanny's
  memory limit cannot see kernel subprocesses: it is off, and every kernel has its own limit.
  Every submit is ``pure=False``.  At most one task per worker thread is in flight, so a worker
  that dies takes only its own task with it.  A notebook the machine kept from being graded (its worker
  died, its kernel died or did not start, the grader failed) is graded again alone once the others are
  done, and recorded "not graded" (no score) where that fails for the machine's reason
  (:func:`instructor.outcome.retry_alone`).  Kernels talk over unix sockets.
* **Only this run reaches the cluster** (:func:`local_cluster`): TLS with a certificate made per run on
  every connection, Dask's scratch in a fresh 0700 folder, HTTP servers with no route; grading is refused
  where a grading process imports from a folder another account could write (:func:`check_private`).
* **Incremental.**  ``.classgrade/state.json`` (:mod:`instructor.state`) remembers, per section
  and student, the hash of the submission's files and of the kit: a re-run grades only new or
  changed submissions, and everyone again when the tests changed; ``force`` regrades all.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from judge.environment import with_python_bin
from judge.sandbox import sandbox_status
from judge.scratch import tree_hash

from . import canary as canaries
from .config import CourseError, late_plugin, ready, release_notebook, submitted_students
from .gradebook import duedate, graded_students, merge_result
from .kit import KitFutures, make_kit, submission_files, with_template
from .outcome import NOT_GRADED, alone_verdict, retry_alone, section_report, why_not_graded
from .prescan import prescan_class
from .private import path_problems
from .state import load_state, record_sandbox, save_state
from .task import DEFAULT_TASK_TIMEOUT, TaskSettings, grade_task, task_environment, warm_up

SCHEDULER_ENV = "ATTNCOURSE_DASK_SCHEDULER"


@dataclass(frozen=True)
class ClassRun:
    """One ``./course grade`` run on Dask: where its results go and how its tasks grade."""
    root: Path
    settings: TaskSettings
    db_url: str
    course_id: str
    late: object                 # nbgrader's late-submission plugin (instructor.config.late_plugin)
    log: Callable = print


def quiet() -> bool:
    """No progress bar under CI or when stderr is not a terminal."""
    return bool(os.environ.get("CI")) or not sys.stderr.isatty()


@contextlib.contextmanager
def cluster(workers: int | None = None, scheduler: str | None = None, log=print, security=None,
            insecure: bool = False):
    """A Dask client no other account can use: on ``scheduler`` (or $ATTNCOURSE_DASK_SCHEDULER), else a LocalCluster
    of processes (:func:`local_cluster`).  A cluster given by address must speak TLS (``tls://``; ``security``: a
    :class:`distributed.Security`, else Dask's own TLS settings), unless ``insecure`` says the instructor knows no
    other account can reach it."""
    from distributed import Client

    scheduler = scheduler or os.environ.get(SCHEDULER_ENV)
    if scheduler:
        with Client(scheduler, timeout="30s", security=remote_security(scheduler, security, insecure)) as client:
            yield client
        return
    with local_cluster(workers or os.cpu_count() or 1) as lc:
        with Client(lc) as client:   # (the cluster's security: this run's certificate)
            yield client


@contextlib.contextmanager
def local_cluster(n: int):
    """A LocalCluster of ``n`` single-threaded worker processes that admits this run alone (docs/GRADING.md,
    "Grading a class"):

    * every connection (scheduler, nannies, workers, this client) is TLS with a certificate and key made for this
      run, in memory (``Security.temporary``): both ends must present it, so another account that finds a port
      (``/proc/net/tcp`` names each port's owner) cannot even complete the handshake, let alone ``Client.run``;
    * Dask's scratch (``temporary-directory``, every ``local_directory``, the folders Dask puts on ``sys.path``) is
      a folder made fresh for the run, 0700, removed after it, never the shared ``$TMPDIR/dask-scratch-space``
      another account can make first;
    * the HTTP servers Dask always starts (the scheduler's and each worker's) serve no route and listen on
      127.0.0.1 only: no dashboard (bokeh is not installed either), no /info, /json, /metrics or /health.
    """
    import dask
    from distributed import LocalCluster, Security

    folder = tempfile.mkdtemp(prefix="attncourse-dask-")   # 0700, a name no one could guess or make first
    try:
        # allowed-failures 0: a task whose worker died fails at once, and the coordinator resubmits it once itself
        with dask.config.set({"distributed.scheduler.allowed-failures": 0,
                              "distributed.worker.daemon": False,       # kernels are child processes of the worker
                              "distributed.admin.tick.limit": "1h",
                              **private_config(folder)}):
            lc = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, memory_limit=0,
                              security=Security.temporary(), protocol="tls://", host="127.0.0.1",
                              dashboard_address="127.0.0.1:0", scheduler_kwargs={"dashboard": False},
                              local_directory=folder, silence_logs=40)
            try:
                yield lc
            finally:
                lc.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def private_config(folder: str) -> dict:
    """Dask's settings that keep a run's files in ``folder`` and serve nothing over HTTP."""
    return {"temporary-directory": folder,
            "distributed.scheduler.http.routes": [], "distributed.worker.http.routes": []}


def remote_security(address: str, security=None, insecure: bool = False):
    """The :class:`distributed.Security` for a cluster given by address: ``security`` or Dask's configured TLS
    (``distributed.comm.tls.*``).  A plain ``tcp://`` address is refused (a CourseError): anyone who can reach
    it runs code as the account of its workers, unless ``insecure``."""
    from distributed import Security

    sec = security if security is not None else Security()
    if not address.startswith("tls://") and not insecure:
        raise CourseError(f"refusing to grade on {address}: a Dask cluster given by address must use TLS with client "
                          "certificates (tls://HOST:PORT and the certificate in Dask's TLS settings or --tls-*; "
                          "docs/GRADING.md, \"A cluster of your own\"): over plain TCP anyone who can reach it "
                          "runs code as its workers' account. --insecure-scheduler grades there anyway.")
    return sec


def tls_security(ca_file: str, cert: str, key: str | None = None):
    """A :class:`distributed.Security` for this client from certificate files (``./course grade --tls-*``)."""
    from distributed import Security

    return Security(tls_ca_file=ca_file, tls_client_cert=cert, tls_client_key=key, require_encryption=True)


def check_private(client) -> None:
    """Refuse (CourseError) to grade where the coordinator or a worker imports from, or reads Dask's settings from,
    a folder another account could write to (:func:`path_problems`)."""
    problems = {"the coordinator": path_problems()}
    try:
        problems.update(client.run(path_problems))
    except Exception as exc:  # noqa: BLE001
        problems["the workers"] = [f"could not be asked: {type(exc).__name__}: {exc}"]
    found = [f"{who}: {p}" for who, ps in problems.items() for p in ps]
    if found:
        raise CourseError("refusing to grade: another account could plant code in a folder the grading processes "
                          "import from: " + "; ".join(found[:3]))


def grade_class(root: Path, sections: list, workers: int | None = None, scheduler: str | None = None,
                force: bool = False, timeout: int | None = None, task_timeout: float = DEFAULT_TASK_TIMEOUT,
                students=None, feedback: bool = False, extra_env: dict | None = None, log=print,
                client=None, canary: bool = True, security=None, insecure: bool = False) -> dict:
    """Grade every (new or changed) submission of ``sections``; return {section: report} (:mod:`instructor.outcome`).

    When anything is to be graded, the canary (:mod:`instructor.canary`) goes first, on the same cluster: where
    the solution does not earn full marks or the blank release earns any, a CourseError and no grade written.
    ``canary=False`` only for tests that grade the same class again and again."""
    root = Path(root)
    t0 = time.time()
    os.environ["PATH"] = with_python_bin()   # nbgrader runs alembic from PATH when it creates a gradebook
    db_url, course_id = ready(root, sections)
    env, task_env = task_environment(extra_env)
    sandboxed, sandbox_line = sandbox_status(env)
    if sandboxed is None:
        raise CourseError(sandbox_line)
    state = {} if force else load_state(root)
    todo, kits, all_students, pre = [], {}, {}, {}
    for section in sections:
        names = submitted_students(root, section, students)
        all_students[section] = names
        if not names:
            continue
        pre[section] = prescan_class(root, section, names, release_notebook(root, section))   # before any kernel
        kits[section] = make_kit(root, section)
        due = duedate(db_url, course_id, section)
        have = graded_students(db_url, course_id, section)
        for s in names:
            files = submission_files(root, s, section)
            prev = state.get(section, {}).get(s)
            if (prev and prev.get("hash") == tree_hash(files) and prev.get("kit") == kits[section]["hash"]
                    and s in have):
                continue
            todo.append((section, s, files, due))
    results: dict = {sec: {} for sec in sections}
    run = ClassRun(root, TaskSettings(timeout, task_timeout, task_env, feedback), db_url, course_id,
                   late_plugin(root), log)
    if todo:
        ctx = (contextlib.nullcontext(client) if client is not None
               else cluster(workers, scheduler, log, security=security, insecure=insecure))
        with ctx as cl:
            from .workerplugin import imports_first

            check_private(cl)   # no folder the coordinator or a worker imports from is another account's to write
            imports_first(cl)   # before any task: nbgrader imported in one thread (instructor/workerplugin.py)
            to_grade = sorted({item[0] for item in todo}, key=sections.index)
            warming = warm_workers(cl, run.settings, kits[to_grade[0]]["files"].get("nbgrader_config.py"))
            for section in to_grade:   # here, once, while the workers warm up
                kits[section] = with_template(kits[section])
            kit_futures = KitFutures(cl, kits)
            if canary:
                canaries.dask(cl, root, to_grade, kit_futures, run.settings, log)
            run_tasks(cl, run, todo, kit_futures, state, results)
            for fut in warming:
                fut.release()
    reports, elapsed = {}, round(time.time() - t0, 1)
    for section in sections:
        reports[section] = section_report(root, section, all_students[section], results[section], state,
                                          db_url, course_id, sandboxed, sandbox_line, pre.get(section))
        reports[section]["graded_now"] = sorted(results[section])
        reports[section]["seconds"] = elapsed   # the whole run's, all sections together
        reports[section]["run"] = {"sections": len(sections), "submissions": sum(len(all_students[x]) for x in sections)}
    return reports


def warm_workers(client, settings: TaskSettings, config: bytes | None) -> list:
    """:func:`instructor.task.warm_up` on every worker, not waited for (each worker's first task queues behind
    it); the futures are kept until the run ends."""
    try:
        workers = list(client.scheduler_info().get("workers", {}))
    except Exception:  # noqa: BLE001
        return []
    return [client.submit(warm_up, settings, config, workers=[w], allow_other_workers=False, pure=False,
                          key=f"warm-up-{os.urandom(4).hex()}") for w in workers]


def run_tasks(client, run: ClassRun, todo, kit_futures, state, results):
    """Submit the tasks (one in flight per worker thread), merge each result as it arrives, keep the state."""
    from distributed import as_completed
    from tqdm import tqdm

    root, log = run.root, run.log
    silent = quiet()
    nworkers = len(client.scheduler_info().get("workers", {}))
    log(f"grading {len(todo)} submission(s) on {nworkers} Dask worker(s) ({client.scheduler.address.split(':')[0]}; "
        "no dashboard)")
    kits = kit_futures.kits
    args = {}

    def submit(item):
        section, student, files, due = item
        fut = client.submit(grade_task, kit_futures.get(section), student, files, due, run.settings,
                            pure=False, key=f"grade-{section}-{student}-{os.urandom(4).hex()}")
        args[fut.key] = item
        return fut

    # At most one task per worker thread in flight: a worker that dies takes only its own task with it
    # (tasks queued on it would be counted as killed too), and a slow class never floods the scheduler.
    # A notebook the machine may have kept from being graded (its worker died, its kernel died or did not start,
    # the grader failed: outcome.retry_alone) waits until the others are done, then is graded again alone, so
    # that a notebook which takes the machine's memory or processes cannot cost its neighbours their grades.
    pending = list(todo)
    later: list = []
    retried: set = set()
    ac = as_completed([])
    alone = False

    def fill():
        try:
            slots = 1 if alone else max(1, sum(client.nthreads().values()))
        except Exception:  # noqa: BLE001
            slots = 1
        while pending and ac.count() < slots:
            ac.add(submit(pending.pop(0)))

    fill()
    failed = 0
    bar = tqdm(total=len(todo), desc="grading", unit="nb", disable=silent, file=sys.stderr, dynamic_ncols=True)
    while True:
        if ac.is_empty():
            if not later:
                break
            pending.extend(later)
            later.clear()
            alone = True
            fill()
            continue
        fut = next(ac)
        item = args.pop(fut.key)
        section, student, files, _ = item
        try:
            result = fut.result()
        except Exception as exc:  # noqa: BLE001 - KilledWorker, a lost scheduler, a broken task
            name = type(exc).__name__
            if kit_futures.lost(section, exc):
                ac.add(submit(item))  # the kit's own task failed (not this submission's): send it again
                continue
            why = "grading failed: worker died" if name == "KilledWorker" else f"grading failed: {name}: {exc}"
            result = {"section": section, "student": student, "hash": tree_hash(files),
                      "kit": kits[section]["hash"], "success": False, "faults": [why], "files": {},
                      "gradebook": None, "log": ""}
        finally:
            fut.release()
        if (section, student) not in retried and retry_alone(result):
            retried.add((section, student))
            later.append(item)
            fill()
            continue
        if (section, student) in retried and retry_alone(result):
            verdict = alone_verdict(result)   # "not graded: …", or None: its kernel died alone, its own doing
            if verdict:
                result["faults"] = [f for f in result["faults"] if f != "grading failed: worker died"] + [verdict]
        fill()
        try:
            merge_result(root, run.db_url, run.course_id, result, run.late)
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
    bar.close()
