"""Hidden cases for section 10: efficient attention.

Ten graded exercises: ``online_softmax``, ``tiled_attention``, ``predicted_bytes`` (predict, then measure),
``predicted_causal_tiles`` (predict, then count), ``flash_backward`` (the backward pass from the output and the
log-sum-exp, tile by tile: graded on how too, never a T×T tensor), ``grouped_query_attention`` (graded on how too: no tensor as large
as the keys copied per query head), ``predicted_cache_mib`` (predict, then measure), ``SlidingWindowCache`` (graded
through the notebook's locked ``given_window_probe`` cell: ``Exercise.wrap``), ``predicted_bf16_gap`` (predict,
then measure) and ``combine_partials`` (find the bug: the notebook hands out the ``max_not_lse`` mistake).

``online_softmax`` and ``tiled_attention`` are graded on how they compute too (``How``, judged from the tensor
operations the kernel records): no operation may combine more numbers than a block holds, the number of blocks or
(for a matrix product) the head size — a softmax, a maximum or a sum of a whole row at once breaks it; attention
in tiles may not call F.scaled_dot_product_attention nor make a tensor larger than a few tiles (the ``long``
cases hold ``T × T`` far above that).  Their ``shortcuts`` (``torch.softmax``, plain attention, SDPA, the full
score matrix) lose those points; correct answers written otherwise (other loop orders, tile sizes, merges) keep
them.

``SlidingWindowCache`` has no float64 case: its keys go through ``attncourse.teach.gpt.rotate``, which computes
the angles in float32 (float32 rounding is then the reference's own).
"""
import math

import torch

from .spec import SDPA, Case, Exercise, How, Mistake, Section, Shortcut, Variant, patch, source_cells

CELLS = source_cells("10_efficient_attention")   # the source notebook: solutions and given code are read from it

# ---------------------------------------------------------------- online_softmax
SOFT_REF = CELLS["online_softmax"]


def _soft(*pairs):
    return patch(SOFT_REF, *pairs)


def _rows(*shape, scale=1.0):
    return lambda g: scale * torch.randn(*shape, generator=g)


ONLINE = Exercise(
    name="online_softmax",
    cell="online_softmax",
    reference=SOFT_REF,
    mistakes=[
        Mistake("no_correction", "the running sum is not rescaled when the maximum grows: the terms already in it "
                "were computed against the old maximum, so multiply it by exp(m_old − m_new) before adding the "
                "block's terms.",
                _soft("l = l * torch.exp(m - m_new) + ", "l = l + ")),
        Mistake("correction_inverted", "the correction factor is exp(m_new − m_old): it must be exp(m_old − m_new) "
                "(at most 1, and 0 for the first block, whose old maximum is −∞).",
                _soft("torch.exp(m - m_new)", "torch.exp(m_new - m)")),
        Mistake("no_max", "the logits are exponentiated without subtracting the running maximum: exp overflows for "
                "large logits. Track the maximum and subtract it.",
                _soft("m_new = torch.maximum(m, xb.amax(dim=-1, keepdim=True))",
                      "m_new = torch.zeros_like(m)"),
                shows="exp() of large scores overflowing to inf (subtract each row's maximum before exp)"),
        Mistake("numerator_unshifted", "the numerators are exp(x), but the sum l was built from exp(x − m): divide "
                "exp(x − m) by l, with the final running maximum m.",
                _soft("torch.exp(x.to(f) - m) / l", "torch.exp(x.to(f)) / l")),
        Mistake("last_block_dropped", "the last, shorter block is skipped when the row's length is not a multiple "
                "of the block size (or the only block, when block exceeds the length): the loop must reach every "
                "column, range(0, n, block).",
                _soft("for start in range(0, n, block):", "for start in range(0, n - block + 1, block):")),
    ],
    variants=[
        Variant("logaddexp", '''
def online_softmax(x, block):
    lse = torch.full_like(x[..., :1], float("-inf"))           # running log-sum-exp
    for chunk in x.split(block, dim=-1):
        lse = torch.logaddexp(lse, torch.logsumexp(chunk, dim=-1, keepdim=True))
    return torch.exp(x - lse)
'''),
        Variant("stats_then_merge", '''
def online_softmax(x, block):
    maxima, sums = [], []
    for chunk in torch.split(x, block, dim=-1):
        mb = chunk.max(dim=-1, keepdim=True).values
        maxima.append(mb)
        sums.append(torch.exp(chunk - mb).sum(dim=-1, keepdim=True))
    m = maxima[0]
    for mb in maxima[1:]:
        m = torch.maximum(m, mb)
    total = sum(lb * torch.exp(mb - m) for mb, lb in zip(maxima, sums))
    return torch.exp(x - m) / total
'''),
        Variant("stacked_stats", '''
def online_softmax(x, block):
    chunks = x.split(block, dim=-1)
    maxima = torch.cat([c.amax(-1, keepdim=True) for c in chunks], dim=-1)     # (..., n_blocks)
    m = maxima.amax(-1, keepdim=True)                                           # merge the blocks' maxima
    sums = torch.cat([torch.exp(c - m).sum(-1, keepdim=True) for c in chunks], dim=-1)
    return torch.exp(x - m) / sums.sum(-1, keepdim=True)
'''),
        Variant("block_softmax_backwards", '''
def online_softmax(x, block):
    m = l = None
    for s in reversed(range(0, x.shape[-1], block)):             # the blocks from the last to the first
        xb = x[..., s:s + block]
        mb = xb.amax(-1, keepdim=True)
        lb = torch.exp(torch.logsumexp(xb, dim=-1, keepdim=True) - mb)   # the block's sum, from its log-sum-exp
        if m is None:
            m, l = mb, lb
        else:
            m_new = torch.maximum(m, mb)
            l = l * torch.exp(m - m_new) + lb * torch.exp(mb - m_new)
            m = m_new
    return torch.exp(x - m) / l
'''),
    ],
    # One operation may combine at most a block's numbers, or one per block (merging the blocks' statistics):
    # never the maximum, the sum or the softmax of a whole row at once (the Goal).
    how=How(widest=lambda a, k: max(a[1], math.ceil(a[0].shape[-1] / a[1]))),
    shortcuts=[
        Shortcut("torch_softmax", "def online_softmax(x, block):\n    return torch.softmax(x, dim=-1)\n",
                 keeps=("one_block", "block_1")),
        Shortcut("whole_row", """
def online_softmax(x, block):
    m = x.amax(dim=-1, keepdim=True)                     # the maximum of the whole row at once
    e = torch.exp(x - m)
    return e / e.sum(dim=-1, keepdim=True)
""", keeps=("one_block", "block_1")),
        Shortcut("row_max_then_blocks", """
def online_softmax(x, block):
    m = x.max(dim=-1, keepdim=True).values               # the row's maximum first, then the sum in blocks
    l = torch.zeros_like(m)
    for start in range(0, x.shape[-1], block):
        l = l + torch.exp(x[..., start:start + block] - m).sum(dim=-1, keepdim=True)
    return torch.exp(x - m) / l
""", keeps=("one_block", "block_1")),
    ],
    cases=[
        Case("blocks_of_2", "a (3, 8) input, blocks of 2", args=lambda g: (torch.randn(3, 8, generator=g), 2)),
        Case("uneven", "a (2, 4, 10) input, blocks of 3 (the last has 1 column)",
             args=lambda g: (torch.randn(2, 4, 10, generator=g), 3), seed=1),
        Case("one_block", "a (5, 6) input, block 8 > 6", args=lambda g: (torch.randn(5, 6, generator=g), 8), seed=2),
        Case("block_1", "a (4, 7) input, blocks of 1", args=lambda g: (torch.randn(4, 7, generator=g), 1), seed=3),
        Case("large_logits", "logits in the thousands, (3, 9), blocks of 4",
             args=lambda g: (1000 * torch.randn(3, 9, generator=g), 4), seed=4),
        Case("float64", "float64, (2, 3, 11), blocks of 4", dtype="float64",
             args=lambda g: (torch.randn(2, 3, 11, generator=g), 4), seed=5),
        Case("bfloat16", "bfloat16, (3, 8), blocks of 3", dtype="bfloat16",
             args=lambda g: (torch.randn(3, 8, generator=g), 3), seed=6),
        Case("best_device", "on the best device (CUDA when present), (2, 9), blocks of 4", device="best",
             args=lambda g: (torch.randn(2, 9, generator=g), 4), seed=7),
        Case("meta", "on the meta device, (2, 9), blocks of 4", device="meta",
             args=lambda g: (torch.randn(2, 9, generator=g), 4)),
    ],
)

