"""How an answer was computed: the kernel's record (attncourse/kernel/watch.py) and the judge's rules on it.

The record must see a library call or a whole-row computation however it is written (under ``torch.no_grad``, in
place, through ``torch.ops``, a compiled function, a view, a NumPy detour), on the CPU and the ``meta`` device and in
float32/float64/bfloat16; each trick is paired with its honest base (the same computation done blockwise, or the
library call left in plain sight).  What it cannot see (code that pops PyTorch's modes) is the forger's case: the
judge then still needs the right values, so the forger earns what an honest computation of them earns
(docs/GRADING.md).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attncourse.kernel.watch import Watch
from attncourse.protocol.cases import StoredCase
from judge.verdict import judge_how


def record(fn, *args):
    w = Watch(fn)
    with torch.no_grad(), w:
        fn(*args)
    return w.record()


def blockwise_softmax(x, block=2):
    m = torch.full(x.shape[:-1] + (1,), float("-inf"), dtype=x.dtype, device=x.device)
    l = torch.zeros_like(m)
    for s in range(0, x.shape[-1], block):
        xb = x[..., s:s + block]
        m_new = torch.maximum(m, xb.amax(-1, keepdim=True))
        l = l * torch.exp(m - m_new) + torch.exp(xb - m_new).sum(-1, keepdim=True)
        m = m_new
    return torch.exp(x - m) / l


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_a_whole_row_softmax_is_seen_on_every_device_and_dtype(device, dtype):
    x = torch.randn(3, 8).to(device=device, dtype=dtype)
    whole = record(lambda t: torch.softmax(t, -1), x)
    assert "torch.softmax" in whole["calls"] and "aten._softmax" in whole["ops"] and whole["widest"] == 8
    honest = record(blockwise_softmax, x)      # the same numbers, two columns at a time
    assert honest["widest"] == 2 and not any("softmax" in n for n in honest["calls"] + honest["ops"])
    assert honest["largest"] == 24 and honest["count"] > whole["count"]


def test_library_calls_are_seen_under_every_disguise():
    x = torch.randn(2, 4, 8)
    ln = torch.nn.LayerNorm(8, elementwise_affine=False)
    cases = {
        "no_grad": (lambda t: torch.softmax(t, -1), "aten._softmax"),
        "method": (lambda t: t.softmax(-1), "torch.Tensor.softmax"),
        "functional": (lambda t: F.softmax(t, dim=-1), "torch.nn.functional.softmax"),
        "torch.ops": (lambda t: torch.ops.aten._softmax(t, -1, False), "aten._softmax"),
        "module": (ln, "torch.nn.functional.layer_norm"),
        "sdpa": (lambda t: F.scaled_dot_product_attention(t, t, t), "torch.nn.functional.scaled_dot_product_attention"),
        "compiled": (torch.compile(lambda t: torch.softmax(t, -1), backend="eager"), "torch.softmax"),
    }
    warm = torch.compile(lambda t: torch.softmax(t, -1), backend="aot_eager")
    warm(x)                                     # compiled and run before the check: its graph runs ATen ops
    cases["compiled_warm"] = (warm, "aten._softmax")
    for name, (fn, seen) in cases.items():
        got = record(fn, x)
        assert seen in got["calls"] + got["ops"], (name, got)
    # past the function mode (DisableTorchFunction) the ATen operation still shows
    hidden = record(lambda t: _without_function_modes(lambda: torch.softmax(t, -1)), x)
    assert "aten._softmax" in hidden["ops"] and hidden["widest"] == 8


def _without_function_modes(fn):
    with torch._C.DisableTorchFunction():
        return fn()


def test_views_and_in_place_results_are_not_new_tensors_but_copies_are():
    x = torch.randn(4, 1)
    view = record(lambda t: t.expand(4, 1000), x)
    copy = record(lambda t: t.expand(4, 1000).contiguous(), x)
    inplace = record(lambda t: t.clone().exp_(), x)
    assert view["largest"] == 0 and copy["largest"] == 4000 and inplace["largest"] == 4


def test_numbers_leaving_torch_are_counted():
    x = torch.randn(3, 8)
    detour = record(lambda t: torch.from_numpy(np.exp(t.numpy())), x)
    listed = record(lambda t: torch.tensor(t.tolist()), x)
    scalar = record(lambda t: t * float(t.shape[-1]), x)    # a shape is a Python int already: nothing leaves
    assert detour["left"] == 24 and listed["left"] == 24 and scalar["left"] == 0


def test_other_libraries_called_by_the_answer_are_listed():
    import functools

    import scipy.special

    ns: dict = {"__name__": "__answer__"}
    exec("import scipy.special\ndef f(x):\n    return scipy.special.softmax(x, axis=-1)\n", ns)
    x = np.random.rand(3, 4)
    for fn in (ns["f"], scipy.special.softmax):
        w = Watch(fn)
        with w:
            fn(x)
        assert "scipy.special._logsumexp.softmax" in w.record()["libs"], fn
    bound = functools.partial(scipy.special.softmax, axis=-1)
    w = Watch(bound, caller=globals())
    with w:
        bound(x)                                # called from here: this module is the caller it was told
    assert "scipy.special._logsumexp.softmax" in w.record()["libs"]
    w = Watch(ns["f"])
    with w:
        np.exp(x).sum(-1)                       # NumPy itself is not listed
    assert w.record()["libs"] == []


def _case(**how):
    return StoredCase(kind="call", how={"refuse": [], **how})


def test_the_judge_refuses_what_the_rules_name_and_passes_the_honest_record():
    x = torch.randn(3, 8)
    rules = {"refuse": [["softmax", ["torch.softmax", "aten._softmax"]]], "widest": 4}
    spec = _case(**rules)
    whole = {"exercise": "online_softmax", "how": record(lambda t: torch.softmax(t, -1), x)}
    honest = {"exercise": "online_softmax", "how": record(blockwise_softmax, x)}
    refused = judge_how(spec, whole, {"online_softmax.how.softmax": "a library softmax"})
    assert refused and "torch.softmax" in refused and refused.mistake == "online_softmax.how.softmax"
    assert judge_how(spec, honest, {}) is None
    wide = judge_how(_case(widest=4), {"exercise": "e", "how": record(lambda t: t.amax(-1), x)}, {})
    assert wide and "combined 8 numbers" in wide and wide.mistake == "e.how.widest"


def test_a_record_without_its_account_is_tampering():
    """A kernel that drops the ``how`` facts (or forges them badly) is not judged honest: the check fails as
    tampering, and the cell with it scores 0."""
    spec = _case(widest=4)
    for how in (None, {"calls": "x"}, {"calls": [], "ops": [], "libs": [], "largest": -1, "widest": 0, "count": 0,
                                       "left": 0}):
        got = judge_how(spec, {"exercise": "e", "how": how}, {})
        assert got is not None and got.tampering, how


HIDDEN_SOFTMAX = """
from torch.utils._python_dispatch import _disable_current_modes

def online_softmax(x, block):
    with _disable_current_modes(), torch._C.DisableTorchFunction():
        return torch.softmax(x, dim=-1)
"""


def test_hiding_from_the_record_works_only_by_name_and_is_flagged():
    """Code that pops PyTorch's modes hides a whole-row softmax from the record (the forger's case: it still needs
    the right values, which is what an honest computation earns); the scan names it for the instructor, and the
    same softmax in plain sight is refused and not flagged as tampering."""
    from instructor.prescan import HIDES, ast_flags

    ns: dict = {"torch": torch, "__name__": "__answer__"}
    exec(HIDDEN_SOFTMAX, ns)
    x = torch.randn(3, 8)
    hidden = record(lambda t: ns["online_softmax"](t, 2), x)
    plain = record(lambda t: torch.softmax(t, -1), x)
    assert hidden["widest"] == 0 and "aten._softmax" not in hidden["ops"]
    assert plain["widest"] == 8 and "aten._softmax" in plain["ops"]
    assert HIDES in ast_flags(HIDDEN_SOFTMAX)
    assert not ast_flags("def online_softmax(x, block):\n    return torch.softmax(x, dim=-1)\n")
