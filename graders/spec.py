"""Instructor-side description of every graded check: inputs, reference, known mistakes.

Each section module (``graders/s02_qkv_by_hand.py`` ...) defines ``SECTION``, a
:class:`Section`.  From it

* ``python -m graders.build`` writes ``graders/data/<section>.pt``: hidden
  inputs (all that the grading kernel ever sees), reference outputs and every
  known mistake's output on the same inputs, which the judge
  (:mod:`attncourse.judge`) compares with the kernel's records outside the kernel;
* the test suite injects each :class:`Mistake`'s code into the student's
  solution cell, autogrades with nbgrader and proves it loses marks with its
  own message, and injects each correct :class:`Variant` and proves it earns
  full marks.

A mistake is written the way a student would write it: a complete solution
cell that defines the contract name(s), with one thing wrong.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

PRELUDE = (
    "import math\n"
    "import numpy as np\n"
    "import torch\n"
    "import torch.nn as nn\n"
    "import torch.nn.functional as F\n"
)


def patch(reference: str, *pairs: str) -> str:
    """``reference`` with each ``old`` replaced by ``new`` (``patch(ref, old, new, old2, new2, ...)``).

    The one way every section writes a known mistake or a variant from its reference code: each
    ``old`` must occur in the code as patched so far, so a mistake can never silently equal the
    reference after the reference is edited.
    """
    if len(pairs) % 2:
        raise ValueError("patch(reference, old, new, ...) takes (old, new) pairs")
    code = reference
    for old, new in zip(pairs[::2], pairs[1::2]):
        if old not in code:
            raise ValueError(f"patch: {old!r} does not occur in the code")
        code = code.replace(old, new)
    return code


@dataclass
class Mistake:
    """A known-wrong implementation: ``code`` defines the contract name(s) with one bug."""

    key: str
    message: str
    code: str
    # Text that must appear in the feedback for this mistake (default: ``message``);
    # e.g. a fixed-device bug is reported by the meta-device check's own words.
    shows: str | None = None


@dataclass
class Variant:
    """A correct implementation written differently from the reference."""

    key: str
    code: str


@dataclass
class Case:
    """One hidden check of an exercise.

    kind: ``call`` (a function), ``module`` (an nn.Module class built with
    ``init`` and loaded with ``params``), ``value`` (a hand-computed answer
    compared with ``expected``) or ``raises`` (a call that must raise one of
    ``raises``).
    A ``value`` case compares the student's variable with the value that the
    exercise's ``reference`` code assigns (and each mistake's code assigns).
    ``args``/``kwargs``/``params`` values may be callables taking a seeded
    ``torch.Generator`` (evaluated once, at build time, stored as float64).
    """

    name: str
    what: str
    kind: str = "call"
    args: Any = ()
    kwargs: dict = field(default_factory=dict)
    init: dict = field(default_factory=dict)
    params: Any = None
    dtype: str = "float32"
    device: str = "cpu"
    api: str = "torch"
    labels: list | None = None
    atol: float | None = None
    rtol: float | None = None
    expected: Any = None
    mistake_values: dict = field(default_factory=dict)  # value kind: key -> (message, wrong value)
    raises: list | None = None
    cast: bool = True
    hint: str | None = None
    seed: int = 0


@dataclass
class Exercise:
    """A graded name (function, module or hand-computed value) and its hidden cases.

    ``cell`` is the grade_id of the solution cell that defines ``name``;
    ``reference`` is code defining ``name`` (instructor only); ``given`` is
    code the notebook provides before the solution cell (run before any
    reference, mistake or variant).
    """

    name: str
    cell: str
    cases: list
    reference: str | None = None
    mistakes: list = field(default_factory=list)
    variants: list = field(default_factory=list)
    given: str = ""
    context: Callable[[], dict] | None = None
    # Name of a function in ``given`` that the hidden cells wrap the answer in,
    # ``GRADER.check(ex, case, wrap(answer))``: the build and the tests grade ``wrap(answer)`` too.
    # For answers that a single call on stored inputs cannot show (a training step's effect on a
    # fresh model over several steps, sampling with a seeded generator).
    wrap: str | None = None


@dataclass
class Section:
    name: str
    exercises: list

    def exercise(self, name: str) -> Exercise:
        for ex in self.exercises:
            if ex.name == name:
                return ex
        raise KeyError(name)