# ---------------------------------------------------------------- tiled_attention
TILED_REF = CELLS["tiled_attention"]


def _tiled(*pairs):
    return patch(TILED_REF, *pairs)


def _qkv(*lead, t_q=8, t_k=None, d=4, scale=1.0):
    t_k = t_q if t_k is None else t_k

    def args(g):
        q = scale * torch.randn(*lead, t_q, d, generator=g)
        return q, torch.randn(*lead, t_k, d, generator=g), torch.randn(*lead, t_k, d, generator=g)
    return args


def _tiled_case(name, what, qkv, block, causal=False, **kw):
    def args(g):
        return (*qkv(g), block)
    return Case(name, what, args=args, kwargs={"causal": True} if causal else {}, **kw)


def _tile_widest(a, k):
    """A tile's keys, the number of blocks, or the head size (q kᵀ's inner dimension): never all T_k keys."""
    q, keys, block = a[0], a[1], a[3]
    return max(block, math.ceil(keys.shape[-2] / block), q.shape[-1])


def _tile_largest(a, k):
    """The inputs, the output, or a few tiles (a (T_q, block) tile times the head size): never (T_q, T_k)."""
    q, keys, v, block = a
    lead = q.numel() // (q.shape[-2] * q.shape[-1])
    d = max(q.shape[-1], v.shape[-1])
    return max(q.numel(), keys.numel(), v.numel(), lead * q.shape[-2] * d * min(block, keys.shape[-2]))


