"""Trusted primitives, captured when this module is first imported.

Every notebook imports this module in its locked setup cell, before any
student code runs.  The grader compares answers only through the names
captured here, so a submission that later rebinds ``np.allclose``,
``torch.allclose``, ``torch.testing.assert_close``, builtins such as
``abs``/``isinstance``/``print``, or methods on ``torch.Tensor`` does not
change how it is graded.

Answers are converted to plain float64 ``numpy.ndarray`` objects with the
C-level methods of ``torch._C.TensorBase`` and ``numpy`` (types whose
attributes cannot be reassigned from Python), after an *exact* type check:
tensor subclasses and objects whose ``__eq__``/``__sub__``/``__array__``
lie are refused before any of their methods is called.
"""
from __future__ import annotations

import builtins as _builtins
import math as _math

import numpy as _np
import torch as _torch

# --- builtins ---------------------------------------------------------------
type_ = _builtins.type
isinstance_ = _builtins.isinstance
len_ = _builtins.len
float_ = _builtins.float
int_ = _builtins.int
bool_ = _builtins.bool
str_ = _builtins.str
list_ = _builtins.list
tuple_ = _builtins.tuple
dict_ = _builtins.dict
range_ = _builtins.range
zip_ = _builtins.zip
repr_ = _builtins.repr
getattr_ = _builtins.getattr
hasattr_ = _builtins.hasattr
BaseException_ = _builtins.BaseException
Exception_ = _builtins.Exception
AssertionError_ = _builtins.AssertionError
TypeError_ = _builtins.TypeError
ValueError_ = _builtins.ValueError
isfinite_ = _math.isfinite
abs_ = _builtins.abs
min_ = _builtins.min
max_ = _builtins.max
sorted_ = _builtins.sorted
round_ = _builtins.round
enumerate_ = _builtins.enumerate
callable_ = _builtins.callable
any_ = _builtins.any
all_ = _builtins.all

# --- numpy --------------------------------------------------------------------
ndarray = _np.ndarray
np_array = _np.array
np_asarray = _np.asarray
np_float64 = _np.float64
np_floating = _np.floating
np_integer = _np.integer
np_bool = _np.bool_
np_abs = _np.abs
np_subtract = _np.subtract
np_multiply = _np.multiply
np_add = _np.add
np_greater = _np.greater
np_isnan = _np.isnan
np_isinf = _np.isinf
np_isfinite = _np.isfinite
np_logical_and = _np.logical_and
np_logical_or = _np.logical_or
np_logical_not = _np.logical_not
# ufunc methods are C code that a submission cannot rebind; np.count_nonzero and
# np.amax are Python wrappers that look up helpers in numpy's modules at call time.
_add_reduce = _np.add.reduce
_max_reduce = _np.maximum.reduce
_np_int64 = _np.int64
_np_bool_dtype = _np.bool_
np_zeros = _np.zeros
np_stack = _np.stack
ndarray_copy = _np.ndarray.copy
ndarray_astype = _np.ndarray.astype
ndarray_reshape = _np.ndarray.reshape
ndarray_shape = _np.ndarray.shape.__get__
ndarray_dtype = _np.ndarray.dtype.__get__
ndarray_size = _np.ndarray.size.__get__
ndarray_item = _np.ndarray.item
ndarray_tolist = _np.ndarray.tolist
ndarray_tobytes = _np.ndarray.tobytes
dict_keys = _builtins.dict.keys
dict_getitem = _builtins.dict.__getitem__


def np_count_nonzero(x) -> int:
    """Number of true entries of an exact ndarray or numpy scalar (C-level ufunc reduce only)."""
    flat = ndarray_reshape(ndarray_astype(np_asarray(x), _np_bool_dtype), -1)
    return int_(_add_reduce(ndarray_astype(flat, _np_int64)))


def np_amax(x):
    """Largest entry of a non-empty exact ndarray (C-level ufunc reduce only)."""
    return _max_reduce(ndarray_reshape(np_asarray(x), -1))

# --- torch ----------------------------------------------------------------------
_TB = _torch._C.TensorBase
Tensor = _torch.Tensor
Parameter = _torch.nn.Parameter
Module = _torch.nn.Module
t_detach = _TB.detach
t_to = _TB.to
t_numpy = _TB.numpy
t_clone = _TB.clone
t_contiguous = _TB.contiguous
t_dtype = _TB.dtype.__get__
t_device = _TB.device.__get__
t_shape = _TB.shape.__get__
t_requires_grad = _TB.requires_grad.__get__
t_float64 = _torch.float64
t_float32 = _torch.float32
t_bfloat16 = _torch.bfloat16
t_float16 = _torch.float16
t_bool = _torch.bool
t_int64 = _torch.int64
t_from_numpy = _torch.from_numpy
t_empty = _torch.empty
t_tensor = _torch.tensor
t_device_cls = _torch.device
t_no_grad = _torch.no_grad
t_is_floating_point = _torch.is_floating_point
Size = _torch.Size
cpu = _torch.device("cpu")

FLOAT_DTYPES = {
    "float64": _torch.float64,
    "float32": _torch.float32,
    "bfloat16": _torch.bfloat16,
    "float16": _torch.float16,
}


