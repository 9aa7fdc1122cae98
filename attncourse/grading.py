"""The grader that the notebooks' test cells call.

The locked setup cell of every notebook creates one ``Grader`` before any
student code runs::

    from attncourse.grading import Grader
    GRADER = Grader("02_qkv_by_hand")

Hidden test cells (stripped from the student release) then call
``GRADER.check(exercise, case, answer)``.  The grader

* reads the hidden inputs, reference outputs and known-mistake outputs from
  the instructor's data file ``graders/data/<section>.pt`` (not part of the
  installed package, never in ``release/``);
* runs the student's function or module on those inputs on the requested
  device (CPU, the best accelerator present, or ``meta``) and dtype, with
  warnings and stderr output of the student's code swallowed so that a correct
  answer is never marked down for them;
* checks the answer's exact type, device, dtype, shape and finiteness, then
  its values, with the trusted primitives of :mod:`attncourse.trusted`;
* on failure raises :class:`GradingError` whose message names the most likely
  mistake (see :mod:`attncourse.diagnose`) and never shows reference values.
"""
from __future__ import annotations

import contextlib as _contextlib
import hashlib as _hashlib
import hmac as _hmac
import io as _io
import os as _os
import signal as _signal_mod
import sys as _sys
import threading as _threading
import warnings as _warnings
from pathlib import Path as _Path

import torch as _torch

from . import trusted as T
from .devices import best_device as _best_device
from .diagnose import which_mistake
from .properties import check_property as _check_property

_torch_load = _torch.load
_Module_to = _torch.nn.Module.to
_Module_eval = _torch.nn.Module.eval
_Module_get_parameter = _torch.nn.Module.get_parameter
_Module_call = _torch.nn.Module.__call__
_copy_ = _torch._C.TensorBase.copy_
_catch_warnings = _warnings.catch_warnings
_simplefilter = _warnings.simplefilter
_redirect_stderr = _contextlib.redirect_stderr
_redirect_stdout = _contextlib.redirect_stdout
_StringIO = _io.StringIO
_environ_get = _os.environ.get
_print = print
_open = open
_unlink = _os.unlink
_getcwd = _os.getcwd
_setattr = setattr
_hmac_new = _hmac.new
_sha256 = _hashlib.sha256
_os_exit = _os._exit
_os_abort = _os.abort
_signal = _signal_mod.signal
_setitimer = _signal_mod.setitimer
_getsignal = _signal_mod.getsignal
_ITIMER_REAL = _signal_mod.ITIMER_REAL
_SIGALRM = _signal_mod.SIGALRM
_main_thread = _threading.main_thread
_current_thread = _threading.current_thread

# Written by the nbgrader side (attncourse.receipts) into the notebook's folder just
# before the kernel starts; the setup cell's Grader reads and deletes it before any
# student code runs, and signs each passed check with it.
RECEIPT_FILE = ".attncourse-receipt-key"
# Longest a single graded call of student code may run (an infinite loop earns nothing
# for that check; nbgrader's per-cell timeout is the backstop).
CHECK_TIMEOUT_ENV = "ATTNCOURSE_CHECK_TIMEOUT"

DATA_ENV = "ATTNCOURSE_ROOT"

# Tolerances by dtype and device kind: (atol, rtol).  float32 on an
# accelerator allows TF32 matmuls (10-bit mantissa).
TOLERANCES = {
    ("float64", "cpu"): (1e-7, 1e-6),
    ("float64", "accel"): (1e-7, 1e-6),
    ("float32", "cpu"): (1e-4, 1e-4),
    ("float32", "accel"): (1e-2, 1e-2),
    ("bfloat16", "cpu"): (6e-2, 6e-2),
    ("bfloat16", "accel"): (6e-2, 6e-2),
    ("float16", "cpu"): (1e-2, 1e-2),
    ("float16", "accel"): (1e-2, 1e-2),
}


class GradingError(AssertionError):
    """A graded check failed; the message says why."""


class _CheckTimeout(BaseException):
    """Raised inside student code when a graded call runs past the time limit."""


def _exit_blocked(*args, **kwargs):
    raise SystemExit("os._exit()/os.abort() is disabled while grading")


