"""The verdict on a record, made where no student code runs.

:func:`judge_record` takes a stored case (with its reference output and known
mistakes' outputs, :class:`attncourse.protocol.cases.StoredCase`) and a record of what the
student's code gave back (:mod:`attncourse.protocol.records`), and returns ``None`` when
the check passes, else the message the student sees (a :class:`Problem`): wrong type,
device, dtype, shape, NaN/inf, an exception explained, a failed property, or wrong
values with the most likely mistake named (:mod:`judge.diagnose`).  What the
judge named in a message -- the mistake, a check's own time or memory limit -- also
travels beside it as data (``Problem.cause``, ``Problem.limit``), never read back
from the words.  It never shows reference values.

It runs in the nbgrader process (:class:`judge.preprocessors.JudgeRecords`)
and, for instructors and the test suite, inside :class:`attncourse.kernel.grader.Grader`
when no autograder is judging.
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass, replace

import numpy as np

from attncourse.protocol.cases import DEVICE_ARG, StoredCase
from .diagnose import matches, which_mistake_key
from attncourse.protocol.records import Got, decode

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
GENERIC_HINT = "It matches none of the common mistakes; re-check each step on a tiny example by hand."
# The causes the judge names without a catalogued mistake (the class report counts them as any other cause).
FIXED_DEVICE, FIXED_DTYPE = "fixed_device", "fixed_dtype"


class Problem(str):
    """Why a check failed, as the student reads it; what the judge named in it is data beside the words:
    ``cause`` the most likely mistake (the text after "Most likely cause:"), ``mistake`` its key in the
    section's data (``"exercise.key"`` of a catalogued mistake, ``"exercise.how.<rule>"`` of a rule on how the
    answer is computed), ``limit`` the check's own limit it hit ("check timed out", "check ran out of
    memory"), ``tampering`` a record no honest kernel makes."""

    cause: str | None = None
    mistake: str | None = None
    limit: str | None = None
    tampering: bool = False     # a record no honest kernel makes: the judge scores the whole cell 0


def problem(message: str, cause: str | None = None, limit: str | None = None, mistake: str | None = None) -> Problem:
    """A :class:`Problem`; with a ``cause``, the message ends "Most likely cause: <cause>"."""
    p = Problem(f"{message}. Most likely cause: {cause}" if cause else message)
    p.cause = cause.strip().split("\n")[0].rstrip(".") if cause else None
    p.limit = limit
    p.mistake = mistake
    return p


def suspect(message: str) -> Problem:
    """A :class:`Problem` with a record no honest kernel makes (tampering suspected): its cell scores 0."""
    p = Problem(message)
    p.tampering = True
    return p


class Refused(Exception):
    """An answer that cannot be read as numbers."""


@dataclass
class Cmp:
    """How one case compares: the API it expects, the device and dtype its inputs had, the tolerances."""

    api: str = "torch"
    device: str | None = None      # "cpu", "cuda", "meta"... (None: a hand-computed value)
    dtype: str | None = None       # "torch.float32"... (None: any)
    atol: float = 1e-4
    rtol: float = 1e-4
    # The device comes from an argument (``causal_mask(T, device=...)``, the case passes :data:`DEVICE_ARG`), not
    # from an input tensor: a wrong device is then "asked for", not "the input's".
    device_asked: bool = False

    @property
    def meta(self) -> bool:
        return self.device == "meta"

    @classmethod
    def for_case(cls, spec: StoredCase, device: str | None) -> "Cmp":
        dtype = None if spec.kind == "value" else f"torch.{spec.dtype}"
        if spec.atol is not None:
            atol, rtol = spec.atol, spec.rtol or 0.0
        else:
            kind = "cpu" if device in (None, "cpu", "meta") else "accel"
            atol, rtol = TOLERANCES[(spec.dtype if spec.kind != "value" else "float32", kind)]
        asked = DEVICE_ARG in _strings(spec.args) + _strings(list((spec.kwargs or {}).values()))
        return cls(api=spec.api, device=device, dtype=dtype, atol=atol, rtol=rtol, device_asked=asked)


