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
    assert f'check_now("{section}")' in read_nb(path).cells[-2].source


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


@pytest.mark.parametrize("env", ["ATTNCOURSE_SELFCHECK_RUNNING", "NBGRADER_EXECUTION"])
def test_check_cells_are_noops_inside_the_checker(env, monkeypatch, capsys):
    """Inside a kernel nbgrader runs (the saved-file check, autograde, validate) neither check cell does anything."""
    from attncourse.selfcheck import check, check_now

    monkeypatch.setenv(env, "1")
    assert check(CORPUS_SECTION) is None
    assert check_now(CORPUS_SECTION, namespace={}) is None
    assert capsys.readouterr().out == ""


def _kernel_state(section: str) -> dict:
    """What a learner's kernel holds after running the instructor's notebook top to bottom (hidden cells and
    demonstrations left out): the solutions, the given code, GRADER."""
    from judge.preprocessors import SKIP_TAG

    ns = {"__name__": "__main__"}
    for c in read_nb(ROOT / "source" / section / f"{section}.ipynb").cells:
        if (c.cell_type != "code" or SKIP_TAG in (c.metadata.get("tags") or [])
                or "BEGIN HIDDEN TESTS" in c.source):
            continue
        exec(compile("\n".join(ln for ln in c.source.splitlines() if not ln.lstrip().startswith(("%", "!"))),
                     "<cell>", "exec"), ns)
    return ns


def test_check_now_judges_what_the_kernel_holds(monkeypatch, capsys):
    """check_now: the hidden cells run on this kernel's definitions, with the grading judge's words; a wrong
    function loses its exercise's points (and only those), a missing one says to run its cell, and the hidden
    cells leave no name behind (their time is printed by the function, never asserted)."""
    monkeypatch.chdir(ROOT / "notebooks" / CORPUS_SECTION)
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    from attncourse.selfcheck import check_now

    ns = _kernel_state(CORPUS_SECTION)
    names = set(ns)
    full = check_now(CORPUS_SECTION, namespace=ns)
    assert full["score"] == full["max_score"] == total_points(CORPUS_SECTION)
    assert set(ns) == names, "check_now left names in the learner's namespace"

    exec("def softmax(x, axis=-1):\n    e = np.exp(x)\n    return e / e.sum(axis=axis, keepdims=True)", ns)
    wrong = check_now(CORPUS_SECTION, namespace=ns)
    by_ex = {e["exercise"]: e for e in wrong["exercises"]}
    assert by_ex["softmax"]["score"] < by_ex["softmax"]["max_score"]
    assert "subtract the row maximum" in " ".join(m for c in by_ex["softmax"]["cells"] for m in c["messages"])
    assert all(e["score"] == e["max_score"] for name, e in by_ex.items() if name != "softmax")

    del ns["SelfAttention"]
    one = check_now(CORPUS_SECTION, "SelfAttention", namespace=ns)
    assert [e["exercise"] for e in one["exercises"]] == ["SelfAttention"] and one["score"] == 0
    assert "run the cell that defines it first" in one["exercises"][0]["cells"][0]["messages"][0]
    assert "BEGIN HIDDEN" not in capsys.readouterr().out


@pytest.mark.xdist_group("selfcheck")
@pytest.mark.slow
def test_selfcheck_gives_a_trick_no_marks(tmp_path):
    """The self-check grades through the same judge: a blank notebook plus a hook that claims full marks scores 0."""
    import nbformat

    from judge.selfcheck import run_check
    from tests.corpus import t_hook_partial_credit
    from tests.harness import slim

    section = CORPUS_SECTION
    nb = t_hook_partial_credit.build(slim(read_nb(ROOT / "release" / section / f"{section}.ipynb")))
    path = tmp_path / f"{section}.ipynb"
    nbformat.write(nb, str(path))
    result = run_check(section, path)
    assert result["max_score"] == total_points(CORPUS_SECTION) and result["score"] == 0, result


def test_a_broken_notebook_is_told_from_a_broken_grader(monkeypatch, capsys):
    """Whose fault a check that could not be made is: the notebook's only when nbformat cannot read the saved
    bytes; otherwise the grader's, with the line of nbgrader's log that says why (a line that merely mentions JSON
    is no verdict on the notebook). ``./course check`` exits 1 for the first, 2 for the second, 0 when checked."""
    import json

    from attncourse import selfcheck
    from judge.selfcheck import why_not_graded

    valid = json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}).encode()
    log = ("[AutogradeApp | INFO] Writing 21278 bytes to …/02_qkv_by_hand.json\n"
           "RuntimeError: Kernel died before replying to kernel_info: the grading kernel stopped (exit 71): "
           "FileNotFoundError: …/IPython/utils/themes/neutral-posix.json\n"
           "[AutogradeApp | ERROR] There was an error processing assignment\n")
    assert why_not_graded(valid, log) == (
        selfcheck.GRADER_BROKEN, "the grader is broken here, not your notebook: RuntimeError: Kernel died before "
        "replying to kernel_info: the grading kernel stopped (exit 71): FileNotFoundError: "
        "…/IPython/utils/themes/neutral-posix.json")
    whose, why = why_not_graded(b'{"cells": [', log)
    assert whose == selfcheck.NOTEBOOK_BROKEN and why.startswith("your notebook is broken"), why
    for result, code in (({"error": "x", "broken": selfcheck.NOTEBOOK_BROKEN}, 1),
                         ({"error": "x", "broken": selfcheck.GRADER_BROKEN}, 2), ({"exercises": []}, 0)):
        monkeypatch.setattr(selfcheck, "check", lambda *a, r=result: r)
        assert selfcheck.main(["02"]) == code


@pytest.mark.xdist_group("selfcheck")
@pytest.mark.slow
def test_check_says_the_grader_is_broken_when_no_kernel_starts(tmp_path):
    """A grader whose kernels cannot start (a memory limit of 1 MB; fresh sandboxes, the fork server's probe would
    take its minute): ./course check says the grader is broken, with the kernel's exit status and last words, and
    exits 2; a notebook that is not JSON exits 1, as the notebook's fault."""
    import subprocess
    import sys

    from tests.harness import course_env

    section = CORPUS_SECTION
    good = tmp_path / f"{section}.ipynb"
    good.write_bytes((ROOT / "source" / section / f"{section}.ipynb").read_bytes())
    broken = tmp_path / "broken.ipynb"
    broken.write_text('{"cells": [')
    run = lambda path, env: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "attncourse.selfcheck", section, str(path)], cwd=ROOT, capture_output=True, text=True,
        timeout=900, env=course_env(env))
    p = run(good, {"ATTNCOURSE_KERNEL_MEM_MB": "1", "ATTNCOURSE_FORKSERVER": "0"})
    assert p.returncode == 2, (p.stdout, p.stderr[-2000:])
    line = p.stdout.strip().splitlines()[-1]
    assert "could not be checked: the grader is broken here, not your notebook" in line and "exit" in line, line
    p = run(broken, {})
    assert p.returncode == 1 and "your notebook is broken" in p.stdout, (p.stdout, p.stderr[-2000:])
