"""The canary: with every class, the instructor's solution and the blank release are graded the same way, first.

``./course grade`` grades ``source/<section>/<section>.ipynb`` (nbgrader's instructor version) and
``release/<section>/<section>.ipynb`` (the untouched handout) as the class is, first in the run's stream of tasks
(:class:`Gate`; the students' beside them, no student's grade written before they pass): the same task
(:func:`instructor.task.grade_task`) on the same executor (the same kernel launcher, sandbox, limits), each in a
scratch course with a gradebook of its own, so the canaries never appear in the course's gradebook.  The solution must
earn every autograded point and the blank none.  Otherwise the environment is broken (a kernel that cannot
import the course package, a missing package, a device that is not there) and every student would get the
same wrong score: no student grade is written and the run stops with one line saying what broke, as a rule
the first error of the solution's notebook (its setup cell's).
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from judge.autograded import first_line
from judge.files import read_regular

from .config import CourseError

SOLUTION, BLANK = "canary-solution", "canary-blank"


def submissions(root, section: str) -> dict:
    """{canary student: its files}: the instructor's notebook and the blank release."""
    name = f"{section}.ipynb"
    out = {}
    for student, base in ((SOLUTION, "source"), (BLANK, "release")):
        path = Path(root) / base / section / name
        if not path.is_file():
            raise CourseError(f"{section}: no {base}/{section}/{name} for the canary: run `./course build {section}`")
        out[student] = {name: read_regular(path, 64 << 20)}
    return out


def autograded_points(nb) -> dict:
    """{grade_id: points} of the autograder tests (code grade cells that are not answers): what autograde scores."""
    out = {}
    for c in nb.cells:
        meta = c.metadata.get("nbgrader", {})
        if c.cell_type == "code" and meta.get("grade") and not meta.get("solution"):
            out[meta["grade_id"]] = float(meta.get("points", 0) or 0)
    return out


def outcome(entry: dict | None, notebook: bytes | None, why: str = "") -> dict:
    """One canary's grading: what nbgrader stored (:func:`instructor.gradebook.gradebook_entry`), the autograded
    notebook, and why nothing came back (when nothing did)."""
    import nbformat

    nb = None
    if notebook:
        try:
            nb = nbformat.reads(notebook.decode("utf-8", "replace"), as_version=4)
        except Exception:  # noqa: BLE001
            nb = None
    grades = {k: v.get("auto_score") or 0.0 for n in (entry or {}).get("notebooks", {}).values()
              for k, v in n["grades"].items()}
    return {"grades": grades, "nb": nb, "why": why}


def first_error(nb) -> str | None:
    """``<cell>: <Error>: <message>`` of the first error in the notebook (the setup cell's, when it broke)."""
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                where = cell.metadata.get("nbgrader", {}).get("grade_id") or f"cell {i + 1}"
                return f"{where}: {out.get('ename')}: {first_line(out.get('evalue', ''))}"
    return None


def verdict(section: str, release_nb, outcomes: dict, seconds: float, log=print) -> str | None:
    """None when the solution earned every autograded point and the blank none; else the one line that says
    what broke.  Logs the canary's scores and seconds."""
    tests = autograded_points(release_nb)
    full = sum(tests.values())
    sol, blank = outcomes[SOLUTION], outcomes[BLANK]
    got = {s: sum(o["grades"].get(g, 0.0) for g in tests) for s, o in outcomes.items()}
    log(f"canary {section}: the solution {got[SOLUTION]:g} / {full:g}, the blank release {got[BLANK]:g} / {full:g} "
        f"({seconds:.1f} s)")
    if got[SOLUTION] != full or not tests:
        lost = [g for g in tests if sol["grades"].get(g, 0.0) != tests[g]]
        cause = ((first_error(sol["nb"]) if sol["nb"] is not None else None) or sol["why"]
                 or f"no error shown; lost points in {', '.join(lost[:5])}")
        return (f"{section}: the instructor's solution (source/{section}/{section}.ipynb) scored {got[SOLUTION]:g} / "
                f"{full:g} here: {first_line(cause, 300)}")
    if got[BLANK]:
        earned = [g for g in tests if blank["grades"].get(g)]
        return (f"{section}: the blank release (release/{section}/{section}.ipynb) scored {got[BLANK]:g} / {full:g}: "
                f"{', '.join(earned[:5])} give points to an untouched notebook")
    return None


def refuse(problems: list):
    """No student grade is written: the run stops, one line per broken section."""
    if problems:
        raise CourseError("canary failed, no student graded: " + "\n".join(problems))


def release_nb(files: dict, section: str):
    import nbformat

    return nbformat.reads(files[BLANK][f"{section}.ipynb"].decode("utf-8", "replace"), as_version=4)


class Gate:
    """Both canaries of every section to grade, as tasks of the run's own stream: the engine
    (:func:`instructor.engine.run_tasks`) sends them first, on the same executor and task as the students'
    (:class:`instructor.engine.Serial` or :class:`instructor.engine.OnDask`), and grades the class beside them; it
    writes no student's grade before :meth:`passed` (every canary back, each solution with full marks, each blank
    with none), and where one fails it stops the run and :func:`refuse` says why.  Nothing waits for the canary
    before the first student is sent: on Dask its two notebooks and the first students share the workers."""

    def __init__(self, root, sections, settings, log=print):
        self.t0, self.log = time.time(), log
        self.subs = {section: submissions(root, section) for section in sections}
        self.settings = dataclasses.replace(settings, feedback=False)
        self.outcomes: dict = {section: {} for section in sections}
        self.problems: list | None = None   # None until every canary is back; then [] or one line per broken section

    def items(self) -> list:
        """(section, canary student, its files) of every canary, the solution first."""
        return [(section, s, files) for section, subs in self.subs.items() for s, files in subs.items()]

    def add(self, section: str, student: str, result: dict | None, exc: BaseException | None = None):
        """One canary's task came back (``result``), or raised (``exc``: a dead worker, a lost kit)."""
        if exc is not None:
            self.outcomes[section][student] = outcome(None, None, f"grading failed: {type(exc).__name__}: {exc}")
        else:
            self.outcomes[section][student] = outcome(result.get("gradebook"),
                                                      result.get("files", {}).get(f"{section}.ipynb"), why(result))
        if all(len(self.outcomes[sec]) == len(subs) for sec, subs in self.subs.items()):
            seconds = time.time() - self.t0
            self.problems = [p for sec in self.subs
                             if (p := verdict(sec, release_nb(self.subs[sec], sec), self.outcomes[sec], seconds,
                                              self.log))]

    def passed(self) -> bool:
        """Every canary is back and none failed (:meth:`refuse` raises where one did)."""
        return self.problems == []

    def refuse(self):
        """Where a canary failed: CourseError, one line per broken section (:func:`refuse`)."""
        refuse(self.problems or [])


def why(result: dict) -> str:
    """Why a canary's task gave no score, in one line: its faults, else the line of its log that names the cause
    (:func:`instructor.outcome.log_reason`: a kernel that died or stopped, grading refused), never a cut fragment."""
    from .outcome import log_reason

    return "; ".join(result.get("faults", [])) or log_reason(result.get("log") or "")
