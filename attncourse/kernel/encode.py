"""Encoding what the student's code gave back, in the kernel, without calling any of its methods.

:func:`encode` describes an answer for a record (:mod:`attncourse.protocol.records`):
exact type checks first, through the primitives captured in :mod:`attncourse.kernel.trusted`,
so a tensor subclass or an object with lying dunders is recorded as "other", none of its
methods called.  The judge decodes the record outside the kernel.
"""
from __future__ import annotations

import base64

from ..protocol.records import MAX_DEPTH, MAX_ELEMENTS
from . import trusted as T


class _TooBig(Exception):
    pass


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
