"""The one reader of an autograded notebook: what each grade cell's outputs say.

After :class:`attncourse.judge.preprocessors.JudgeRecords`, a grade cell holds ``✓ check`` /
``✗ check`` lines with the reasons under them and, when anything failed, one error output.
:func:`grade_cells` reads that back for the instructor's per-student report
(:mod:`instructor.outcome`), the class report (:mod:`instructor.report`) and the learner's
self-check (:mod:`attncourse.selfcheck`); :func:`run_reasons` names what went wrong with the
run itself (a cell that timed out, tampering).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..protocol.calls import exercises_checked

TIMEOUT_NAMES = {"KeyboardInterrupt", "CellTimeoutError"}
TAMPERING = "TamperingSuspected"
CHECK_LINE = re.compile(r"^([✓✗]) (.+)$", re.M)
CAUSE = re.compile(r"Most likely cause:\s*(.+?)(?:\n|$)")
# a hidden check's own limits (the judge's words for them): faults, not mistakes
LIMITS = (("timed out: ", "check timed out"), ("ran out of memory", "check ran out of memory"))
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def first_line(text: str, limit: int = 240) -> str:
    """The first line of a message, without terminal colours, cut at ``limit`` characters."""
    line = _ANSI.sub("", text or "").strip().split("\n")[0]
    return line if len(line) <= limit else line[: limit - 1] + "…"


@dataclass
class GradeCell:
    """One autograded code cell that carries a grade."""

    grade_id: str
    points: float
    exercises: list = field(default_factory=list)   # the exercises its GRADER.check calls name ([] = visible checks)
    checks: list = field(default_factory=list)      # (passed, check label) per ✓/✗ line
    failure: str | None = None                      # why it scored 0, in one line (None: it did not)
    messages: list = field(default_factory=list)    # one line per failed check, error or stderr print
    causes: list = field(default_factory=list)      # the named mistakes ("Most likely cause: …")
    limits: list = field(default_factory=list)      # checks stopped by their time or memory limit
    timed_out: bool = False                         # the whole cell hit nbgrader's cell timeout

    @property
    def visible(self) -> bool:
        return not self.exercises


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
        errors, stderr = [], []
        for o in cell.get("outputs", []):
            kind = o.get("output_type")
            if kind == "stream" and o.get("name") == "stderr":
                stderr.append(_text(o.get("text")))
            elif kind == "stream":
                c.checks += [(mark == "✓", name) for mark, name in CHECK_LINE.findall(_text(o.get("text")))]
            elif kind == "error":
                errors.append(o)
        for e in errors:
            name, value = e.get("ename", "Error"), str(e.get("evalue", ""))
            if name in TIMEOUT_NAMES:
                c.timed_out = True
                c.messages.append("timed out (an infinite loop?)")
            elif name == "GradingError":   # one line per failed check of the cell
                c.messages += [first_line(ln, 400) for ln in value.split("\n") if ln.strip()]
            else:
                c.messages.append(f"{name}: {first_line(value, 400)}")
            c.causes += [m.strip().rstrip(".") for m in CAUSE.findall(value)]
            c.limits += [what for line in value.splitlines() for pattern, what in LIMITS if pattern in line]
        if stderr:
            c.messages.append("printed on stderr (a test cell must print nothing there)")
        if errors:
            e = errors[-1] if errors[-1].get("ename") == TAMPERING else errors[0]
            name, msg = e.get("ename", "Error"), first_line(str(e.get("evalue", "")))
            c.failure = msg if name == "GradingError" else (f"{name}: {msg}" if msg else name)
        elif stderr:
            c.failure = "printed on stderr: " + first_line("".join(stderr))
        c.limits = list(dict.fromkeys(c.limits))
        out.append(c)
    return out


def run_reasons(nb) -> list[str]:
    """What went wrong with the run itself: cells that timed out, tampering the judge or the guard noticed."""
    reasons = []
    for idx, cell in enumerate(_cells(nb)):
        if cell.get("cell_type") != "code":
            continue
        gid = ((cell.get("metadata") or {}).get("nbgrader") or {}).get("grade_id") or f"cell {idx + 1}"
        for o in cell.get("outputs", []):
            if o.get("output_type") == "error":
                if o.get("ename") in TIMEOUT_NAMES:
                    reasons.append(f"cell timed out ({gid})")
                elif o.get("ename") == TAMPERING:
                    reasons.append(f"tampering suspected: {gid}: {first_line(str(o.get('evalue', '')), 160)}")
            text = _text(o.get("text")) if o.get("output_type") == "stream" else str(o.get("evalue", ""))
            m = re.search(r"\(tampering suspected: ([^)]*)\)", text)
            if m:
                reasons.append(f"tampering suspected: {m.group(1)}")
    return list(dict.fromkeys(reasons))


def _cells(nb):
    return nb.get("cells", []) if isinstance(nb, dict) else nb.cells


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else (value or "")
