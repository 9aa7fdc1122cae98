"""The Dask executor's cluster (``./course grade`` without ``--serial``; :class:`instructor.engine.OnDask`).

Design (docs/GRADING.md, "Grading a class"; the engine itself is :mod:`instructor.engine`):

* **Dask's pitfalls.**  No per-task timeout in Dask: each task runs a watchdog.  The nanny's
  memory limit cannot see kernel subprocesses: it is off, and every kernel has its own limit.
  Every submit is ``pure=False``.  At most one task per worker thread is in flight, so a worker
  that dies takes only its own task with it.  Kernels talk over unix sockets.
* **Only this run reaches the cluster** (:func:`local_cluster`): TLS with a certificate made per run on
  every connection, Dask's scratch in a fresh 0700 folder, HTTP servers with no route; grading is refused
  where a grading process imports from a folder another account could write (:func:`check_private`).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile

from .config import CourseError
from .private import path_problems

SCHEDULER_ENV = "ATTNCOURSE_DASK_SCHEDULER"


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

    Its workers are forked from one multiprocessing fork server that has imported what a task needs (Dask,
    nbgrader, the judge, torch: :func:`worker_preload`), so that the second worker, and a worker the nanny restarts
    after a death, does not import it all again (3.4 CPU-s a worker on this machine).
    """
    import dask
    from distributed import LocalCluster, Security

    folder = tempfile.mkdtemp(prefix="attncourse-dask-")   # 0700, a name no one could guess or make first
    try:
        # allowed-failures 0: a task whose worker died fails at once, and the coordinator resubmits it once itself
        with dask.config.set({"distributed.scheduler.allowed-failures": 0,
                              "distributed.worker.daemon": False,       # kernels are child processes of the worker
                              "distributed.admin.tick.limit": "1h",
                              "distributed.worker.multiprocessing-method": "forkserver",
                              **QUIET_CONFIG, **private_config(folder)}):
            worker_preload()
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


# What a local cluster of a few processes, one task each at a time, with no dashboard, need not spend CPU on: each
# worker's statistical profiler (a stack walk of the running task every 10 ms), the system monitor's GIL sampling
# (every 1 ms) and its 0.5 s host samples, the event loop's 20 ms ticks, and work stealing (the engine keeps one task
# per worker thread in flight: there is nothing to steal).
QUIET_CONFIG = {"distributed.worker.profile.enabled": False,
                "distributed.admin.system-monitor.gil.enabled": False,
                "distributed.admin.system-monitor.interval": "5s",
                "distributed.admin.tick.interval": "1s",
                "distributed.scheduler.work-stealing": False}


WORKER_PRELOAD = ("nbgrader.apps", "nbgrader.preprocessors", "judge.preprocessors", "instructor.task", "torch")


def worker_preload():
    """What the workers' multiprocessing fork server imports before it forks a worker: Dask's own list
    (:func:`distributed.utils.get_mp_context`) and :data:`WORKER_PRELOAD`.  Set before that server starts (the
    first worker of this process); it then serves every later cluster of the process."""
    from distributed.utils import get_mp_context

    ctx = get_mp_context()   # (Dask sets its own list once, here)
    from multiprocessing import forkserver

    if getattr(forkserver._forkserver, "_forkserver_pid", None) is None:   # not started yet
        ctx.set_forkserver_preload(list(dict.fromkeys([*forkserver._forkserver._preload_modules, *WORKER_PRELOAD])))


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
