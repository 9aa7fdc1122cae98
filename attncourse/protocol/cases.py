"""A stored hidden case: the typed record shared by the reference build, the kernel's runner and the judge.

``graders/data/<section>.pt`` (instructor only) holds, per ``"exercise:case"``, the
case's inputs *and* its secrets (reference output, known mistakes' outputs, hint).
The grading kernel only ever receives :meth:`StoredCase.inputs` — the same record
with the secrets removed — in a file that the autograder writes into the kernel's
scratch folder (:data:`INPUTS_FILE`).  The verdict is made outside the kernel.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

# Written by judge.preprocessors.IsolatedExecute into the kernel's scratch folder;
# its presence is what tells the kernel's Grader that an autograder is judging.
INPUTS_FILE = ".attncourse-inputs.pt"
SECRET = ("expected", "mistakes", "hint")
# An argument stored as this string is the case's own device when the kernel runs it (``cpu``, the best
# accelerator or ``meta``) and the CPU when the build runs the reference: how a function that creates its
# output from nothing (``causal_mask(T, device=...)``) is graded on the device it was asked for.
DEVICE_ARG = "$device"


@dataclass(kw_only=True)
class StoredCase:
    """One hidden check: how to run the student's answer, and (instructor side) what it must give.

    The one schema of a hidden case: authors write :class:`graders.spec.Case` (this record plus a
    name, a seed and input generators), the build stores this, the kernel runs :meth:`inputs`, the
    judge compares against ``expected`` and ``mistakes``.

    ``kind``: ``call`` (a function on ``args``/``kwargs``), ``module`` (an nn.Module built
    with ``init``, loaded with ``params``, called on ``args``), ``value`` (a hand-computed
    answer), ``raises`` (a call that must raise one of ``raises``), ``property``
    (invariants of the output named by ``labels``, see :mod:`judge.verdict`) or ``attributes`` (an
    nn.Module built with ``init`` on the CPU: the values of its attributes named by ``labels``, which
    the contract names, e.g. ``n_heads`` and ``d_k``).
    ``device`` is ``cpu``, ``best`` (the best accelerator present) or ``meta``; ``api`` is
    ``torch`` (outputs must be exact tensors on the input's device and dtype), ``numpy`` or
    ``any``.  An argument :data:`DEVICE_ARG` is the case's device.  Fields that are ``None`` are absent
    from the stored form.

    ``points``: what the check is worth, the share of its cell's nbgrader points (the spec declares it; the
    judge scores a hidden cell by the checks that pass).  ``how``: rules on *how* the answer is computed, for
    exercises whose point is the computation (the kernel then records the tensor operations that ran, and
    the judge refuses what the rules name; :mod:`attncourse.protocol.records`, ``HOW_*``): ``refuse`` (named
    library calls, ``[[group, [pattern, ...]], ...]``), ``widest`` (the most numbers one operation may
    combine into one: a reduction's, a softmax's or a matrix product's length), ``largest`` (the most
    elements of one tensor the computation may create), ``count`` (the most tensor operations) and ``left``
    (the most numbers that may leave torch for Python or NumPy).  Neither is a secret.
    """

    kind: str = "call"
    what: str = ""
    dtype: str = "float32"
    device: str = "cpu"
    api: str = "torch"
    cast: bool = True
    labels: list | None = None
    atol: float | None = None
    rtol: float | None = None
    raises: list | None = None
    hint: str | None = None
    args: Any = None
    kwargs: dict | None = None
    init: dict | None = None
    params: Any = None
    expected: Any = None
    mistakes: dict | None = None
    points: float | None = None
    how: dict | None = None

    @classmethod
    def from_dict(cls, d: dict) -> "StoredCase":
        names = {f.name for f in fields(StoredCase)}
        return StoredCase(**{k: v for k, v in d.items() if k in names})

    def to_dict(self) -> dict:
        out = {}
        for f in fields(StoredCase):
            v = getattr(self, f.name)
            if v is not None or (f.name == "expected" and self.mistakes is not None):
                out[f.name] = v
        return out

    def inputs(self) -> "StoredCase":
        """This case without its secrets: what the grading kernel may see."""
        return replace(StoredCase.from_dict(self.to_dict()), **{k: None for k in SECRET})


def inputs_only(data: dict) -> dict:
    """A section's stored data reduced to what the kernel needs: no references, mistakes, hints or messages."""
    return {"section": data["section"],
            "cases": {k: StoredCase.from_dict(v).inputs().to_dict() for k, v in data["cases"].items()}}


def label(exercise: str, case: StoredCase | dict | None, name: str) -> str:
    """How a check is named to the student: ``exercise (what the case is)``."""
    what = case.what if isinstance(case, StoredCase) else (case or {}).get("what")
    return f"{exercise} ({what or name})"
