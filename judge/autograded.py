"""The one reader of an autograded notebook: the judge's verdict on each code cell, as data.

:class:`judge.preprocessors.JudgeRecords` first deletes every ``attncourse`` key from the
submitted notebook's metadata and its cells' (the student controls them), then writes its verdict on
every code cell into ``cell.metadata["attncourse"]`` (:data:`KEY`)::

    {"schema": 1,
     "checks": [{"name": "scaled_dot_product_attention (float64)", "passed": False,
                 "message": "… is wrong. Most likely cause: …",   # what the student reads (None: passed)
                 "cause": "the scores are not divided by √d_k",   # the mistake the judge named, or None
                 "limit": None}],                                 # "check timed out" / "check ran out of memory"
     "tampering": ["tampering suspected: only 1 record came back …"],  # why the judge scores it 0 regardless
     "notes": ["GRADER was rebound by student code (restored)"],  # the in-kernel grader's flags (no score change)
     "timed_out": False,        # nbgrader's cell timeout fired here (IsolatedExecute saw it; no output read)
     "error": {"ename": "ValueError", "evalue": "…"},             # the first error the kernel raised here, or None
     "stderr": None,            # the first line the cell printed on stderr, or None
     "failure": "…"}            # why the cell scores 0, in one line (None: it does not)

Every code cell gets one (a cell without hidden checks: ``checks`` empty).  Only ``checks`` (hidden
checks' names, verdicts, causes, limits), ``tampering`` and ``timed_out`` are the judge's own findings;
``notes`` come with the kernel's records, and ``error``, ``stderr`` and the student's part of a message
are the kernel's text: data to show (inert, :mod:`judge.sanitize`), never to parse.  The
``✓ check`` / ``✗ check`` lines in the cell's outputs are feedback for the student: nothing reads them
back.  A grade cell without this record (a notebook the judge did not see) has no verdicts and fails
with "no verdict from the judge".

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
SCHEMA = 1
NO_VERDICT = "no verdict from the judge (the notebook was not graded by this course's autograder)"


def first_line(text: str, limit: int = 240) -> str:
    """The first line of a message, inert (no escape sequences or control characters), cut at ``limit``."""
    line = (text or "").strip().split("\n")[0]
    line = inert(line).strip()
    return line if len(line) <= limit else line[: limit - 1] + "…"


@dataclass
class GradeCell:
    """One autograded code cell that carries a grade."""

    grade_id: str
    points: float
    exercises: list = field(default_factory=list)   # the exercises its GRADER.check calls name ([] = visible checks)
    checks: list = field(default_factory=list)      # (passed, check label) per hidden check the judge judged
    failure: str | None = None                      # why it scored 0, in one line (None: it did not)
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
            c.checks.append((bool(chk.get("passed")), str(chk.get("name"))))
            if not chk.get("passed"):
                c.messages.append(first_line(f"{chk.get('name')}: {chk.get('message')}", 400))
            c.causes += [chk["cause"]] if chk.get("cause") else []
            c.limits += [chk["limit"]] if chk.get("limit") else []
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
