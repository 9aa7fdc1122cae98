"""Primitives captured when the grader's kernel side is first imported (in the locked setup cell).

The kernel side of the grader (:mod:`attncourse.kernel.grader`, :mod:`attncourse.protocol.records`)
runs the student's code and describes what came back.  It looks at an answer only
through the names captured here — builtins, exact types, and the C-level methods of
``torch._C.TensorBase`` and ``numpy.ndarray`` — after an *exact* type check, so a
tensor subclass or an object whose ``__eq__``/``__array__`` lie is recorded by its
type, none of its methods called, and a later rebinding of ``torch.Tensor.numpy``,
``isinstance`` and the like does not change what is recorded.

This protects the *description*, not the grade: the verdict is made outside the
kernel (:mod:`judge.verdict`), against reference values the kernel never holds.
"""
from __future__ import annotations

import builtins as _builtins
import contextlib as _contextlib
import io as _io
import math as _math
import os as _os
import signal as _signal
import threading as _threading
import warnings as _warnings

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
reversed_ = _builtins.reversed
id_ = _builtins.id
callable_ = _builtins.callable
any_ = _builtins.any
all_ = _builtins.all

# --- what the kernel's runner calls around the student's code (attncourse.kernel.grader) -----------
torch_load = _torch.load
Module_to = _torch.nn.Module.to
Module_eval = _torch.nn.Module.eval
Module_get_parameter = _torch.nn.Module.get_parameter
Module_named_parameters = _torch.nn.Module.named_parameters
Module_call = _torch.nn.Module.__call__
tensor_copy_ = _torch._C.TensorBase.copy_
catch_warnings = _warnings.catch_warnings
simplefilter = _warnings.simplefilter
redirect_stderr = _contextlib.redirect_stderr
redirect_stdout = _contextlib.redirect_stdout
StringIO = _io.StringIO
environ_get = _os.environ.get
print_ = print
getcwd = _os.getcwd
path_join = _os.path.join
isfile = _os.path.isfile
signal = _signal.signal
setitimer = _signal.setitimer
getsignal = _signal.getsignal
ITIMER_REAL = _signal.ITIMER_REAL
SIGALRM = _signal.SIGALRM
main_thread = _threading.main_thread
current_thread = _threading.current_thread

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
t_numel = _TB.numel
TensorBase = _TB
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


def is_numpy_scalar(v) -> bool:
    """A NumPy scalar (np.float64, np.int32, np.bool_ ...), not a subclass defined elsewhere."""
    return isinstance_(v, (np_floating, np_integer, np_bool)) and type_(v).__module__ == "numpy"
