"""Find-the-bug exercises (``Exercise(handout=<mistake key>)``, judge/handout.py).

In a scratch copy of the course, section 03's ``causal_mask`` is turned into a find-the-bug exercise
handing out its ``inverted`` mistake, then built and graded as an instructor would:

* the release and the self-study notebook show the mistake's code (markers dropped) in the solution
  cell, and not the stub, while the source keeps the correct code;
* the untouched release earns nothing on that exercise and its feedback names the handed-out bug;
  the instructor's notebook keeps full marks;
* the build refuses, in one line, a handout that is not a mistake of the exercise, and one that passes
  a case (an unfixed handout would earn points).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.harness import ROOT, Course, cell_by_id, read_nb
from tests.sections import checks_of

SECTION = "03_masking"
pytestmark = [pytest.mark.xdist_group("handout"), pytest.mark.slow]


def _course(root, handout_line):
    root.mkdir()
    for name in ("source", "graders", "release", "notebooks"):
        shutil.copytree(ROOT / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "nbgrader_config.py", root / "nbgrader_config.py")
    spec = root / "graders" / f"s{SECTION}.py"
    text = spec.read_text()
    anchor = 'name="causal_mask", cell="causal_mask", reference=CAUSAL_REF,'
    assert anchor in text
    spec.write_text(text.replace(anchor, anchor + "\n    " + handout_line))
    return root


def _build(root, *extra):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "authoring.build", SECTION, "--root", str(root), *extra],
                          cwd=root, env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = _course(tmp_path_factory.mktemp("handout") / "course", 'handout="inverted",')
    p = _build(root, "--force")
    assert p.returncode == 0, p.stderr
    return root


def test_release_shows_the_handout_and_the_source_keeps_the_fix(built):
    src = cell_by_id(read_nb(built / "source" / SECTION / f"{SECTION}.ipynb"), "causal_mask").source
    assert "### BEGIN SOLUTION" in src and "~torch.ones" not in src
    for folder in ("release", "notebooks"):
        shown = cell_by_id(read_nb(built / folder / SECTION / f"{SECTION}.ipynb"), "causal_mask").source
        assert "~torch.ones(T, T, dtype=torch.bool, device=device).tril()" in shown, shown
        assert "BEGIN SOLUTION" not in shown and "NotImplementedError" not in shown, shown


def test_untouched_handout_earns_nothing_and_is_named(built):
    course = Course.open(built)
    source = read_nb(built / "source" / SECTION / f"{SECTION}.ipynb")
    course.submit("blank", SECTION, read_nb(built / "release" / SECTION / f"{SECTION}.ipynb"))
    course.submit("instructor", SECTION, source)
    course.autograde(SECTION)
    cells = checks_of(source, "causal_mask")
    blank, full = course.scores(SECTION, "blank"), course.scores(SECTION, "instructor")
    assert sum(full[c][1] for c in cells) > 0
    assert all(blank[c][0] == 0 for c in cells), {c: blank[c] for c in cells}
    assert all(full[c][0] == full[c][1] for c in full), full
    text = "\n".join(course.messages(SECTION, "blank")[c] for c in cells)
    assert "the mask is inverted" in text, text[-800:]


@pytest.mark.parametrize("line, words", [
    ('handout="no_such_mistake",', "is not one of its mistakes"),
    ('handout="sees_next",', "passes the case 'T1'"),   # a 1 x 1 mask is the same with one future token seen
])
def test_build_refuses_a_handout_that_cannot_be_one(tmp_path, line, words):
    root = _course(tmp_path / "course", line)
    p = _build(root)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert words in lines[0], lines[0]
