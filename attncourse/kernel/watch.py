"""How the student's code computed its answer: the tensor operations that ran, recorded in the kernel.

For a hidden case whose exercise *is* a computation (an online softmax, attention in tiles, a layer norm built
from tensor operations), the case carries rules on how the answer may be computed
(:class:`attncourse.protocol.cases.StoredCase` ``how``).  While the student's function runs on such a case,
:class:`Watch` records, as facts for the judge (:mod:`attncourse.protocol.records`, ``how``):

* ``calls`` — every torch function or tensor method the student's code called (PyTorch's own
  ``TorchFunctionMode``: ``torch.softmax``, ``torch.Tensor.softmax``,
  ``torch.nn.functional.scaled_dot_product_attention``; a call made inside another torch function is that
  function's business and is not listed);
* ``ops`` — every ATen operation that ran, after PyTorch's own decompositions (``TorchDispatchMode``:
  ``aten._softmax``, ``aten.native_layer_norm``, ``aten.bmm``), on any device, ``meta`` included;
* ``libs`` — the functions of other Python libraries the student's code called directly
  (``scipy.special._logsumexp.softmax``; torch and NumPy are left out: the modes above see torch), listed
  where the case's rules name such a library (it costs a profile function at every Python call);
* ``largest`` — the most elements of one tensor an operation created (views and in-place results share
  their input's memory and are not counted);
* ``widest`` — the most numbers one operation combined into one result: the length of a reduction
  (``sum``, ``amax``, ``logsumexp``, ...), of a softmax, a cumulative sum or a sort along its dimension, of a
  matrix product's inner dimension, of a pooling window;
* ``count`` — how many ATen operations ran;
* ``left`` — how many numbers left torch for Python or NumPy (``.numpy()``, ``.tolist()``, ``.item()``,
  ``float(t)``, ``np.asarray(t)``): a computation there is invisible to the record.

The record makes no verdict: the judge (:mod:`judge.verdict`) compares it with the case's rules.  It is evidence
from the student's kernel, which the student controls: code that pops the modes or forges the record can hide a
library call.  What that gains is at most what an honest computation of the same values earns (docs/GRADING.md,
"What a forged record could still gain").
"""
from __future__ import annotations

import sys as _sys

from torch.overrides import TorchFunctionMode as _TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode as _TorchDispatchMode

from . import trusted as T

MAX_NAMES = 300          # names kept per list (a record stays small whatever the code calls)
MAX_NAME = 160           # characters of one name

# ATen operations that combine numbers along a dimension (``dim`` in their schema) or across the whole tensor.
REDUCTIONS = frozenset({
    "sum", "nansum", "mean", "nanmean", "prod", "amax", "amin", "max", "min", "aminmax", "argmax", "argmin",
    "logsumexp", "var", "std", "var_mean", "std_mean", "norm", "linalg_vector_norm", "median", "nanmedian",
    "mode", "kthvalue", "count_nonzero", "any", "all", "_softmax", "_log_softmax", "_safe_softmax", "softmax",
    "log_softmax", "cumsum", "cumprod", "logcumsumexp", "cummax", "cummin", "_logcumsumexp", "sort", "argsort",
    "topk", "special_logsumexp", "avg_pool1d", "avg_pool2d", "avg_pool3d", "max_pool1d", "max_pool2d",
    "max_pool3d", "max_pool2d_with_indices", "max_pool3d_with_indices", "adaptive_avg_pool1d",
    "_adaptive_avg_pool2d", "_adaptive_avg_pool3d", "adaptive_max_pool1d", "adaptive_max_pool2d",
    "adaptive_max_pool3d", "native_layer_norm", "native_group_norm", "native_batch_norm",
    "_native_batch_norm_legit", "_native_batch_norm_legit_no_training", "_fused_rms_norm",
})
# Matrix products: the length of the dimension summed over (the first matrix's last dimension); index of that
# matrix among the arguments.
PRODUCTS = {"mm": 0, "bmm": 0, "matmul": 0, "mv": 0, "dot": 0, "vdot": 0, "addmm": 1, "addbmm": 1, "baddbmm": 1,
            "addmv": 1, "_scaled_mm": 0, "linear": 0}
# Fused attention kernels: every key combined into each output row.
ATTENTION = {"_scaled_dot_product_flash_attention": 1, "_scaled_dot_product_flash_attention_for_cpu": 1,
             "_scaled_dot_product_efficient_attention": 1, "_scaled_dot_product_cudnn_attention": 1,
             "_scaled_dot_product_attention_math": 1, "_scaled_dot_product_fused_attention_overrideable": 1,
             "_flash_attention_forward": 1, "_efficient_attention_forward": 1}
# Tensor methods through which numbers leave torch.
LEAVING = frozenset({"torch.Tensor.numpy", "torch.Tensor.__array__", "torch.Tensor.tolist", "torch.Tensor.item",
                     "torch.Tensor.__float__", "torch.Tensor.__int__", "torch.Tensor.__index__",
                     "torch.Tensor.__bool__", "torch.Tensor.__complex__", "torch.Tensor.__dlpack__"})
