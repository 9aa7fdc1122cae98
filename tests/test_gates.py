"""nbgrader's full loop for every section, as an instructor runs it.

For each section, in a throw-away copy of the course: generate the release,
then autograde in one batch
* the instructor's source notebook (solutions in place): full marks;
* the untouched release: zero on every autograded cell, and no crash;
* mistake round k: every exercise's k-th known-wrong implementation injected
  into its solution cell: the exercise's checks lose marks and the feedback
  names the mistake, while the other exercises keep full marks; each cell
  scores exactly the points of its checks that pass (credit per check, the
  judge's verdicts in-process), never less;
* variant round k: every exercise's k-th correct alternative: full marks;
* shortcut round k: every exercise's k-th shortcut (a correct answer computed
  the way its rules refuse: a library one-liner, the whole at once) loses
  exactly the points of the cases its rules refuse, and the feedback names
  the rule.
"""
from __future__ import annotations

import functools
import json
import os
import re
from pathlib import Path

import nbformat
import pytest

from authoring.run_all import run_all
from judge.preprocessors import SKIP_TAG
from tests.harness import ROOT, Course, cell_text, expected_cell_scores, read_nb, with_cells
from tests.sections import checks_of, params, with_source


def _shared_folder(tmp_root: str) -> Path:
    """A folder every pytest-xdist worker of this run shares (the session's temp folder), or this run's own."""
    base = Path(tmp_root)
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "gates"


class GradingFailed(RuntimeError):
    """The section's grading failed in an earlier test of this run (its error, once)."""