TILED = Exercise(
    name="tiled_attention",
    cell="tiled_attention",
    reference=TILED_REF,
    how=How(refuse=(SDPA,), widest=_tile_widest, largest=_tile_largest),
    shortcuts=[
        Shortcut("plain", """
def tiled_attention(q, k, v, block_size, causal=False):
    scores = torch.einsum("...id,...jd->...ij", q, k) * q.shape[-1] ** -0.5    # the notebook's plain_attention
    if causal:
        future = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    return torch.einsum("...ij,...jd->...id", scores.softmax(dim=-1), v)
""", keeps=("one_block",)),
        Shortcut("sdpa", "def tiled_attention(q, k, v, block_size, causal=False):\n"
                 "    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)\n"),
        Shortcut("full_scores_online", """
def tiled_attention(q, k, v, block_size, causal=False):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])        # every score at once: (..., T_q, T_k)
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    m = torch.full(q.shape[:-1] + (1,), float("-inf"), dtype=q.dtype, device=q.device)
    l = torch.zeros_like(m)
    acc = torch.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype, device=q.device)
    for start in range(0, k.shape[-2], block_size):              # the online softmax over its column blocks
        sb = s[..., start:start + block_size]
        m_new = torch.maximum(m, sb.amax(-1, keepdim=True))
        p = torch.exp(sb - m_new)
        alpha = torch.exp(m - m_new)
        l = l * alpha + p.sum(-1, keepdim=True)
        acc = acc * alpha + p @ v[..., start:start + block_size, :]
        m = m_new
    return acc / l
""", keeps=("basic", "heads", "one_block", "cross", "large_logits", "causal", "causal_heads", "float64",
             "bfloat16", "best_device", "meta")),
        Shortcut("row_by_row", """
def tiled_attention(q, k, v, block_size, causal=False):
    rows = []
    for i in range(q.shape[-2]):                                  # one query at a time, all its keys at once
        s = (q[..., i:i + 1, :] @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])    # (..., 1, T_k)
        if causal:
            s = s.masked_fill(torch.arange(k.shape[-2], device=q.device) > i, float("-inf"))
        p = torch.exp(s - s.amax(-1, keepdim=True))
        rows.append((p / p.sum(-1, keepdim=True)) @ v)
    return torch.cat(rows, dim=-2)
""", keeps=("one_block", "causal_block_1")),
    ],
    mistakes=[
        Mistake("acc_not_rescaled", "the running output is not rescaled when the maximum grows: like the running "
                "sum, acc holds terms exp(s − m_old)·v, so multiply it by exp(m_old − m_new) before adding the "
                "block's p @ v.",
                _tiled("acc = acc * alpha + p @ vb", "acc = acc + p @ vb")),
        Mistake("no_scale", "the scores are not divided by √d: scale q kᵀ by 1/√d in every block.",
                _tiled("scale = 1.0 / math.sqrt(d)", "scale = 1.0")),
        Mistake("local_causal", "the causal mask compares positions inside the tile: a key block starting at "
                "`start` holds the keys at positions start, start + 1, ...; compare those global positions with "
                "the query's.",
                _tiled("torch.arange(start, start + kb.shape[-2], device=q.device)",
                       "torch.arange(kb.shape[-2], device=q.device)")),
        Mistake("diagonal_masked", "the causal mask also hides the key at the query's own position: query i may "
                "attend to keys 0 … i, itself included (mask only keys after it).",
                _tiled("s.masked_fill(cols > rows,", "s.masked_fill(cols >= rows,")),
        Mistake("sum_not_rescaled", "the running sum l is not rescaled when the maximum grows: multiply it by the "
                "same exp(m_old − m_new) as the output.",
                _tiled("l = l * alpha + p.sum(dim=-1, keepdim=True)", "l = l + p.sum(dim=-1, keepdim=True)")),
    ],
    variants=[
        Variant("einsum_additive", '''
def tiled_attention(q, k, v, block_size, causal=False):
    T_q, d = q.shape[-2:]
    m = q.new_full((*q.shape[:-1], 1), float("-inf"))
    l = q.new_zeros((*q.shape[:-1], 1))
    out = q.new_zeros((*q.shape[:-1], v.shape[-1]))
    qi = torch.arange(T_q, device=q.device)
    for start, kb, vb in zip(range(0, k.shape[-2], block_size), k.split(block_size, dim=-2),
                             v.split(block_size, dim=-2)):
        s = torch.einsum("...qd,...kd->...qk", q, kb) / d ** 0.5
        if causal:
            kj = torch.arange(start, start + kb.shape[-2], device=q.device)
            bias = torch.zeros(T_q, kb.shape[-2], dtype=s.dtype, device=q.device)
            s = s + bias.masked_fill(kj[None, :] > qi[:, None], float("-inf"))     # additive mask
        m_new = torch.max(m, s.max(dim=-1, keepdim=True).values)
        p = (s - m_new).exp()
        c = (m - m_new).exp()
        l = c * l + p.sum(-1, keepdim=True)
        out = c * out + torch.einsum("...qk,...kd->...qd", p, vb)
        m = m_new
    return out / l
'''),
        Variant("normalised_running", '''
def tiled_attention(q, k, v, block_size, causal=False):
    T_q = q.shape[-2]
    lse = torch.full((*q.shape[:-1], 1), float("-inf"), dtype=q.dtype, device=q.device)
    o = torch.zeros((*q.shape[:-1], v.shape[-1]), dtype=q.dtype, device=q.device)
    pos = torch.arange(T_q, device=q.device).unsqueeze(-1)
    for start in range(0, k.shape[-2], block_size):
        stop = min(start + block_size, k.shape[-2])
        s = torch.matmul(q, k[..., start:stop, :].transpose(-1, -2)) / q.shape[-1] ** 0.5
        if causal:
            keep = torch.arange(start, stop, device=q.device).unsqueeze(0) <= pos      # bool mask
            s = torch.where(keep, s, torch.tensor(float("-inf"), dtype=s.dtype, device=s.device))
        lse_b = torch.logsumexp(s, dim=-1, keepdim=True)
        lse_new = torch.logaddexp(lse, lse_b)
        o = o * torch.exp(lse - lse_new) + torch.exp(s - lse_new) @ v[..., start:stop, :]
        lse = lse_new
    return o
'''),
        Variant("backwards_01_mask", '''
def tiled_attention(q, k, v, block_size, causal=False):
    T_q, T_k = q.shape[-2], k.shape[-2]
    m = torch.full((*q.shape[:-1], 1), float("-inf"), dtype=q.dtype, device=q.device)
    l = torch.zeros_like(m)
    acc = torch.zeros((*q.shape[:-1], v.shape[-1]), dtype=q.dtype, device=q.device)
    qpos = torch.arange(T_q, device=q.device).reshape(-1, 1)
    for start in reversed(range(0, T_k, block_size)):             # the blocks from the last to the first
        stop = min(start + block_size, T_k)
        s = torch.einsum("...id,...jd->...ij", q * q.shape[-1] ** -0.5, k[..., start:stop, :])
        if causal:
            allowed = (torch.arange(start, stop, device=q.device).reshape(1, -1) <= qpos).to(s.dtype)  # 0/1
            s = s + torch.log(allowed)                            # log 0 = -inf where the key is in the future
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        scale_old = torch.exp(m - m_new).nan_to_num(0.0)          # a row that has seen only masked keys so far
        p = torch.exp(s - m_new).nan_to_num(0.0)
        l = l * scale_old + p.sum(-1, keepdim=True)
        acc = acc * scale_old + p @ v[..., start:stop, :]
        m = m_new
    return acc / l
'''),
        Variant("tile_outer_products", '''
def tiled_attention(q, k, v, block_size, causal=False):
    d = q.shape[-1]
    m = q.new_full((*q.shape[:-1], 1), float("-inf"))
    l = q.new_zeros((*q.shape[:-1], 1))
    acc = q.new_zeros((*q.shape[:-1], v.shape[-1]))
    for start in range(0, k.shape[-2], block_size):
        kb, vb = k[..., start:start + block_size, :], v[..., start:start + block_size, :]
        s = (q.unsqueeze(-2) * kb.unsqueeze(-3)).sum(-1) / math.sqrt(d)       # (..., T_q, b): products summed
        if causal:
            cols = torch.arange(start, start + kb.shape[-2], device=q.device)
            s = torch.where(cols[None, :] <= torch.arange(q.shape[-2], device=q.device)[:, None], s,
                            torch.tensor(float("-inf"), dtype=s.dtype, device=s.device))
        m_new = torch.maximum(m, s.max(-1, keepdim=True).values)
        p = (s - m_new).exp()
        alpha = (m - m_new).exp()
        l = alpha * l + p.sum(-1, keepdim=True)
        acc = alpha * acc + (p.unsqueeze(-1) * vb.unsqueeze(-3)).sum(-2)      # (..., T_q, d_v)
        m = m_new
    return acc / l
'''),
        Variant("smaller_tiles", '''
def tiled_attention(q, k, v, block_size, causal=False):
    tile = max(1, block_size // 2)                                # tiles of half the block: even less memory
    T_q = q.shape[-2]
    m = torch.full(q.shape[:-1] + (1,), float("-inf"), dtype=q.dtype, device=q.device)
    l = torch.zeros_like(m)
    acc = torch.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype, device=q.device)
    for start in range(0, k.shape[-2], tile):
        s = torch.matmul(q, k[..., start:start + tile, :].mT) / math.sqrt(q.shape[-1])
        if causal:
            keys = torch.arange(start, start + s.shape[-1], device=q.device)
            s = s.masked_fill(keys > torch.arange(T_q, device=q.device).unsqueeze(-1), float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        alpha, p = torch.exp(m - m_new), torch.exp(s - m_new)
        l, acc, m = l * alpha + p.sum(-1, keepdim=True), acc * alpha + p @ v[..., start:start + tile, :], m_new
    return acc / l
'''),
        Variant("query_tiles_skip_causal", '''
def tiled_attention(q, k, v, block_size, causal=False):
    T_q, T_k = q.shape[-2], k.shape[-2]
    f = torch.promote_types(q.dtype, torch.float32)
    outs = []
    for i in range(0, T_q, block_size):                           # tiles of queries too, each on its own
        qi = q[..., i:i + block_size, :].to(f) / math.sqrt(q.shape[-1])
        rows = torch.arange(i, i + qi.shape[-2], device=q.device)[:, None]
        m = torch.full(qi.shape[:-1] + (1,), float("-inf"), dtype=f, device=q.device)
        l = torch.zeros_like(m)
        acc = torch.zeros(qi.shape[:-1] + (v.shape[-1],), dtype=f, device=q.device)
        for j in range(0, T_k, block_size):
            if causal and j > i + qi.shape[-2] - 1:               # the tile lies above the diagonal: skipped
                break
            s = qi @ k[..., j:j + block_size, :].to(f).mT
            if causal:
                s = s.masked_fill(torch.arange(j, j + s.shape[-1], device=q.device) > rows, float("-inf"))
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            p, alpha = torch.exp(s - m_new), torch.exp(m - m_new)
            l = l * alpha + p.sum(-1, keepdim=True)
            acc = acc * alpha + p @ v[..., j:j + block_size, :].to(f)
            m = m_new
        outs.append((acc / l).to(q.dtype))
    return torch.cat(outs, dim=-2)
'''),
    ],
    cases=[
        _tiled_case("basic", "T=8, d=4, blocks of 3", _qkv(), 3),
        _tiled_case("heads", "(B=2, h=3, T=10, d=8), blocks of 4", _qkv(2, 3, t_q=10, d=8), 4, seed=1),
        _tiled_case("one_block", "T=5, block 16 > T", _qkv(t_q=5), 16, seed=2),
        _tiled_case("cross", "T_q=3 queries, T_k=7 keys, blocks of 2", _qkv(2, t_q=3, t_k=7), 2, seed=3),
        _tiled_case("large_logits", "scores in the hundreds, T=9, blocks of 4", _qkv(t_q=9, scale=60.0), 4, seed=4),
        _tiled_case("causal", "causal, (2, T=9, d=4), blocks of 4", _qkv(2, t_q=9), 4, causal=True, seed=5),
        _tiled_case("causal_block_1", "causal, T=6, blocks of 1", _qkv(t_q=6), 1, causal=True, seed=6),
        _tiled_case("causal_heads", "causal, (B=2, h=2, T=11, d=8), blocks of 3", _qkv(2, 2, t_q=11, d=8), 3,
                    causal=True, seed=7),
        _tiled_case("float64", "float64, causal, (2, T=7, d=4), blocks of 2", _qkv(2, t_q=7), 2, causal=True,
                    dtype="float64", seed=8),
        _tiled_case("bfloat16", "bfloat16, causal, (2, T=8, d=4), blocks of 3", _qkv(2, t_q=8), 3, causal=True,
                    dtype="bfloat16", seed=9),
        _tiled_case("best_device", "on the best device (CUDA when present), causal, (2, T=9, d=4), blocks of 4",
                    _qkv(2, t_q=9), 4, causal=True, device="best", seed=10),
        _tiled_case("meta", "on the meta device, causal, (2, T=9, d=4), blocks of 4", _qkv(2, t_q=9), 4,
                    causal=True, device="meta"),
        _tiled_case("long", "T=64, d=4, blocks of 8 (a (T, T) tensor is far more than a few tiles here)",
                    _qkv(t_q=64), 8, seed=11),
        _tiled_case("long_causal", "causal, (2, T=48, d=4), blocks of 6", _qkv(2, t_q=48), 6, causal=True, seed=12),
    ],
)

# ---------------------------------------------------------------- predict, then measure: the largest tensor
BYTES_REF = CELLS["predicted_bytes"]