# Python modules whose functions are not listed in ``libs`` (the modes see torch; NumPy is a course tool).
QUIET = ("torch", "numpy", "builtins", "math", "cmath", "operator", "functools", "itertools", "collections",
         "typing", "abc", "contextlib", "copy", "attncourse", "_operator", "_functools", "_collections",
         "posixpath", "genericpath", "os", "random", "_random", "warnings", "enum", "dataclasses", "re",
         "importlib", "_frozen_importlib", "_frozen_importlib_external", "sys", "types", "inspect", "string")

_numel = T.t_numel
_shape = T.t_shape
_TensorBase = T.TensorBase


def _is_tensor(x) -> bool:
    return T.isinstance_(x, _TensorBase)


class _Facts:
    __slots__ = ("calls", "ops", "libs", "largest", "widest", "count", "left")

    def __init__(self):
        self.calls, self.ops, self.libs = set(), set(), set()
        self.largest = self.widest = self.count = self.left = 0

    def as_record(self) -> dict:
        def names(s):
            return T.sorted_(n[:MAX_NAME] for n in s)[:MAX_NAMES]
        return {"calls": names(self.calls), "ops": names(self.ops), "libs": names(self.libs),
                "largest": self.largest, "widest": self.widest, "count": self.count, "left": self.left}


# Where torch's C bindings live, and the public names they have (``torch.overrides.resolve_name`` gives the same
# names but builds a table of every torch function at its first call: seconds in a grading kernel).
_PUBLIC = (("torch._VariableFunctionsClass.", "torch."), ("torch._C._nn.", "torch.nn.functional."),
           ("torch._C._special.special_", "torch.special."), ("torch._C._linalg.linalg_", "torch.linalg."),
           ("torch._C._fft.fft_", "torch.fft."), ("torch._tensor.Tensor.", "torch.Tensor."),
           ("torch._C.TensorBase.", "torch.Tensor."), ("builtins.TensorBase.", "torch.Tensor."))


def _name(func) -> str:
    """A torch function's public name: ``torch.softmax``, ``torch.Tensor.softmax``, ``aten._softmax`` (an
    operator called through ``torch.ops``), ``torch.nn.functional.scaled_dot_product_attention``."""
    op = T.getattr_(func, "_qualified_op_name", None)
    if T.isinstance_(op, T.str_):
        return op.replace("::", ".")
    qual = T.getattr_(func, "__qualname__", None) or T.getattr_(func, "__name__", None) or "?"
    mod = T.getattr_(func, "__module__", None)
    if not mod:
        mod = T.getattr_(T.getattr_(func, "__objclass__", None), "__module__", None) or "builtins"
    name = f"{mod}.{qual}"
    if qual.startswith("TensorBase."):
        name = "torch.Tensor." + qual[len("TensorBase."):]
    for private, public in _PUBLIC:
        if name.startswith(private):
            return public + name[len(private):]
    return name


class _Calls(_TorchFunctionMode):
    """Torch functions and tensor methods called (the outermost call of each: a mode is off inside its handler)."""

    def __init__(self, facts: _Facts):
        super().__init__()
        self.facts = facts

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = _name(func)
        facts = self.facts
        if T.len_(facts.calls) < 4 * MAX_NAMES:
            facts.calls.add(name)
        if name in LEAVING and args and _is_tensor(args[0]):
            facts.left += _numel(args[0])
        return func(*args, **(kwargs or {}))


_SCHEMA: dict = {}    # an ATen overload -> (its results alias an input, where its ``dim`` is, that dim's default)


def _schema(func):
    found = _SCHEMA.get(func)
    if found is None:
        schema = func._schema
        aliased = T.any_(r.alias_info is not None for r in schema.returns)
        dim = next(((i, a.default_value) for i, a in T.enumerate_(schema.arguments) if a.name == "dim"), None)
        found = _SCHEMA[func] = (aliased, dim)
    return found


def _dims(func, args, kwargs):
    """The ``dim`` argument of an ATen call (an int, a list of ints, or None), and whether it has one."""
    dim = _schema(func)[1]
    if dim is None:
        return None, False
    i, default = dim
    if kwargs and "dim" in kwargs:
        return kwargs["dim"], True
    return (args[i] if i < T.len_(args) else default), True


def _extent(name: str, func, args, kwargs, out) -> int:
    """How many numbers ``func`` combined into one result (0: an elementwise or a shape operation)."""
    if name in PRODUCTS:
        i = PRODUCTS[name]
        if i < T.len_(args) and _is_tensor(args[i]) and T.len_(_shape(args[i])):
            return T.int_(_shape(args[i])[-1]) if name not in ("dot", "vdot") else _numel(args[i])
        return 0
    if name in ATTENTION:
        i = ATTENTION[name]
        if i < T.len_(args) and _is_tensor(args[i]) and T.len_(_shape(args[i])) >= 2:
            return T.int_(_shape(args[i])[-2])
        return 0
    if name not in REDUCTIONS or not args or not _is_tensor(args[0]):
        return 0
    x = args[0]
    shape = _shape(x)
    dim, has = _dims(func, args, kwargs)
    if has and dim is not None and not (T.isinstance_(dim, (T.list_, T.tuple_)) and T.len_(dim) == 0):
        dims = dim if T.isinstance_(dim, (T.list_, T.tuple_)) else [dim]
        n = 1
        for d in dims:
            if T.isinstance_(d, T.int_) and T.len_(shape):
                n *= T.int_(shape[d % T.len_(shape)])
        return n
    first = out[0] if T.isinstance_(out, (T.list_, T.tuple_)) and out else out
    if _is_tensor(first) and _numel(first):
        return _numel(x) // _numel(first)
    return _numel(x)


