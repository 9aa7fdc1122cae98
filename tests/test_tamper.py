"""Tampering earns nothing: tests/corpus/t_*.py graded as real submissions in one nbgrader batch.

Each submission tries to trick the hidden checks of scaled_dot_product_attention
(section 02) — replaced comparisons and builtins, lying tensor subclasses and
objects, monkeypatched torch.Tensor, a rebound or faked GRADER, deleted/edited test
and setup cells, SystemExit/os._exit, fake "✓" text, expected outputs taken from the
grader's memory, stack frames or files, a patched grader instance or in-kernel judge,
forged records, a hand value copied from the grader — and must score 0 there, while a
correct submission in the same batch keeps full marks.  Each trick is also paired with
its honest base (the same code without the trick): the trick adds zero marks, cell by cell.
"""
from __future__ import annotations

import functools

import pytest

from harness import base_student, corpus_problems, grade_corpus, pairing_problems

pytestmark = pytest.mark.xdist_group("corpus_tamper")


@functools.lru_cache(maxsize=None)
def _batch(tmp):
    from pathlib import Path

    return grade_corpus("tamper", Path(tmp) / "tamper")


@pytest.fixture
def batch(tmp_path_factory):
    return _batch(str(tmp_path_factory.getbasetemp()))


def _judged(batch):
    """The tricks this run can prove: those that need the sandbox only when kernels ran sandboxed."""
    _, _, cases, report = batch
    return {n: m for n, m in cases.items() if report["sandboxed"] or not getattr(m, "NEEDS_SANDBOX", False)}


def test_tampering_earns_nothing(batch):
    course, source, cases, report = batch
    assert len(cases) >= 18
    problems = corpus_problems(source, _judged(batch), report, course)
    assert not problems, "\n".join(problems)


def test_each_trick_adds_zero_marks_to_its_honest_base(batch):
    """Paired: the same code without the trick scores at least as much, cell by cell."""
    _, _, cases, report = batch
    judged = _judged(batch)
    problems = pairing_problems(judged, report)
    assert not problems, "\n".join(problems)
    # the pairing can fail: a base that is graded and earns something somewhere
    bases = {base_student(m) for m in judged.values()}
    assert all(report["students"][b]["cells"] for b in bases), bases


def test_reading_the_reference_from_disk_needs_the_sandbox(batch):
    """Kernels run sandboxed wherever bwrap works, and then the reference file is out of reach."""
    _, _, cases, report = batch
    if not report["sandboxed"]:
        pytest.skip(f"not provable here: {report['sandbox']}")
    assert "t_disk_reference" in _judged(batch)


def test_report_flags_tampering(batch):
    _, _, cases, report = batch
    unflagged = [n for n in cases if not any("tampering suspected" in r for r in report["students"][n]["reasons"])
                 and n not in ("t_system_exit", "t_os_exit")]
    assert not unflagged, unflagged
    assert not any("tampering" in r for r in report["students"]["correct"]["reasons"])
