"""The serial path: one plain ``nbgrader autograde`` batch per section (``./course grade --serial``, the tests'
corpus batches), then the per-student report."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from judge.environment import GRADING_KEEP as KEEP_ENV, grading_env
from judge.files import remove
from judge.sandbox import sandbox_status

from . import capture
from .config import CourseError, course_db, release_notebook, submitted_students
from .gradebook import clear_autogrades, gradebook_scores
from .outcome import classify_log, format_report, machine_trouble, not_graded, student_entry
from .prescan import prescan_class
from .state import record_sandbox


CONFIG_FAILED = "Exception while loading config file"


class ConfigError(RuntimeError):
    """nbgrader_config.py raised: nbgrader would carry on with defaults (no judge, no limits)."""


def check_config_loaded(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    """Refuse a run in which nbgrader could not load nbgrader_config.py."""
    if CONFIG_FAILED in (proc.stdout or "") + (proc.stderr or ""):
        log = (proc.stdout or "") + (proc.stderr or "")
        start = log.find(CONFIG_FAILED)
        raise ConfigError("nbgrader could not load nbgrader_config.py; grading without it would drop the "
                          "judge of the hidden checks, the sandbox, time and memory limits:\n" + log[start:start + 2000])
    return proc


def run_nbgrader(root: Path, args, timeout=None, env=None):
    """``python -m nbgrader ARGS`` in ``root``; its output (and its kernels', which nbgrader hands them) kept capped,
    never in memory (:func:`instructor.capture.run`); it dies with this process."""
    return check_config_loaded(capture.run([sys.executable, "-m", "nbgrader", *args], cwd=root, env=env,
                                           timeout=timeout))


def graded_notebook(root: Path, section: str, student: str) -> Path:
    return Path(root) / "autograded" / student / section / f"{section}.ipynb"


def grade(section: str, root: Path, timeout: int | None = None, students=None, log=print,
          extra_env: dict | None = None) -> dict:
    """Autograde every submission of ``section`` in one ``nbgrader autograde`` run; return the report.

    What an earlier grading of these submissions left (their autograded notebooks and feedback) is removed first:
    a notebook this run does not grade keeps no earlier verdict beside its cleared score.  A submission nbgrader
    could not grade (the batch failed on it, or died before reaching it) is graded again alone; where that fails
    too for a reason the machine gives (a kernel that cannot start, processes or memory run out, the run killed),
    it is reported "not graded", else (its kernel died alone, its notebook is broken) it scores 0 with the reason.
    One bad submission never stops the others.  Refuses (CourseError) where the sandbox cannot start and the
    instructor did not turn it off by name.
    """
    root = Path(root)
    t0 = time.time()
    all_students = submitted_students(root, section)
    env = grading_env(keep=KEEP_ENV, extra=extra_env)
    sandboxed, sandbox_line = sandbox_status(env)
    if sandboxed is None:
        raise CourseError(sandbox_line)
    students = submitted_students(root, section, students)
    release = release_notebook(root, section)
    pre = prescan_class(root, section, students, release)
    extra = [f"--IsolatedExecute.timeout={timeout}"] if timeout else []
    for s in students:
        forget_grading(root, section, s)
    autograde = ["autograde", section, "--create", "--force", *extra]
    if len(students) == len(all_students):
        runs = {"": run_nbgrader(root, autograde, env=env)} if students else {}   # ("": no student's id)
    else:
        runs = {s: run_nbgrader(root, [*autograde, f"--student={s}"], env=env) for s in students}
    report = {"section": section, "students": {}, "sandboxed": sandboxed, "sandbox": sandbox_line,
              # every run's status counts: the first that failed, else 0
              "batch_returncode": next((r.returncode for r in runs.values() if r.returncode), 0),
              "returncodes": {k: r.returncode for k, r in runs.items()}}
    why = {}
    for s in students:   # not graded by the batch: alone, once more (unless its notebook cannot be read at all)
        if graded_notebook(root, section, s).is_file() or pre[s]["fatal"]:
            continue
        single = runs.get(s)   # its own run, when it had one
        if single is None or _worth_retrying(single):
            single = run_nbgrader(root, [*autograde, f"--student={s}"], env=env)
        if not graded_notebook(root, section, s).is_file():
            why[s] = _why_alone(single)
    db = course_db(root) if students else None   # (an empty section may have no course config at all)
    for s in students:   # nbgrader could not grade it: its earlier scores must not stand (the Dask path's rule)
        if not graded_notebook(root, section, s).is_file():
            clear_autogrades(*db, section, s)
    record_sandbox(root, section, [s for s in students if graded_notebook(root, section, s).is_file()],
                   sandboxed, sandbox_line)
    scores = gradebook_scores(*db, section) if students else {}
    for s in students:
        report["students"][s] = student_entry(root, section, s, release, scores, info=pre[s],
                                              why_missing=lambda s=s: why.get(s))
    report["seconds"] = round(time.time() - t0, 1)
    log(format_report(report, color=log is print and sys.stdout.isatty()))
    return report


def forget_grading(root: Path, section: str, student: str):
    """An earlier grading's autograded notebook and feedback of this submission, removed before it is graded again
    (nbgrader's ``--force`` removes the first only once it reaches the student, never the second)."""
    for part in ("autograded", "feedback"):
        remove(Path(root) / part / student / section)


def _worth_retrying(proc: subprocess.CompletedProcess) -> bool:
    """A student's own nbgrader run that failed for a reason worth a second run alone (the run was killed, the
    machine ran out of something, a kernel did not start or died)."""
    text = proc.stdout + proc.stderr
    return proc.returncode < 0 or proc.returncode in (124, 137) or machine_trouble(text) is not None \
        or "kernel died" in classify_log(text) or "did not start" in classify_log(text)


def _why_alone(proc: subprocess.CompletedProcess) -> str:
    """Why a submission graded alone still has no autograded notebook: "not graded: …" when the machine is to blame
    (the run killed or timed out, the machine out of something, no kernel), else nbgrader's reason."""
    text = proc.stdout + proc.stderr
    if proc.returncode < 0 or proc.returncode in (124, 137):
        return not_graded(f"its nbgrader run was stopped (exit {proc.returncode}), twice")
    trouble = machine_trouble(text)
    if trouble:
        return not_graded(f"the machine ran out, twice: {trouble}")
    reason = classify_log(text)
    if "did not start" in reason:
        return not_graded("its kernel did not start, twice")
    return reason
