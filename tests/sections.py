"""Which sections exist, and their graded exercises (shared by the test modules)."""
from __future__ import annotations


import pytest

from attncourse.course import SECTIONS
from tests.harness import ROOT


def with_source():
    return [s for s in SECTIONS if (ROOT / "source" / s / f"{s}.ipynb").is_file()]


def with_grader():
    from graders import available_sections

    return [s for s in available_sections() if (ROOT / "graders" / "data" / f"{s}.pt").is_file()]


def params(names):
    """One pytest param per section, grouped so that pytest-xdist keeps a section on one worker."""
    return [pytest.param(s, id=s, marks=pytest.mark.xdist_group(s)) for s in names]


def checks_of(nb, exercise: str) -> list[str]:
    """grade_ids of the test cells that call GRADER.check on ``exercise``."""
    from attncourse.protocol.calls import calls_exercise

    return [c.metadata["nbgrader"]["grade_id"] for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("grade") and c.cell_type == "code"
            and calls_exercise(c.source, exercise)]
