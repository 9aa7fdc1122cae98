"""Build the hidden reference data: ``python -m authoring.references [section ...]`` (``./course build`` runs it).

For every case of every exercise: generate the hidden inputs from a seeded
generator, run the reference implementation in float64 on the CPU (inputs and
parameters first rounded to the case's dtype), run every known mistake on the
same inputs, and save it all to ``graders/data/<section>.pt``.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

from attncourse.protocol.cases import DEVICE_ARG, StoredCase
from graders import available_sections, load_section
from graders.spec import COURSE, GENERIC_TITLES, HOW_TITLES, PRELUDE, Case, Exercise

DATA_DIR = COURSE / "graders" / "data"
FLOAT = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def define(ex: Exercise, code: str):
    """Execute solution-cell ``code`` (after the prelude and given code); return the contract object
    (wrapped in the given ``ex.wrap`` function when the exercise has one, as its hidden cells do)."""
    import contextlib
    import io

    ns: dict = {"__name__": "__graders__"}
    with contextlib.redirect_stdout(io.StringIO()):   # given cells print what the notebook shows
        exec(compile(PRELUDE + ex.given + "\n" + code, f"<{ex.name}>", "exec"), ns)
    return ns[ex.wrap](ns[ex.name]) if ex.wrap else ns[ex.name]


def _as_tensor(value):
    if isinstance(value, (str, dict)):  # a word or a table of words (e.g. "pick the family") is stored as is
        return value
    return torch.as_tensor(np.asarray(value, dtype=np.float64))


def _as_nested_list(value):
    """A matrix as nested lists of Python floats (how a value typed by hand is stored)."""
    return np.asarray(value, dtype=np.float64).tolist()


def _generate(value, gen):
    if callable(value) and not isinstance(value, type):
        return value(gen)
    return value


def _master(v):
    """Stored form: tensors become contiguous CPU float64 (bool/int kept); containers recurse."""
    if isinstance(v, np.ndarray):
        v = torch.from_numpy(v)
    if isinstance(v, torch.Tensor):
        v = v.detach().cpu()
        if v.is_floating_point():
            v = v.to(torch.float64)
        return v.contiguous().clone()
    if isinstance(v, list):
        return [_master(x) for x in v]
    if isinstance(v, tuple):
        return tuple(_master(x) for x in v)
    if isinstance(v, dict):
        return {k: _master(x) for k, x in v.items()}
    if isinstance(v, (np.floating,)):
        return float(v)
    if isinstance(v, (np.integer,)):
        return int(v)
    return v


def _rounded(v, dtype, api, context):
    """An input as the reference sees it: float tensors rounded to the case dtype, then float64."""
    if isinstance(v, torch.Tensor):
        if v.is_floating_point():
            v = v.to(dtype).to(torch.float64)
        return v.numpy().copy() if api == "numpy" else v.clone()
    if isinstance(v, str) and v == DEVICE_ARG:     # the reference runs on the CPU
        return torch.device("cpu")
    if isinstance(v, str) and v.startswith("$ctx:"):
        return context[v[5:]]
    if isinstance(v, list):
        return [_rounded(x, dtype, api, context) for x in v]
    if isinstance(v, tuple):
        return tuple(_rounded(x, dtype, api, context) for x in v)
    return v


def run_case(obj, case: Case, stored, context: dict):
    """Run ``obj`` (reference or mistake) on a stored case in float64 on the CPU; return stored-form output."""
    dtype = FLOAT[case.dtype]
    cast_dtype = dtype if case.cast else torch.float64
    args = _rounded(stored.args or [], cast_dtype, case.api, context)
    kwargs = {k: _rounded(v, cast_dtype, case.api, context) for k, v in (stored.kwargs or {}).items()}
    with torch.no_grad():
        if case.kind == "attributes":   # the contract's attributes of a freshly built module, in label order
            m = obj(**case.init)
            return _master(tuple(getattr(m, name) for name in case.labels))
        if case.kind == "module":
            torch.manual_seed(0)
            m = obj(**case.init).to(torch.float64)
            for name, value in (stored.params or {}).items():
                m.get_parameter(name).copy_(value.to(dtype).to(torch.float64))
            m.eval()
            out = m(*args, **kwargs)
        else:
            out = obj(*args, **kwargs)
    return _master(out)


def same(a, b, atol=1e-9, rtol=0.0, strict=False):
    """Stored-form outputs equal within ``atol + rtol*|b|`` (NaN == NaN); bool and, if ``strict``, integer
    tensors exactly.  ``strict`` also requires equal dtypes and container types (list vs tuple)."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape or (strict and a.dtype != b.dtype):
            return False
        if a.dtype == torch.bool or b.dtype == torch.bool or (strict and not a.is_floating_point()):
            return bool(torch.equal(a, b))
        return bool(torch.allclose(a.to(torch.float64), b.to(torch.float64), atol=atol, rtol=rtol, equal_nan=True))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if strict and type(a) is not type(b):
            return False
        return len(a) == len(b) and all(same(x, y, atol, rtol, strict) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k], atol, rtol, strict) for k in a)
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= atol + rtol * abs(b)
    return type(a) is type(b) and a == b


