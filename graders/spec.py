"""Instructor-side description of every graded check: inputs, reference, known mistakes.

Each section module (``graders/s02_qkv_by_hand.py`` ...) defines ``SECTION``, a
:class:`Section`.  From it

* ``python -m authoring.references`` writes ``graders/data/<section>.pt``: hidden
  inputs (all that the grading kernel ever sees), reference outputs and every
  known mistake's output on the same inputs, which the judge
  (:mod:`judge.verdict`) compares with the kernel's records outside the kernel;
* the test suite injects each :class:`Mistake`'s code into the student's
  solution cell, autogrades with nbgrader and proves it loses marks with its
  own message, and injects each correct :class:`Variant` and proves it earns
  full marks.

A mistake is written the way a student would write it: a complete solution
cell that defines the contract name(s), with one thing wrong.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from functools import lru_cache
from pathlib import Path
from typing import Callable

from attncourse.protocol.cases import StoredCase

COURSE = Path(__file__).resolve().parents[1]   # the course folder this graders/ belongs to

PRELUDE = (
    "import math\n"
    "import numpy as np\n"
    "import torch\n"
    "import torch.nn as nn\n"
    "import torch.nn.functional as F\n"
)


@lru_cache(maxsize=None)
def source_cells(section: str, course: Path = COURSE) -> dict:
    """grade_id -> source of every nbgrader cell of ``source/<section>/<section>.ipynb``.

    The source notebook is the one edited source of a section: the reference solutions and the given
    code of the hidden tests are read from its cells, never written a second time here.
    """
    path = Path(course) / "source" / section / f"{section}.ipynb"
    nb = json.loads(path.read_text(encoding="utf-8"))
    out = {}
    for cell in nb["cells"]:
        gid = (cell.get("metadata", {}).get("nbgrader") or {}).get("grade_id")
        if gid:
            src = cell.get("source", "")
            out[gid] = "".join(src) if isinstance(src, list) else src
    return out


def patch(reference: str, *pairs: str) -> str:
    """``reference`` with each ``old`` replaced by ``new`` (``patch(ref, old, new, old2, new2, ...)``).

    The one way every section writes a known mistake or a variant from its reference code: each
    ``old`` must occur in the code as patched so far, so a mistake can never silently equal the
    reference after the reference is edited.  A line's trailing comment stays in its column where the
    new code fits (a find-the-bug handout must not show where it differs from the reference by a
    shifted comment).
    """
    if len(pairs) % 2:
        raise ValueError("patch(reference, old, new, ...) takes (old, new) pairs")
    code = reference
    for old, new in zip(pairs[::2], pairs[1::2]):
        if old not in code:
            raise ValueError(f"patch: {old!r} does not occur in the code")
        if "\n" in old or "\n" in new:
            code = code.replace(old, new)
        else:
            code = "\n".join(_replace_in_line(line, old, new) for line in code.split("\n"))
    return code


def _replace_in_line(line: str, old: str, new: str) -> str:
    """``line.replace(old, new)``, with a trailing ``  # comment`` kept in its column if the code fits."""
    head, sep, comment = line.partition("  #")
    if not sep or old not in head or old in sep + comment:
        return line.replace(old, new)
    code = head.replace(old, new).rstrip()
    return code.ljust(len(head)) + sep + comment


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


@dataclass(kw_only=True, init=False)
class Case(StoredCase):
    """One hidden check of an exercise, as written here: a :class:`StoredCase` plus its name and seed.

    ``Case(name, what, kind=..., args=..., ...)``; every other field is the stored case's (see
    :class:`attncourse.protocol.cases.StoredCase`: one schema for authors, the build, the kernel and
    the judge).  Here ``args``/``kwargs``/``params`` values may be callables taking a seeded
    ``torch.Generator`` (evaluated once, at build time, stored as float64).  A ``value`` case
    compares the student's variable with the value that the exercise's ``reference`` code assigns
    (and each mistake's code assigns); ``mistake_values`` adds wrong values with their messages.
    """

    name: str = ""
    seed: int = 0
    mistake_values: dict = field(default_factory=dict)

    def __init__(self, name: str, what: str, **kw):
        self.name, self.seed = name, kw.pop("seed", 0)
        self.mistake_values = kw.pop("mistake_values", {})
        kw.setdefault("args", ())
        kw.setdefault("kwargs", {})
        kw.setdefault("init", {})
        StoredCase.__init__(self, what=what, **kw)

    def stored(self) -> StoredCase:
        """This case's fields as a stored case, without its inputs and outputs (the build fills them in)."""
        names = [f.name for f in fields(StoredCase) if f.name not in INPUT_FIELDS]
        return StoredCase(**{n: getattr(self, n) for n in names})


INPUT_FIELDS = ("args", "kwargs", "init", "params", "expected", "mistakes")


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
    # The section's own words the judge shows for this exercise, by key: ``property.<label>`` (a failed
    # invariant of a ``property`` case), ``attribute.<name>`` (an attribute an ``attributes`` case names is
    # missing), ``raises.no_message`` (an error raised without a message).
    messages: dict = field(default_factory=dict)
    # Name of a function in ``given`` that the hidden cells wrap the answer in,
    # ``GRADER.check(ex, case, wrap(answer))``: the build and the tests grade ``wrap(answer)`` too.
    # For answers that a single call on stored inputs cannot show (a training step's effect on a
    # fresh model over several steps, sampling with a seeded generator).
    wrap: str | None = None
    # Find the bug: the key of one of ``mistakes``.  The student's notebook shows that mistake's code in the
    # exercise's solution cell (instead of nbgrader's stub) for the student to debug; the source keeps the
    # correct code.  The build refuses a handout that passes any case (an unfixed handout earns nothing).
    handout: str | None = None


@dataclass
class Section:
    name: str
    exercises: list

    def exercise(self, name: str) -> Exercise:
        for ex in self.exercises:
            if ex.name == name:
                return ex
        raise KeyError(name)
