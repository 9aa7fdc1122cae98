"""Section 10's predictions are what the notebook measures, its find-the-bug handout is the named mistake, and its
references keep the section's promises (tiles never hold T×T; a sliding-window cache equals full recomputation)."""
from __future__ import annotations

import math
from dataclasses import replace

import pytest

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


# ---------------------------------------------------------------- memory measured, not computed (the meter)
def test_peak_bytes_counts_what_is_alive_at_once_not_views_nor_inputs():
    from attncourse.teach.meter import peak_bytes

    x = torch.ones(1000)                                                  # made before: not counted

    def two_alive(x):
        a = x * 2                                                         # 4000 bytes
        b = a + 1                                                         # 4000 more, a still alive
        return b.view(10, 100).T[0]                                       # views add nothing

    def one_at_a_time(x):
        a = x * 2
        a = a + 1                                                         # the first buffer is freed after this
        return (a * 3).sum()

    assert peak_bytes(two_alive, x)[1] == 8000
    assert peak_bytes(lambda x: x[:500].clone(), x)[1] == 2000            # a slice of an input, then a copy
    # a + 1 needs the first a alive, a * 3 the second (the first is gone), then the sum's 4 bytes: never three
    assert peak_bytes(one_at_a_time, x)[1] == 8004
    assert peak_bytes(lambda x: x.view(-1).T, x)[1] == 0


def test_peak_bytes_plain_holds_scores_and_weights_tiled_a_few_tiles():
    from attncourse.teach.meter import peak_bytes

    plain, tiled = _given("plain_attention", "plain_attention"), _ref("tiled_attention")
    T, b = 1024, 128
    q, k, v = torch.randn(3, T, 32).unbind(0)
    _, plain_peak = peak_bytes(plain, q, k, v)
    _, tiled_peak = peak_bytes(tiled, q, k, v, b)
    assert 2 * T * T * 4 <= plain_peak < 2.2 * T * T * 4                  # the scores and the weights at once
    assert 3 * T * b * 4 <= tiled_peak <= 6 * T * b * 4                   # a few (T, block) tiles


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the allocator's peak needs a CUDA device")
def test_peak_bytes_on_cuda_reads_the_allocator():
    from attncourse.teach.meter import peak_bytes

    x = torch.ones(1 << 20, device="cuda")
    _, n = peak_bytes(lambda x: (x * 2) + 1, x)
    assert 8 << 20 <= n < 16 << 20


# ---------------------------------------------------------------- GQA without copying K and V
def test_gqa_reference_does_not_copy_and_the_copy_shortcut_is_refused():
    from attncourse.teach.meter import peak_bytes

    ex = _ex("grouped_query_attention")
    ref = _ref("grouped_query_attention")
    q, k, v = torch.randn(1, 32, 1, 64), torch.randn(1, 4, 2048, 64), torch.randn(1, 4, 2048, 64)
    copied = k.nbytes * 8                                                 # K repeated for every query head
    out, ref_peak = peak_bytes(ref, q, k, v)
    assert ref_peak < k.nbytes
    for sc in ex.shortcuts:
        fn = define(ex, sc.code)
        got, peak = peak_bytes(fn, q, k, v)
        assert torch.allclose(got, out, atol=1e-5), sc.key                 # right values...
        assert peak >= copied, sc.key                                       # ...from a copy per query head
    limit = [c for c in ex.cases if c.name == "decode"][0]
    assert limit.how is None and ex.how.largest is not None                # the exercise's rule judges the decode case


# ---------------------------------------------------------------- query tiles, causal tiles skipped, backward
def _flash():
    ns: dict = {}
    cells = source_cells(SECTION)
    exec(PRELUDE + "\n".join(cells[n] for n in ("flash_forward", "flash_backward", "flash_function")), ns)
    return ns


def test_flash_forward_skips_the_predicted_causal_tiles_and_equals_plain():
    ns, plain = _flash(), _given("plain_attention", "plain_attention")
    q, k, v = torch.randn(3, 4096, 8).unbind(0)
    out, lse, computed = ns["flash_forward"](q, k, v, 256, 256, causal=True)
    assert (computed, 256 - computed) == tuple(_ref("predicted_causal_tiles"))
    assert torch.allclose(out, plain(q, k, v, causal=True), atol=1e-5)
    scores = (q @ k.T / 8 ** 0.5).masked_fill(torch.ones(4096, 4096, dtype=torch.bool).triu(1), float("-inf"))
    assert torch.allclose(lse, scores.logsumexp(-1), atol=1e-4)


def test_flash_backward_passes_gradcheck_and_without_the_d_term_fails():
    ns = _flash()
    q, k, v = (torch.randn(1, 2, 9, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    for causal in (False, True):
        assert torch.autograd.gradcheck(lambda q, k, v: ns["FlashAttention"].apply(q, k, v, 4, 3, causal), (q, k, v))
    code = source_cells(SECTION)["flash_backward"]
    assert "ds = p * (dp - D[..., i:i + block_q, :])" in code
    wrong: dict = {}
    no_d = [m for m in _ex("flash_backward").mistakes if m.key == "no_d_term"][0].code      # the named mistake
    exec(PRELUDE + source_cells(SECTION)["flash_forward"] + "\n" + no_d + "\n" + source_cells(SECTION)["flash_function"],
         wrong)
    assert not torch.autograd.gradcheck(lambda q, k, v: wrong["FlashAttention"].apply(q, k, v, 4, 3, False),
                                        (q, k, v), raise_exception=False)


# ---------------------------------------------------------------- bfloat16: scores and statistics in float32
def test_references_keep_scores_and_statistics_in_float32_for_bfloat16():
    from torch.utils._python_dispatch import TorchDispatchMode

    class Dtypes(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            name = func.__name__.split(".")[0]
            if name in ("exp", "amax", "mm", "bmm", "sum", "maximum") and isinstance(out, torch.Tensor):
                self.seen.setdefault(name, set()).add(out.dtype)
            return out

    q, k, v = torch.randn(3, 2, 20, 8, dtype=torch.bfloat16).unbind(0)
    for fn, args in ((_ref("tiled_attention"), (q, k, v, 6)), (_ref("online_softmax"), (q, 6)),
                     (lambda *a: _flash()["flash_forward"](*a)[0], (q, k, v, 8, 6))):
        mode = Dtypes()
        with mode:
            out = fn(*args)
        assert out.dtype == torch.bfloat16
        assert mode.seen and all(d == {torch.float32} for d in mode.seen.values()), mode.seen