# How far a rebuild of the reference data may differ from the committed file: (rtol, atol) by the precision a
# stored number carries (every float is stored as float64).  Inputs are drawn in float32 (torch.randn), some
# references and probes compute in float32, and float32 rounding differs from one CPU to another (vectorised log,
# exp, sin: one float32 step, 5.96e-8, failed CI; under ATEN_CPU_CAPABILITY=default, a CPU without SIMD, inputs
# move by up to 2e-4 relative near zero and losses of 09's float32-initialised probe GPT by 1e-7).  float64
# cases are held 10x tighter, not to float64's own rounding: 09's float64 case still inits its GPT in float32
# (4e-8 apart).  atol scales with the largest magnitude of the tensor (rounding is relative to the operands).
# A different solution, input or spec moves values far more; the grader's own float32 tolerance is 1e-4.
DATA_TOLERANCE = {torch.float32: (1e-5, 1e-6), torch.float64: (1e-6, 1e-8)}


def data_precision(t: torch.Tensor, case_dtype: torch.dtype = torch.float64) -> torch.dtype:
    """The precision a stored float tensor carries: float32 when it is float32 or coarser, or every finite value is
    a float32 number (drawn or computed in float32, stored as float64), or its case is not a float64 case."""
    if case_dtype != torch.float64 or t.dtype != torch.float64:
        return torch.float32
    finite = t[torch.isfinite(t)]
    return torch.float32 if torch.equal(finite.to(torch.float32).to(torch.float64), finite) else torch.float64


def same_data(a, b, case_dtype: torch.dtype = torch.float64) -> bool:
    """Stored data ``a`` (rebuilt) equals ``b`` (committed) up to the rounding of the precision each float carries
    (:data:`DATA_TOLERANCE`, :func:`data_precision`; ``case_dtype``: the case's dtype); integers, bools, strings,
    dtypes, shapes and container types exactly, NaN only as NaN."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        if not a.is_floating_point():
            return bool(torch.equal(a, b))
        precision = min((data_precision(a, case_dtype), data_precision(b, case_dtype)), key=lambda d: d.itemsize)
        rtol, atol = DATA_TOLERANCE[precision]
        finite = b[torch.isfinite(b)]
        scale = max(1.0, finite.abs().max().item()) if finite.numel() else 1.0
        return same(a, b, atol=atol * scale, rtol=rtol, strict=True)
    if isinstance(a, float) and isinstance(b, float):
        return same_data(torch.tensor([a], dtype=torch.float64), torch.tensor([b], dtype=torch.float64), case_dtype)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same_data(x, y, case_dtype) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_data(a[k], b[k], case_dtype) for k in a)
    return same(a, b, strict=True)


def case_inputs(case: Case) -> dict:
    """A call or module case's hidden inputs, drawn from its seeded generator, in stored form."""
    gen = torch.Generator().manual_seed(case.seed)
    drawn = {"args": _master(list(_generate(case.args, gen))),
             "kwargs": {k: _master(_generate(v, gen)) for k, v in case.kwargs.items()}}
    if case.kind == "module":
        drawn["params"] = {k: _master(v) for k, v in (_generate(case.params, gen) or {}).items()}
    return drawn


