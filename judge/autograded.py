"""The one reader of an autograded notebook: the judge's verdict on each code cell, as data.

:class:`judge.preprocessors.JudgeRecords` first deletes every ``attncourse`` key from the
submitted notebook's metadata and its cells' (the student controls them), then writes its verdict on
every code cell into ``cell.metadata["attncourse"]`` (:data:`KEY`)::

    {"schema": 2,
     "points": 4.0,             # the cell's nbgrader points
     "score": 3.75,             # what the judge scores it: the one execute_result it wrote (nbgrader's partial credit)
     "checks": [{"name": "scaled_dot_product_attention (float64)",    # how the check is named to the student
                 "case": "scaled_dot_product_attention:float64",      # exercise:case (the spec's)
                 "passed": False,
                 "weight": 0.125,                                     # what it is worth (the spec's points)
                 "points": 0.0,                                       # what it earned
                 "message": "… is wrong. Most likely cause: …",       # what the student reads (None: passed)
                 "cause": "the scores are not divided by √d_k",       # the mistake the judge named, or None
                 "cause_key": "no_scale",                             # that mistake's key, shared by exercises
                 "cause_title": "the scores are not scaled by √d_k",  # the section's name for it (the report's row)
                 "limit": None,                                       # "check timed out" / "check ran out of memory"
                 "judged": True,                                      # False: no record came back for it
                 "untouched": False}],                                # its exercise's cell is as handed out
     "tampering": ["tampering suspected: only 1 record came back …"],  # why the judge scores it 0 regardless
     "notes": ["GRADER was rebound by student code (restored)"],  # the in-kernel grader's flags (no score change)
     "timed_out": False,        # nbgrader's cell timeout fired here (IsolatedExecute saw it; no output read)
     "error": {"ename": "ValueError", "evalue": "…"},             # the first error the kernel raised here, or None
     "stderr": None,            # the first line the cell printed on stderr, or None
     "zeroed": None,            # why the whole cell scores 0 whatever its checks (time-out, error, tampering, stderr)
     "failure": "…"}            # why the cell lost points, in one line (None: it earned them all)

Every code cell gets one (a cell without hidden checks: ``checks`` empty); a hidden cell's ``checks`` has
one entry per ``GRADER.check`` call of its locked source, in order, whether or not a record came back.
Only ``checks``, ``score``, ``zeroed``, ``tampering`` and ``timed_out`` are the judge's own findings;
``notes`` come with the kernel's records, and ``error``, ``stderr`` and the student's part of a message
are the kernel's text: data to show (inert, :mod:`judge.sanitize`), never to parse.  The
``✓ check`` / ``✗ check`` lines in the cell's outputs are feedback for the student: nothing reads them
back.  A grade cell without this record (a notebook the judge did not see, or one judged by schema 1) has no
verdicts and fails with "no verdict from the judge".

:func:`grade_cells` turns the records into the instructor's per-student report
(:mod:`instructor.outcome`), the class report (:mod:`instructor.report`) and the learner's self-check
(:mod:`attncourse.selfcheck`); :func:`run_reasons` names what went wrong with the run itself (a cell that
timed out, tampering).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from attncourse.protocol.calls import exercises_checked
from .sanitize import inert

KEY = "attncourse"
SCHEMA = 2
NO_VERDICT = "no verdict from the judge (the notebook was not graded by this course's autograder)"


def first_line(text: str, limit: int = 240) -> str:
    """The first line of a message, inert (no escape sequences or control characters), cut at ``limit``."""
    line = (text or "").strip().split("\n")[0]
    line = inert(line).strip()
    return line if len(line) <= limit else line[: limit - 1] + "…"


@dataclass
class Check:
    """One hidden check of a cell, as the judge judged it."""

    name: str                       # how it is named to the student (exercise and case)
    key: str                        # exercise:case
    passed: bool
    weight: float                   # what it is worth
    points: float                   # what it earned
    cause: str | None = None        # the mistake the judge named (its key when it has one)
    title: str | None = None        # the section's name for that cause
    untouched: bool = False         # its exercise's cell is as it was handed out


@dataclass
class GradeCell:
    """One autograded code cell that carries a grade."""

    grade_id: str
    points: float
    exercises: list = field(default_factory=list)   # the exercises its GRADER.check calls name ([] = visible checks)
    checks: list = field(default_factory=list)      # a :class:`Check` per hidden check (every call of the cell)
    score: float | None = None                      # what the judge scored it (None: no verdict)
    failure: str | None = None                      # why it lost points, in one line (None: it did not)
    zeroed: str | None = None                       # why it scored 0 whatever its checks (None: it did not)
    messages: list = field(default_factory=list)    # one line per failed check, error or stderr print
    causes: list = field(default_factory=list)      # the mistakes the judge named
    limits: list = field(default_factory=list)      # checks stopped by their time or memory limit
    timed_out: bool = False                         # the whole cell hit nbgrader's cell timeout
    tampering: list = field(default_factory=list)   # why the judge scored it 0 whatever its checks

    @property
    def visible(self) -> bool:
        return not self.exercises


def verdict_of(cell) -> dict | None:
    """The judge's record of a cell (``cell.metadata["attncourse"]``), or None."""
    found = (cell.get("metadata") or {}).get(KEY)
    return found if isinstance(found, dict) and found.get("schema") == SCHEMA else None