def _on_alarm(signum, frame):
    raise _CheckTimeout()


def _read_receipt_key():
    """The per-run signing key left by the autograder (read once, then deleted), or None."""
    path = _os.path.join(_getcwd(), RECEIPT_FILE)
    try:
        with _open(path, "rb") as fh:
            key = fh.read()
        _unlink(path)
        return key or None
    except OSError:
        return None


def receipt(key: bytes, n: int, label: str) -> str:
    """The receipt printed after a passed check: proves the genuine grader ran it."""
    return _hmac_new(key, f"{n}|{label}".encode(), _sha256).hexdigest()[:16]


def _install_guard(grader):
    """Before every later cell, undo rebinding of GRADER and replacement of the grader's code.

    Runs as an IPython ``pre_run_cell`` hook, so a solution cell that rebinds
    ``GRADER`` or patches ``Grader``'s methods or this module's helpers is
    undone before the hidden test cells run; the check then prints a notice
    that the instructor's report shows as "tampering suspected".
    """
    try:
        ip = get_ipython()  # noqa: F821  (defined inside IPython only)
    except NameError:
        return
    if ip is None:
        return
    mods = [_sys.modules[__name__], T, _sys.modules[which_mistake.__module__]]
    snaps = [(m, dict(m.__dict__)) for m in mods]
    cls_snap = dict(Grader.__dict__)
    state = {"bound": None}
    ns = ip.user_ns
    grading = grader._receipt_key is not None
    exits = [(_os, "_exit", _exit_blocked), (_os, "abort", _exit_blocked)]
    try:
        import posix as _posix
        exits.append((_posix, "_exit", _exit_blocked))
    except ImportError:  # pragma: no cover
        pass

    def guard(*_a, **_k):
        notes = grader._tampering
        if ns.get("GRADER") is grader:
            state["bound"] = True
        elif state["bound"]:
            notes.append("GRADER was rebound by student code (restored)")
            ns["GRADER"] = grader
        for mod, snap in snaps:
            d = mod.__dict__
            for k, v in snap.items():
                if d.get(k) is not v:
                    d[k] = v
                    notes.append(f"{mod.__name__}.{k} was replaced (restored)")
        for k, v in cls_snap.items():
            if Grader.__dict__.get(k) is not v and k not in ("__dict__", "__weakref__"):
                try:
                    _setattr(Grader, k, v)
                except T.Exception_:
                    pass
                notes.append(f"Grader.{k} was replaced (restored)")
        if grading:  # a correct answer is never marked down for a warning on stderr
            _simplefilter("ignore")
            for mod, name, fn in exits:
                if mod.__dict__.get(name) is not fn:
                    mod.__dict__[name] = fn

    ip.events.register("pre_run_cell", guard)
    guard()


def find_course_root(start=None):
    """The course folder holding ``graders/data``: $ATTNCOURSE_ROOT, else the nearest parent of cwd."""
    env = _environ_get(DATA_ENV)
    if env and (_Path(env) / "graders" / "data").is_dir():
        return _Path(env)
    here = _Path(start or _os.getcwd()).resolve()
    for p in (here, *here.parents):
        if (p / "graders" / "data").is_dir() and (p / "nbgrader_config.py").is_file():
            return p
    return None


def _to_plain(obj):
    """Stored reference structure -> plain python/numpy (float64 ndarrays)."""
    if T.type_(obj) is T.Tensor:
        return T.tensor_to_numpy(obj)
    if T.type_(obj) is T.list_:
        return [_to_plain(v) for v in obj]
    if T.type_(obj) is T.tuple_:
        return T.tuple_(_to_plain(v) for v in obj)
    if T.type_(obj) is T.dict_:
        return {k: _to_plain(v) for k, v in obj.items()}
    return obj


