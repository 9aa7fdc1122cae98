"""The one parser of ``GRADER.check(...)`` calls in a test cell's source.

Hidden test cells are one call per line::

    GRADER.check("softmax", "rows", softmax)
    GRADER.check("attention_maps", "short", attention_maps, model=SHIPPED.model, tokenizer=SHIPPED.tokenizer)

The autograder's judge (``judge.preprocessors``) reads the *locked* cell's
source with :func:`check_calls` to know which records must come back, and in what
order; the self-check, the instructor's report and the tests use the same parser.
Python's own parser reads the source, so comments, strings and odd spacing cannot
confuse it.
"""
from __future__ import annotations

import ast
import re

_QUICK = re.compile(r"GRADER\s*\.\s*check\s*\(")


def check_calls(source: str) -> list[tuple[str, str]]:
    """``(exercise, case)`` of every ``GRADER.check`` call in ``source``, in execution order.

    Lines that are not Python (IPython magics) are ignored; a call whose exercise or
    case is not a string literal is reported as ``("?", "?")`` so that it can never
    match a record.
    """
    if not _QUICK.search(source or ""):
        return []
    lines = [ln if not ln.lstrip().startswith(("%", "!")) else "" for ln in source.splitlines()]
    try:
        tree = ast.parse("\n".join(lines))
    except SyntaxError:
        return [("?", "?")] * len(_QUICK.findall(source))
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "check"
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "GRADER"):
            args = [a.value if isinstance(a, ast.Constant) and isinstance(a.value, str) else "?"
                    for a in node.args[:2]]
            args += ["?"] * (2 - len(args))
            found.append((node.lineno, node.col_offset, args[0], args[1]))
    return [(ex, case) for _, _, ex, case in sorted(found)]


def exercises_checked(source: str) -> list[str]:
    """The exercises a cell checks, once each, in order."""
    return list(dict.fromkeys(ex for ex, _ in check_calls(source)))


def calls_exercise(source: str, exercise: str, case: str | None = None) -> bool:
    """Whether ``source`` checks ``exercise`` (on ``case``, when given)."""
    return any(ex == exercise and (case is None or c == case) for ex, c in check_calls(source))
