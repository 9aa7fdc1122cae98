"""Every hidden check, run in-process against the reference, the variants and the mistakes.

For each exercise of each section:
* the reference implementation and every correct variant pass every case and
  no mistake message is shown for them;
* every known mistake fails at least one case, and the failure names it.
"""
from __future__ import annotations

import pytest

from attncourse.kernel.grader import Grader, GradingError
from judge.verdict import judge_record
from tests.sections import params, with_grader


def _run_all(grader, ex, code):
    from authoring.references import define

    obj = define(ex, code)
    context = ex.context() if ex.context else {}
    failures = []
    for case in ex.cases:
        try:
            grader.check(ex.name, case.name, obj, **context)
        except GradingError as err:
            failures.append(str(err))
    return failures


@pytest.fixture(scope="module")
def root_env(monkeypatch_module=None):
    import os

    from tests.harness import ROOT

    old = os.environ.get("ATTNCOURSE_ROOT")
    os.environ["ATTNCOURSE_ROOT"] = str(ROOT)
    yield
    if old is None:
        os.environ.pop("ATTNCOURSE_ROOT", None)
    else:
        os.environ["ATTNCOURSE_ROOT"] = old


@pytest.mark.parametrize("section", params(with_grader(), quick_one=True))
def test_reference_and_variants_pass_without_a_diagnosis(section, root_env, capsys):
    from graders import load_section

    spec = load_section(section)
    grader = Grader(section, judge=judge_record)
    messages = [m.shows or m.message for ex in spec.exercises for m in ex.mistakes]
    for ex in spec.exercises:
        for label, code in [("reference", ex.reference)] + [(v.key, v.code) for v in ex.variants]:
            failures = _run_all(grader, ex, code)
            assert not failures, f"{ex.name} {label}: {failures}"
    out = capsys.readouterr().out
    shown = [m for m in messages if m in out]
    assert not shown, f"a correct answer was told about a mistake: {shown}"


@pytest.mark.parametrize("section", params(with_grader(), quick_one=True))
def test_each_mistake_fails_and_is_named(section, root_env, capsys):
    from graders import load_section

    spec = load_section(section)
    grader = Grader(section, judge=judge_record)
    problems = []
    for ex in spec.exercises:
        if len(ex.mistakes) < 3:
            problems.append(f"{ex.name}: only {len(ex.mistakes)} known mistakes (at least 3 required)")
        if not ex.variants and ex.cases[0].kind != "value":
            problems.append(f"{ex.name}: no correct variant written differently")
        for m in ex.mistakes:
            failures = _run_all(grader, ex, m.code)
            if not failures:
                problems.append(f"{ex.name}.{m.key}: passes every hidden case")
            elif not any((m.shows or m.message) in f for f in failures):
                problems.append(f"{ex.name}.{m.key}: not named; feedback was {failures}")
    capsys.readouterr()
    assert not problems, "\n".join(problems)
