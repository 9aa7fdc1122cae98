"""Section 06's predict-then-measure, translation and find-the-bug exercises checked against the code."""
from __future__ import annotations

import torch
import torch.nn as nn

from authoring.references import define
from graders import load_section


def _ex(name):
    return load_section("06_transformer_block").exercise(name)


def test_block_params_is_the_measured_count():
    ex = _ex("block_params")
    block_cls = define(_ex("TransformerBlock"), _ex("TransformerBlock").reference)
    measured = sum(p.numel() for p in block_cls(d_model=768, n_heads=12).parameters())
    assert define(ex, ex.reference) == measured == 7_087_872
    for m in ex.mistakes:
        assert define(ex, m.code) != measured, m.key


def test_translation_accepts_decoder_only_and_encoder_decoder():
    ex = _ex("can_translate")
    assert define(ex, ex.reference) == {"encoder-only": False, "decoder-only": True, "encoder-decoder": True}


def test_rms_norm_matches_torch_and_the_handout_does_not():
    ex = _ex("rms_norm")
    ref = define(ex, ex.reference)
    buggy = define(ex, [m for m in ex.mistakes if m.key == ex.handout][0].code)
    x, rms = torch.randn(2, 5, 16), nn.RMSNorm(16, eps=1e-6)
    with torch.no_grad():
        rms.weight.uniform_(0.5, 1.5)
        assert torch.allclose(ref(x, rms.weight), rms(x), atol=1e-5)
        assert not torch.allclose(buggy(x, rms.weight), rms(x), atol=1e-3)