def build_case(ex: Exercise, case: Case, context: dict, messages: dict, log=print, inputs: dict | None = None) -> dict:
    """The stored form of one hidden case (:class:`attncourse.protocol.cases.StoredCase`): inputs, reference, mistakes.

    ``inputs``: a stored case whose inputs (args, kwargs, params) to run on instead of drawing them anew."""
    stored = case.stored()
    stored.points = None if case.points is None else float(case.points)
    stored.how = None
    if case.kind == "value":
        # A hand-computed answer: the reference and each mistake are solution-cell code
        # that assigns the value; extra wrong values may be listed in ``mistake_values``.
        # A matrix typed by hand (the reference assigns a list) is stored as nested lists: the judge then takes only
        # a list of numbers for it, and refuses an array or a tensor (an object computed in the notebook).
        reference = define(ex, ex.reference)
        store = _as_nested_list if isinstance(reference, (list, tuple)) else _as_tensor
        stored.expected = _master(store(reference))
        stored.mistakes = {}
        for mistake in ex.mistakes:
            stored.mistakes[f"{ex.name}.{mistake.key}"] = _master(store(define(ex, mistake.code)))
        for key, (message, value) in case.mistake_values.items():
            messages[f"{ex.name}.{key}"] = message
            stored.mistakes[f"{ex.name}.{key}"] = _master(store(value))
        return stored.to_dict()
    drawn = case_inputs(case) if inputs is None else inputs
    stored.args, stored.kwargs = drawn.get("args", []), drawn.get("kwargs", {})
    if case.kind in ("module", "attributes"):
        stored.init = dict(case.init)
    if case.kind == "module":
        stored.params = drawn.get("params", {})
    if case.kind == "raises":
        return stored.to_dict()
    how = case.how if case.how is not None else ex.how
    if how is not None and case.kind in ("call", "module", "property"):   # the rules' bounds, from these inputs
        stored.how = how.stored(stored.args, stored.kwargs)
    reference = define(ex, ex.reference)
    stored.expected = run_case(reference, case, stored, context)
    stored.mistakes = {}
    for mistake in ex.mistakes:
        full = f"{ex.name}.{mistake.key}"
        try:
            with np.errstate(all="ignore"):   # a mistake may overflow by design (the unstable softmax)
                out = run_case(define(ex, mistake.code), case, stored, context)
        except Exception as exc:  # a mistake that crashes on this case has no output to match
            log(f"    {full} on {case.name}: raises {type(exc).__name__} (no stored output)")
            continue
        if same(out, stored.expected, atol=1e-9):
            continue  # indistinguishable here (e.g. a device mistake on the CPU)
        stored.mistakes[full] = out
    return stored.to_dict()


