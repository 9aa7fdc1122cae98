"""What leaves the grading kernel: a record of what the student's code gave back.

The kernel's :class:`attncourse.kernel.Grader` runs the student's answer on a case's
inputs and publishes one record per ``GRADER.check`` call as display data of the MIME
type :data:`MIME`.  A record holds facts only — exact type, dtype, device, shape and
the values (float64, base64), or the exception — never a verdict: the judge
(:mod:`judge.verdict`) decides outside the kernel.

The kernel encodes (:mod:`attncourse.kernel.encode`); the judge decodes here into
:class:`Got` nodes.

A case with rules on how its answer is computed (``StoredCase.how``) adds ``how``: the facts
:class:`attncourse.kernel.watch.Watch` recorded while the answer ran —
``{"calls": [...], "ops": [...], "libs": [...], "largest": int, "widest": int, "count": int, "left": int}``
(torch functions called, ATen operations run, other libraries' functions called, the largest tensor made,
the most numbers one operation combined, how many operations ran, how many numbers left torch).
:func:`how_facts` reads them for the judge.
"""
from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

MIME = "application/vnd.attncourse.record+json"
VERSION = 1
MAX_ELEMENTS = 20_000_000   # values in one record (a 160 MB answer is refused, not shipped)
MAX_DEPTH = 8


# -- judge side ----------------------------------------------------------------------------------
@dataclass
class Got:
    """A decoded answer node.  ``kind``: tensor, ndarray, list, tuple, dict, str, bool, int, float, npnum, other."""

    kind: str
    type_name: str = ""
    dtype: str = ""
    device: str = ""
    shape: tuple = ()
    is_float: bool = False
    array: Any = None          # float64 ndarray of the values (None on meta / non-numeric arrays)
    value: Any = None          # str / bool / int / float
    items: list = field(default_factory=list)
    keys: list = field(default_factory=list)

    def describe(self) -> str:
        """The answer's type in the words the feedback uses (:func:`decode` names every kind)."""
        return self.type_name or self.kind


TYPE_NAMES = {"tensor": "torch.Tensor", "ndarray": "numpy.ndarray"}


def decode(node) -> Got:
    """A record's answer node -> :class:`Got` (raises ValueError on a malformed node)."""
    import numpy as np

    if not isinstance(node, dict) or not isinstance(node.get("k"), str):
        raise ValueError("malformed record")
    k = node["k"]
    if k in ("tensor", "ndarray"):
        shape = tuple(int(s) for s in node["shape"])
        arr = None
        if node.get("data") is not None:
            arr = np.frombuffer(base64.b64decode(node["data"]), dtype="<f8").reshape(shape).copy()
        return Got(k, type_name=TYPE_NAMES[k], dtype=str(node["dtype"]), device=str(node.get("device", "cpu")),
                   shape=shape, is_float=bool(node.get("float", True)), array=arr)
    if k in ("list", "tuple"):
        return Got(k, type_name=k, items=[decode(v) for v in node["items"]])
    if k == "dict":
        keys = [str(x) for x in node["keys"]]
        items = [decode(v) for v in node["items"]]
        if len(keys) != len(items):
            raise ValueError("malformed record")
        return Got(k, type_name="dict", keys=keys, items=items)
    if k == "str":
        return Got(k, type_name="str", value=str(node["v"]))
    if k == "bool":
        return Got(k, type_name="bool", value=bool(node["v"]))
    if k == "int":
        return Got(k, type_name="int", value=int(node["v"]))
    if k in ("float", "npnum"):
        return Got(k, type_name=str(node.get("type", "float")), value=float(node["v"]))
    if k == "other":
        return Got(k, type_name=str(node.get("type", "?")))
    raise ValueError(f"malformed record (kind {k!r})")


HOW_LISTS = ("calls", "ops", "libs")
HOW_NUMBERS = ("largest", "widest", "count", "left")


def how_facts(record: dict) -> dict | None:
    """The ``how`` facts of a record, checked for shape (lists of str, non-negative ints), or None (absent or
    malformed: the judge refuses a check whose rules need them)."""
    how = record.get("how")
    if not isinstance(how, dict):
        return None
    out = {}
    for key in HOW_LISTS:
        names = how.get(key)
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            return None
        out[key] = names
    for key in HOW_NUMBERS:
        n = how.get(key)
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            return None
        out[key] = n
    return out
