"""Name the most likely mistake behind a wrong answer, without revealing the answer.

The mechanism is data-driven and shared by every section: for each graded case
the instructor's reference data holds the correct output and the outputs that
known mistakes produce on the same hidden input (``mistakes``: key -> output),
plus one message per mistake key.  A wrong answer that matches one of those
outputs gets that mistake's message; any other wrong answer gets a generic
hint.  Adding a mistake is one entry in the instructor's catalogue
(``graders/``), never new code in a notebook.
"""
from __future__ import annotations

from . import trusted as T


def _matches(got, expected, atol, rtol) -> bool:
    """Structural closeness of an already-converted answer and a stored output."""
    tg, te = T.type_(got), T.type_(expected)
    if te is T.ndarray:
        return tg is T.ndarray and T.close(got, expected, atol, rtol)
    if te is T.list_ or te is T.tuple_:
        if (tg is not T.list_ and tg is not T.tuple_) or T.len_(got) != T.len_(expected):
            return False
        for g, e in T.zip_(got, expected):
            if not _matches(g, e, atol, rtol):
                return False
        return True
    if te is T.dict_:
        if tg is not T.dict_ or T.len_(got) != T.len_(expected):
            return False
        for k in expected:
            if k not in got or not _matches(got[k], expected[k], atol, rtol):
                return False
        return True
    if te is T.str_:
        return tg is T.str_ and got == expected
    if te is T.int_ or te is T.bool_:
        return tg is te and got == expected
    if te is T.float_:
        return tg is T.float_ and T.isfinite_(got) and T.abs_(got - expected) <= atol + rtol * T.abs_(expected)
    return False


def which_mistake(got, mistakes: dict, messages: dict, atol: float, rtol: float):
    """The message of the first catalogued mistake whose output matches ``got``, else None.

    ``got`` and every value in ``mistakes`` are plain converted answers
    (float64 ndarrays, lists, dicts, numbers, strings).
    """
    for key in mistakes:
        if _matches(got, mistakes[key], atol, rtol):
            return messages.get(key, key)
    return None
