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

from attncourse.protocol.cases import DEVICE_ARG, StoredCase

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
    # The cause this mistake is an instance of, shared by the exercises of a section that can make it (the class
    # report names each cause once): default ``key``.  ``Section.titles`` names a cause; default: this message.
    cause: str | None = None


@dataclass(frozen=True)
class Refusal:
    """Library functions an exercise's computation may not call, by name as the kernel records them
    (:mod:`attncourse.kernel.watch`: torch functions, ATen operations, other libraries' functions); ``*`` in a
    name stands for any run of characters.  ``message`` tells the student what was refused (the exercise may word it its own way:
    ``Exercise.messages["how.<key>"]``)."""

    key: str
    names: tuple
    message: str


SDPA = Refusal("sdpa", ("torch.nn.functional.scaled_dot_product_attention", "torch._C._nn.scaled_dot_product_attention",
                        "aten.scaled_dot_product_attention", "aten._scaled_dot_product_*", "aten._safe_softmax",
                        "aten._fused_sdp_choice", "aten._flash_attention_*", "aten._efficient_attention_*"),
               "F.scaled_dot_product_attention computes the attention this exercise asks you to build from its steps")
SOFTMAX = Refusal("softmax", ("torch.softmax", "torch.nn.functional.softmax", "torch.Tensor.softmax",
                              "torch.log_softmax", "torch.nn.functional.log_softmax", "torch.Tensor.log_softmax",
                              "torch.special.softmax", "torch.special.log_softmax", "aten._softmax",
                              "aten._log_softmax", "aten._safe_softmax", "scipy.special.*softmax"),
                  "a library softmax (torch.softmax, scipy.special.softmax) computes what this exercise asks you "
                  "to write: shift by the maximum, exponentiate, normalise")
LAYER_NORM = Refusal("library_norm", ("torch.nn.functional.layer_norm", "torch.layer_norm", "torch.native_layer_norm",
                                      "aten.native_layer_norm", "aten.layer_norm", "torch.nn.functional.group_norm",
                                      "torch.group_norm", "aten.native_group_norm", "torch.nn.functional.instance_norm",
                                      "torch.instance_norm", "torch.nn.functional.batch_norm", "torch.batch_norm",
                                      "aten.native_batch_norm", "aten._native_batch_norm_legit*",
                                      "torch.nn.functional.rms_norm", "torch.rms_norm", "aten._fused_rms_norm"),
                     "the library's layer norm (F.layer_norm, nn.LayerNorm, or another normalisation layer) computes "
                     "what this exercise asks you to write with tensor operations of your own: the mean, the "
                     "variance, the division")
LIBRARY_MHA = Refusal("library_mha", ("torch.nn.functional.multi_head_attention_forward",
                                      "aten._native_multi_head_attention", "torch._native_multi_head_attention"),
                      "nn.MultiheadAttention (F.multi_head_attention_forward) computes the multi-head attention this "
                      "exercise asks you to build: split into heads, attend, merge")
HF_SAMPLING = Refusal("library_filter", ("transformers.*",),
                      "a logits processor from transformers (TopPLogitsWarper) filters the logits for you: the "
                      "exercise is to write the nucleus rule yourself")


# How the class report names the causes the judge finds without a catalogued mistake (judge.verdict), and a
# catalogued mistake with the same cause key (``Mistake(..., cause="fixed_device")``, or its key).
GENERIC_TITLES = {
    "fixed_device": "a tensor is created on a fixed device (not the input's, or not the one asked for)",
    "fixed_dtype": "a tensor is created with a fixed dtype (not the input's)",
}
HOW_TITLES = {   # how the class report names a broken rule on how an answer is computed (an exercise may word it)
    "widest": "the whole at once: one operation combined more numbers than the exercise's pieces hold",
    "largest": "a tensor larger than the computation may hold",
    "count": "a Python loop where the exercise asks for whole-tensor operations",
    "left": "the numbers left torch (.numpy(), .tolist(), .item()): the computation cannot be seen",
}