class Refused(Exception_):
    """An answer the grader will not look inside (wrong or suspicious type)."""


def _exact_tensor(x) -> bool:
    return type_(x) is Tensor or type_(x) is Parameter


def describe_type(x) -> str:
    t = type_(x)
    mod = getattr_(t, "__module__", "")
    name = getattr_(t, "__qualname__", "?")
    return name if mod in ("builtins", None, "") else f"{mod}.{name}"


def tensor_to_numpy(x) -> "ndarray":
    """A float64 numpy copy of an exact torch.Tensor (any device, any dtype)."""
    if not _exact_tensor(x):
        raise Refused(f"expected a torch.Tensor, got {describe_type(x)}")
    d = t_detach(x)
    if str_(t_device(d)) == "meta":
        raise Refused("the tensor is on the meta device and has no values")
    dt = t_dtype(d)
    target = t_bool if dt is t_bool else t_float64
    if t_is_floating_point(d) or dt is t_bool:
        d = t_to(d, cpu, target)
    else:
        d = t_to(d, cpu, t_float64)
    arr = t_numpy(d)
    return ndarray_astype(arr, np_float64, copy=True)


def _plain_number(v) -> bool:
    t = type_(v)
    return t is int_ or t is float_ or t is bool_ or t is np_float64 or (
        isinstance_(v, (np_floating, np_integer, np_bool)) and type_(v).__module__ == "numpy"
    )


def is_numpy_scalar(v) -> bool:
    """A NumPy scalar (np.float64, np.int32, np.bool_ ...), not a subclass defined elsewhere."""
    return isinstance_(v, (np_floating, np_integer, np_bool)) and type_(v).__module__ == "numpy"


def _nested_numbers(obj, depth=0):
    if depth > 8:
        raise Refused("nested too deeply")
    t = type_(obj)
    if t is list_ or t is tuple_:
        return [_nested_numbers(v, depth + 1) for v in obj]
    if _plain_number(obj):
        return float_(obj)
    raise Refused(f"expected numbers, found {describe_type(obj)}")


def to_numpy(x) -> "ndarray":
    """float64 copy of a plain answer: exact ndarray, exact tensor, list/tuple of numbers, or a number."""
    if _exact_tensor(x):
        return tensor_to_numpy(x)
    t = type_(x)
    if t is ndarray:
        dt = ndarray_dtype(x)
        if dt.kind not in "fiub":
            raise Refused(f"expected a numeric array, got an array of dtype {dt}")
        return ndarray_astype(x, np_float64, copy=True)
    if t is list_ or t is tuple_ or _plain_number(x):
        try:
            return np_array(_nested_numbers(x), dtype=np_float64)
        except ValueError_ as e:
            raise Refused(f"the nested lists are ragged ({e})")
    raise Refused(f"expected a NumPy array, a torch.Tensor or a list of numbers, got {describe_type(x)}")


def shape_of(x):
    """Shape of an exact tensor or ndarray, as a plain tuple of ints."""
    if _exact_tensor(x):
        return tuple_(int_(s) for s in t_shape(x))
    if type_(x) is ndarray:
        return tuple_(int_(s) for s in ndarray_shape(x))
    return tuple_(int_(s) for s in ndarray_shape(to_numpy(x)))


def max_abs_diff(a: "ndarray", b: "ndarray") -> float:
    """Largest |a - b| over finite-and-equal-inf positions; inf where NaN/inf patterns differ."""
    a_nan, b_nan = np_isnan(a), np_isnan(b)
    if np_count_nonzero(np_logical_not(a_nan == b_nan)):
        return float_("inf")
    a_inf, b_inf = np_isinf(a), np_isinf(b)
    if np_count_nonzero(np_logical_not(a_inf == b_inf)):
        return float_("inf")
    mask = np_logical_not(np_logical_or(a_nan, a_inf))
    if np_count_nonzero(np_logical_and(a_inf, np_logical_not(a == b))):
        return float_("inf")
    if not np_count_nonzero(mask):
        return 0.0
    d = np_abs(np_subtract(a[mask], b[mask]))
    return float_(np_amax(d))


def close(a: "ndarray", b: "ndarray", atol: float, rtol: float) -> bool:
    """Trusted allclose for two float64 ndarrays of equal shape (NaN == NaN, inf == inf)."""
    if ndarray_shape(a) != ndarray_shape(b):
        return False
    a_nan, b_nan = np_isnan(a), np_isnan(b)
    if np_count_nonzero(np_logical_not(a_nan == b_nan)):
        return False
    a_inf, b_inf = np_isinf(a), np_isinf(b)
    if np_count_nonzero(np_logical_not(a_inf == b_inf)):
        return False
    if np_count_nonzero(np_logical_and(a_inf, np_logical_not(a == b))):
        return False
    mask = np_logical_not(np_logical_or(a_nan, a_inf))
    diff = np_abs(np_subtract(a[mask], b[mask]))
    bound = np_add(atol, np_multiply(rtol, np_abs(b[mask])))
    return not np_count_nonzero(np_greater(diff, bound))