def handout_source(code: str) -> str:
    """What a find-the-bug cell shows the student: the handout mistake's code without the solution markers."""
    return "\n".join(line for line in code.splitlines()
                     if line.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION")).strip("\n")


def check_handout(ex: Exercise, stored_cases: dict, context: dict) -> str:
    """The code a find-the-bug exercise hands out, after proving that it fails every case of the exercise.

    An unfixed handout must earn nothing: each case's output must differ from the reference beyond any
    grading tolerance (or the handout must raise).  Raises ``ValueError`` (the build's one line) otherwise.
    """
    keys = [m.key for m in ex.mistakes]
    if ex.handout not in keys:
        raise ValueError(f"{ex.name}: handout={ex.handout!r} is not one of its mistakes ({', '.join(keys)})")
    mistake = ex.mistakes[keys.index(ex.handout)]
    for case in ex.cases:
        stored = StoredCase.from_dict(stored_cases[f"{ex.name}:{case.name}"])
        if case.kind == "value":
            passes = same(_master(_as_tensor(define(ex, mistake.code))), stored.expected, atol=1e-4, rtol=1e-3)
        elif case.kind in ("call", "module"):
            try:
                out = run_case(define(ex, mistake.code), case, stored, context)
            except Exception:  # noqa: BLE001 - a handout that raises fails the case
                continue
            passes = same(out, stored.expected, atol=1e-4, rtol=1e-3)
        else:
            raise ValueError(f"{ex.name}: a find-the-bug exercise has call, module or value cases only "
                             f"({case.name} is a {case.kind} case)")
        if passes:
            raise ValueError(f"{ex.name}: the handout {ex.handout!r} passes the case {case.name!r}: an unfixed "
                             "handout would earn its points (make the case show the bug, or hand out another mistake)")
    handed = handout_source(mistake.code)
    if handed == handout_source(ex.reference or ""):
        raise ValueError(f"{ex.name}: the handout {ex.handout!r} is the reference code")
    return handed


def build_section(name: str, log=print, inputs: dict | None = None) -> dict:
    """A section's reference data; ``inputs``: stored cases (key -> stored form) whose inputs to run on, where
    there is one of the key, instead of drawing them anew (the test of the committed data)."""
    section = load_section(name)
    data = {"section": name, "messages": {}, "cases": {}, "cells": {}, "causes": {}, "titles": {}}
    handouts = {}
    for ex in section.exercises:
        data["cells"][ex.name] = ex.cell           # the solution cell (the judge: is it as handed out?)
        for m in ex.mistakes:
            data["messages"][f"{ex.name}.{m.key}"] = m.message
            cause = m.cause or m.key               # one cause, named once, whichever exercise made it
            data["causes"][f"{ex.name}.{m.key}"] = cause
            data["titles"].setdefault(cause, section.titles.get(cause) or m.message)
        for key in (ex.how.messages() if ex.how else {}):
            data["causes"][f"{ex.name}.{key}"] = key
        for case in ex.cases:
            for key in (case.how.messages() if case.how else {}):
                data["causes"][f"{ex.name}.{key}"] = key
            for key, (message, _) in case.mistake_values.items():   # a wrong prediction's cause is its key
                data["causes"][f"{ex.name}.{key}"] = key
                data["titles"].setdefault(key, section.titles.get(key) or message)
        if ex.how is not None or any(c.how is not None for c in ex.cases):
            for rule in HOW_TITLES:
                data["causes"].setdefault(f"{ex.name}.how.{rule}", f"how.{rule}")
        data["messages"].update({f"{ex.name}.{k}": v for c in [ex, *ex.cases] if getattr(c, "how", None)
                                 for k, v in c.how.messages().items()})
        data["messages"].update({f"{ex.name}.{key}": text for key, text in ex.messages.items()})
        context = ex.context() if ex.context else {}
        for case in ex.cases:
            log(f"  {name}: {ex.name}:{case.name}")
            key = f"{ex.name}:{case.name}"
            data["cases"][key] = build_case(ex, case, context, data["messages"], log, (inputs or {}).get(key))
        if ex.handout:
            handouts[ex.cell] = check_handout(ex, data["cases"], context)
    if handouts:   # grade_id -> the code the student's notebook shows (judge.handout.HandOut)
        data["handouts"] = handouts
    for cause, title in GENERIC_TITLES.items():  # causes the judge names by itself (a fixed device, a fixed dtype)
        data["titles"].setdefault(cause, section.titles.get(cause) or title)
    for key, cause in data["causes"].items():   # a rule on how is named by its message (the section's words)
        if cause.startswith("how."):
            data["titles"].setdefault(cause, data["messages"].get(key) or HOW_TITLES.get(cause[4:], cause))
    return data


def write_section(name: str, out_dir: Path = DATA_DIR, log=print) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    data = build_section(name, log)
    path = out_dir / f"{name}.pt"
    torch.save(data, path)
    return path


def main(argv=None):
    names = (argv if argv is not None else sys.argv[1:]) or available_sections()
    for name in names:
        print(f"building {name}")
        print(f"  wrote {write_section(name)}")


if __name__ == "__main__":
    main()