PRED_BYTES = Exercise(
    name="predicted_bytes",
    cell="predicted_bytes",
    reference=BYTES_REF,
    mistakes=[
        Mistake("entries", "those are numbers of entries, not bytes: each float32 number takes 4 bytes.",
                "predicted_bytes = (4096 * 4096, 4096 * 256)"),
        Mistake("tiled_acc", "the running output acc is (T, d) = 4096 × 64, but a tile of scores, (T, block_size) = "
                "4096 × 256, is larger: the tiled version's largest tensor is a score tile.",
                "predicted_bytes = (4096 * 4096 * 4, 4096 * 64 * 4)"),
        Mistake("square_tile", "the tile is block × block: that would be tiling the queries too; the contract takes "
                "all T queries against one block of keys, a (T, block_size) tile.",
                "predicted_bytes = (4096 * 4096 * 4, 256 * 256 * 4)"),
        Mistake("float64", "8 bytes per number is float64; the inputs are float32, 4 bytes per number.",
                "predicted_bytes = (4096 * 4096 * 8, 4096 * 256 * 8)"),
    ],
    variants=[Variant("literal", "predicted_bytes = [67108864, 4194304]"),
              Variant("mib", "predicted_bytes = (64 * 2**20, 4 * 2**20)")],
    cases=[Case("value", "bytes of the largest intermediate of plain and tiled attention, T=4096, d=64, float32, "
                "blocks of 256", kind="value", api="any", atol=0.0, rtol=0.01,
                hint="plain attention builds the (T, T) scores: 4096 × 4096 float32 numbers; the tiled one holds a "
                     "(T, block_size) tile of scores at a time: 4096 × 256 numbers; 4 bytes each.",
                mistake_values={
                    "mib": ("those look like MiB: the question asks for bytes (1 MiB = 2^20 bytes).", [64.0, 4.0]),
                    "bits": ("that is in bits: a float32 number takes 4 bytes (32 bits).",
                             [4096 * 4096 * 32.0, 4096 * 256 * 32.0]),
                })],
)

# ---------------------------------------------------------------- predict, then count: causal tiles skipped
TILES_REF = CELLS["predicted_causal_tiles"]

PRED_TILES = Exercise(
    name="predicted_causal_tiles",
    cell="predicted_causal_tiles",
    reference=TILES_REF,
    mistakes=[
        Mistake("diagonal_skipped", "the tiles on the diagonal were skipped too: query tile i still sees key tile i "
                "(its first query sees the tile's first key), so those 16 are computed and masked inside.",
                "predicted_causal_tiles = (120, 136)"),
        Mistake("half", "half of the 256 tiles is the area below the diagonal line, but a tile is computed whole or "
                "not at all: the 16 tiles the diagonal crosses are all computed.",
                "predicted_causal_tiles = (128, 128)"),
        Mistake("none_skipped", "every tile computed is the non-causal count: a key tile that starts after the query "
                "tile's last query holds only masked scores and is skipped.",
                "predicted_causal_tiles = (256, 0)"),
        Mistake("entries", "those count scores, not tiles: the question asks for (query tile, key tile) pairs of 256 "
                "by 256.", "predicted_causal_tiles = (4096 * 4097 // 2, 4096 * 4095 // 2)"),
    ],
    variants=[Variant("literal", "predicted_causal_tiles = [136, 120]"),
              Variant("from_n", "n = 4096 // 256\npredicted_causal_tiles = (n * (n + 1) / 2, n * n - n * (n + 1) / 2)")],
    cases=[Case("value", "tiles computed and skipped by causal attention in 256 x 256 tiles, T=4096", kind="value",
                api="any", atol=0.5, rtol=0.0,
                hint="4096 / 256 = 16 tiles a side, 256 pairs; query tile i needs key tiles 0 … i, the diagonal one "
                     "included: 1 + 2 + … + 16 computed.",
                mistake_values={
                    "swapped": ("the two are swapped: (computed, skipped).", [120, 136]),
                })],
)

# ---------------------------------------------------------------- flash_backward
BWD_REF = CELLS["flash_backward"]


def _bwd(*pairs):
    return patch(BWD_REF, *pairs)


def _bwd_args(*lead, t_q=8, t_k=None, d=4, bq=3, bk=3, causal=False, scale=1.0):
    """q, k, v, the output and log-sum-exp of attention over them (float64 at build time), a gradient of the output,
    and the tile sizes."""
    t_k = t_q if t_k is None else t_k

    def args(g):
        q = scale * torch.randn(*lead, t_q, d, generator=g, dtype=torch.float64)
        k = torch.randn(*lead, t_k, d, generator=g, dtype=torch.float64)
        v = torch.randn(*lead, t_k, d, generator=g, dtype=torch.float64)
        s = q @ k.transpose(-2, -1) / math.sqrt(d)
        if causal:
            s = s.masked_fill(torch.ones(t_q, t_k, dtype=torch.bool).triu(1), float("-inf"))
        d_out = torch.randn(*lead, t_q, d, generator=g, dtype=torch.float64)
        return q, k, v, s.softmax(-1) @ v, s.logsumexp(-1), d_out, bq, bk
    return args


def _bwd_case(name, what, causal=False, **kw):
    shape = {k: kw.pop(k) for k in ("lead", "t_q", "t_k", "d", "bq", "bk", "scale") if k in kw}
    lead = shape.pop("lead", ())
    return Case(name, what, args=_bwd_args(*lead, causal=causal, **shape), kwargs={"causal": True} if causal else {},
                labels=["dq", "dk", "dv"], **kw)


def _bwd_largest(a, k):
    """The inputs, or a few tiles: (block_q, T_k), (T_q, block_k) or (block_q, block_k, d) per leading index —
    never (T_q, T_k)."""
    q, keys, v, out, lse, d_out, bq, bk = a
    lead = q.numel() // (q.shape[-2] * q.shape[-1])
    t_q, t_k, d = q.shape[-2], keys.shape[-2], q.shape[-1]
    return max(q.numel(), keys.numel(), v.numel(), out.numel(),
               lead * max(min(bq, t_q) * t_k, t_q * min(bk, t_k), min(bq, t_q) * min(bk, t_k) * d))


