"""Section 10's predictions are what the notebook measures, its find-the-bug handout is the named mistake, and its
references keep the section's promises (tiles never hold T×T; a sliding-window cache equals full recomputation)."""
from __future__ import annotations

import math
from dataclasses import replace

import torch

from attncourse.teach.gpt import rotate
from attncourse.teach.memory import largest_intermediate
from authoring.references import define
from graders import load_section
from graders.spec import PRELUDE, source_cells

SECTION = "10_efficient_attention"


def _ex(name):
    return load_section(SECTION).exercise(name)


def _ref(name):
    ex = _ex(name)
    return define(ex, ex.reference)


def _given(grade_id, name):
    ns: dict = {}
    exec(PRELUDE + source_cells(SECTION)[grade_id], ns)
    return ns[name]


def test_predicted_bytes_are_the_measured_largest_tensors():
    plain, tiled = _given("plain_attention", "plain_attention"), _ref("tiled_attention")
    q, k, v = torch.randn(3, 4096, 64).unbind(0)
    _, plain_bytes = largest_intermediate(plain, q, k, v)
    _, tiled_bytes = largest_intermediate(tiled, q, k, v, 256)
    assert tuple(_ref("predicted_bytes")) == (plain_bytes, tiled_bytes)


def test_tiled_attention_never_holds_t_by_t():
    tiled, plain = _ref("tiled_attention"), _given("plain_attention", "plain_attention")
    q, k, v = torch.randn(3, 2, 512, 16).unbind(0)
    out, n_bytes = largest_intermediate(tiled, q, k, v, 64, causal=True)
    assert n_bytes == 2 * 512 * 64 * 4                                  # one (B, T, block) tile of scores
    assert torch.allclose(out, plain(q, k, v, causal=True), atol=1e-5)


def test_predicted_cache_mib_is_what_real_caches_take():
    gqa = _ref("grouped_query_attention")
    measured = []
    for n_kv in (8, 2, 1):
        cache = []
        for _ in range(6):
            k, v = torch.randn(1, n_kv, 1024, 64), torch.randn(1, n_kv, 1024, 64)
            assert gqa(torch.randn(1, 8, 2, 64), k, v).shape == (1, 8, 2, 64)
            cache.append((k, v))
        measured.append(sum(k.nbytes + v.nbytes for k, v in cache) / 2 ** 20)
    assert tuple(_ref("predicted_cache_mib")) == tuple(measured)


def test_predicted_bf16_gap_is_the_next_bfloat16_number():
    x = torch.tensor(1000.0, dtype=torch.bfloat16)
    gap = (torch.nextafter(x, torch.tensor(math.inf, dtype=torch.bfloat16)) - x).item()
    assert _ref("predicted_bf16_gap") == gap == 4.0


def _window_attention(cache_class, q, k, v, W, prompt):
    """The notebook's cached generation: the prompt with a window mask, then one token at a time from the cache."""
    T = q.shape[-2]
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    mask = (j <= i) & (j > i - W)
    scores = rotate(q) @ rotate(k).transpose(-2, -1) / q.shape[-1] ** 0.5
    full = scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v
    cache = cache_class(W)
    cache.append(k[..., :prompt, :], v[..., :prompt, :])
    outs = [full[..., :prompt, :]]
    for t in range(prompt, T):
        cache.append(k[..., t:t + 1, :], v[..., t:t + 1, :])
        s = rotate(q[..., t:t + 1, :], offset=t) @ cache.keys().transpose(-2, -1) / q.shape[-1] ** 0.5
        outs.append(s.softmax(-1) @ cache.values())
    return torch.cat(outs, dim=-2), full


def test_sliding_window_cache_equals_full_recomputation_and_slot_rotation_does_not():
    ex = _ex("SlidingWindowCache")
    q, k, v = torch.randn(3, 1, 2, 20, 16, dtype=torch.float64).unbind(0)
    ref = define(replace(ex, wrap=None), ex.reference)
    cached, full = _window_attention(ref, q, k, v, 4, prompt=6)
    assert torch.allclose(cached, full, atol=1e-5)
    slot = [m for m in ex.mistakes if m.key == "slot_positions"][0]
    wrong = define(replace(ex, wrap=None), slot.code)
    cached, full = _window_attention(wrong, q, k, v, 4, prompt=6)
    assert not torch.allclose(cached, full, atol=1e-3)


def test_combine_partials_handout_is_the_named_mistake_and_the_fix_merges():
    ex = _ex("combine_partials")
    assert ex.handout == "max_not_lse"
    partial = _given("partial_attention", "partial_attention")
    plain = _given("plain_attention", "plain_attention")
    q, k, v = torch.randn(4, 8), torch.randn(6, 8), torch.randn(6, 8)
    parts = (*partial(q, k[:3], v[:3]), *partial(q, k[3:], v[3:]))
    buggy = define(ex, [m for m in ex.mistakes if m.key == ex.handout][0].code)
    o, lse = buggy(*parts)
    assert o.shape == (4, 8) and lse.shape == (4,) and torch.isfinite(o).all()      # passes the visible check...
    assert not torch.allclose(o, plain(q, k, v), atol=1e-3)                          # ...but not the values
    o, lse = define(ex, ex.reference)(*parts)
    assert torch.allclose(o, plain(q, k, v), atol=1e-5)
    assert torch.allclose(lse, (q @ k.T / math.sqrt(8)).logsumexp(-1), atol=1e-5)


def test_online_softmax_equals_softmax_for_every_block_size():
    online = _ref("online_softmax")
    x = 1000 * torch.randn(2, 257)
    for block in (1, 7, 64, 257, 1000):
        assert torch.allclose(online(x, block), torch.softmax(x, dim=-1), atol=1e-6)
