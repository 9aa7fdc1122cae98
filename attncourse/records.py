"""What leaves the grading kernel: a record of what the student's code gave back.

The kernel's :class:`attncourse.grading.Grader` runs the student's answer on a
case's inputs and publishes one record per ``GRADER.check`` call as display data
of the MIME type :data:`MIME`.  A record holds facts only — exact type, dtype,
device, shape and the values (float64, base64), or the exception — never a
verdict: the judge (:mod:`attncourse.judge`) decides outside the kernel.

:func:`encode` runs in the kernel (exact type checks first: a tensor subclass or
an object with lying dunders is recorded as "other", none of its methods called);
:func:`decode` runs in the judge and turns a record back into :class:`Got` nodes.
"""
from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

from . import trusted as T

MIME = "application/vnd.attncourse.record+json"
VERSION = 1
MAX_ELEMENTS = 20_000_000   # values in one record (a 160 MB answer is refused, not shipped)
MAX_DEPTH = 8


class _TooBig(Exception):
    pass


# -- kernel side ---------------------------------------------------------------------------------
def _b64(arr) -> str:
    return base64.b64encode(T.ndarray_tobytes(arr)).decode("ascii")


def encode(x, _depth: int = 0, _budget: list | None = None) -> dict:
    """A JSON-able description of an answer, built without calling any method of the answer."""
    budget = _budget if _budget is not None else [MAX_ELEMENTS]
    if _depth > MAX_DEPTH:
        return {"k": "other", "type": "a structure nested too deeply"}
    t = T.type_(x)
    if t is T.Tensor or t is T.Parameter:
        shape = [T.int_(s) for s in T.t_shape(x)]
        dev = T.str_(T.t_device(x))
        node = {"k": "tensor", "dtype": T.str_(T.t_dtype(x)), "device": dev, "shape": shape,
                "float": T.bool_(T.t_is_floating_point(x)), "data": None}
        if dev != "meta":
            arr = T.tensor_to_numpy(x)
            budget[0] -= T.ndarray_size(arr)
            if budget[0] < 0:
                raise _TooBig()
            node["data"] = _b64(arr)
        return node
    if t is T.ndarray:
        dt = T.ndarray_dtype(x)
        node = {"k": "ndarray", "dtype": T.str_(dt), "shape": [T.int_(s) for s in T.ndarray_shape(x)], "data": None}
        if dt.kind in "fiub":
            budget[0] -= T.ndarray_size(x)
            if budget[0] < 0:
                raise _TooBig()
            node["data"] = _b64(T.ndarray_astype(x, T.np_float64, copy=True))
        return node
    if t is T.list_ or t is T.tuple_:
        budget[0] -= T.len_(x)
        if budget[0] < 0:
            raise _TooBig()
        return {"k": "list" if t is T.list_ else "tuple", "items": [encode(v, _depth + 1, budget) for v in x]}
    if t is T.dict_:
        keys = T.list_(T.dict_keys(x))
        if not T.all_(T.type_(k) is T.str_ for k in keys):
            return {"k": "other", "type": "a dict whose keys are not all str"}
        return {"k": "dict", "keys": keys, "items": [encode(T.dict_getitem(x, k), _depth + 1, budget) for k in keys]}
    if t is T.str_:
        return {"k": "str", "v": x}
    if t is T.bool_:
        return {"k": "bool", "v": T.bool_(x)}
    if t is T.int_:
        return {"k": "int", "v": T.repr_(x)}
    if t is T.float_:
        return {"k": "float", "v": T.repr_(x)}
    if T.is_numpy_scalar(x):
        return {"k": "npnum", "type": T.describe_type(x), "v": T.repr_(T.float_(x))}
    return {"k": "other", "type": T.describe_type(x)}


def encode_answer(x) -> dict:
    """``{"answer": node}``, or ``{"problem": why}`` when the answer is too large to ship."""
    try:
        return {"answer": encode(x)}
    except _TooBig:
        return {"problem": f"the result is too large (more than {MAX_ELEMENTS:,} values)"}


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