BWD = Exercise(
    name="flash_backward",
    cell="flash_backward",
    reference=BWD_REF,
    how=How(refuse=(SDPA,), largest=_bwd_largest),
    messages={"how.largest": "a tensor with T_q × T_k entries was made: the backward pass recomputes the weights tile "
                             "by tile from the log-sum-exp (P = exp(S − lse)); it never rebuilds the whole score "
                             "matrix (nor runs autograd through plain attention, which keeps it)."},
    mistakes=[
        Mistake("no_d_term", "dS = P ∘ dP misses the softmax's own term: each row's weights sum to 1, so "
                "dS = P ∘ (dP − D) with D = rowsum(dO ∘ O), the row's Σ_j P_ij dP_ij (dV stays right, dQ and dK do "
                "not).", _bwd("ds = p * (dp - D[..., i:i + block_q, :])", "ds = p * dp")),
        Mistake("d_from_tile", "D is summed over one tile of keys only: it is Σ_j P_ij dP_ij over the whole row, "
                "which no tile sees; compute it once from the output, D = rowsum(dO ∘ O).",
                _bwd("ds = p * (dp - D[..., i:i + block_q, :])",
                     "ds = p * (dp - (p * dp).sum(dim=-1, keepdim=True))")),
        Mistake("max_not_lse", "the tile's weights are normalised by its own maximum, exp(S − max): they must be the "
                "softmax's weights of the whole row, exp(S − lse), with the saved log-sum-exp.",
                _bwd("p = torch.exp(s - lse[..., i:i + block_q, None].to(f))",
                     "p = torch.exp(s - s.amax(dim=-1, keepdim=True))")),
        Mistake("dk_unscaled", "dK misses the 1/√d of the scores S = Q Kᵀ / √d (dQ has it): both come through S.",
                _bwd("dk[..., j:j + block_k, :] += ds.transpose(-2, -1) @ qi * scale",
                     "dk[..., j:j + block_k, :] += ds.transpose(-2, -1) @ qi")),
        Mistake("local_causal", "the causal mask compares positions inside the tiles: a key tile starting at j holds "
                "the keys j, j + 1, …; compare those global positions with the query tile's.",
                _bwd("torch.arange(j, j + kj.shape[-2], device=q.device)",
                     "torch.arange(kj.shape[-2], device=q.device)")),
    ],
    variants=[
        Variant("key_tiles_outer", '''
def flash_backward(q, k, v, out, lse, d_out, block_q, block_k, causal=False):
    f = torch.promote_types(q.dtype, torch.float32)
    d = q.shape[-1]
    do = d_out.to(f)
    D = torch.einsum("...id,...id->...i", do, out.to(f))[..., None]            # (..., T_q, 1)
    dq = torch.zeros(q.shape, dtype=f, device=q.device)
    dks, dvs = [], []
    for j in range(0, k.shape[-2], block_k):                      # FlashAttention-2's order: dK, dV per key tile
        kj, vj = k[..., j:j + block_k, :].to(f), v[..., j:j + block_k, :].to(f)
        dk_j, dv_j = torch.zeros_like(kj), torch.zeros_like(vj)
        for i in range(0, q.shape[-2], block_q):
            qi = q[..., i:i + block_q, :].to(f)
            s = torch.einsum("...id,...jd->...ij", qi, kj) / d ** 0.5
            if causal:
                allowed = (torch.arange(j, j + kj.shape[-2], device=q.device)[None, :]
                           <= torch.arange(i, i + qi.shape[-2], device=q.device)[:, None]).to(f)   # 0/1 mask
                s = s + torch.log(allowed)
            p = torch.exp(s - lse[..., i:i + block_q].to(f)[..., None])
            dp = torch.einsum("...id,...jd->...ij", do[..., i:i + block_q, :], vj)
            ds = p * (dp - D[..., i:i + block_q, :])
            dv_j = dv_j + torch.einsum("...ij,...id->...jd", p, do[..., i:i + block_q, :])
            dk_j = dk_j + torch.einsum("...ij,...id->...jd", ds, qi) / d ** 0.5
            dq[..., i:i + block_q, :] += torch.einsum("...ij,...jd->...id", ds, kj) / d ** 0.5
        dks.append(dk_j)
        dvs.append(dv_j)
    return dq.to(q.dtype), torch.cat(dks, dim=-2).to(k.dtype), torch.cat(dvs, dim=-2).to(v.dtype)
'''),
        Variant("all_queries_per_key_tile", '''
def flash_backward(q, k, v, out, lse, d_out, block_q, block_k, causal=False):
    scale = q.shape[-1] ** -0.5
    D = (d_out * out).sum(-1, keepdim=True)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    pos = torch.arange(q.shape[-2], device=q.device)[:, None]
    for j in range(0, k.shape[-2], block_k):                      # all queries against one key tile at a time
        kj, vj = k[..., j:j + block_k, :], v[..., j:j + block_k, :]
        s = q @ kj.mT * scale
        if causal:
            s = torch.where(torch.arange(j, j + kj.shape[-2], device=q.device) <= pos, s,
                            torch.tensor(float("-inf"), dtype=s.dtype, device=s.device))
        p = torch.exp(s - lse.unsqueeze(-1))
        ds = p * (d_out @ vj.mT - D)
        dv[..., j:j + block_k, :] = p.mT @ d_out
        dk[..., j:j + block_k, :] = ds.mT @ q * scale
        dq = dq + ds @ kj * scale
    return dq, dk, dv
'''),
    ],
    shortcuts=[
        Shortcut("autograd_plain", """
def flash_backward(q, k, v, out, lse, d_out, block_q, block_k, causal=False):
    with torch.enable_grad():                                     # autograd through plain attention: keeps T x T
        q2, k2, v2 = (t.detach().requires_grad_() for t in (q, k, v))
        s = q2 @ k2.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=q.device).triu(1), float("-inf"))
        return torch.autograd.grad(torch.softmax(s, dim=-1) @ v2, (q2, k2, v2), d_out)
""", keeps=("one_tile", "bfloat16")),     # T x T is no more than a tile (8 x 8 > T = 5) or a few (T = 6, 4 x 4 x d)
    ],
    cases=[
        _bwd_case("basic", "T=8, d=4, tiles of 3 x 3 (the last ones shorter)"),
        _bwd_case("heads", "(B=2, h=3, T=10, d=8), tiles of 4 queries x 3 keys", lead=(2, 3), t_q=10, d=8, bq=4, bk=3,
                  seed=1),
        _bwd_case("cross", "T_q=5 queries, T_k=9 keys, tiles of 2 x 4", lead=(2,), t_q=5, t_k=9, bq=2, bk=4, seed=2),
        _bwd_case("one_tile", "T=5, tiles of 8 x 8 > T", t_q=5, bq=8, bk=8, seed=3),
        _bwd_case("causal", "causal, (2, T=9, d=4), tiles of 4 x 4", causal=True, lead=(2,), t_q=9, bq=4, bk=4, seed=4),
        _bwd_case("causal_ragged", "causal, T=11, tiles of 4 queries x 3 keys", causal=True, t_q=11, bq=4, bk=3, seed=5),
        _bwd_case("large_scores", "scores in the tens, T=7, tiles of 3 x 2", t_q=7, bq=3, bk=2, scale=12.0, seed=6),
        _bwd_case("long_causal", "causal, T=48, tiles of 8 x 6 (a (T, T) tensor is far more than a few tiles here)",
                  causal=True, t_q=48, bq=8, bk=6, seed=7),
        _bwd_case("float64", "float64, causal, (2, T=7, d=4), tiles of 3 x 2", causal=True, lead=(2,), t_q=7, bq=3,
                  bk=2, dtype="float64", seed=8),
        _bwd_case("bfloat16", "bfloat16, (T=6, d=4), tiles of 4 x 4", t_q=6, bq=4, bk=4, dtype="bfloat16", seed=9),
        _bwd_case("best_device", "on the best device (CUDA when present), causal, T=9, tiles of 4 x 4", causal=True,
                  t_q=9, bq=4, bk=4, device="best", seed=10),
        _bwd_case("meta", "on the meta device, causal, T=9, tiles of 4 x 4", causal=True, t_q=9, bq=4, bk=4,
                  device="meta"),
    ],
)

# ---------------------------------------------------------------- grouped_query_attention
GQA_REF = CELLS["grouped_query_attention"]


def _gqa(*pairs):
    return patch(GQA_REF, *pairs)


def _gqa_args(b, h, h_kv, t_q, t_k, d):
    def args(g):
        return (torch.randn(b, h, t_q, d, generator=g), torch.randn(b, h_kv, t_k, d, generator=g),
                torch.randn(b, h_kv, t_k, d, generator=g))
    return args


def _gqa_largest(a, k):
    """The inputs, the scores (B, H, T_q, T_k) or the output: never the keys copied once per query head."""
    q, keys, v = a
    B, H, T_q, _ = q.shape
    return max(q.numel(), keys.numel(), v.numel(), B * H * T_q * keys.shape[-2], B * H * T_q * v.shape[-1])


