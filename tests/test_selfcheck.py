"""The self-study edition (notebooks/) and its "check my work" cell / `./course check NN`."""
from __future__ import annotations

import pytest

from tests.harness import CORPUS_CELL, CORPUS_SECTION, ROOT, read_nb, total_points, with_cells
from tests.sections import params, with_source


def _released():
    return [s for s in with_source() if (ROOT / "release" / s / f"{s}.ipynb").is_file()]


@pytest.mark.parametrize("section", params(_released()))
def test_notebooks_in_sync_with_release(section):
    from authoring.generate import selfstudy_notebook

    path = ROOT / "notebooks" / section / f"{section}.ipynb"
    assert path.is_file(), f"notebooks/{section} missing: run ./course build {section}"
    fresh = selfstudy_notebook(read_nb(ROOT / "release" / section / f"{section}.ipynb"), section)
    assert read_nb(path) == fresh, f"notebooks/{section} is out of date: run ./course build {section}"
    assert f'check("{section}")' in read_nb(path).cells[-1].source


@pytest.mark.xdist_group("selfcheck")
@pytest.mark.slow
def test_selfcheck_grades_a_saved_copy(tmp_path, capsys):
    """A learner's saved notebook (one exercise wrong) is checked offline without leaking tests
    (its time is printed, "checked in N s", never asserted: a loaded machine is no failure; time belongs in bench/)."""
    import nbformat

    from attncourse.selfcheck import VISIBLE, check
    from tests.corpus._base import WRONG
    from authoring.generate import selfstudy_notebook

    section = CORPUS_SECTION
    source = read_nb(ROOT / "source" / section / f"{section}.ipynb")
    nb = selfstudy_notebook(with_cells(source, {CORPUS_CELL: WRONG}), section)
    # a learner's copy still holds the solutions here, but the hidden tests come only from source/
    path = tmp_path / f"{section}.ipynb"
    nbformat.write(nb, str(path))
    result = check(section, str(path))
    out = capsys.readouterr().out
    assert "save first" in out.lower()
    by_name = {e["exercise"]: e for e in result["exercises"]}
    sdpa = by_name["scaled_dot_product_attention"]
    assert sdpa["score"] < sdpa["max_score"]
    assert "Most likely cause" in out
    others = [e for n, e in by_name.items() if n not in ("scaled_dot_product_attention", VISIBLE)]
    assert others and all(e["score"] == e["max_score"] for e in others), others
    for secret in ("GRADER.check", "BEGIN HIDDEN", "BEGIN SOLUTION"):
        assert secret not in out


def test_check_cell_is_a_noop_inside_the_checker(monkeypatch, capsys):
    from attncourse.selfcheck import RUNNING_ENV, check

    monkeypatch.setenv(RUNNING_ENV, "1")
    assert check(CORPUS_SECTION) is None
    assert capsys.readouterr().out == ""


@pytest.mark.xdist_group("selfcheck")
@pytest.mark.slow
def test_selfcheck_gives_a_trick_no_marks(tmp_path):
    """The self-check grades through the same judge: a blank notebook plus a hook that claims full marks scores 0."""
    import nbformat

    from attncourse.selfcheck import run_check
    from tests.corpus import t_hook_partial_credit
    from tests.harness import slim

    section = CORPUS_SECTION
    nb = t_hook_partial_credit.build(slim(read_nb(ROOT / "release" / section / f"{section}.ipynb")))
    path = tmp_path / f"{section}.ipynb"
    nbformat.write(nb, str(path))
    result = run_check(section, path)
    assert result["max_score"] == total_points(CORPUS_SECTION) and result["score"] == 0, result
