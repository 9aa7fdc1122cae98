"""Faults and bad input: tests/corpus/f_*.py graded in one batch with `./course grade`'s code.

An infinite loop, a memory hog, a kernel that dies, a notebook that is not JSON, a
renamed notebook, warnings, a flood of output, and the plain mistakes (wrong
shape, NaN, dtype, type, an exception, a fixed device): each gets its expected
score and a clear reason in the instructor's report, and a correct submission in
the same batch keeps full marks.  The feedback HTML shows the message and no
reference values.
"""
from __future__ import annotations

import functools
import re

import pytest

from tests.harness import CORPUS_SECTION, corpus_problems, grade_corpus

pytestmark = pytest.mark.xdist_group("corpus_faults")


@functools.lru_cache(maxsize=None)
def _batch(tmp):
    from pathlib import Path

    # f_infinite_loop needs nbgrader's cell limit to fire before the grader's per-check alarm
    return grade_corpus("faults", Path(tmp) / "faults", timeout=30, check_timeout=120)


@pytest.fixture
def batch(tmp_path_factory):
    return _batch(str(tmp_path_factory.getbasetemp()))


@pytest.mark.slow
def test_faults_are_contained(batch):
    course, source, cases, report = batch
    problems = corpus_problems(source, cases, report, course)
    assert not problems, "\n".join(problems)


@pytest.mark.slow
def test_report_prints_every_student(batch):
    from instructor.outcome import format_report

    _, _, cases, report = batch
    text = format_report(report)
    for name in list(cases) + ["correct"]:
        assert re.search(rf"^{name}\s", text, re.M), name


@pytest.mark.slow
def test_feedback_html_names_the_mistake_without_reference_values(batch):
    import torch

    course, _, _, _ = batch
    section = CORPUS_SECTION
    course.nbgrader("generate_feedback", section, "--student=f_wrong_shape", "--force")
    html = (course.root / "feedback" / "f_wrong_shape" / section / f"{section}.html").read_text()
    assert "has shape" in html
    data = torch.load(course.root / "graders" / "data" / f"{section}.pt", weights_only=True)
    leaked = []
    for key, case in data["cases"].items():
        if not key.startswith("scaled_dot_product_attention:"):
            continue
        for part in case.get("expected", ()) if isinstance(case.get("expected"), tuple) else [case.get("expected")]:
            if isinstance(part, torch.Tensor) and part.is_floating_point():
                for v in part.flatten()[:6].tolist():
                    if abs(v) > 1e-3 and f"{v:.4f}" in html:
                        leaked.append((key, v))
    assert not leaked, leaked


def test_check_time_limit_in_process(monkeypatch):
    """The kernel-side runner stops a looping call itself (ATTNCOURSE_CHECK_TIMEOUT); the judge says so."""
    from attncourse.kernel import grader as grading
    from judge.verdict import explain_exception

    monkeypatch.setenv("ATTNCOURSE_CHECK_TIMEOUT", "0.5")

    def loop():
        while True:
            pass

    got, exc = grading.call_guarded(loop)
    assert got is None and "more than 0.5 s" in str(exc)
    assert "timed out" in explain_exception(grading.error_facts(exc)["error"], None)


def test_grade_command_survives_an_empty_section(tmp_path):
    from instructor.engine import grade_section as grade

    report = grade(CORPUS_SECTION, tmp_path, log=lambda *a: None)
    assert report["students"] == {}
