"""Section 05's predict-then-measure and find-the-bug exercises: the graded answer is what the code measures."""
from __future__ import annotations

import math

import torch

from authoring.references import define
from graders import load_section


def _ex(name):
    return load_section("05_positional_encoding").exercise(name)


def test_predicted_wavelength_is_the_measured_period():
    ex = _ex("predicted_wavelength")
    predicted = define(ex, ex.reference)
    pe = define(_ex("positional_encoding"), _ex("positional_encoding").reference)
    col = pe(1300, 64)[:, 32].double()                                    # sin feature of pair 16
    up = torch.nonzero((col[:-1] < 0) & (col[1:] >= 0)).flatten()
    crossing = float(up[0] + col[up[0]] / (col[up[0]] - col[up[0] + 1]))
    assert abs(crossing - predicted) < 0.01 * predicted
    assert abs(predicted - 2 * math.pi * 100) < 1e-9


def test_rope_rotate_half_is_apply_rope_on_permuted_features():
    half = define(_ex("rope_rotate_half"), _ex("rope_rotate_half").reference)
    rope = define(_ex("apply_rope"), _ex("apply_rope").reference)
    x = torch.randn(2, 7, 8, dtype=torch.float64)
    perm = torch.cat([torch.arange(0, 8, 2), torch.arange(1, 8, 2)])
    assert torch.allclose(half(x[..., perm]), rope(x)[..., perm], atol=1e-12)


def test_rope_handout_is_the_named_mistake():
    ex = _ex("rope_rotate_half")
    assert ex.handout == "freq_index"
    buggy = define(ex, [m for m in ex.mistakes if m.key == ex.handout][0].code)
    x = torch.randn(6, 8, dtype=torch.float64)
    assert torch.allclose(buggy(x).norm(dim=-1), x.norm(dim=-1))            # passes the visible checks...
    assert not torch.allclose(buggy(x), define(ex, ex.reference)(x))         # ...but not the values
