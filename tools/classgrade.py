"""Grade a whole class in parallel on Dask, into the course's one gradebook.

    ./course grade 02 04 [--workers N] [--scheduler tcp://HOST:8786] [--force] [--feedback]
    ./course grade all

Design (docs/GRADING.md, "Grading a class"):

* **One task per submission, self-contained and idempotent.**  In: the section's
  *kit* (nbgrader_config.py, source/<section>/, graders/data/<section>.pt, as bytes,
  sent once as a task of its own, see :class:`KitFutures`), the student id, the files
  of ``submitted/<student>/<section>/`` (notebook and timestamp.txt) and the
  assignment's due date.  The task builds a scratch course folder with a scratch
  SQLite gradebook of its own, runs nbgrader's
  own ``autograde`` there with the course's config (in-process, through
  :class:`nbgrader.apps.NbGraderAPI`, so a worker pays nbgrader's and torch's imports
  once), and returns the autograded folder's files, the grades, comments and late
  penalty nbgrader stored in the scratch gradebook, nbgrader's log and timings.
  Nothing on the worker touches the course folder or its gradebook.
* **One writer.**  The coordinator merges each result, as it arrives, into the course
  gradebook (``CourseDirectory.db_url``: SQLite by default, PostgreSQL works) through
  nbgrader's :class:`~nbgrader.api.Gradebook` the way ``SaveAutoGrades`` and
  ``AssignLatePenalties`` do (a manual score already given is kept and flags the cell
  for review), and writes ``autograded/<student>/<section>/``: formgrader,
  ``nbgrader generate_feedback`` and ``nbgrader export`` work afterwards as after
  ``nbgrader autograde``.
* **Dask's pitfalls.**  No per-task timeout in Dask: the task runs a watchdog that
  kills its kernels after ``task_timeout`` s (nbgrader then records the notebook as
  failed).  The nanny's memory limit cannot see kernel subprocesses: it is off, and
  every kernel has its own limit (attncourse/sandbox.py).  Every submit is
  ``pure=False``.  At most one task per worker thread is in flight, so a worker that
  dies takes only its own task with it; that task is retried once (the scheduler's
  ``allowed-failures`` is 0 on a local cluster), then recorded as "grading failed: worker
  died" and the run goes on.  Kernels talk over unix sockets (ipc transport), so
  parallel kernels never race for TCP ports.  Workers run one task at a time
  (``threads_per_worker=1``; start external workers with ``--nthreads 1``).
* **Incremental.**  ``.classgrade/state.json`` remembers, per section and student, the
  hash of the submission's files and of the section's kit: a re-run grades only new or
  changed submissions, and everyone again when the tests (kit) changed; ``force``
  regrades all.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

STATE_DIR = ".classgrade"
DEFAULT_TASK_TIMEOUT = 900
DIE_ENV = "ATTNCOURSE_CLASSGRADE_DIE_FOR"   # test hook: the worker grading this student dies (os._exit)
SCHEDULER_ENV = "ATTNCOURSE_DASK_SCHEDULER"
from attncourse.course import GRADING_KEEP as KEEP_ENV  # noqa: E402


class CourseError(RuntimeError):
    """The course is not ready to be graded (what to run instead is in the message)."""


# -- the course's config ------------------------------------------------------------------
def load_config(folder: Path):
    """nbgrader_config.py of ``folder``, loaded the way nbgrader loads it."""
    from traitlets.config.loader import PyFileConfigLoader

    return PyFileConfigLoader("nbgrader_config.py", path=str(folder)).load_config()


def course_db(root: Path) -> tuple[str, str]:
    """(db_url, course_id) of the course at ``root``."""
    cfg = load_config(root)
    cd = cfg.get("CourseDirectory", {})
    db_url = cd.get("db_url") or f"sqlite:///{root / 'gradebook.db'}"
    return db_url, cd.get("course_id", "default_course")


# -- the section's kit --------------------------------------------------------------------
def make_kit(root: Path, section: str) -> dict:
    """Everything a task needs of the course for ``section``, as bytes, with a content hash."""
    root = Path(root)
    files = {"nbgrader_config.py": (root / "nbgrader_config.py").read_bytes()}
    src = root / "source" / section
    for p in sorted(src.rglob("*")):
        if p.is_file() and ".ipynb_checkpoints" not in p.parts and "__pycache__" not in p.parts:
            files[str(p.relative_to(root))] = p.read_bytes()
    data = root / "graders" / "data" / f"{section}.pt"
    if data.is_file():
        files[str(data.relative_to(root))] = data.read_bytes()
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return {"section": section, "files": files, "hash": h.hexdigest()}


def submission_files(root: Path, student: str, section: str, max_kb: int = 2000) -> dict:
    """The regular files of ``submitted/<student>/<section>/``, read without following a link (links, special
    files and files over ``max_kb`` are left out; the report's prescan names them)."""
    from attncourse.safefiles import read_tree
    from tools.grade import submission_folder

    folder = submission_folder(root, student, section)
    return read_tree(folder, max_file_bytes=max_kb * 1024).files if folder is not None else {}


def files_hash(files: dict) -> str:
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return h.hexdigest()


# -- the task (runs on a worker) ---------------------------------------------------------
_TEMPLATES: dict = {}
_LOCK = threading.Lock()


def _write_files(base: Path, files: dict):
    """Write a tree of files into ``base`` (replaced), no name leaving it, nothing written through a link."""
    from attncourse.safefiles import write_tree

    write_tree(base, files)


def _api(folder: Path, timeout: int | None):
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


def _template(kit: dict) -> dict:
    """The scratch course of a kit with its assignment generated, as files in this worker's memory.

    ``generate_assignment`` runs once per kit and worker process, in a private folder that is deleted at
    once; tasks get fresh copies of the files from memory.  Nothing on disk is reused between tasks, so
    nothing a kernel could reach (an unsandboxed one can reach this account's files) can change how a later
    submission is judged.
    """
    with _LOCK:
        hit = _TEMPLATES.get(kit["hash"])
        if hit is not None:
            return hit
        from attncourse.safefiles import read_tree

        folder = Path(tempfile.mkdtemp(prefix=f"attncourse-kit-{kit['section']}-"))
        try:
            _write_files(folder, kit["files"])
            api, _ = _api(folder, None)
            res = api.generate_assignment(kit["section"], force=True, create=True)
            if not res.get("success"):
                raise RuntimeError("generate_assignment failed in the scratch course:\n"
                                   + (res.get("log") or "") + (res.get("error") or ""))
            tree = read_tree(folder, max_file_bytes=1 << 30, max_files=10_000)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        _TEMPLATES.clear()     # one kit per section at a time is plenty
        _TEMPLATES[kit["hash"]] = tree.files
        return tree.files


@contextlib.contextmanager
def _kernel_output_to(path: Path):
    """Kernels inherit the worker's stdout/stderr: send their banners to a file while grading."""
    saved = []
    try:
        fd = os.open(str(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        for n in (1, 2):
            saved.append((n, os.dup(n)))
            os.dup2(fd, n)
        os.close(fd)
    except OSError:
        pass
    try:
        yield
    finally:
        for n, old in saved:
            os.dup2(old, n)
            os.close(old)


def _kernel_pids() -> list:
    import psutil

    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if any("ipykernel" in part or "sandbox.py" in part for part in p.cmdline()):
                out.append(p)
        except psutil.Error:
            pass
    return out


def _kill_kernels(flag: dict):
    flag["fired"] = True
    for p in _kernel_pids():
        with contextlib.suppress(Exception):
            p.kill()


def _gradebook_entry(db_url: str, section: str, student: str) -> dict | None:
    """What nbgrader stored for one submission: timestamp, grades, comments, late penalties."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(db_url) as gb:
        try:
            sub = gb.find_submission(section, student)
        except MissingEntry:
            return None
        out = {"timestamp": sub.timestamp.isoformat() if sub.timestamp else None, "notebooks": {}}
        for nb in sub.notebooks:
            out["notebooks"][nb.name] = {
                "late_submission_penalty": nb.late_submission_penalty,
                "grades": {g.name: {"auto_score": g.auto_score, "max_score": g.max_score,
                                    "needs_manual_grade": g.needs_manual_grade, "cell_type": g.cell_type}
                           for g in nb.grades},
                "comments": {c.name: c.auto_comment for c in nb.comments},
            }
        return out


def grade_task(kit: dict, student: str, files: dict, duedate: str | None = None, timeout: int | None = None,
               task_timeout: float = DEFAULT_TASK_TIMEOUT, env: dict | None = None, feedback: bool = False) -> dict:
    """Autograde one submission in a scratch course of its own; return everything the coordinator merges."""
    t0 = time.time()
    section = kit["section"]
    env = dict(env or {})
    if env.get(DIE_ENV) == student:
        os._exit(70)  # test hook: a worker that dies while grading
    for k in KEEP_ENV:   # this run's settings, not those of an earlier run on the same worker
        os.environ.pop(k, None)
    os.environ.update({k: v for k, v in env.items() if k != DIE_ENV})
    bindir = os.path.dirname(sys.executable)  # nbgrader runs alembic from PATH when it creates a gradebook
    if bindir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    out = {"section": section, "student": student, "hash": files_hash(files), "kit": kit["hash"],
           "worker_pid": os.getpid(), "success": False, "faults": [], "files": {}, "feedback": {}}
    work = None
    try:
        from attncourse.sandbox import sandbox_status

        sandboxed, line = sandbox_status()
        if sandboxed is None:   # this worker cannot sandbox its kernels: it grades nothing
            import socket

            out["faults"].append(f"not graded on worker {socket.gethostname()}: {line}")
            return out
        tmpl = _template(kit)
        t_setup = time.time()
        work = Path(tempfile.mkdtemp(prefix="attncourse-task-"))
        _write_files(work, {k: v for k, v in tmpl.items() if k.split("/")[0] in
                            ("nbgrader_config.py", "source", "graders", "gradebook.db")})
        _write_files(work / "submitted" / student / section, files)
        api, cd = _api(work, timeout)
        if duedate:
            from nbgrader.api import Gradebook

            with Gradebook(cd.db_url) as gb:
                gb.update_or_create_assignment(section, duedate=duedate)
        flag = {"fired": False}
        dog = threading.Timer(task_timeout, _kill_kernels, args=(flag,))
        dog.daemon = True
        dog.start()
        t_run = time.time()
        try:
            with _kernel_output_to(work / "kernel-output.txt"):
                res = api.autograde(section, student, force=True, create=True)
        finally:
            dog.cancel()
        t_done = time.time()
        out["success"] = bool(res.get("success"))
        out["log"] = (res.get("log") or "")[-20000:] + (res.get("error") or "")[-5000:]
        if flag["fired"]:
            out["faults"].append(f"grading took longer than {task_timeout:g} s: its kernel was stopped")
        graded = work / "autograded" / student / section
        if graded.is_dir():
            out["files"] = {str(p.relative_to(graded)): p.read_bytes() for p in graded.rglob("*") if p.is_file()}
        out["gradebook"] = _gradebook_entry(cd.db_url, section, student)
        if feedback and out["files"]:
            fb = api.generate_feedback(section, student, force=True)
            fdir = work / "feedback" / student / section
            if fb.get("success") and fdir.is_dir():
                out["feedback"] = {str(p.relative_to(fdir)): p.read_bytes() for p in fdir.rglob("*") if p.is_file()}
        out["seconds"] = {"setup": round(t_setup - t0, 2), "autograde": round(t_done - t_run, 2),
                          "total": round(time.time() - t0, 2)}
    except Exception:  # noqa: BLE001 - a result, never a crashed task
        out["log"] = out.get("log", "") + traceback.format_exc()
        out["faults"].append("grading failed: " + traceback.format_exc().strip().splitlines()[-1][:300])
    finally:
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
    return out


# -- the coordinator: one writer -----------------------------------------------------------
def merge_result(root: Path, db_url: str, course_id: str, result: dict, late_plugin=None):
    """Write one task's result into the course: autograded/ files, feedback/, and the gradebook."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SQLAlchemy's autoflush notes from inside nbgrader's Gradebook
        _merge(root, db_url, course_id, result, late_plugin)


def _merge(root, db_url, course_id, result, late_plugin):
    from nbgrader.api import Gradebook, MissingEntry

    section, student = result["section"], result["student"]
    entry = result.get("gradebook")
    if entry is None and not result.get("files"):
        return  # nothing came back (a dead worker): what an earlier run wrote stays as it was
    from attncourse.safefiles import remove

    dest = Path(root) / "autograded" / student / section
    remove(dest)
    if result.get("files"):
        _write_files(dest, result["files"])
    if result.get("feedback"):
        _write_files(Path(root) / "feedback" / student / section, result["feedback"])
    if entry is None:
        return
    from datetime import datetime

    with Gradebook(db_url, course_id) as gb:
        gb.update_or_create_student(student)
        ts = datetime.fromisoformat(entry["timestamp"]) if entry.get("timestamp") else None
        sub = (gb.update_or_create_submission(section, student, timestamp=ts) if ts
               else gb.update_or_create_submission(section, student))
        for nb_name, nb in entry["notebooks"].items():
            try:
                snb = gb.find_submission_notebook(nb_name, section, student)
            except MissingEntry:
                continue
            for name, g in nb["grades"].items():
                grade = gb.find_grade(name, nb_name, section, student)
                grade.auto_score = g["auto_score"]
                # SaveAutoGrades' rule, against THIS gradebook: a manual score already given is kept
                grade.needs_manual_grade = grade.manual_score is not None or grade.auto_score is None
            for name, text in nb["comments"].items():
                gb.find_comment(name, nb_name, section, student).auto_comment = text
            gb.db.commit()
            # AssignLatePenalties' rule, against this gradebook's due date and scores
            snb.late_submission_penalty = None
            if sub.total_seconds_late > 0 and late_plugin is not None:
                penalty = late_plugin.late_submission_penalty(student, snb.score, sub.total_seconds_late)
                if penalty is not None:
                    snb.late_submission_penalty = max(0.0, min(penalty, snb.score))
            gb.db.commit()


def _late_plugin(root: Path):
    from nbgrader.plugins import LateSubmissionPlugin

    cfg = load_config(root)
    name = cfg.get("AssignLatePenalties", {}).get("plugin_class")
    cls = LateSubmissionPlugin
    if name:
        import importlib

        mod, _, attr = name.rpartition(".") if isinstance(name, str) else (None, None, None)
        cls = getattr(importlib.import_module(mod), attr) if mod else name
    return cls(config=cfg)


def _state_path(root: Path) -> Path:
    return Path(root) / STATE_DIR / "state.json"


def load_state(root: Path) -> dict:
    try:
        return json.loads(_state_path(root).read_text())
    except (OSError, ValueError):
        return {}


def save_state(root: Path, state: dict):
    p = _state_path(root)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1, sort_keys=True))
    tmp.replace(p)


def ready(root: Path, sections) -> tuple[str, str]:
    """(db_url, course_id) once every section can be graded; a CourseError says what to run instead."""
    db_url, course_id = course_db(root)
    for section in sections:
        check_section(root, section, db_url, course_id)
    return db_url, course_id


def check_section(root: Path, section: str, db_url: str, course_id: str):
    """Refuse, with what to run instead, a section that cannot be graded yet."""
    from nbgrader.api import Gradebook, MissingEntry

    if not (root / "source" / section / f"{section}.ipynb").is_file():
        raise CourseError(f"{section}: no source/{section}/{section}.ipynb in {root}")
    run = (f"run `nbgrader generate_assignment {section} --force` (or `./course generate`) first, then grade")
    if db_url.startswith("sqlite:///") and not Path(db_url[len("sqlite:///"):]).is_file():
        raise CourseError(f"there is no gradebook yet ({db_url}): {run}")
    try:
        with Gradebook(db_url, course_id) as gb:
            gb.find_assignment(section)
    except MissingEntry:
        raise CourseError(f"{section} is not in the gradebook yet: {run}") from None
    except Exception as exc:  # noqa: BLE001 - a database that cannot be opened
        raise CourseError(f"cannot open the gradebook {db_url}: {type(exc).__name__}: {exc}") from None


def _duedate(db_url, course_id, section):
    from nbgrader.api import Gradebook

    with Gradebook(db_url, course_id) as gb:
        d = gb.find_assignment(section).duedate
        return d.isoformat() if d else None


def _quiet() -> bool:
    return bool(os.environ.get("CI")) or not sys.stderr.isatty()


@contextlib.contextmanager
def cluster(workers: int | None = None, scheduler: str | None = None, log=print):
    """A Dask client: on ``scheduler`` (or $ATTNCOURSE_DASK_SCHEDULER), else a LocalCluster of processes."""
    import dask
    from distributed import Client, LocalCluster

    scheduler = scheduler or os.environ.get(SCHEDULER_ENV)
    if scheduler:
        with Client(scheduler, timeout="30s") as client:
            yield client
        return
    n = workers or os.cpu_count() or 1
    # allowed-failures 0: a task whose worker died fails at once, and the coordinator resubmits it once itself
    with dask.config.set({"distributed.scheduler.allowed-failures": 0,
                          "distributed.worker.daemon": False,       # kernels are child processes of the worker
                          "distributed.admin.tick.limit": "1h"}):
        lc = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, memory_limit=0,
                          dashboard_address=":0", silence_logs=40)
        try:
            with Client(lc) as client:
                yield client
        finally:
            lc.close()