class Grader:
    """Hidden-test runner for one section; create it in the locked setup cell."""

    def __init__(self, section: str):
        self.section = section
        self._data = None
        self._root = find_course_root()
        self._receipt_key = _read_receipt_key()
        self._count = 0
        self._tampering = []
        if self._root is not None:
            self._load()
        _install_guard(self)

    # -- data -----------------------------------------------------------------
    def _load(self):
        if self._data is None:
            root = self._root or find_course_root()
            if root is None:
                raise GradingError(
                    "The hidden reference data is not available here: hidden tests run when an "
                    "instructor autogrades, or through the course's self-check (see README)."
                )
            path = root / "graders" / "data" / f"{self.section}.pt"
            self._data = _torch_load(str(path), weights_only=True)
        return self._data

    def _case(self, exercise, case):
        key = f"{exercise}:{case}"
        cases = self._load()["cases"]
        if key not in cases:
            raise GradingError(f"no reference data for {key!r} in section {self.section}")
        return cases[key]

    # -- public API -------------------------------------------------------------
    def check(self, exercise: str, case: str, answer, **context):
        """Grade ``answer`` (a value, a function or a module class) on a hidden case."""
        __tracebackhide__ = True  # noqa: F841  (IPython shows the message, not grader internals)
        spec = self._case(exercise, case)
        kind = spec["kind"]
        label = f"{exercise} ({spec.get('what', case)})"
        if kind == "value":
            problem = self._compare(answer, spec, device=None, dtype=None)
        elif kind in ("call", "module"):
            problem = self._run_and_compare(answer, spec, context)
        elif kind == "raises":
            problem = self._expect_raise(answer, spec, context)
        elif kind == "property":  # invariants any correct answer has (attncourse.properties)
            problem = _check_property(self, answer, spec, context)
        else:  # pragma: no cover - data error
            raise GradingError(f"unknown check kind {kind!r}")
        notice = self._tampering_notice()
        if problem is not None:
            raise GradingError(f"{label}: {problem}{notice}")
        self._count += 1
        if self._receipt_key is not None:
            _print(f"✓ {label}  [#{self._count} {receipt(self._receipt_key, self._count, label)}]{notice}")
        else:
            _print(f"✓ {label}{notice}")

    def _tampering_notice(self):
        if not self._tampering:
            return ""
        seen = list(dict.fromkeys(self._tampering))
        return "\n(tampering suspected: " + "; ".join(seen[:5]) + ")"

    # -- running the student's code -----------------------------------------------
    def _device(self, spec):
        name = spec.get("device", "cpu")
        if name == "best":
            return _best_device()
        return T.t_device_cls(name)

    def _materialise(self, value, dtype, device, cast, context, api="torch"):
        """A fresh copy of a stored input on the case's device and dtype (a NumPy array for NumPy exercises)."""
        if T.type_(value) is T.Tensor:
            dt = T.t_dtype(value)
            target = dtype if (cast and T.t_is_floating_point(value)) else dt
            if api == "numpy":
                return T.ndarray_copy(T.t_numpy(T.t_to(T.t_clone(value), T.cpu, target)))
            if T.str_(device) == "meta":
                return T.t_empty(T.tuple_(T.t_shape(value)), dtype=target, device="meta")
            return T.t_to(T.t_clone(value), device, target)
        if T.type_(value) is T.str_ and value.startswith("$ctx:"):
            name = value[5:]
            if name not in context:
                raise GradingError(f"the test needs {name!r} to be passed to the grader")
            return context[name]
        if T.type_(value) is T.list_:
            return [self._materialise(v, dtype, device, cast, context, api) for v in value]
        if T.type_(value) is T.tuple_:
            return T.tuple_(self._materialise(v, dtype, device, cast, context, api) for v in value)
        return value

    def _guarded(self, fn, *args, **kwargs):
        """Call student code with warnings and stray stderr/stdout swallowed and a time limit; return (result, exc)."""
        sink = _StringIO()
        limit = 0.0
        try:
            limit = T.float_(_environ_get(CHECK_TIMEOUT_ENV, "20") or 0)
        except T.ValueError_:
            limit = 20.0
        timed = limit > 0 and _current_thread() is _main_thread()
        old = None
        try:
            if timed:
                old = _getsignal(_SIGALRM)
                _signal(_SIGALRM, _on_alarm)
                _setitimer(_ITIMER_REAL, limit)
            try:
                with _catch_warnings():
                    _simplefilter("ignore")
                    with _redirect_stderr(sink), _redirect_stdout(sink):
                        return fn(*args, **kwargs), None
            finally:
                if timed:
                    _setitimer(_ITIMER_REAL, 0)
                    _signal(_SIGALRM, old if old is not None else 0)
        except _CheckTimeout:
            return None, _CheckTimeout(f"it ran for more than {limit:g} s (an infinite loop?)")
        except T.BaseException_ as exc:  # SystemExit included: it earns nothing
            if T.type_(exc) is KeyboardInterrupt:
                raise
            return None, exc

    def _run_and_compare(self, answer, spec, context):
        device = self._device(spec)
        dtype = T.FLOAT_DTYPES[spec.get("dtype", "float32")]
        cast = spec.get("cast", True)
        api = spec.get("api", "torch")
        args = self._materialise(spec.get("args", []), dtype, device, cast, context, api)
        kwargs = {k: self._materialise(v, dtype, device, cast, context, api) for k, v in spec.get("kwargs", {}).items()}
        if spec["kind"] == "module":
            module, problem = self._build_module(answer, spec, dtype, device)
            if problem:
                return problem
            fn = lambda *a, **k: _Module_call(module, *a, **k)  # noqa: E731
        else:
            if not T.callable_(answer):
                return f"expected a function, got {T.describe_type(answer)}"
            fn = answer
        with T.t_no_grad():
            got, exc = self._guarded(fn, *args, **kwargs)
        if exc is not None:
            return self._explain_exception(exc, device, spec)
        return self._compare(got, spec, device=device, dtype=dtype)

    def _build_module(self, cls, spec, dtype, device):
        init = spec.get("init", {})
        if T.str_(device) == "meta":
            def make():
                with T.t_device_cls("meta"):
                    return _Module_to(cls(**init), dtype=dtype)
        else:
            def make():
                return _Module_to(cls(**init), dtype=dtype)
        module, exc = self._guarded(make)
        if exc is not None:
            return None, f"constructing it with {init} raised {T.type_(exc).__name__}: {exc}"
        if not T.isinstance_(module, T.Module):
            return None, f"expected an nn.Module subclass, got {T.describe_type(module)}"
        for name, value in spec.get("params", {}).items():
            try:
                p = _Module_get_parameter(module, name)
            except T.Exception_:
                return None, f"the module has no parameter {name!r} (the contract names it)"
            want = T.tuple_(T.t_shape(value))
            have = T.tuple_(T.t_shape(p))
            if want != have:
                return None, f"parameter {name!r} has shape {have}, expected {want}"
            if T.str_(device) != "meta":
                with T.t_no_grad():
                    _copy_(p, value)
        if T.str_(device) != "meta":
            module, exc = self._guarded(_Module_to, module, device)
            if exc is not None:
                return None, f"moving it to {device} raised {T.type_(exc).__name__}: {exc}"
        _Module_eval(module)
        return module, None

    def _explain_exception(self, exc, device, spec):
        name = T.type_(exc).__name__
        text = T.str_(exc).split("\n")[0][:300]
        msg = f"raised {name}: {text}"
        low = text.lower()
        if name == "SystemExit":
            return "the code tried to exit the interpreter (SystemExit); it earns nothing for this check"
        if name == "NotImplementedError" and not text:
            return "not written yet: the cell still raises NotImplementedError (replace the stub with your code)"
        if name == "_CheckTimeout":
            return f"timed out: {text}; it earns nothing for this check"
        if name == "MemoryError" or "can't allocate memory" in low or "out of memory" in low:
            return ("ran out of memory (the grading kernel's memory is limited): " + text[:120] +
                    ". Most likely cause: a huge intermediate tensor or list.")
        if "device" in low or "meta" in low:
            return (msg + ". Most likely cause: a tensor is created on a fixed device (e.g. torch.ones(T, T) "
                    "or .to('cpu') inside the function); create new tensors on the input's device "
                    "(device=x.device) so the code runs unchanged on CPU and GPU.")
        if "dtype" in low or "expected scalar type" in low or "same dtype" in low:
            return (msg + ". Most likely cause: a tensor is created with a fixed dtype; use dtype=x.dtype "
                    "(or torch.finfo(x.dtype)) so float64 and bfloat16 inputs work.")
        return msg

    def _expect_raise(self, answer, spec, context):
        args = self._materialise(spec.get("args", []), T.t_float32, T.cpu, False, context)
        kwargs = {k: self._materialise(v, T.t_float32, T.cpu, False, context) for k, v in spec.get("kwargs", {}).items()}
        got, exc = self._guarded(answer, *args, **kwargs)
        allowed = spec.get("raises", ["ValueError", "KeyError"])
        if exc is None:
            return f"expected a clear error ({' or '.join(allowed)}) for this input, but nothing was raised"
        names = [c.__name__ for c in T.type_(exc).__mro__]
        if not T.any_(a in names for a in allowed):
            return f"raised {T.type_(exc).__name__}; expected {' or '.join(allowed)} with a clear message"
        if not T.str_(exc).strip():
            return "the error has no message; say which token is missing"
        return None

    # -- comparing ----------------------------------------------------------------
    def _tolerance(self, spec, device, dtype):
        if spec.get("atol") is not None:
            return spec["atol"], spec.get("rtol", 0.0)
        dname = {v: k for k, v in T.FLOAT_DTYPES.items()}.get(dtype, "float32")
        kind = "cpu" if device is None or T.str_(device) in ("cpu", "meta") else "accel"
        return TOLERANCES[(dname, kind)]

    def _compare(self, got, spec, device, dtype):
        expected = _to_plain(spec["expected"])
        labels = spec.get("labels")
        atol, rtol = self._tolerance(spec, device, dtype)
        api = spec.get("api", "torch")
        meta = device is not None and T.str_(device) == "meta"
        if T.type_(expected) is T.tuple_:
            if T.type_(got) is not T.tuple_ and T.type_(got) is not T.list_:
                names = ", ".join(labels) if labels else f"{T.len_(expected)} values"
                return f"should return a tuple ({names}), got {T.describe_type(got)}"
            if T.len_(got) != T.len_(expected):
                return f"should return {T.len_(expected)} values, got {T.len_(got)}"
            parts = T.list_(T.zip_(got, expected))
            names = labels or [f"value {i}" for i in T.range_(T.len_(expected))]
        else:
            parts, names = [(got, expected)], [labels[0] if labels else "the result"]
        converted = []
        for (g, e), name in T.zip_(parts, names):
            problem, plain = self._compare_part(g, e, name, api, device, dtype, atol, rtol, meta)
            if problem:
                return problem
            converted.append(plain)
        if meta:
            return None
        plain_got = T.tuple_(converted) if T.type_(expected) is T.tuple_ else converted[0]
        if self._values_match(plain_got, expected, atol, rtol):
            return None
        mistakes = {k: _to_plain(v) for k, v in spec.get("mistakes", {}).items()}
        messages = self._load().get("messages", {})
        hint = which_mistake(plain_got, mistakes, messages, atol, rtol)
        wrong, verb = self._which_part_wrong(plain_got, expected, names, atol, rtol)
        if hint:
            return f"{wrong} {verb} wrong. Most likely cause: {hint}"
        generic = spec.get("hint", "It matches none of the common mistakes; re-check each step on a tiny example by hand.")
        return f"{wrong} {verb} wrong. {generic}"

    @staticmethod
    def _values_match(got, expected, atol, rtol):
        from .diagnose import _matches
        return _matches(got, expected, atol, rtol)

    def _which_part_wrong(self, got, expected, names, atol, rtol):
        """('Output and weights', 'are'): which returned values differ, capitalised, with the verb."""
        if T.type_(expected) is not T.tuple_:
            return names[0][0].upper() + names[0][1:], "is"
        bad = [n for g, e, n in T.zip_(got, expected, names) if not self._values_match(g, e, atol, rtol)]
        text = " and ".join(bad) if bad else "the combination of values"
        return text[0].upper() + text[1:], ("are" if T.len_(bad) > 1 else "is")

    def _compare_part(self, g, e, name, api, device, dtype, atol, rtol, meta):
        """Type/device/dtype/shape/finiteness of one returned value; returns (problem, plain value)."""
        te = T.type_(e)
        if te is T.ndarray:
            if api == "torch":
                if T.type_(g) is not T.Tensor:
                    return f"{name} should be a torch.Tensor, got {T.describe_type(g)}", None
                if device is not None:
                    gdev = T.t_device(g)
                    if gdev.type != device.type:
                        return (f"{name} is on device '{gdev}' but the input was on '{device}'. Most likely cause: "
                                "a tensor is created on a fixed device or moved with .to('cpu')/.cuda(); use "
                                "the input's device."), None
                if dtype is not None and T.t_is_floating_point(g) and T.t_dtype(g) != dtype:
                    return (f"{name} has dtype {T.t_dtype(g)} but the input was {dtype}. Most likely cause: a tensor "
                            "is created with a fixed dtype (e.g. torch.tensor(...) or float32 constants); keep the "
                            "input's dtype."), None
                shape = T.tuple_(T.int_(s) for s in T.t_shape(g))
            elif api == "numpy":
                if T.type_(g) is not T.ndarray:
                    return f"{name} should be a NumPy array, got {T.describe_type(g)}", None
                shape = T.tuple_(T.int_(s) for s in T.ndarray_shape(g))
            else:  # any array-like
                try:
                    shape = T.shape_of(g)
                except T.Refused as r:
                    return f"{name}: {r}", None
            want = T.tuple_(T.int_(s) for s in T.ndarray_shape(e))
            if shape != want:
                return f"{name} has shape {shape}, expected {want}", None
            if meta:
                return None, None
            try:
                plain = T.to_numpy(g)
            except T.Refused as r:
                return f"{name}: {r}", None
            if T.np_count_nonzero(T.np_isnan(plain)) and not T.np_count_nonzero(T.np_isnan(e)):
                return (f"{name} contains NaN. Common causes: exp() of large scores overflowing to inf "
                        "(subtract each row's maximum before exp), a row where every key is masked (softmax "
                        "over all -inf), or subtracting inf from inf."), None
            if T.np_count_nonzero(T.np_isinf(plain)) and not T.np_count_nonzero(T.np_isinf(e)):
                return f"{name} contains inf: a masked score leaked through, or an overflow in exp().", None
            return None, plain
        if te is T.list_ or te is T.tuple_:
            if T.type_(g) is not T.list_ and T.type_(g) is not T.tuple_:
                return f"{name} should be a list, got {T.describe_type(g)}", None
            if T.len_(g) != T.len_(e):
                return f"{name} has {T.len_(g)} items, expected {T.len_(e)}", None
            out = []
            for i, (gi, ei) in T.enumerate_(T.zip_(g, e)):
                problem, p = self._compare_part(gi, ei, f"{name}[{i}]", api, device, dtype, atol, rtol, meta)
                if problem:
                    return problem, None
                out.append(p)
            return None, out
        if te is T.dict_:
            if T.type_(g) is not T.dict_:
                return f"{name} should be a dict, got {T.describe_type(g)}", None
            missing = [k for k in e if k not in g]
            if missing:
                return f"{name} is missing the keys {missing}", None
            out = {}
            for k in e:
                problem, p = self._compare_part(g[k], e[k], f"{name}[{k!r}]", api, device, dtype, atol, rtol, meta)
                if problem:
                    return problem, None
                out[k] = p
            return None, out
        if te is T.str_:
            if T.type_(g) is not T.str_:
                return f"{name} should be a str, got {T.describe_type(g)}", None
            return None, g
        if te is T.int_ or te is T.float_ or te is T.bool_:
            try:
                arr = T.to_numpy(g)
            except T.Refused as r:
                return f"{name}: {r}", None
            if T.ndarray_size(arr) != 1:
                return f"{name} should be a single number, got shape {T.ndarray_shape(arr)}", None
            val = T.ndarray_item(T.ndarray_reshape(arr, -1)[0:1])
            if te is T.int_:
                if val != T.round_(val):
                    return f"{name} should be a whole number, got {val}", None
                return None, T.int_(val)
            if te is T.bool_:
                return None, T.bool_(val)
            return None, T.float_(val)
        return f"{name}: cannot compare a {T.describe_type(g)}", None