GQA = Exercise(
    name="grouped_query_attention",
    cell="grouped_query_attention",
    reference=GQA_REF,
    mistakes=[
        Mistake("heads_cycled", "the kv heads are shared cyclically (query head h reads kv head h % H_kv): query "
                "head h must read kv head h // (H // H_kv), so consecutive query heads share one (0, 0, …, 1, 1, "
                "…): the G heads of a group are consecutive in q.",
                _gqa("qg = q.reshape(B, H_kv, group * T_q, d)",
                     "qg = q.reshape(B, group, H_kv, T_q, d).transpose(1, 2).reshape(B, H_kv, group * T_q, d)")),
        Mistake("no_scale", "the scores are not divided by √d.",
                _gqa(" / math.sqrt(d)", "")),
        Mistake("softmax_queries", "the softmax runs over the queries (dim=-2): each query's weights over the keys "
                "must sum to 1, softmax over the last dim.",
                _gqa("torch.softmax(scores, dim=-1)", "torch.softmax(scores, dim=-2)")),
        Mistake("rows_interleaved", "the group's rows are put back in the wrong order: the rows of (B, H_kv, G·T_q, "
                "d) are query head after query head (G blocks of T_q rows); reshape them to (B, H, T_q, d), not as "
                "T_q blocks of G heads.",
                _gqa("return out.reshape(B, H, T_q, v.shape[-1])",
                     "return out.reshape(B, H_kv, T_q, group, v.shape[-1]).transpose(2, 3).reshape(B, H, T_q, "
                     "v.shape[-1])")),
    ],
    variants=[
        Variant("grouped_einsum", '''
def grouped_query_attention(q, k, v):
    B, H, T, d = q.shape
    H_kv = k.shape[1]
    qg = q.reshape(B, H_kv, H // H_kv, T, d)                          # (B, H_kv, G, T, d): a view
    s = torch.einsum("bhgqd,bhkd->bhgqk", qg, k) / d ** 0.5            # (B, H_kv, G, T, T_k)
    return torch.einsum("bhgqk,bhkd->bhgqd", s.softmax(-1), v).reshape(B, H, T, v.shape[-1])
'''),
        Variant("fused_sdpa", '''
def grouped_query_attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
'''),
        Variant("per_group_loop", '''
def grouped_query_attention(q, k, v):
    H, H_kv = q.shape[1], k.shape[1]
    G = H // H_kv
    outs = []
    B, _, T_q, d = q.shape
    for g in range(H_kv):                                             # one kv head serves G consecutive query heads
        rows = q[:, g * G:(g + 1) * G].reshape(B, G * T_q, d)         # the group's queries as rows
        s = torch.matmul(rows, k[:, g].transpose(-2, -1)) / math.sqrt(d)             # (B, G·T_q, T_k)
        outs.append(torch.matmul(torch.softmax(s, dim=-1), v[:, g]).reshape(B, G, T_q, -1))
    return torch.cat(outs, dim=1)
'''),
    ],
    # The point of GQA is the memory of H_kv heads: no tensor as large as the keys repeated for every query head.
    # Such a copy is the largest tensor where T_k > T_q (else q is as large) and d > T_q (else the scores are): every
    # case but mha (one kv head per query head: nothing to copy) and the two device checks has fewer queries than keys.
    how=How(largest=_gqa_largest),
    messages={"how.largest": "the keys or values were copied once per query head (repeat_interleave, or expand "
                             "made contiguous, or a product broadcasting k over the group): that allocates the "
                             "memory GQA exists to save; fold each group's query heads into rows, q.reshape(B, "
                             "H_kv, G·T_q, d), and multiply by the kv head once."},
    shortcuts=[
        Shortcut("repeat_interleave", '''
def grouped_query_attention(q, k, v):
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)                             # (B, H, T_k, d): a copy per query head
    v = v.repeat_interleave(group, dim=1)
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v
''', keeps=("mha", "best_device", "meta")),
        Shortcut("expand_contiguous", '''
def grouped_query_attention(q, k, v):
    B, H, T_q, d = q.shape
    H_kv, T_k = k.shape[1], k.shape[2]
    k = k[:, :, None].expand(B, H_kv, H // H_kv, T_k, d).reshape(B, H, T_k, d)     # reshape copies the expand
    v = v[:, :, None].expand(B, H_kv, H // H_kv, T_k, v.shape[-1]).reshape(B, H, T_k, v.shape[-1])
    return torch.softmax(q @ k.transpose(-2, -1) / d ** 0.5, dim=-1) @ v
''', keeps=("mha", "mqa", "best_device", "meta")),     # one kv head: the expand's reshape is a view (a stride of 0), nothing copied
        Shortcut("broadcast_matmul", '''
def grouped_query_attention(q, k, v):
    B, H, T, d = q.shape
    H_kv = k.shape[1]
    qg = q.reshape(B, H_kv, H // H_kv, T, d)                         # (B, H_kv, G, T, d)
    s = qg @ k.unsqueeze(2).transpose(-2, -1) / d ** 0.5              # k broadcast over G: matmul copies it
    return (s.softmax(-1) @ v.unsqueeze(2)).reshape(B, H, T, v.shape[-1])
''', keeps=("mha", "mqa", "best_device", "meta")),     # one kv head: matmul folds the group into rows itself, nothing copied
    ],
    cases=[
        Case("gqa", "8 query heads, 2 kv heads, (B=2, T_q=4, T_k=9, d=8)", args=_gqa_args(2, 8, 2, 4, 9, 8)),
        Case("mqa", "MQA: 4 query heads, 1 kv head, T_q=2, T_k=10, d=8", args=_gqa_args(1, 4, 1, 2, 10, 8), seed=1),
        Case("mha", "MHA: 3 query heads, 3 kv heads", args=_gqa_args(2, 3, 3, 4, 4, 4), seed=2),
        Case("cross", "6 query heads, 2 kv heads, T_q=3, T_k=7", args=_gqa_args(1, 6, 2, 3, 7, 4), seed=3),
        Case("decode", "one generation step: 8 query heads, 2 kv heads, T_q=1 against T_k=12 cached keys, d=8",
             args=_gqa_args(2, 8, 2, 1, 12, 8), seed=7),
        Case("float64", "float64, 6 query heads, 3 kv heads, T_q=3, T_k=6", dtype="float64", args=_gqa_args(2, 6, 3, 3, 6, 8),
             seed=4),
        Case("bfloat16", "bfloat16, 4 query heads, 2 kv heads, T_q=3, T_k=6", dtype="bfloat16", args=_gqa_args(1, 4, 2, 3, 6, 8),
             seed=5),
        # the device checks keep T_q = T_k (a copy is no larger than q): PyTorch's own fused attention copies K
        # and V on the meta device (and may on a GPU, by its math path), and these checks are about the device
        Case("best_device", "on the best device (CUDA when present), 8 query heads, 2 kv heads", device="best",
             args=_gqa_args(2, 8, 2, 5, 5, 8), seed=6),
        Case("meta", "on the meta device, 8 query heads, 2 kv heads", device="meta",
             args=_gqa_args(2, 8, 2, 5, 5, 8)),
    ],
)

# ---------------------------------------------------------------- predict, then measure: the KV cache's bytes
CACHE_REF = CELLS["predicted_cache_mib"]

PRED_CACHE = Exercise(
    name="predicted_cache_mib",
    cell="predicted_cache_mib",
    reference=CACHE_REF,
    mistakes=[
        Mistake("keys_only", "only the keys are counted: the cache holds a key tensor and a value tensor per "
                "layer.", "predicted_cache_mib = (12.0, 3.0, 1.5)"),
        Mistake("one_layer", "that is one layer's cache: each of the 6 layers keeps its own keys and values.",
                "predicted_cache_mib = (4.0, 1.0, 0.5)"),
        Mistake("query_heads", "the cache was counted with all 8 query heads every time: it stores keys and values "
                "only, one per kv head, so it shrinks with H_kv.", "predicted_cache_mib = (24.0, 24.0, 24.0)"),
        Mistake("entries", "those are Mi-entries, not MiB: each float32 number takes 4 bytes.",
                "predicted_cache_mib = (6.0, 1.5, 0.75)"),
    ],
    variants=[Variant("literal", "predicted_cache_mib = [24, 6, 3]"),
              Variant("bytes_first", "per_head = 2 * 6 * 1024 * 64 * 4\n"
                                     "predicted_cache_mib = (8 * per_head / 2**20, 2 * per_head / 2**20, "
                                     "per_head / 2**20)")],
    cases=[Case("value", "MiB of the KV cache of a 6-layer, 8-head decoder (d_head=64, T=1024, float32) with 8, 2 "
                "and 1 kv heads", kind="value", api="any", atol=0.0, rtol=0.01,
                hint="per layer the cache holds keys and values, each (1, H_kv, 1024, 64) float32 numbers: "
                     "2 × 6 × H_kv × 1024 × 64 × 4 bytes, divided by 2^20.",
                mistake_values={
                    "mb": ("those are MB (10^6 bytes): the question asks for MiB (2^20 bytes).",
                           [2 * 6 * h * 1024 * 64 * 4 / 1e6 for h in (8, 2, 1)]),
                })],
)

