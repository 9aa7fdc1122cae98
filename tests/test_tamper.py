"""Tampering earns nothing: tests/corpus/t_*.py graded as real submissions in one nbgrader batch.

Each submission tries to trick the hidden checks of scaled_dot_product_attention
(section 02) — replaced comparisons and builtins, lying tensor subclasses and
objects, monkeypatched torch.Tensor, a rebound or faked GRADER, deleted/edited test
and setup cells, SystemExit/os._exit, fake "✓" text — and must score 0 there,
while a correct submission in the same batch keeps full marks.
"""
from __future__ import annotations

import functools

import pytest

from harness import corpus_problems, grade_corpus

pytestmark = pytest.mark.xdist_group("corpus_tamper")


@functools.lru_cache(maxsize=None)
def _batch(tmp):
    from pathlib import Path

    return grade_corpus("tamper", Path(tmp) / "tamper")


@pytest.fixture
def batch(tmp_path_factory):
    return _batch(str(tmp_path_factory.getbasetemp()))


def test_tampering_earns_nothing(batch):
    course, source, cases, report = batch
    assert len(cases) >= 10
    problems = corpus_problems(source, cases, report, course)
    assert not problems, "\n".join(problems)


def test_report_flags_tampering(batch):
    _, _, cases, report = batch
    unflagged = [n for n in cases if not any("tampering suspected" in r for r in report["students"][n]["reasons"])
                 and n not in ("t_system_exit", "t_os_exit")]
    assert not unflagged, unflagged
    assert not any("tampering" in r for r in report["students"]["correct"]["reasons"])


def test_trusted_reductions_survive_numpy_patching():
    """The grader's comparison ignores rebinding of NumPy's Python-level helpers."""
    import numpy as np

    from attncourse import trusted as T

    saved = np.count_nonzero, np.amax, np.allclose
    try:
        np.count_nonzero = lambda *a, **k: 0
        np.amax = lambda *a, **k: 0.0
        np.allclose = lambda *a, **k: True
        a = np.zeros(3)
        assert not T.close(a, a + 1, 1e-4, 1e-4)
        assert T.max_abs_diff(a, a + 1) == 1.0
    finally:
        np.count_nonzero, np.amax, np.allclose = saved
