"""The serial path: one plain ``nbgrader autograde`` batch per section (``./course grade --serial``, the tests'
corpus batches), then the per-student report."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from attncourse.course import GRADING_KEEP as KEEP_ENV, grading_env
from judge.sandbox import sandbox_status

from .config import CourseError, course_db, release_notebook, submitted_students
from .gradebook import clear_autogrades, gradebook_scores
from .outcome import classify_log, format_report, student_entry
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
    cmd = [sys.executable, "-m", "nbgrader", *args]
    try:
        proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as exc:
        return subprocess.CompletedProcess(cmd, 124, exc.stdout or "", (exc.stderr or "") + "\nTIMEOUT")
    return check_config_loaded(proc)


def grade(section: str, root: Path, timeout: int | None = None, students=None, log=print,
          extra_env: dict | None = None) -> dict:
    """Autograde every submission of ``section`` in one ``nbgrader autograde`` run; return the report.

    A submission nbgrader could not grade is graded again alone to learn why; one bad submission never
    stops the others.  Refuses (CourseError) where the sandbox cannot start and the instructor did not
    turn it off by name.
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
    if len(students) == len(all_students):
        batch = run_nbgrader(root, ["autograde", section, "--create", "--force", *extra], env=env)
    else:
        for s in students:
            batch = run_nbgrader(root, ["autograde", section, "--create", "--force", f"--student={s}", *extra], env=env)
    if not students:
        batch = subprocess.CompletedProcess([], 0, "", "")
    report = {"section": section, "students": {}, "batch_returncode": batch.returncode,
              "sandboxed": sandboxed, "sandbox": sandbox_line}
    db = course_db(root) if students else None   # (an empty section may have no course config at all)
    for s in students:   # nbgrader could not grade it: its earlier scores must not stand (the Dask path's rule)
        if not (root / "autograded" / s / section / f"{section}.ipynb").is_file():
            clear_autogrades(*db, section, s)
    record_sandbox(root, section, [s for s in students
                                   if (root / "autograded" / s / section / f"{section}.ipynb").is_file()],
                   sandboxed, sandbox_line)
    scores = gradebook_scores(*db, section) if students else {}
    for s in students:
        def why_missing(s=s):  # nbgrader could not grade it: grade it alone to learn why
            single = run_nbgrader(root, ["autograde", section, "--create", "--force", f"--student={s}", *extra], env=env)
            return classify_log(single.stdout + single.stderr)

        entry = student_entry(root, section, s, release, scores, info=pre[s], why_missing=why_missing)
        report["students"][s] = entry
    report["seconds"] = round(time.time() - t0, 1)
    log(format_report(report, color=log is print and sys.stdout.isatty()))
    return report
