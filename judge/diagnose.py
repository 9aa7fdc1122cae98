"""Name the most likely mistake behind a wrong answer, without revealing the answer.

The mechanism is data-driven and shared by every section: for each graded case
the instructor's reference data holds the correct output and the outputs that
known mistakes produce on the same hidden input (``mistakes``: key -> output),
plus one message per mistake key.  A wrong answer that matches one of those
outputs gets that mistake's message; any other wrong answer gets a generic
hint.  Adding a mistake is one entry in the instructor's catalogue
(``graders/``), never new code in a notebook.

Runs in the judge (:mod:`judge.verdict`), outside the student's kernel.
"""
from __future__ import annotations

import math

import numpy as np


def close(a: np.ndarray, b: np.ndarray, atol: float, rtol: float) -> bool:
    """allclose for two float64 arrays of equal shape (NaN == NaN, inf == inf of the same sign)."""
    return a.shape == b.shape and bool(np.allclose(a, b, atol=atol, rtol=rtol, equal_nan=True))


def matches(got, expected, atol, rtol) -> bool:
    """Structural closeness of an already-converted answer and a stored output."""
    if isinstance(expected, np.ndarray):
        return isinstance(got, np.ndarray) and close(got, expected, atol, rtol)
    if isinstance(expected, (list, tuple)):
        if not isinstance(got, (list, tuple)) or len(got) != len(expected):
            return False
        return all(matches(g, e, atol, rtol) for g, e in zip(got, expected))
    if isinstance(expected, dict):
        if not isinstance(got, dict) or len(got) != len(expected):
            return False
        return all(k in got and matches(got[k], expected[k], atol, rtol) for k in expected)
    if isinstance(expected, str):
        return type(got) is str and got == expected
    if type(expected) in (int, bool):
        return type(got) is type(expected) and got == expected
    if isinstance(expected, float):
        return (type(got) is float and math.isfinite(got)
                and abs(got - expected) <= atol + rtol * abs(expected))
    return False


def which_mistake_key(got, mistakes: dict, atol: float, rtol: float):
    """The key (``"exercise.mistake"``) of the first catalogued mistake whose output matches ``got``, else None.

    ``got`` and every value in ``mistakes`` are plain converted answers
    (float64 ndarrays, lists, dicts, numbers, strings).
    """
    for key in mistakes:
        if matches(got, mistakes[key], atol, rtol):
            return key
    return None

