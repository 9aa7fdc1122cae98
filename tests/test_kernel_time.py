"""One time limit per notebook on nbgrader's own path (plain ``nbgrader autograde``, formgrader's Autograde).

Six cells sleeping 25 s each took one submission's autograde from 36 s to 177 s: each cell had its own limit
(180 s), the notebook none, and the 900 s watchdog covers ``./course grade`` only. ``IsolatedExecute``'s
``notebook_timeout`` (nbgrader_config.py; 600 s) is one deadline for all of a notebook's cells.
"""
from __future__ import annotations

import nbformat
import pytest

from judge import sandbox
from judge.autograded import grade_cells
from tests.harness import CORPUS_SECTION, Course, slim

pytestmark = pytest.mark.xdist_group("sandbox")

LIMIT, SLEEPS, NAP = 12, 3, 8   # three cells sleeping 8 s each: the second is cut at 12 s, the third never runs


def _need_bwrap():
    ok, why = sandbox.bwrap_works()
    if not ok:
        pytest.skip(f"sandbox unavailable here: {why}")


@pytest.mark.slow
def test_a_notebook_stops_at_its_time_limit(tmp_path):
    """Under a 12 s limit a notebook sleeping 3 x 8 s before its checks is stopped: the cell running at 12 s is
    interrupted, no later cell runs, every check after it scores 0 as timed out; its honest twin (no naps) keeps
    full marks beside it. The pairing: with no limit, the same notebook runs every cell to full marks."""
    _need_bwrap()
    section = CORPUS_SECTION
    course = Course(tmp_path / "c", [section])
    course.generate(section)
    honest = slim(course.source_nb(section))
    course.submit("honest", section, honest)
    napper = slim(course.source_nb(section))
    for _ in range(SLEEPS):
        napper.cells.insert(1, nbformat.v4.new_code_cell(f"import time\ntime.sleep({NAP})"))
    course.submit("napper", section, napper)
    seen = {}
    for limit in (LIMIT, 0):
        course.nbgrader("autograde", section, "--create", "--force", f"--IsolatedExecute.notebook_timeout={limit}")
        seen[limit] = {s: (course.scores(section, s), course.autograded_nb(section, s)) for s in ("honest", "napper")}
    full = lambda scores: all(got == top for got, top in scores.values())  # noqa: E731
    cut_scores, cut_nb = seen[LIMIT]["napper"]
    ran = [c for c in cut_nb.cells if c.cell_type == "code" and "time.sleep" in c.source]
    stopped = [any(o.get("ename") == "NotebookTimeoutError" for o in c.get("outputs", [])) for c in ran]
    assert stopped[0] is False and stopped[-1] is True, stopped      # the last nap never ran
    cells = grade_cells(cut_nb)
    graded = [c for c in cells if c.points]
    assert graded and all(c.timed_out for c in graded), [(c.grade_id, c.failure) for c in graded]
    assert all(got == 0 for got, top in cut_scores.values() if top), cut_scores
    assert full(seen[LIMIT]["honest"][0]) and full(seen[0]["honest"][0]) and full(seen[0]["napper"][0]), seen
    nb = seen[0]["napper"][1]
    assert not any(o.get("ename") == "NotebookTimeoutError" for c in nb.cells for o in c.get("outputs", []))