class _Ops(_TorchDispatchMode):
    """ATen operations that ran: names, the largest tensor made, the widest combination, how many."""

    def __init__(self, facts: _Facts):
        super().__init__()
        self.facts = facts

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        facts = self.facts
        facts.count += 1
        packet = func.overloadpacket.__name__
        if T.len_(facts.ops) < 4 * MAX_NAMES:
            facts.ops.add(f"{func.namespace}.{packet}")
        if not _schema(func)[0]:
            for t in (out if T.isinstance_(out, (T.list_, T.tuple_)) else (out,)):
                if _is_tensor(t):
                    n = _numel(t)
                    if n > facts.largest:
                        facts.largest = n
        wide = _extent(packet, func, args, kwargs, out)
        if wide > facts.widest:
            facts.widest = wide
        return out


def _library(g: dict) -> bool:
    """Whether a global namespace is an imported library module's (not the notebook's, nor code run in a fresh
    namespace as the build and the tests run a solution cell)."""
    name = g.get("__name__")
    mod = _sys.modules.get(name) if T.isinstance_(name, T.str_) else None
    return name != "__main__" and mod is not None and T.getattr_(mod, "__dict__", None) is g


def _student_globals(answer) -> tuple:
    """The global namespaces the student's code runs in (the notebook's ``__main__``; the answer's own, a
    function's or a class's methods', unless a library's), and the library functions the answer *is* (a name
    bound straight to one: ``from scipy.special import softmax``)."""
    found, libs = [], []
    main = T.getattr_(_sys.modules.get("__main__"), "__dict__", None)
    for fn in (answer, T.getattr_(answer, "forward", None)):
        g = T.getattr_(fn, "__globals__", None)
        if not T.isinstance_(g, T.dict_):
            continue
        if _library(g) and g is not main:
            module = g.get("__name__")
            if not _quiet(module):
                libs.append(f"{module}.{T.getattr_(fn, '__qualname__', '?')}")
        elif not T.any_(g is h for h in found):
            found.append(g)
    if T.isinstance_(main, T.dict_) and not T.any_(main is h for h in found):
        found.append(main)
    return found, libs


def _quiet(module: str) -> bool:
    head = module.split(".", 1)[0]
    return head in QUIET


class Watch:
    """Record how ``answer`` computes, for the duration of a ``with`` block (:meth:`record` then has the facts)."""

    def __init__(self, answer, caller: dict | None = None, libraries: bool = True):
        """``caller``: the globals of the code that calls ``answer`` inside the ``with`` block (the grader's): what
        it calls directly counts as the answer's own call (an answer bound to a library function, a
        ``functools.partial`` of one).  ``libraries``: list the other libraries' functions the answer calls (a
        profile function at every Python call: about as much again as the two modes; the grader asks for it
        only where a case's rules name such a library)."""
        self.libraries = libraries
        self.facts = _Facts()
        self._student, libs = _student_globals(answer)
        self._callers = self._student + ([caller] if caller is not None else [])
        self.facts.libs.update(libs)
        self._modes = (_Calls(self.facts), _Ops(self.facts))
        self._old_profile = None

    def _profiler(self):
        """The profile function (``sys.setprofile``): called at every Python and C call and return while the answer
        runs, so it does as little as it can; it lists the functions of other libraries that the answer's own code
        calls directly."""
        callers = frozenset(T.id_(g) for g in self._callers)
        libs = self.facts.libs

        def profile(frame, event, arg):
            if event == "call":
                back = frame.f_back
                if back is None or T.id_(back.f_globals) not in callers or T.id_(frame.f_globals) in callers:
                    return
                module = frame.f_globals.get("__name__") or "?"
                if not _quiet(module):
                    libs.add(f"{module}.{frame.f_code.co_qualname}")
            elif event == "c_call" and T.id_(frame.f_globals) in callers:
                module = T.getattr_(arg, "__module__", None) or ""
                if module and not _quiet(module):
                    libs.add(f"{module}.{T.getattr_(arg, '__qualname__', '?')}")
        return profile

    def __enter__(self):
        self._old_profile = _sys.getprofile()
        for mode in self._modes:
            mode.__enter__()
        if self.libraries:
            _sys.setprofile(self._profiler())
        return self

    def __exit__(self, *exc):
        if self.libraries:
            try:
                _sys.setprofile(self._old_profile)
            except T.TypeError_:   # a C profiler (cProfile) cannot be put back from Python: none is left on
                _sys.setprofile(None)
        for mode in T.reversed_(self._modes):
            mode.__exit__(*exc)
        return False

    def record(self) -> dict:
        return self.facts.as_record()