# ---------------------------------------------------------------- SlidingWindowCache (through window_probe)
WINDOW_REF = CELLS["SlidingWindowCache"]
WINDOW_GIVEN = "from attncourse.teach.gpt import rotate\n\n" + CELLS["given_window_probe"]


def _win(*pairs):
    return patch(WINDOW_REF, *pairs)


def _kv(b, h, t, d):
    return lambda g: torch.randn(b, h, t, d, generator=g)


def _window_case(name, what, shape, window, chunks, **kw):
    def args(g):
        return (_kv(*shape)(g), _kv(*shape)(g), window, list(chunks))
    return Case(name, what, args=args, labels=["keys", "values", "positions"], **kw)


WINDOW = Exercise(
    name="SlidingWindowCache",
    cell="SlidingWindowCache",
    given=WINDOW_GIVEN,
    wrap="window_probe",
    reference=WINDOW_REF,
    mistakes=[
        Mistake("slot_positions", "the new keys are rotated at their slot in the cache (how many entries it holds) "
                "instead of their absolute position: once old entries are evicted the two differ. Count every "
                "position ever appended and rotate from that count.",
                _win("k = rotate(k, offset=self.seen)", "k = rotate(k, offset=0 if self.pos is None else len(self.pos))")),
        Mistake("keeps_oldest", "the cache keeps the first `window` positions: it must keep the last ones, "
                "[..., -window:, :].",
                _win("k[..., -self.window:, :], v[..., -self.window:, :], pos[-self.window:]",
                     "k[..., :self.window, :], v[..., :self.window, :], pos[:self.window]")),
        Mistake("evicts_one", "only one entry is evicted per append: an append of several positions (a prompt) "
                "can overflow the window by more than one; keep the last `window`, however many arrived.",
                _win("        self.k, self.v, self.pos = k[..., -self.window:, :], v[..., -self.window:, :], "
                     "pos[-self.window:]",
                     "        if k.shape[-2] > self.window:\n"
                     "            k, v, pos = k[..., 1:, :], v[..., 1:, :], pos[1:]\n"
                     "        self.k, self.v, self.pos = k, v, pos"),
                shows="keys[0] has shape"),
        Mistake("values_rotated", "the values are rotated too: RoPE rotates queries and keys only; the values are "
                "kept as they came.",
                _win("k = rotate(k, offset=self.seen)", "k, v = rotate(k, offset=self.seen), rotate(v, offset=self.seen)")),
        Mistake("positions_fixed_device", "the positions are created on the CPU.",
                _win("torch.arange(self.seen, self.seen + t, device=k.device)", "torch.arange(self.seen, self.seen + t)"),
                shows="a tensor is created on a fixed device", cause="fixed_device"),
    ],
    variants=[
        Variant("deque", '''
import collections


class SlidingWindowCache:
    def __init__(self, window):
        self.items = collections.deque(maxlen=window)
        self.count = 0

    def append(self, k, v):
        k = rotate(k, offset=self.count)
        for i in range(k.shape[-2]):
            self.items.append((k[..., i, :], v[..., i, :], self.count + i))
        self.count += k.shape[-2]

    def keys(self):
        return torch.stack([item[0] for item in self.items], dim=-2)

    def values(self):
        return torch.stack([item[1] for item in self.items], dim=-2)

    def positions(self):
        return torch.tensor([item[2] for item in self.items], dtype=torch.int64, device=self.items[0][0].device)
'''),
        Variant("rotate_on_read", '''
class SlidingWindowCache:
    def __init__(self, window):
        self.window, self.total = window, 0
        self.raw_k = self.raw_v = None

    def append(self, k, v):
        self.raw_k = k if self.raw_k is None else torch.cat((self.raw_k, k), -2)
        self.raw_v = v if self.raw_v is None else torch.cat((self.raw_v, v), -2)
        self.total += k.shape[-2]
        self.raw_k, self.raw_v = self.raw_k[..., -self.window:, :], self.raw_v[..., -self.window:, :]

    def positions(self):
        n = self.raw_k.shape[-2]
        return torch.arange(self.total - n, self.total, device=self.raw_k.device)

    def keys(self):
        return rotate(self.raw_k, offset=self.total - self.raw_k.shape[-2])   # kept positions are consecutive

    def values(self):
        return self.raw_v
'''),
    ],
    cases=[
        _window_case("one_by_one", "window 4, 10 positions appended one at a time", (1, 2, 10, 8), 4, [1] * 10),
        _window_case("long_prompt", "window 4, a prompt of 7 then 4 single positions", (2, 1, 11, 8), 4,
                     [7, 1, 1, 1, 1], seed=1),
        _window_case("chunks", "window 5, chunks of 3, 2, 4 and 3", (1, 3, 12, 4), 5, [3, 2, 4, 3], seed=2),
        _window_case("wide_window", "window 16 > the 9 positions appended (nothing evicted)", (1, 2, 9, 8), 16,
                     [4, 1, 1, 3], seed=3),
        _window_case("bfloat16", "bfloat16, window 3, a prompt of 5 then 3 single positions", (1, 2, 8, 8), 3,
                     [5, 1, 1, 1], dtype="bfloat16", seed=4),
        _window_case("best_device", "on the best device (CUDA when present), window 4, a prompt of 6 then 3",
                     (1, 2, 9, 8), 4, [6, 1, 1, 1], device="best", seed=5),
        _window_case("meta", "on the meta device, window 4, a prompt of 6 then 3", (1, 2, 9, 8), 4, [6, 1, 1, 1],
                     device="meta"),
    ],
)

# ---------------------------------------------------------------- predict, then measure: a bfloat16 gap
GAP_REF = CELLS["predicted_bf16_gap"]

PRED_GAP = Exercise(
    name="predicted_bf16_gap",
    cell="predicted_bf16_gap",
    reference=GAP_REF,
    mistakes=[
        Mistake("relative_eps", "that is the gap just above 1 (2^-7): the gap grows with the number; above 2^e it "
                "is 2^e / 128.", "predicted_bf16_gap = 2 ** -7"),
        Mistake("half_gap", "that is half the gap (the largest rounding error): the question asks for the distance "
                "to the next bfloat16 number, 2^9 / 128.", "predicted_bf16_gap = 2.0"),
        Mistake("next_power", "the power of two *above* 1000 was used: 1000 lies between 2^9 = 512 and 2^10, so the "
                "gap is 2^9 / 128.", "predicted_bf16_gap = 2 ** 10 / 128"),
        Mistake("float16", "that is float16's gap (10 stored mantissa bits, 1024 numbers per octave): bfloat16 has "
                "7 stored bits, 128 numbers between consecutive powers of two.", "predicted_bf16_gap = 2 ** 9 / 1024"),
    ],
    variants=[Variant("literal", "predicted_bf16_gap = 4"),
              Variant("from_eps", "eps = 2 ** -7\npredicted_bf16_gap = 512 * eps")],
    cases=[Case("value", "the gap between 1000 and the next larger bfloat16 number", kind="value", api="any",
                atol=0.0, rtol=0.01,
                hint="1000 lies between 2^9 = 512 and 2^10 = 1024; bfloat16 has 128 evenly spaced numbers there, "
                     "512 / 128 apart.",
                mistake_values={
                    "value_times_eps": ("1000 × 2^-7 scales the gap at 1 by the number itself; the gap is constant "
                                        "between two powers of two: 2^9 × 2^-7.", 1000 * 2 ** -7),
                    "float32": ("that is float32's gap (23 stored bits); bfloat16 keeps 7.", 2 ** 9 * 2 ** -23),
                })],
)

# ---------------------------------------------------------------- find the bug: combine_partials
COMBINE_REF = CELLS["combine_partials"]


def _comb(*pairs):
    return patch(COMBINE_REF, *pairs)