@dataclass
class How:
    """Rules on how an exercise's answer is computed, judged from what the kernel records while it runs
    (:mod:`attncourse.kernel.watch`, :func:`judge.verdict.judge_how`).  Each bound is an int or a function of the
    case's stored ``args`` and ``kwargs`` (shapes are what they need), evaluated at build time: ``widest`` the
    most numbers one operation may combine into one, ``largest`` the most elements of one tensor made,
    ``count`` the most tensor operations, ``left`` the most numbers that may leave torch (None: not judged)."""

    refuse: tuple = ()
    widest: Callable | int | None = None
    largest: Callable | int | None = None
    count: Callable | int | None = None
    left: int | None = 8

    def stored(self, args, kwargs) -> dict:
        def value(bound):
            return int(bound(args, kwargs)) if callable(bound) else bound
        out = {"refuse": [[r.key, list(r.names)] for r in self.refuse]}
        for rule in ("widest", "largest", "count", "left"):
            v = value(getattr(self, rule))
            if v is not None:
                out[rule] = int(v)
        return out

    def messages(self) -> dict:
        return {f"how.{r.key}": r.message for r in self.refuse}


@dataclass
class Shortcut:
    """A correct answer computed the way the exercise's rules refuse (a library one-liner, the whole at once):
    it must lose the points of every case except those in ``keeps`` (where the rules cannot tell it apart), and
    each failure must name the rule (``shows``: default, the refused rule's message)."""

    key: str
    code: str
    keeps: tuple = ()
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
    numerics: bool = False
    native: bool = False

    def __init__(self, name: str, what: str, **kw):
        self.name, self.seed = name, kw.pop("seed", 0)
        self.mistake_values = kw.pop("mistake_values", {})
        # a float64/bfloat16 case chosen for the numbers' sake (very negative scores, an invariant checked
        # tightly): not a check of the dtype contract, though a dtype slip still fails it
        self.numerics = kw.pop("numerics", False)
        # the device is the one the exercise itself runs on (a Triton kernel: the best device, interpreted on a
        # CPU), not a check of the device contract
        self.native = kw.pop("native", False)
        kw.setdefault("args", ())
        kw.setdefault("kwargs", {})
        kw.setdefault("init", {})
        StoredCase.__init__(self, what=what, **kw)

    def stored(self) -> StoredCase:
        """This case's fields as a stored case, without its inputs and outputs (the build fills them in)."""
        names = [f.name for f in fields(StoredCase) if f.name not in INPUT_FIELDS]
        return StoredCase(**{n: getattr(self, n) for n in names})

    @property
    def plumbing(self) -> str | None:
        """What contract beyond the values this case checks: ``"device"`` (the ``meta`` device, the best device, a
        ``device`` argument: what a tensor made on a fixed device fails), ``"dtype"`` (float64 or bfloat16 in and
        out: what a tensor made in a fixed dtype fails, unless the dtype was chosen for the numbers' sake,
        ``numerics``), or None.  The course keeps such checks at most 10 % of a section's points
        (tests/test_weights.py)."""
        if self.kind in ("value", "raises", "attributes"):
            return None
        if ((self.device in ("meta", "best") and not self.native) or "device" in (self.kwargs or {})
                or DEVICE_ARG in _flat(self.args)):
            return "device"
        if self.api != "numpy" and self.dtype != "float32" and not self.numerics:
            return "dtype"
        return None


def _flat(value, depth=0) -> list:
    if isinstance(value, (list, tuple)) and depth < 4:
        return [x for v in value for x in _flat(v, depth + 1)]
    return [value]


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
    # Rules on how the answer is computed, for every call, module and property case (a case may set its own).
    how: How | None = None
    # Correct answers computed the way ``how`` refuses: each must lose those points (tests/test_gates.py).
    shortcuts: list = field(default_factory=list)


@dataclass
class Section:
    name: str
    exercises: list
    # What each hidden check is worth, ``{exercise: {case: points}}`` (a case may say ``Case(..., points=...)``
    # itself): a hidden cell's nbgrader points are the sum of its checks' (the build refuses otherwise), and the
    # judge scores the cell by the checks that pass.  Checks of plumbing (``Case.plumbing``) stay small.
    points: dict = field(default_factory=dict)
    # The names of causes (``Mistake.cause``) the class report shows, where a cause is shared by exercises whose
    # messages are worded for each (default: the first such mistake's message).
    titles: dict = field(default_factory=dict)

    def __post_init__(self):
        for ex in self.exercises:
            table = self.points.get(ex.name, {})
            unknown = set(table) - {c.name for c in ex.cases}
            if unknown:
                raise ValueError(f"{self.name}: points for cases {ex.name} does not have: {sorted(unknown)}")
            for case in ex.cases:
                if case.points is None and case.name in table:
                    case.points = float(table[case.name])

    def exercise(self, name: str) -> Exercise:
        for ex in self.exercises:
            if ex.name == name:
                return ex
        raise KeyError(name)
