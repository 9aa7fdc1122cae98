"""An unfinished exercise says so: named stubs (judge/stubs.py) and ``needs`` (attncourse/teach/progress.py).

* every stub of every release names its exercise ("Exercise 3 (scaled_dot_product_attention) is not done
  yet"), and ``NamedStubs`` reads the number and the name the way the releases show them;
* ``needs`` stops a cell, naming the exercise, while that exercise is a stub or undefined, and lets it run once
  the exercise is written — even when the student left the stub's raise below working code;
* (slow) every release run top to bottom with errors allowed shows only "not done yet" errors, besides a
  find-the-bug handout's own visible check; before, 08 showed a TypeError and KeyErrors after an unfinished
  ``train_step``.
"""
from __future__ import annotations

import re

import nbformat
import pytest

from attncourse.teach.progress import NOT_DONE, NotDoneYet, needs, stub_message, unfinished
from tests.harness import ROOT, read_nb
from tests.sections import params, with_source


def _define(code: str) -> dict:
    ns: dict = {}
    exec(compile(code, "<cell>", "exec"), ns)   # noqa: S102 - the test's own snippets
    return ns


STUB = f'def f(x):\n    """Doc."""\n    # YOUR CODE HERE\n    raise NotImplementedError("{stub_message("f", "2")}")\n'


def test_stub_message_names_number_and_name():
    assert stub_message("softmax", "1").startswith(f"Exercise 1 (softmax) {NOT_DONE}")
    assert stub_message("scores_hand").startswith(f"scores_hand {NOT_DONE}")


def test_needs_names_the_unfinished_exercise_and_lets_a_written_one_run():
    ns = _define(STUB)
    assert unfinished(ns["f"]) is not None
    with pytest.raises(NotDoneYet, match=r"needs Exercise 2 \(f\), which is not done yet"):
        needs("f", namespace=ns)
    written = _define("def f(x):\n    return x + 1\n")
    needs("f", namespace=written)                       # the honest base: nothing raised


def test_needs_lets_a_function_run_whose_stub_raise_was_left_below_code():
    """No false negative: a student who wrote the function above the stub's raise has finished it."""
    leftover = STUB.replace("    # YOUR CODE HERE\n", "    return x + 1\n")
    ns = _define(leftover)
    assert ns["f"](1) == 2 and unfinished(ns["f"]) is None
    needs("f", namespace=ns)


def test_needs_sees_a_stub_method_of_a_class_and_an_undefined_value():
    cls = _define("class Net:\n    def __init__(self):\n        self.a = 1\n\n    def forward(self, x):\n"
                  f"        raise NotImplementedError(\"{stub_message('Net', '5')}\")\n")
    with pytest.raises(NotDoneYet, match=r"Exercise 5 \(Net\)"):
        needs("Net", namespace=cls)
    with pytest.raises(NotDoneYet, match=r"`predicted_std`, which is not done yet \(the name is not defined\)"):
        needs("predicted_std", namespace={})
    needs("predicted_std", namespace={"predicted_std": 8.0})
    needs("Net", namespace=_define("class Net:\n    def forward(self, x):\n        return x\n"))


def test_needs_reads_the_calling_notebook_namespace():
    ns = _define("from attncourse.teach.progress import needs\n" + STUB + "def cell():\n    needs('f')\n")
    with pytest.raises(NotDoneYet):
        ns["cell"]()


def _exercise_headings(nb):
    """grade_id of each solution code cell -> (exercise number or None), from the nearest heading above it."""
    heading, out = None, {}
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            lines = [ln for ln in cell.source.splitlines() if ln.lstrip().startswith("#")]
            heading = lines[-1] if lines else heading
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("solution"):
            m = re.search(r"\bExercise\s+(\d+)\b", heading or "")
            out[meta["grade_id"]] = m.group(1) if m else None
    return out


@pytest.mark.parametrize("section", with_source())
def test_every_release_stub_names_its_exercise(section):
    """Each stub raises NotImplementedError with the exercise's number (from its heading) and graded name; no
    bare ``raise NotImplementedError()`` is left (its traceback names no exercise)."""
    from judge.stubs import graded_name

    source = read_nb(ROOT / "source" / section / f"{section}.ipynb")
    release = read_nb(ROOT / "release" / section / f"{section}.ipynb")
    numbers = _exercise_headings(source)
    names = {c.metadata["nbgrader"]["grade_id"]: graded_name(c.source) for c in source.cells
             if c.metadata.get("nbgrader", {}).get("solution") and c.cell_type == "code"}
    stubs = 0
    for cell in release.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        assert "raise NotImplementedError()" not in cell.source, f"{section} {gid}: a stub names no exercise"
        if gid in names and "NotImplementedError" in cell.source:
            stubs += 1
            assert names[gid], gid
            assert f'raise NotImplementedError("{stub_message(names[gid], numbers[gid])}")' in cell.source, gid
    assert stubs, f"{section}: no stub found"


def test_graded_name_reads_a_definition_or_the_assigned_name():
    from judge.stubs import graded_name

    assert graded_name("class SelfAttention(nn.Module):\n    ### BEGIN SOLUTION\n    pass\n") == "SelfAttention"
    assert graded_name("# predicted_std = your number\n### BEGIN SOLUTION\npredicted_std = 8.0\n### END SOLUTION") \
        == "predicted_std"


def _run_release(section: str):
    import os
    import shutil
    import tempfile
    from pathlib import Path

    from nbclient import NotebookClient

    os.environ.setdefault("MPLBACKEND", "Agg")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / section
        shutil.copytree(ROOT / "release" / section, work, ignore=shutil.ignore_patterns("figures"))
        nb = nbformat.read(str(work / f"{section}.ipynb"), as_version=4)
        NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=True, skip_cells_with_tag="",
                       resources={"metadata": {"path": str(work)}}).execute()
    return nb


@pytest.mark.parametrize("section", params(with_source(), quick_one=True))
def test_an_unfinished_release_says_not_done_yet_and_nothing_else(section):
    """The untouched release run top to bottom, every cell (errors allowed, training cells included): every error
    names an unfinished exercise, or is a find-the-bug handout's own visible check showing its bug."""
    from graders import available_sections, load_section

    handouts = set()
    if section in available_sections():
        spec = load_section(section)
        source = read_nb(ROOT / "source" / section / f"{section}.ipynb")
        for ex in spec.exercises:
            if ex.handout:   # the visible checks right after a handout's cell
                ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in source.cells]
                handouts.add(ids[ids.index(ex.cell) + 1])
    nb = _run_release(section)
    errors = [(c.metadata.get("nbgrader", {}).get("grade_id"), o.ename, o.evalue)
              for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert errors, "an untouched release runs without an error: its stubs do not raise"
    other = [e for e in errors if not (e[1] in ("NotImplementedError", "NotDoneYet") and NOT_DONE in e[2])
             and e[0] not in handouts]
    assert not other, f"errors that do not say which exercise is not done: {other}"
