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


# The one section ./course test --quick takes end to end (graded by nbgrader, its reference data rebuilt).
QUICK_SECTION = "02_qkv_by_hand"


def params(names, quick_one=False):
    """One pytest param per section, grouped so that pytest-xdist keeps a section on one worker.

    ``quick_one``: every section but :data:`QUICK_SECTION` is marked ``slow`` (left out of ./course test --quick).
    A section that needs a package missing here (:func:`attncourse.course.missing_requirement`) skips, saying why."""
    from attncourse.course import missing_requirement

    return [pytest.param(s, id=s, marks=[pytest.mark.xdist_group(s)]
                         + ([pytest.mark.slow] if quick_one and s != QUICK_SECTION else [])
                         + ([pytest.mark.skip(reason=why)] if (why := missing_requirement(s)) else [])) for s in names]


def checks_of(nb, exercise: str) -> list[str]:
    """grade_ids of the test cells that call GRADER.check on ``exercise``."""
    from attncourse.protocol.calls import calls_exercise

    return [c.metadata["nbgrader"]["grade_id"] for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("grade") and c.cell_type == "code"
            and calls_exercise(c.source, exercise)]