def _strings(value, depth=0) -> list:
    """The plain strings among a case's stored arguments (nested lists and tuples included)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)) and depth < 4:
        return [s for v in value for s in _strings(v, depth + 1)]
    return []


def expected_device(spec: StoredCase) -> str | None:
    """The device type a case's inputs are on, as this machine resolves it (``best`` = CUDA when present)."""
    if spec.kind in ("value", "raises", "attributes"):
        return None
    if spec.device == "best":
        from attncourse.teach.devices import best_device

        return best_device().type
    return spec.device


class Exact(np.ndarray):
    """The float64 values of a stored bool or integer tensor, with its dtype (``torch_dtype``): a torch answer
    must have that very dtype (a mask is bool, token ids are int64), which values alone cannot show."""

    torch_dtype: str | None = None


def plain(obj):
    """Stored reference structure -> plain python/numpy (float64 ndarrays; :class:`Exact` for bool/int tensors)."""
    import torch

    from attncourse.teach.checks import as_numpy

    if isinstance(obj, torch.Tensor):
        arr = as_numpy(obj)
        if obj.is_floating_point() or obj.is_complex():
            return arr
        arr = arr.view(Exact)
        arr.torch_dtype = str(obj.dtype)
        return arr
    if isinstance(obj, list):
        return [plain(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(plain(v) for v in obj)
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    return obj


def judge_record(spec: StoredCase | None, record: dict, messages: dict) -> Problem | None:
    """``None`` if the record shows a correct answer for ``spec``, else what is wrong (no reference values).

    A case with rules on how its answer is computed (``spec.how``) is judged on them once its answer is right
    (:func:`judge_how`): a wrong answer is told what is wrong with it first."""
    found = _judge(spec, record, messages)
    if found is None and spec is not None and spec.how:
        found = judge_how(spec, record, messages)
    return found if found is None or isinstance(found, Problem) else Problem(found)


# -- a cell's score from its checks ------------------------------------------------------------------------------
def earn(checks: list, points: float) -> None:
    """Each check's share of the cell's ``points``: its weight, scaled so that the weights sum to the points (the
    build makes them equal; data built before a change of points still scores the share)."""
    total = sum(c["weight"] for c in checks)
    for c in checks:
        c["weight"] = round(points * c["weight"] / total, 6) if total else 0.0
        c["points"] = c["weight"] if c["passed"] else 0.0


def cell_score(points: float, checks: list) -> float:
    """What a cell earns from its checks: the points of those that pass (all of them: exactly ``points``)."""
    if checks and all(c["passed"] for c in checks):
        return float(points)
    return max(0.0, min(float(points), round(sum(c["points"] for c in checks if c["passed"]), 6)))


# -- how the answer was computed ------------------------------------------------------------------------------
HOW_WORDS = {   # what a broken rule tells the student when the section gives no words of its own
    "widest": "one operation combined {got} numbers into one, more than this case allows ({limit}): the "
              "computation was done on the whole at once instead of in the pieces the exercise asks for",
    "largest": "a tensor of {got} elements was made, more than this case allows ({limit}): the computation "
               "holds what the exercise asks it never to hold",
    "count": "{got} tensor operations ran, more than this case allows ({limit}): a Python loop where the "
             "exercise asks for whole-tensor operations",
    "left": "{got} numbers left torch for Python or NumPy (.numpy(), .tolist(), .item(), float(...)): this "
            "exercise is graded on the tensor operations it runs, which the grader sees only in torch",
}


def _matches(name: str, pattern: str) -> bool:
    """A recorded name against a rule's pattern (``*`` stands for any run of characters)."""
    return fnmatch.fnmatchcase(name, pattern)


def judge_how(spec: StoredCase, record: dict, messages: dict) -> Problem | None:
    """The rules of ``spec.how`` against the record's ``how`` facts (:func:`attncourse.protocol.records.how_facts`):
    a library call the rules refuse, more numbers combined at once, a larger tensor, more operations or more
    numbers leaving torch than the case allows.  The section's words for a rule are ``messages["<exercise>.how.
    <rule>"]``."""
    from attncourse.protocol.records import how_facts

    rules = spec.how or {}
    facts = how_facts(record)
    if facts is None:
        return suspect("the grader recorded no account of how the answer was computed (tampering suspected)")
    ex = record.get("exercise")

    def broken(rule: str, seen: str, default: str) -> Problem:
        words = messages.get(f"{ex}.how.{rule}") or default
        return problem(f"The answer is right but {seen}", words, mistake=f"{ex}.how.{rule}")

    names = facts["calls"] + facts["libs"] + facts["ops"]
    for group, patterns in rules.get("refuse") or []:
        hit = next((n for n in names for p in patterns if _matches(n, p)), None)
        if hit is not None:
            return broken(group, f"the computation called {hit}",
                          "a library function does what this exercise asks you to build")
    for rule in ("left", "widest", "largest", "count"):
        limit = rules.get(rule)
        if limit is not None and facts[rule] > limit:
            seen = HOW_WORDS[rule].format(got=facts[rule], limit=limit)
            head, _, tail = seen.partition(": ")
            return broken(rule, head, tail)
    return None


def _judge(spec: StoredCase | None, record: dict, messages: dict):
    if spec is None or record.get("problem"):
        return record.get("problem") or "no such hidden case"
    device = expected_device(spec)
    cmp = Cmp.for_case(spec, device)
    if spec.kind not in ("value", "raises") and record.get("device") is not None:
        used = str(record["device"]).split(":")[0]
        if used != device:  # the kernel ran it elsewhere than this machine's rules say: not this case's record
            return suspect(f"the check ran on '{used}' but this case runs on '{device}' (tampering suspected)")
    def wording(key: str) -> str | None:   # the section's own words for this exercise (from its spec)
        return messages.get(f"{record.get('exercise')}.{key}")

    if spec.kind == "raises":
        return _judge_raise(spec, record, wording)
    if "error" in record:
        return explain_exception(record["error"], device)
    if "answer" not in record:
        return "the grader recorded no answer"
    try:
        got = decode(record["answer"])
    except (ValueError, KeyError, TypeError):
        return suspect("the grader's record is malformed (tampering suspected)")
    if spec.kind == "property":
        return _judge_property(spec, got, cmp, wording)
    if spec.kind == "attributes":
        return _judge_attributes(spec, got, cmp, messages, wording)
    return compare(got, spec, cmp, messages)


def _judge_attributes(spec: StoredCase, got: Got, cmp: Cmp, messages: dict, wording) -> str | None:
    """A case of kind ``attributes``: the kernel built the module and recorded, as a dict, those of the attributes
    named in ``labels`` it has.  A missing one gets the section's words (``wording("attribute.<name>")``); the
    values are then compared in label order, a catalogued mistake named as for any answer."""
    if got.kind != "dict":
        return suspect("the grader's record is malformed (tampering suspected)")
    have = dict(zip(got.keys, got.items))
    names = list(spec.labels or [])
    for name in names:
        if name not in have:
            return (wording(f"attribute.{name}") or f"the module has no attribute '{name}' after __init__: the "
                    f"contract names it (set self.{name} in __init__)")
    values = Got("tuple", type_name="tuple", items=[have[n] for n in names])
    shown = replace(spec, labels=[f"the attribute self.{n}" for n in names])
    return compare(values, shown, cmp, messages)


def explain_exception(error: dict, device: str | None) -> Problem:
    """The message for an exception raised by the student's code (from its recorded type and text)."""
    name = str(error.get("type", "Exception"))
    full = str(error.get("text", ""))
    text = full.split("\n")[0][:300]
    msg = f"raised {name}: {text}"
    low = text.lower()
    if name == "SystemExit":
        return Problem("the code tried to exit the interpreter (SystemExit); it earns nothing for this check")
    if name == "NotImplementedError" and not text:
        return Problem("not written yet: the cell still raises NotImplementedError (replace the stub with your code)")
    if name == "_CheckTimeout":
        return problem(f"timed out: {text}; it earns nothing for this check", limit="check timed out")
    if name == "MemoryError" or "can't allocate memory" in low or "out of memory" in low:
        return problem("ran out of memory (the grading kernel's memory is limited): " + text[:120],
                       "a huge intermediate tensor or list.", limit="check ran out of memory")
    if "device" in low or "meta" in low:
        return problem(msg, "a tensor is created on a fixed device (e.g. torch.ones(T, T) "
                       "or .to('cpu') inside the function); create new tensors on the input's device "
                       "(device=x.device) so the code runs unchanged on CPU and GPU.", mistake=FIXED_DEVICE)
    if "dtype" in low or "expected scalar type" in low or "same dtype" in low:
        return problem(msg, "a tensor is created with a fixed dtype; use dtype=x.dtype "
                       "(or torch.finfo(x.dtype)) so float64 and bfloat16 inputs work.", mistake=FIXED_DTYPE)
    return Problem(msg)


def _judge_raise(spec: StoredCase, record: dict, wording) -> str | None:
    allowed = spec.raises or ["ValueError", "KeyError"]
    err = record.get("error")
    if err is None:
        return f"expected a clear error ({' or '.join(allowed)}) for this input, but nothing was raised"
    if not any(a in (err.get("mro") or []) for a in allowed):
        return f"raised {err.get('type')}; expected {' or '.join(allowed)} with a clear message"
    if not str(err.get("text", "")).strip():
        return "the error has no message; " + (wording("raises.no_message") or "say what is wrong with the input")
    return None


# -- values -----------------------------------------------------------------------------------------
def compare(got: Got, spec: StoredCase, cmp: Cmp, messages: dict) -> str | None:
    expected = plain(spec.expected)
    labels = spec.labels
    if isinstance(expected, tuple):
        if got.kind not in ("tuple", "list"):
            names = ", ".join(labels) if labels else f"{len(expected)} values"
            return f"should return a tuple ({names}), got {got.describe()}"
        if len(got.items) != len(expected):
            return f"should return {len(expected)} values, got {len(got.items)}"
        parts = list(zip(got.items, expected))
        names = labels or [f"value {i}" for i in range(len(expected))]
    else:
        parts, names = [(got, expected)], [labels[0] if labels else "the result"]
    nonfinite, converted = _check_parts([(g, e, name) for (g, e), name in zip(parts, names)], cmp)
    if converted is None:
        return nonfinite
    if cmp.meta:   # no values: only the structure is graded
        return nonfinite if isinstance(nonfinite, ExtraKeys) else None
    value = tuple(converted) if isinstance(expected, tuple) else converted[0]
    if not nonfinite and matches(value, expected, cmp.atol, cmp.rtol):
        return None
    mistakes = {k: plain(v) for k, v in (spec.mistakes or {}).items()}
    key = which_mistake_key(value, mistakes, cmp.atol, cmp.rtol)
    hint = messages.get(key, key) if key else None
    wrong, verb = _which_part_wrong(value, expected, names, cmp)
    if hint:
        return problem(nonfinite if isinstance(nonfinite, ExtraKeys) else f"{wrong} {verb} wrong", hint,
                       mistake=key)
    if nonfinite:   # NaN or inf (or extra keys) that no catalogued mistake explains: the general causes
        return nonfinite
    return f"{wrong} {verb} wrong. {spec.hint or GENERIC_HINT}"


def _which_part_wrong(value, expected, names, cmp):
    """('Output and weights', 'are'): which returned values differ, capitalised, with the verb."""
    if not isinstance(expected, tuple):
        return names[0][0].upper() + names[0][1:], "is"
    bad = [n for g, e, n in zip(value, expected, names) if not matches(g, e, cmp.atol, cmp.rtol)]
    text = " and ".join(bad) if bad else "the combination of values"
    return text[0].upper() + text[1:], ("are" if len(bad) > 1 else "is")


def to_numpy(g: Got) -> np.ndarray:
    """float64 values of a plain answer: tensor, ndarray, nested list/tuple of numbers, or a number."""
    if g.kind in ("tensor", "ndarray"):
        if g.array is None:
            if g.kind == "tensor" and g.device == "meta":
                raise Refused("the tensor is on the meta device and has no values")
            raise Refused(f"expected a numeric array, got an array of dtype {g.dtype}")
        return g.array
    if g.kind in ("list", "tuple", "bool", "int", "float", "npnum"):
        try:
            return np.array(_nested_numbers(g), dtype=np.float64)
        except ValueError as e:
            raise Refused(f"the nested lists are ragged ({e})")
    raise Refused(f"expected a NumPy array, a torch.Tensor or a list of numbers, got {g.describe()}")


def _nested_numbers(g: Got, depth=0):
    if depth > 8:
        raise Refused("nested too deeply")
    if g.kind in ("list", "tuple"):
        return [_nested_numbers(v, depth + 1) for v in g.items]
    if g.kind in ("bool", "int", "float", "npnum"):
        return float(g.value)
    raise Refused(f"expected numbers, found {g.describe()}")


class Partial(Problem):
    """A problem of :func:`check_part` that still has a value.  The caller first asks whether a catalogued
    mistake produces those very values (its message names the cause); if none does, this message is shown."""


class NonFinite(Partial):
    """NaN or inf where the reference has none (a catalogued mistake may explain them, e.g. an inverted mask that
    leaves a row with no key)."""


class ExtraKeys(Partial):
    """A dict with every expected key and more: its value holds the extra entries too (a catalogued mistake may
    produce that very dict); the message names a few of the extra keys."""


def _few(keys: list, n: int = 5) -> str:
    """A list of keys as the feedback shows it: all of them when few, else the first ``n`` and how many in all."""
    return repr(keys) if len(keys) <= n else f"{keys[:n]!r} and {len(keys) - n} more"


def _check_parts(parts, cmp: Cmp):
    """:func:`check_part` over ``(got, expected, name)`` triples: ``(problem, values)``.  The first problem that
    has no value ends it (values ``None``); a :class:`Partial` one is kept (the first) and the values go on."""
    values, nonfinite = [], None
    for g, e, name in parts:
        problem, value = check_part(g, e, name, cmp)
        if problem and not isinstance(problem, Partial):
            return problem, None
        nonfinite = nonfinite or problem
        values.append(value)
    return nonfinite, values


def check_part(g: Got, e, name: str, cmp: Cmp):
    """Type/device/dtype/shape/finiteness of one returned value; returns (problem, plain value).  A
    :class:`Partial` problem comes with the value; any other problem with ``None``."""
    if isinstance(e, np.ndarray):
        if cmp.api == "torch":
            if g.kind != "tensor":
                return f"{name} should be a torch.Tensor, got {g.describe()}", None
            if cmp.device is not None and g.device.split(":")[0] != cmp.device:
                if cmp.device_asked:   # no input tensor: the device was an argument
                    return problem(f"{name} is on device '{g.device}' but device '{cmp.device}' was asked for "
                                   "(the device argument)",
                                   "the device argument is ignored: the tensor is created on a fixed device (the "
                                   "default one) or moved with .to('cpu')/.cuda(); create it directly on `device`.",
                                   mistake=FIXED_DEVICE), None
                return problem(f"{name} is on device '{g.device}' but the input was on '{cmp.device}'",
                               "a tensor is created on a fixed device or moved with .to('cpu')/.cuda(); use "
                               "the input's device.", mistake=FIXED_DEVICE), None
            exact = getattr(e, "torch_dtype", None)
            if exact is not None and g.dtype != exact:
                return f"{name} should be a {exact} tensor, got {g.dtype}", None
            if exact is None and cmp.dtype is not None and g.is_float and g.dtype != cmp.dtype:
                return problem(f"{name} has dtype {g.dtype} but the input was {cmp.dtype}", "a tensor "
                               "is created with a fixed dtype (e.g. torch.tensor(...) or float32 constants); keep "
                               "the input's dtype.", mistake=FIXED_DTYPE), None
            shape = g.shape
        elif cmp.api == "numpy":
            if g.kind != "ndarray":
                return f"{name} should be a NumPy array, got {g.describe()}", None
            shape = g.shape
        else:  # any array-like
            try:
                shape = g.shape if g.kind in ("tensor", "ndarray") else tuple(to_numpy(g).shape)
            except Refused as r:
                return f"{name}: {r}", None
        want = tuple(int(s) for s in e.shape)
        if tuple(shape) != want:
            return f"{name} has shape {tuple(shape)}, expected {want}", None
        if cmp.meta:
            return None, None
        try:
            value = to_numpy(g)
        except Refused as r:
            return f"{name}: {r}", None
        if np.isnan(value).any() and not np.isnan(e).any():
            return NonFinite(f"{name} contains NaN. Common causes: exp() of large scores overflowing to inf "
                             "(subtract each row's maximum before exp), a row where every key is masked (softmax "
                             "over all -inf), or subtracting inf from inf."), value
        if np.isinf(value).any() and not np.isinf(e).any():
            return NonFinite(f"{name} contains inf: a masked score leaked through, or an overflow in exp()."), value
        return None, value
    if isinstance(e, (list, tuple)):
        if g.kind not in ("list", "tuple"):
            return f"{name} should be a list, got {g.describe()}", None
        if len(g.items) != len(e):
            return f"{name} has {len(g.items)} items, expected {len(e)}", None
        return _check_parts([(gi, ei, f"{name}[{i}]") for i, (gi, ei) in enumerate(zip(g.items, e))], cmp)
    if isinstance(e, dict):
        if g.kind != "dict":
            return f"{name} should be a dict, got {g.describe()}", None
        have = dict(zip(g.keys, g.items))
        missing = [k for k in e if k not in have]
        extra = [k for k in have if k not in e]
        if missing:
            also = f" and has keys it should not have: {_few(extra)}" if extra else ""
            return f"{name} is missing the keys {_few(missing)}{also}", None
        found, values = _check_parts([(have[k], e[k], f"{name}[{k!r}]") for k in e], cmp)
        if values is None or not extra:
            return found, (None if values is None else dict(zip(e, values)))
        # Every expected key and more: refused, naming a few extra keys.  The extra values are read like the
        # expected ones (the first as the template) so that a catalogued mistake's dict can still be recognised.
        refused = f"{name} has keys it should not have: {_few(extra)}"
        template = next(iter(e.values()), None)
        _, more = _check_parts([(have[k], template, f"{name}[{k!r}]") for k in extra], cmp) if e else (None, None)
        if more is None:
            return Problem(refused), None
        return (found or ExtraKeys(refused)), {**dict(zip(e, values)), **dict(zip(extra, more))}
    if isinstance(e, str):
        if g.kind != "str":
            return f"{name} should be a str, got {g.describe()}", None
        return None, g.value
    if isinstance(e, (bool, int, float)):
        try:
            arr = to_numpy(g)
        except Refused as r:
            return f"{name}: {r}", None
        if arr.size != 1:
            return f"{name} should be a single number, got shape {arr.shape}", None
        val = float(arr.reshape(-1)[0])
        if isinstance(e, bool):
            return None, bool(val)
        if isinstance(e, int):
            if val != round(val):
                return f"{name} should be a whole number, got {val}", None
            return None, int(val)
        return None, val
    return f"{name}: cannot compare a {g.describe()}", None


# -- properties (graded behaviour that any correct answer has, whatever its exact numbers) -----------
def _judge_property(spec: StoredCase, got: Got, cmp: Cmp, wording) -> str | None:
    """A case of kind ``property``: its stored input is ``(2, T, d)``, one query vector repeated at every
    position then one key vector (``x[0, t] = q``, ``x[1, t] = k``); ``labels`` name the invariants of a
    position-dependent map ``f`` to check: ``norms`` (lengths kept), ``relative`` (``f(x)[0, m] · f(x)[1, n]``
    depends on ``m - n`` only), ``moves`` (it does depend on the offset).  What a failure tells the student
    is the section's wording (``wording("property.<name>")``)."""
    x = plain(spec.args[0])
    problem, y = check_part(got, x, "the output", cmp)
    if problem:
        return problem
    if cmp.meta:
        return None
    for name in spec.labels or []:
        if not _holds(name, x, y, cmp.atol, cmp.rtol):
            return wording(f"property.{name}") or f"the output does not have the property '{name}'"
    return None


def _close(a, b, atol, rtol) -> bool:
    return a.shape == b.shape and bool(np.allclose(a, b, atol=atol, rtol=rtol))


def _holds(name, x, y, atol, rtol):
    if name == "norms":
        return _close(np.sqrt((y * y).sum(-1)), np.sqrt((x * x).sum(-1)), atol, rtol)
    scores = y[0] @ y[1].T                              # (T, T): query at m, key at n
    scale = float(np.abs(scores).max()) + 1.0
    tol = atol * scale + rtol * scale
    shifted, base = scores[1:, 1:], scores[:-1, :-1]     # (m+1, n+1) against (m, n)
    if name == "relative":
        return _close(shifted, base, tol, 0.0)
    if name == "moves":
        down = np.abs(scores[1:, :] - scores[:-1, :])    # move the query, keep the key
        return float(down.max()) > 10 * tol
    raise ValueError(f"unknown property {name!r}")