@functools.lru_cache(maxsize=None)
def graded(section: str, tmp_root: str):
    """The section graded once per test run: the first worker to ask grades it, under a lock; any other
    worker that asks (xdist does not always keep a section's tests on one worker) reads the same results."""
    import fcntl

    from graders import available_sections, load_section

    folder = _shared_folder(tmp_root)
    folder.mkdir(parents=True, exist_ok=True)
    root, done = folder / section, folder / f"{section}.results.json"
    failed = folder / f"{section}.failed.txt"   # grading failed once: every later test says so, none regrades
    spec = load_section(section) if section in available_sections() else None
    with open(folder / f"{section}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if failed.is_file():
            raise GradingFailed(f"grading {section} failed earlier in this run (not tried again): {failed.read_text()}")
        if not done.is_file():
            try:
                _grade(section, spec, root, folder)
            except BaseException as exc:   # pytest.fail and timeouts too: the next test says so instead of regrading
                failed.write_text(f"{type(exc).__name__}: {exc}"[-4000:])
                raise
    course = Course.open(root)     # every worker reads the same: the course folder and the results file
    source = course.source_nb(section)
    _, rounds = _submissions(spec, source, course.release_nb(section))
    results = {s: (scores, messages) for s, (scores, messages) in json.loads(done.read_text()).items()}
    return course, spec, source, rounds, results


def _grade(section: str, spec, root: Path, folder: Path) -> None:
    """Grade the section's batch once: results in ``folder/NN.results.json`` (and the run-all notebook)."""
    course = Course(root, [section])
    course.generate(section)
    subs, rounds = _submissions(spec, course.source_nb(section), course.release_nb(section))
    for student, nb in subs.items():
        course.submit(student, section, nb)
    course.autograde(section)
    results = {s: (course.scores(section, s), course.messages(section, s)) for s in subs}
    _write_score_table(section, rounds, results)
    if skipped_when_grading(course.source_nb(section)):   # the prose quotes what those cells print
        nbformat.write(run_all(section, course.root)[0], str(folder / f"{section}.run_all.ipynb"))
    (folder / f"{section}.results.json").write_text(json.dumps(results))


def skipped_when_grading(nb) -> list[int]:
    """Indexes of the cells grading skips (tagged :data:`judge.preprocessors.SKIP_TAG`)."""
    return [i for i, c in enumerate(nb.cells) if SKIP_TAG in (c.metadata.get("tags") or [])]


def run_all_nb(section: str, tmp_root: str):
    """The instructor's notebook with the outputs of every cell: its autograded copy, or where grading skips
    cells, the same notebook run top to bottom (authoring/run_all.py) beside the batch."""
    course, *_ = graded(section, tmp_root)
    path = _shared_folder(tmp_root) / f"{section}.run_all.ipynb"
    return read_nb(path) if path.is_file() else course.autograded_nb(section, "instructor")


def _submissions(spec, source, release):
    """Who is graded: the instructor, the blank release, one round per k-th mistake and per k-th variant."""
    subs = {"instructor": source, "blank": release}
    rounds = {}
    if spec is not None:
        # Rounds start from the instructor's notebook, so an exercise that has no k-th
        # mistake (or variant) keeps its correct solution in round k.
        for k in range(max([len(e.mistakes) for e in spec.exercises] + [0])):
            injected = {e.name: e.mistakes[k] for e in spec.exercises if len(e.mistakes) > k}
            subs[f"mistake{k}"] = with_cells(source, {spec.exercise(n).cell: m.code for n, m in injected.items()})
            rounds[f"mistake{k}"] = injected
        for k in range(max([len(e.variants) for e in spec.exercises] + [0])):
            injected = {e.name: e.variants[k] for e in spec.exercises if len(e.variants) > k}
            subs[f"variant{k}"] = with_cells(source, {spec.exercise(n).cell: v.code for n, v in injected.items()})
            rounds[f"variant{k}"] = injected
        for k in range(max([len(e.shortcuts) for e in spec.exercises] + [0])):
            injected = {e.name: e.shortcuts[k] for e in spec.exercises if len(e.shortcuts) > k}
            subs[f"shortcut{k}"] = with_cells(source, {spec.exercise(n).cell: c.code for n, c in injected.items()})
            rounds[f"shortcut{k}"] = injected
    return subs, rounds


def _write_score_table(section, rounds, results):
    """With ATTNCOURSE_SCORE_DIR set, save each submission's total and per-cell scores (for release notes)."""
    out_dir = os.environ.get("ATTNCOURSE_SCORE_DIR")
    if not out_dir:
        return
    table = {}
    for student, (scores, _) in results.items():
        injected = rounds.get(student, {})
        table[student] = {
            "total": sum(v[0] for v in scores.values()), "max": sum(v[1] for v in scores.values()),
            "injected": {name: getattr(item, "key", "") for name, item in injected.items()},
            "cells": {k: list(v) for k, v in scores.items()},
        }
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    (Path(out_dir) / f"{section}.json").write_text(json.dumps(table, indent=1))


@pytest.fixture
def tmp_root(tmp_path_factory):
    return str(tmp_path_factory.getbasetemp())


@pytest.mark.parametrize("section", params(with_source(), quick_one=True))
def test_release_in_sync(section, tmp_root):
    course, *_ = graded(section, tmp_root)
    fresh = read_nb(course.root / "release" / section / f"{section}.ipynb")
    committed_path = ROOT / "release" / section / f"{section}.ipynb"
    assert committed_path.is_file(), f"release/{section} missing: run ./course build {section}"
    assert fresh == read_nb(committed_path), f"release/{section} is out of date with source/: run ./course build {section}"


@pytest.mark.parametrize("section", params(with_source(), quick_one=True))
def test_instructor_full_marks(section, tmp_root):
    _, _, _, _, results = graded(section, tmp_root)
    scores, messages = results["instructor"]
    assert scores, "no autograded cells"
    lost = {k: v for k, v in scores.items() if v[0] != v[1]}
    assert not lost, {k: messages[k][-600:] for k in lost}


@pytest.mark.parametrize("section", params(with_source(), quick_one=True))
def test_blank_release_scores_zero(section, tmp_root):
    _, _, _, _, results = graded(section, tmp_root)
    scores, _ = results["blank"]
    earned = {k: v for k, v in scores.items() if v[0] != 0}
    assert not earned, f"cells that give points to an untouched release: {earned}"
    # A find-the-bug exercise hands out one of its mistakes: the untouched release's feedback names it.
    _, spec, source, _, _ = graded(section, tmp_root)
    for ex in (spec.exercises if spec else []):
        if ex.handout:
            m = [m for m in ex.mistakes if m.key == ex.handout][0]
            text = "\n".join(results["blank"][1][c] for c in checks_of(source, ex.name))
            assert _says(text, m.shows or m.message), f"{ex.name}: the blank handout's feedback does not name it"


@pytest.mark.parametrize("section", params(with_source(), quick_one=True))
def test_known_mistakes_lose_marks_and_are_named(section, tmp_root):
    _, spec, source, rounds, results = graded(section, tmp_root)
    if spec is None:
        pytest.skip("section has no grader module yet")
    problems = []
    for student, injected in rounds.items():
        if not student.startswith("mistake"):
            continue
        scores, messages = results[student]
        for ex in spec.exercises:
            cells = checks_of(source, ex.name)
            assert cells, f"{ex.name}: no test cell calls GRADER.check on it"
            got = sum(scores[c][0] for c in cells)
            full = sum(scores[c][1] for c in cells)
            if ex.name in injected:
                m = injected[ex.name]
                if got >= full:
                    problems.append(f"{student} {ex.name}.{m.key}: kept full marks {got}/{full}")
                text = "\n".join(messages[c] for c in cells)
                if not _says(text, m.shows or m.message):
                    problems.append(f"{student} {ex.name}.{m.key}: feedback does not name it:\n{text[-800:]}")
                problems += _partial_credit_problems(section, source, ex, m.code, scores, f"{student} {ex.name}.{m.key}")
            elif got != full:
                problems.append(f"{student} {ex.name}: lost marks though only other exercises were wrong "
                                f"({got}/{full}): checks are not independent")
    assert not problems, "\n".join(problems)


def _says(text: str, words: str) -> bool:
    """Whether feedback ``text`` says ``words`` (the verdict lines wrap long messages: spacing is not compared)."""
    return " ".join(words.split()) in " ".join(text.split())


def _partial_credit_problems(section, source, ex, code, scores, who) -> list[str]:
    """Each of the exercise's cells scores exactly the points of its checks that the judge passes (judged
    in-process on the same hidden cases): a mistake loses what it breaks, not the cell."""
    expected = expected_cell_scores(section, source, ex, code)
    return [f"{who}: {gid} scored {scores[gid][0]:g} / {scores[gid][1]:g}, its passing checks are worth {want:g}"
            for gid, want in expected.items() if abs(scores[gid][0] - want) > 1e-6]


@pytest.mark.parametrize("section", params(with_source(), quick_one=True))
def test_shortcuts_lose_exactly_the_refused_points(section, tmp_root):
    """A correct answer computed the way its exercise's rules refuse (a library one-liner, the whole row at once,
    a (T, T) tensor) loses the points of every case its rules can tell apart, names the rule there, and keeps
    the points of the cases it declares kept; the other exercises keep full marks."""
    _, spec, source, rounds, results = graded(section, tmp_root)
    if spec is None or not any(e.shortcuts for e in spec.exercises):
        pytest.skip("no exercise of this section has rules on how its answer is computed")
    problems = []
    for student, injected in rounds.items():
        if not student.startswith("shortcut"):
            continue
        scores, messages = results[student]
        for ex in spec.exercises:
            cells = checks_of(source, ex.name)
            got, full = sum(scores[c][0] for c in cells), sum(scores[c][1] for c in cells)
            if ex.name not in injected:
                if got != full:
                    problems.append(f"{student} {ex.name}: lost marks though only other exercises took a shortcut")
                continue
            cut = injected[ex.name]
            kept = sum(c.points for c in ex.cases if c.name in cut.keeps)
            if abs(got - kept) > 1e-6:
                problems.append(f"{student} {ex.name}.{cut.key}: scored {got:g} / {full:g}, expected {kept:g} (the "
                                f"points of {list(cut.keeps) or 'no case'})")
            text = "\n".join(messages[c] for c in cells)
            shows = cut.shows or "The answer is right but"
            if not _says(text, shows):
                problems.append(f"{student} {ex.name}.{cut.key}: feedback does not name the rule:\n{text[-600:]}")
            problems += _partial_credit_problems(section, source, ex, cut.code, scores, f"{student} {ex.name}.{cut.key}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("section", params(with_source(), quick_one=True))
def test_correct_variants_full_marks(section, tmp_root):
    _, spec, _, rounds, results = graded(section, tmp_root)
    if spec is None:
        pytest.skip("section has no grader module yet")
    for student in (s for s in rounds if s.startswith("variant")):
        scores, messages = results[student]
        lost = {k: v for k, v in scores.items() if v[0] != v[1]}
        assert not lost, {k: messages[k][-600:] for k in lost}


@pytest.mark.parametrize("section", params(with_source(), quick_one=True))
def test_grading_skips_only_demonstrations(section, tmp_root):
    """Cells tagged ``skip-when-grading`` are not run when grading and say so; every other cell runs without
    an error (none needs a skipped one), and run top to bottom every cell does (authoring/run_all.py)."""
    from judge.preprocessors import NOT_RUN

    course, _, source, _, _ = graded(section, tmp_root)
    skipped = skipped_when_grading(source)
    graded_nb = course.autograded_nb(section, "instructor")
    for i, cell in enumerate(graded_nb.cells):
        if cell.cell_type != "code":
            continue
        text = cell_text(cell)
        if i in skipped:
            assert text.strip() == NOT_RUN.strip(), f"cell {i} is tagged {SKIP_TAG} but ran when grading: {text[:200]}"
            assert not (cell.metadata.get("nbgrader") or {}), f"cell {i}: an nbgrader cell cannot be skipped"
        else:
            errors = [o for o in cell.outputs if o.output_type == "error"]
            assert not errors, f"cell {i} failed when grading (does it need a skipped cell?): {errors[0].get('ename')}"
    full = run_all_nb(section, tmp_root)
    errors = [(i, o.get("ename")) for i, c in enumerate(full.cells) if c.cell_type == "code"
              for o in c.outputs if o.output_type == "error"]
    assert not errors, f"run top to bottom, cells failed: {errors}"


_DECIMAL = re.compile(r"(?<![\w.])-?\d+\.\d+(?![\w.])")


def _strip_math_and_code(text: str) -> str:
    text = re.sub(r"```.*?```", " ", text, flags=re.S)
    text = re.sub(r"`[^`]*`", " ", text)
    text = re.sub(r"\$\$.*?\$\$", " ", text, flags=re.S)
    return re.sub(r"\$[^$]*\$", " ", text)


@pytest.mark.parametrize("section", params(with_source(), quick_one=True))
def test_prose_numbers_are_printed_by_code(section, tmp_root):
    """Every decimal number in the prose appears (to its printed precision) in some code output."""
    nb = run_all_nb(section, tmp_root)
    printed = []
    for cell in nb.cells:
        if cell.cell_type == "code":
            printed += [float(x) for x in _DECIMAL.findall(cell_text(cell).replace("−", "-"))]
    missing = []
    # the prose as the author wrote it (the autograded copy holds some markdown cells as their sanitized rendering)
    for cell in read_nb(ROOT / "source" / section / f"{section}.ipynb").cells:
        if cell.cell_type != "markdown":
            continue
        for token in _DECIMAL.findall(_strip_math_and_code(cell.source).replace("−", "-")):
            value, places = float(token), len(token.split(".")[1])
            if not any(abs(p - value) <= 0.5 * 10 ** -places + 1e-12 for p in printed):
                missing.append(token)
    assert not missing, f"numbers in the prose that no code cell prints: {sorted(set(missing))}"


@pytest.mark.parametrize("section", params(with_source(), quick_one=True))
def test_class_report_counts_every_student_and_names_each_cause_once(section, tmp_root):
    """The class report of the graded rounds (instructor, blank, mistakes, variants, shortcuts): every hidden
    check's pass rate counts every graded student (the same students as the per-exercise chart); the blank
    release is named under no mistake (its find-the-bug handouts are untouched); a cause is one row, whichever
    exercise made it (02's √d_k: the PyTorch exercises' no_scale and the hand-computed not_scaled)."""
    from instructor.report import collect

    course, spec, _, _, results = graded(section, tmp_root)
    data = collect(course.root, section)
    graded_students = [s for s, e in data["report"]["students"].items() if e.get("cells")]
    assert sorted(graded_students) == sorted(results), data["report"]["students"].keys()
    assert {c["graded"] for c in data["checks"].values()} == {len(results)}, data["checks"]
    named = [s for row in data["mistakes"].values() for s in row["students"]]
    assert "blank" not in named and "instructor" not in named and not any(s.startswith("variant") for s in named)
    causes = {m.cause or m.key for ex in (spec.exercises if spec else []) for m in ex.mistakes}
    assert set(data["mistakes"]) - causes <= {"fixed_device", "fixed_dtype"} | {
        k for k in data["mistakes"] if k.startswith("how.")}, set(data["mistakes"]) - causes
    if section == "02_qkv_by_hand":
        assert "not_scaled" not in data["mistakes"] and "no_scale" in data["mistakes"]


@pytest.mark.unit
def test_a_failed_grading_is_reported_again_not_redone(tmp_path, monkeypatch):
    """A section whose grading failed is not graded again by each of its tests: the later ones get the first error.
    (The pairing: the first call does grade, and fails with the grading's own error.)"""
    calls = []

    def broken(section, *_a):
        calls.append(section)
        raise RuntimeError("nbgrader autograde exited 1")

    monkeypatch.setitem(globals(), "_grade", broken)
    section = with_source()[0]
    with pytest.raises(RuntimeError, match="exited 1"):
        graded(section, str(tmp_path / "run"))   # (its "gates" folder is inside tmp_path, with or without xdist)
    for _ in range(2):
        with pytest.raises(GradingFailed, match="failed earlier in this run.*exited 1"):
            graded(section, str(tmp_path / "run"))   # (its "gates" folder is inside tmp_path, with or without xdist)
    assert calls == [section]