def task_environment(extra_env: dict | None = None) -> tuple[dict, dict]:
    """(the grading environment, the part of it a task sets on its worker)."""
    from attncourse.course import grading_env

    env = grading_env(keep=KEEP_ENV, extra=extra_env)
    task_env = {k: v for k, v in env.items() if k.startswith("ATTNCOURSE_") or k in (
        "PYTHONWARNINGS", "MPLBACKEND", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TOKENIZERS_PARALLELISM")}
    if extra_env and DIE_ENV in extra_env:
        task_env[DIE_ENV] = extra_env[DIE_ENV]
    return env, task_env


def grade_class(root: Path, sections: list, workers: int | None = None, scheduler: str | None = None,
                force: bool = False, timeout: int | None = None, task_timeout: float = DEFAULT_TASK_TIMEOUT,
                students=None, feedback: bool = False, extra_env: dict | None = None, log=print,
                client=None) -> dict:
    """Grade every (new or changed) submission of ``sections``; return {section: report} (tools.grade format)."""
    from attncourse.sandbox import sandbox_status

    root = Path(root)
    t0 = time.time()
    bindir = os.path.dirname(sys.executable)  # nbgrader runs alembic from PATH when it creates a gradebook
    if bindir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    db_url, course_id = ready(root, sections)
    env, task_env = task_environment(extra_env)
    sandboxed, sandbox_line = sandbox_status(env)
    if sandboxed is None:
        raise CourseError(sandbox_line)
    state = {} if force else load_state(root)
    todo, kits, all_students = [], {}, {}
    for section in sections:
        subdir = root / "submitted"
        names = sorted(p.name for p in subdir.iterdir() if (p / section).is_dir()) if subdir.is_dir() else []
        names = [s for s in names if not students or s in students]
        all_students[section] = names
        if not names:
            continue
        kits[section] = make_kit(root, section)
        due = _duedate(db_url, course_id, section)
        have = _graded_in_gradebook(db_url, course_id, section)
        for s in names:
            files = submission_files(root, s, section)
            prev = state.get(section, {}).get(s)
            if (prev and prev.get("hash") == files_hash(files) and prev.get("kit") == kits[section]["hash"]
                    and s in have):
                continue
            todo.append((section, s, files, due))
    results: dict = {sec: {} for sec in sections}
    late = _late_plugin(root)
    if todo:
        ctx = contextlib.nullcontext(client) if client is not None else cluster(workers, scheduler, log)
        with ctx as cl:
            _run(cl, root, todo, kits, timeout, task_timeout, task_env, feedback, db_url, course_id, late, state,
                 results, log)
    reports, elapsed = {}, round(time.time() - t0, 1)
    for section in sections:
        reports[section] = section_report(root, section, all_students[section], results[section], state,
                                          db_url, course_id, sandboxed, sandbox_line)
        reports[section]["graded_now"] = sorted(results[section])
        reports[section]["seconds"] = elapsed   # the whole run's, all sections together
        reports[section]["run"] = {"sections": len(sections), "submissions": sum(len(all_students[x]) for x in sections)}
    return reports


def _graded_in_gradebook(db_url, course_id, section) -> set:
    from nbgrader.api import Gradebook

    with Gradebook(db_url, course_id) as gb:
        return {s.student.id for s in gb.find_assignment(section).submissions}


def _kit(kit: dict) -> dict:
    """The kit as a task's result (see :class:`KitFutures`)."""
    return kit


class KitFutures:
    """Each section's kit on the cluster, sent once, that survives the death of the workers holding it.

    Scattered data cannot be recovered: when the last worker holding it dies, every task that
    needs it fails ("lost dependencies").  A worker dying is a case the run must survive (a
    student's code can kill its worker; the nanny restarts it empty), and two deaths in a row
    lost the kit in CI, failing every later submission.  So the kit is the result of a task
    (``_kit``) whose spec holds the bytes: the scheduler keeps the spec and computes the kit
    again wherever it is lost.  If that tiny task itself was running on a worker that died
    (it then fails with KilledWorker, with allowed-failures 0), :meth:`lost` says so and the
    kit is sent again, at most ``tries`` times per section.
    """

    GONE = ("error", "cancelled")  # future states in which the kit must be sent again ("lost": the scheduler recomputes it)

    def __init__(self, client, kits: dict, tries: int = 5):
        self.client, self.kits, self.tries = client, kits, tries
        self.futures: dict = {}
        self.sent: dict = {}

    def get(self, section: str):
        fut = self.futures.get(section)
        if fut is None or fut.status in self.GONE:
            self.sent[section] = self.sent.get(section, 0) + 1
            fut = self.client.submit(_kit, self.kits[section], pure=False,
                                     key=f"kit-{section}-{os.urandom(4).hex()}")
            self.futures[section] = fut
        return fut

    def lost(self, section: str, exc: BaseException) -> bool:
        """Did a grading task fail because its kit did (and may the kit be sent again)?"""
        fut = self.futures.get(section)
        failed = fut is not None and (fut.status in self.GONE or str(getattr(exc, "task", "")) == str(fut.key))
        if failed:
            self.futures.pop(section, None)
        return failed and self.sent.get(section, 0) < self.tries


def _run(client, root, todo, kits, timeout, task_timeout, task_env, feedback, db_url, course_id, late, state,
         results, log):
    from distributed import as_completed
    from distributed.client import FutureCancelledError  # noqa: F401
    from tqdm import tqdm

    quiet = _quiet()
    link = getattr(client, "dashboard_link", None) or "none (the scheduler serves no dashboard)"
    try:
        import bokeh  # noqa: F401
    except ImportError:
        link += " (its plots need `pip install bokeh`)"
    nworkers = len(client.scheduler_info().get("workers", {}))
    log(f"grading {len(todo)} submission(s) on {nworkers} Dask worker(s); Dask dashboard: {link}")
    kit_futures = KitFutures(client, kits)
    args = {}

    def submit(item):
        section, student, files, due = item
        fut = client.submit(grade_task, kit_futures.get(section), student, files, due, timeout, task_timeout,
                            task_env, feedback, pure=False, key=f"grade-{section}-{student}-{os.urandom(4).hex()}")
        args[fut.key] = item
        return fut

    # At most one task per worker thread in flight: a worker that dies takes only its own task with it
    # (tasks queued on it would be counted as killed too), and a slow class never floods the scheduler.
    pending = list(todo)
    ac = as_completed([])

    def fill():
        try:
            slots = max(1, sum(client.nthreads().values()))
        except Exception:  # noqa: BLE001
            slots = 1
        while pending and ac.count() < slots:
            ac.add(submit(pending.pop(0)))

    fill()
    retried = set()
    failed = 0
    bar = tqdm(total=len(todo), desc="grading", unit="nb", disable=quiet, file=sys.stderr, dynamic_ncols=True)
    while not ac.is_empty():
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
            if name == "KilledWorker" and (section, student) not in retried:
                retried.add((section, student))  # a dead worker: its submission is retried once
                ac.add(submit(item))
                continue
            why = "grading failed: worker died" if name == "KilledWorker" else f"grading failed: {name}: {exc}"
            result = {"section": section, "student": student, "hash": files_hash(files),
                      "kit": kits[section]["hash"], "success": False, "faults": [why], "files": {},
                      "gradebook": None, "log": ""}
        finally:
            fut.release()
        fill()
        try:
            merge_result(root, db_url, course_id, result, late)
        except Exception as exc:  # noqa: BLE001
            result["faults"].append(f"could not write into the gradebook: {type(exc).__name__}: {exc}")
        if not result.get("success") or result.get("faults"):
            failed += 1
        results[section][student] = result
        state.setdefault(section, {})[student] = {
            # a submission nothing came back for is graded again next time, whatever the gradebook holds
            "hash": result["hash"] if result.get("gradebook") is not None or result.get("files") else None, "kit": result["kit"], "success": result.get("success", False),
            "faults": result.get("faults", []), "reason": _reason(result), "seconds": result.get("seconds"),
            "graded_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
        save_state(root, state)
        bar.update(1)
        bar.set_postfix(failed=failed)
    bar.close()


def _reason(result: dict) -> str | None:
    """Why nbgrader could not grade the notebook, from its log (None when it did)."""
    from tools.grade import classify_log

    if result.get("files") and result.get("success"):
        return None
    if any("worker died" in f for f in result.get("faults", [])):
        return None
    return classify_log(result.get("log") or "")


def section_report(root: Path, section: str, students: list, results: dict, state: dict, db_url: str,
                   course_id: str, sandboxed: bool, sandbox_line: str) -> dict:
    """The per-student report of tools/grade.py for everything graded so far (this run or earlier ones)."""
    from tools.grade import release_notebook, release_points, student_entry

    release = release_notebook(root, section)
    scores = gradebook_scores(db_url, course_id, section)
    report = {"section": section, "students": {}, "batch_returncode": 0, "sandboxed": sandboxed,
              "sandbox": sandbox_line, "engine": "dask"}
    max_score = release_points(release)
    for s in students:
        st = state.get(section, {}).get(s, {})
        report["students"][s] = student_entry(root, section, s, release, scores, why_missing=lambda st=st: st.get("reason"),
                                              faults=st.get("faults", []), max_score=max_score)
    return report


def gradebook_scores(db_url, course_id, section) -> dict:
    """{student: (score, max_score, {cell: (score, max_score)})} of ``section`` in the gradebook."""
    from nbgrader.api import Gradebook, MissingEntry

    out = {}
    with Gradebook(db_url, course_id) as gb:
        try:
            assignment = gb.find_assignment(section)
        except MissingEntry:
            return out
        for sub in assignment.submissions:
            cells = {g.name: (g.score, g.max_score) for nb in sub.notebooks for g in nb.grades}
            out[sub.student.id] = (sub.score, sub.max_score, cells)
    return out
