"""An unfinished exercise says so once, in plain words, instead of a cascade of unrelated errors.

The student's copy of a solution cell holds a stub that raises ``NotImplementedError`` with
:func:`stub_message` (written by :class:`judge.stubs.NamedStubs` when the release is generated), e.g.
``Exercise 3 (scaled_dot_product_attention) is not done yet: ...``.  A demonstration or visible-check cell
that uses an exercise's result, directly or through what an earlier cell computed from it, starts with
``needs("scaled_dot_product_attention")``: while that exercise is a stub (or its name is not defined, as
after a value cell whose stub raised) the cell stops there with :class:`NotDoneYet`, naming the exercise,
instead of failing later with a ``NameError``, ``KeyError`` or ``TypeError`` about something else.
Once the exercise is written, ``needs`` does nothing.

Plain Python (no torch): the nbgrader process imports :func:`stub_message` when it generates a release.
"""
from __future__ import annotations

import ast
import inspect
import re
import sys
import textwrap

NOT_DONE = "is not done yet"
_LABEL = re.compile(r"^(?P<label>.+?) " + re.escape(NOT_DONE))


def stub_message(name: str | None, number: str | None = None) -> str:
    """The words of an unfinished exercise's stub: ``Exercise N (name) is not done yet: ...``."""
    if number and name:
        label = f"Exercise {number} ({name})"
    elif number:
        label = f"Exercise {number}"
    else:
        label = name or "This exercise"
    return f"{label} {NOT_DONE}: replace this line with your code"


class NotDoneYet(NotImplementedError):
    """A cell needs an exercise that is not done yet (raised by :func:`needs`)."""


def _raises_stub(body) -> str | None:
    """The stub message if ``body`` (a function's statements, docstring aside) is only the stub's raise."""
    stmts = [s for s in body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)
                                     and isinstance(s.value.value, str))]
    if len(stmts) != 1 or not isinstance(stmts[0], ast.Raise) or stmts[0].exc is None:
        return None
    for node in ast.walk(stmts[0].exc):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and NOT_DONE in node.value:
            return node.value
    return None


def _stub_of_function(fn) -> str | None:
    """The stub message if ``fn`` does nothing but raise a stub (read from its source; its constants if the
    source cannot be read).  A function with code of its own is not a stub, even with the raise left after it."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    consts = [c for c in code.co_consts if isinstance(c, str) and NOT_DONE in c]
    if not consts:
        return None
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return consts[0]
    node = tree.body[0] if tree.body else None
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return _raises_stub(node.body)
    return consts[0]


def unfinished(obj) -> str | None:
    """The stub message of an unfinished exercise's function or class (any method still a stub), else None."""
    if inspect.isclass(obj):
        for value in vars(obj).values():
            found = _stub_of_function(getattr(value, "__func__", value))
            if found:
                return found
        return None
    return _stub_of_function(obj) if callable(obj) else None


def _label(message: str) -> str:
    m = _LABEL.match(message)
    return m.group("label") if m else message


def needs(*names: str, namespace: dict | None = None) -> None:
    """Stop this cell, naming the exercise, if an exercise it uses is not done yet.

    ``names`` are the exercises' graded names (a function, a class or a value the student sets); each must be
    defined and not a stub.  ``namespace``: where to look (default: the calling notebook's globals).
    """
    ns = sys._getframe(1).f_globals if namespace is None else namespace
    for name in names:
        if name not in ns:
            raise NotDoneYet(f"this cell needs `{name}`, which {NOT_DONE} (the name is not defined): finish its "
                             "exercise above and run its cell, then run this cell again") from None
        message = unfinished(ns[name])
        if message:
            raise NotDoneYet(f"this cell needs {_label(message)}, which {NOT_DONE}: finish it and run its cell, "
                             "then run this cell again") from None