def _partials(*lead, t=5, t_a=3, t_b=4, d=4, scale=1.0, twin=False):
    """Two genuine partial attentions of the same queries over disjoint key sets (float64 at build time).
    ``twin``: B's keys are A's moved by a little, so that both parts hold a fair share of the mass even when the
    scores are large (otherwise one part takes it all, and the larger lse is the combined one)."""
    def args(g):
        q = scale * torch.randn(*lead, t, d, generator=g, dtype=torch.float64)
        out, k = [], None
        for n in (t_a, t_b):
            if twin and k is not None:
                k = k + 0.002 * torch.randn(*k.shape, generator=g, dtype=torch.float64)
            else:
                k = torch.randn(*lead, n, d, generator=g, dtype=torch.float64)
            v = torch.randn(*lead, n, d, generator=g, dtype=torch.float64)
            s = q @ k.transpose(-2, -1) / d ** 0.5
            out += [s.softmax(-1) @ v, s.logsumexp(-1)]
        return tuple(out)
    return args


COMBINE = Exercise(
    name="combine_partials",
    cell="combine_partials",
    reference=COMBINE_REF,
    handout="max_not_lse",
    mistakes=[
        # The handout's own bug: its message says what the student can observe, not the line that fixes it.
        Mistake("max_not_lse", "the weights w_a and w_b add up to more than 1 (the part with the larger "
                "log-sum-exp always gets weight exactly 1), so the merged output is not an average of o_a and o_b, "
                "and the returned lse is smaller than the log-sum-exp over both key sets.",
                _comb("lse = torch.logaddexp(lse_a, lse_b)", "lse = torch.maximum(lse_a, lse_b)")),
        Mistake("weights_swapped", "the weights are swapped: o_a is weighted by A's share exp(lse_a − lse), o_b by "
                "B's.", _comb("return o_a * w_a + o_b * w_b, lse", "return o_a * w_b + o_b * w_a, lse")),
        Mistake("lse_summed", "the log-sum-exps are added: that multiplies the two masses; their sum's logarithm is "
                "log(e^lse_a + e^lse_b) (torch.logaddexp).",
                _comb("lse = torch.logaddexp(lse_a, lse_b)", "lse = lse_a + lse_b")),
        Mistake("unstable_weights", "the weights exponentiate the log-sum-exps themselves, exp(lse_a) / "
                "(exp(lse_a) + exp(lse_b)): right in exact arithmetic, but exp overflows for large scores. Subtract "
                "the combined lse before exp.",
                _comb("w_a = torch.exp(lse_a - lse).unsqueeze(-1)",
                      "w_a = (torch.exp(lse_a) / (torch.exp(lse_a) + torch.exp(lse_b))).unsqueeze(-1)",
                      "w_b = torch.exp(lse_b - lse).unsqueeze(-1)",
                      "w_b = (torch.exp(lse_b) / (torch.exp(lse_a) + torch.exp(lse_b))).unsqueeze(-1)"),
                shows="exp() of large scores overflowing to inf (subtract each row's maximum before exp)"),
        Mistake("plain_average", "the two outputs are averaged with equal weights: each part weighs its share of the "
                "softmax mass, exp(lse_part − lse).",
                _comb("return o_a * w_a + o_b * w_b, lse", "return (o_a + o_b) / 2, lse")),
    ],
    variants=[
        Variant("sigmoid", '''
def combine_partials(o_a, lse_a, o_b, lse_b):
    share_a = torch.sigmoid(lse_a - lse_b).unsqueeze(-1)        # e^a / (e^a + e^b)
    lse = lse_b + F.softplus(lse_a - lse_b)
    return share_a * o_a + (1 - share_a) * o_b, lse
'''),
        Variant("stacked", '''
def combine_partials(o_a, lse_a, o_b, lse_b):
    lses = torch.stack([lse_a, lse_b])                          # (2, ..., T)
    lse = torch.logsumexp(lses, dim=0)
    w = torch.exp(lses - lse).unsqueeze(-1)                     # (2, ..., T, 1)
    return (w * torch.stack([o_a, o_b])).sum(dim=0), lse
'''),
    ],
    cases=[
        Case("halves", "T=5 queries, key sets of 3 and 4", args=_partials(), labels=["output", "lse"]),
        Case("heads", "(B=2, h=3, T=5, d=8), key sets of 6 and 2", args=_partials(2, 3, t_a=6, t_b=2, d=8),
             labels=["output", "lse"], seed=1),
        Case("uneven", "one key against 9", args=_partials(2, t=4, t_a=1, t_b=9), labels=["output", "lse"], seed=2),
        Case("large_scores", "scores in the thousands", args=_partials(t=4, t_a=3, t_b=3, scale=600.0, twin=True), labels=["output", "lse"],
             seed=3),
        Case("float64", "float64, (2, T=6, d=4)", dtype="float64", args=_partials(2, t=6), labels=["output", "lse"],
             seed=4),
        Case("bfloat16", "bfloat16, (2, T=4, d=4)", dtype="bfloat16", args=_partials(2, t=4), labels=["output", "lse"],
             seed=5),
        Case("best_device", "on the best device (CUDA when present), (2, T=5, d=4)", device="best",
             args=_partials(2), labels=["output", "lse"], seed=6),
        Case("meta", "on the meta device, (2, T=5, d=4)", device="meta", args=_partials(2), labels=["output", "lse"]),
    ],
)

POINTS = {   # what each hidden check is worth; a hidden cell's points are the sum of its checks'
    # one_block and block_1 cannot tell a whole-row softmax from the online one (one block is the row; with
    # blocks of 1, merging the blocks' maxima is the row's maximum): they weigh least
    "online_softmax": {"blocks_of_2": 0.875, "uneven": 0.75, "one_block": 0.5, "block_1": 0.625,
                       "large_logits": 0.75, "float64": 0.125, "bfloat16": 0.125, "best_device": 0.125,
                       "meta": 0.125},
    # long and long_causal are where a (T, T) tensor is far more than a few tiles
    "tiled_attention": {"basic": 0.5, "heads": 0.5, "one_block": 0.375, "cross": 0.5, "large_logits": 0.5,
                        "causal": 0.5, "causal_block_1": 0.5, "causal_heads": 0.625, "long": 0.75,
                        "long_causal": 0.75, "float64": 0.125, "bfloat16": 0.125, "best_device": 0.125,
                        "meta": 0.125},
    "predicted_bytes": {"value": 2},
    # decode is where a copy of K per query head is the largest tensor by far (one query against 12 keys)
    "grouped_query_attention": {"gqa": 0.75, "mqa": 0.75, "mha": 0.75, "cross": 0.75, "decode": 0.5,
                                "float64": 0.125, "bfloat16": 0.125, "best_device": 0.125, "meta": 0.125},
    "predicted_causal_tiles": {"value": 2},
    # long_causal is where a (T, T) tensor is far more than a few tiles (autograd through plain attention keeps it)
    "flash_backward": {"basic": 0.5, "heads": 0.5, "cross": 0.5, "one_tile": 0.375, "causal": 0.5,
                       "causal_ragged": 0.625, "large_scores": 0.5, "long_causal": 1.0, "float64": 0.125,
                       "bfloat16": 0.125, "best_device": 0.125, "meta": 0.125},
    "predicted_cache_mib": {"value": 2},
    "SlidingWindowCache": {"one_by_one": 1.25, "long_prompt": 1.125, "chunks": 1.125, "wide_window": 1.125,
                           "bfloat16": 0.125, "best_device": 0.125, "meta": 0.125},
    "predicted_bf16_gap": {"value": 2},
    "combine_partials": {"halves": 0.625, "heads": 0.625, "uneven": 0.625, "large_scores": 0.625, "float64": 0.125,
                         "bfloat16": 0.125, "best_device": 0.125, "meta": 0.125},
}

SECTION = Section("10_efficient_attention", [ONLINE, TILED, PRED_BYTES, PRED_TILES, BWD, GQA, PRED_CACHE, WINDOW, PRED_GAP, COMBINE],
                  points=POINTS)