def grade_cells(nb) -> list[GradeCell]:
    """Every code grade cell of an autograded notebook (a NotebookNode or its dict), in order."""
    out = []
    for idx, cell in enumerate(_cells(nb)):
        meta = (cell.get("metadata") or {}).get("nbgrader") or {}
        if cell.get("cell_type") != "code" or not meta.get("grade"):
            continue
        src = cell.get("source", "")
        src = "".join(src) if isinstance(src, list) else src
        c = GradeCell(meta.get("grade_id") or f"cell {idx + 1}", float(meta.get("points", 0) or 0),
                      exercises_checked(src))
        v = verdict_of(cell)
        if v is None:
            c.failure = NO_VERDICT
            c.messages.append(NO_VERDICT)
            out.append(c)
            continue
        for chk in v.get("checks") or []:
            cause = chk.get("cause_key") or chk.get("cause")
            c.checks.append(Check(str(chk.get("name")), str(chk.get("case") or ""), bool(chk.get("passed")),
                                  _number(chk.get("weight")),
                                  _number(chk.get("points")), str(cause) if cause else None,
                                  str(chk.get("cause_title") or chk.get("cause") or cause or "") or None,
                                  bool(chk.get("untouched"))))
            if not chk.get("passed") and chk.get("judged", True):
                c.messages.append(first_line(f"{chk.get('name')}: {chk.get('message')}", 400))
            if chk.get("cause") and not chk.get("untouched"):
                c.causes.append(chk["cause"])
            c.limits += [chk["limit"]] if chk.get("limit") else []
        c.score = _number(v.get("score"))
        c.zeroed = first_line(v["zeroed"]) if v.get("zeroed") else None
        c.tampering = [first_line(str(t), 400) for t in v.get("tampering") or []]
        c.messages += c.tampering
        c.timed_out = bool(v.get("timed_out"))
        error = v.get("error") or None
        if c.timed_out:
            c.messages.append("timed out (an infinite loop?)")
        elif error:
            c.messages.append(first_line(f"{error.get('ename')}: {error.get('evalue')}", 400))
        if v.get("stderr") is not None:
            c.messages.append("printed on stderr (a test cell must print nothing there)")
        c.failure = first_line(v["failure"]) if v.get("failure") else None
        c.limits = list(dict.fromkeys(c.limits))
        out.append(c)
    return out


def _number(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def run_reasons(nb) -> list[str]:
    """What went wrong with the run itself: cells that timed out, tampering the judge or the grader noticed."""
    reasons = []
    for idx, cell in enumerate(_cells(nb)):
        v = verdict_of(cell) if cell.get("cell_type") == "code" else None
        if v is None:
            continue
        gid = first_line(((cell.get("metadata") or {}).get("nbgrader") or {}).get("grade_id") or f"cell {idx + 1}")
        if v.get("timed_out"):
            reasons.append(f"cell timed out ({gid})")
        reasons += [f"tampering suspected: {gid}: {first_line(str(t), 160)}" for t in v.get("tampering") or []]
        reasons += [f"tampering suspected: {first_line(str(n), 160)}" for n in v.get("notes") or []]
    return list(dict.fromkeys(reasons))


def _cells(nb):
    return nb.get("cells", []) if isinstance(nb, dict) else nb.cells
