"""Hidden cases for section 11: FlashAttention in Triton.

Five graded exercises: ``softmax_rows`` (a Triton kernel, one program per row), ``flash_attention_forward`` (the
FlashAttention forward kernel), ``predicted_tiles`` (predict, then measure), ``flash_forward_exp2`` (find the bug:
the notebook hands out the ``lse_base2`` mistake) and ``flash_attention_backward_dkdv`` (the backward's dK/dV
kernel).

Every case runs on the best device (a Triton kernel compiled for a GPU cannot take CPU tensors; on a CPU, and
wherever the grading sandbox runs it, the kernel is interpreted), never on ``meta`` (a kernel cannot run there):
the device is the exercise's own (``native=True``), not a check of the device contract.
The hidden cells wrap each launcher in a given function of the notebook (``Exercise.wrap``): ``kernel_only``
refuses PyTorch's own math while the launcher runs (:func:`attncourse.teach.flash.no_torch_math`: a launcher that
computes the answer with torch raises, and earns nothing); ``forward_probe`` and ``dkdv_probe`` also return how
many ``tl.load`` calls of the kernel read ``k`` (``q``), which is how the causal tiles above (before) the diagonal
are seen to be skipped. When the kernel side records the operations a computation ran (issue 36's ``How`` rules),
the refusal belongs there, as a rule of these exercises' cases, and ``kernel_only`` reduces to counting.

The build runs every reference in float64 on the CPU, in Triton's interpreter (``triton_mode(interpret=True)`` in
the given code). float16 cases are ``api="any"``: the contract's ``lse`` is float32 whatever the inputs' dtype.
"""
import torch

from .spec import Case, Exercise, Mistake, patch, Section, source_cells, Variant

CELLS = source_cells("11_flash_attention_triton")   # the source notebook: solutions and given code are read from it

GIVEN = ("from attncourse.teach.flash import interpreting, no_torch_math, run_and_count, triton_mode\n"
         "triton_mode(interpret=True)\n"
         "import triton\n"
         "import triton.language as tl\n\n" + CELLS["given_probes"])
OUTSIDE = "outside every tensor given to the kernel"     # what the checked interpreter says of an unmasked access
REFUSED = "the launcher computed with torch"               # what no_torch_math says

# ---------------------------------------------------------------- softmax_rows
SOFT_REF = CELLS["softmax_rows"]


def _soft(*pairs):
    return patch(SOFT_REF, *pairs)


def _rows(r, c, scale=1.0):
    return lambda g: (scale * torch.randn(r, c, generator=g),)


SOFTMAX = Exercise(
    name="softmax_rows",
    cell="softmax_rows",
    given=GIVEN,
    wrap="kernel_only",
    reference=SOFT_REF,
    mistakes=[
        Mistake("pad_zero", "the slots past the end of the row are loaded as 0 (other=0.0): they take part in the "
                "maximum and the sum as columns of score 0. Load them as other=float(\"-inf\"), whose exp is 0.",
                _soft('other=float("-inf")', "other=0.0")),
        Mistake("no_max", "the row's maximum is not subtracted before exp: exp overflows for large logits. Subtract "
                "tl.max(x, axis=0) first.",
                _soft("z = x - tl.max(x, axis=0)", "z = x")),
        Mistake("sum_unshifted", "the numerators are exp(x − max) but the sum is of exp(x): both must be shifted by "
                "the same maximum (sum the numerators themselves).",
                _soft("y = num / tl.sum(num, axis=0)", "y = num / tl.sum(tl.exp(x), axis=0)")),
        Mistake("store_unmasked", "the store has no mask: the slots past the end of the last row are written outside "
                "the output. Store with the load's mask, cols < C.",
                _soft("tl.store(Y + row * stride_row + cols, y.to(Y.dtype.element_ty), mask=cols < C)",
                      "tl.store(Y + row * stride_row + cols, y.to(Y.dtype.element_ty))"),
                shows=OUTSIDE),
        Mistake("torch_launcher", "the launcher computes the softmax with torch: the kernel must compute it.",
                _soft("    softmax_rows_kernel[(R,)](x, y, C, x.stride(0), BLOCK=triton.next_power_of_2(C))\n"
                      "    return y",
                      "    return torch.softmax(x, dim=1)"),
                shows=REFUSED),
    ],
    variants=[
        Variant("exp2", _soft("num = tl.exp(z)", "num = tl.exp2(z * 1.4426950408889634)")),
        Variant("rows_per_program", '''
@triton.jit
def softmax_tile_kernel(X, Y, R, C, stride_row, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)                 # (ROWS,): several rows per program
    cols = tl.arange(0, BLOCK)
    inside = (rows[:, None] < R) & (cols[None, :] < C)                  # (ROWS, BLOCK)
    ptrs = rows[:, None] * stride_row + cols[None, :]
    x = tl.load(X + ptrs, mask=inside, other=-float("inf")).to(tl.float32)
    m = tl.max(x, axis=1)
    e = tl.where(inside, tl.exp(x - m[:, None]), 0.0)
    tl.store(Y + ptrs, (e / tl.sum(e, axis=1)[:, None]).to(Y.dtype.element_ty), mask=inside)


def softmax_rows(x):
    x = x.contiguous()
    out = torch.empty_like(x)
    n_rows, n_cols = x.shape
    softmax_tile_kernel[(triton.cdiv(n_rows, 2),)](x, out, n_rows, n_cols, x.stride(0), ROWS=2,
                                                  BLOCK=triton.next_power_of_2(n_cols))
    return out
'''),
    ],
    cases=[
        Case("basic", "a (4, 10) input: a tile of 16 per row", args=_rows(4, 10), device="best", native=True),
        Case("power_of_two", "a (3, 16) input: the tile is the row", args=_rows(3, 16), device="best", native=True,
             seed=1),
        Case("wide", "a (2, 300) input: a tile of 512", args=_rows(2, 300), device="best", native=True, seed=2),
        Case("one_column", "a (5, 1) input", args=_rows(5, 1), device="best", native=True, seed=3),
        Case("large_logits", "logits in the thousands, (3, 20)", args=_rows(3, 20, scale=1000.0), device="best",
             native=True,
             seed=4),
        Case("float16", "float16, (4, 33)", args=_rows(4, 33, scale=3.0), dtype="float16", device="best", native=True,
             seed=5),
    ],
)

# ---------------------------------------------------------------- flash_attention_forward
FWD_REF = CELLS["flash_attention_forward"]


def _fwd(*pairs):
    return patch(FWD_REF, *pairs)


def _attention_args(b, h, t, d, causal, block_m, block_n, scale=1.0, uniform_large=False):
    def args(g):
        if uniform_large:     # every key equally likely (q = 0), values in the thousands (exact in float32)
            q = torch.zeros(b, h, t, d)
            k = torch.randn(b, h, t, d, generator=g)
            v = torch.randint(3000, 4000, (b, h, t, d), generator=g).float()
        else:
            q, k, v = (torch.randn(b, h, t, d, generator=g) for _ in range(3))
            q = scale * q
        return q, k, v, causal, block_m, block_n
    return args


FWD_LABELS = ["output", "lse", "the number of key tiles loaded (tl.load calls that read k)"]


def _fwd_case(name, what, *shape, causal=False, tiles=(16, 16), **kw):
    scale, uniform = kw.pop("scale", 1.0), kw.pop("uniform_large", False)
    return Case(name, what, args=_attention_args(*shape, causal, *tiles, scale=scale, uniform_large=uniform),
                labels=FWD_LABELS, device="best", native=True, **kw)


FORWARD_CASES = [
    _fwd_case("basic", "(B=1, H=1, T=32, d=16), 16 × 16 tiles", 1, 1, 32, 16),
    _fwd_case("ragged", "(1, 2, T=37, 16), 16 × 16 tiles: partial last tiles", 1, 2, 37, 16, seed=1),
    _fwd_case("causal", "causal, (1, 1, T=48, 16), 16 × 16 tiles", 1, 1, 48, 16, causal=True, seed=2),
    _fwd_case("causal_ragged", "causal, (2, 1, T=45, 32), 16 × 16 tiles", 2, 1, 45, 32, causal=True, seed=3),
    _fwd_case("wide_key_tiles", "causal, (1, 1, T=50, 16), 16 queries × 32 keys per tile", 1, 1, 50, 16,
              causal=True, tiles=(16, 32), seed=4),
    _fwd_case("tall_query_tiles", "causal, (1, 1, T=50, 16), 32 queries × 16 keys per tile", 1, 1, 50, 16,
              causal=True, tiles=(32, 16), seed=5),
    _fwd_case("short", "causal, T=5 < one tile", 1, 1, 5, 16, causal=True, seed=6),
    _fwd_case("large_logits", "scores in the tens, (1, 1, T=40, 16)", 1, 1, 40, 16, scale=6.0, seed=7),
    _fwd_case("uniform_large_values", "every key equally likely (q = 0), values in the thousands, T=48",
              1, 1, 48, 16, uniform_large=True, seed=8),
    _fwd_case("float16", "float16, causal, (1, 2, T=40, 32)", 1, 2, 40, 32, causal=True, dtype="float16",
              api="any", seed=9),
    _fwd_case("tiles_64", "causal, (1, 1, T=100, 64), 64 × 64 tiles", 1, 1, 100, 64, causal=True, tiles=(64, 64),
              seed=10),
]

FORWARD = Exercise(
    name="flash_attention_forward",
    cell="flash_attention_forward",
    given=GIVEN,
    wrap="forward_probe",
    reference=FWD_REF,
    mistakes=[
        Mistake("acc_not_rescaled", "the accumulator is not rescaled when a row's maximum grows: like l, acc holds "
                "terms exp(s − m_old)·v, so multiply it by alpha = exp(m_old − m_new) before adding the tile's P V.",
                _fwd("acc = acc * alpha[:, None] + tl.dot(", "acc = acc + tl.dot(")),
        Mistake("lse_m_plus_l", "the log-sum-exp is m + l: l is a sum of exponentials, so the log-sum-exp is "
                "m + log(l).",
                _fwd("m_i + tl.log(l_i)", "m_i + l_i")),
        Mistake("tail_scores_unmasked", "the scores of the keys past the end of the last, partial key tile are not "
                "masked: loaded as zeros, they get the score 0 and a weight exp(0 − m). Set the scores of keys "
                "≥ T to −inf.",
                _fwd('        s = tl.where(cols[None, :] < T, s, float("-inf"))                # keys past the end '
                     'get no weight\n', "")),
        Mistake("tail_loads_unmasked", "the last, partial key tile is loaded without a mask: it reads past the end "
                "of k and v. Load with mask=cols[:, None] < T (and other=0.0), and mask the missing keys' scores.",
                _fwd("mask=cols[:, None] < T, other=0.0)", ")"), shows=OUTSIDE),
        Mistake("causal_skips_diagonal", "the causal loop stops one tile early and skips the diagonal tile, whose "
                "keys the tile's queries partly see (query t sees key t): loop up to (start_m + 1) · BLOCK_M.",
                _fwd("tl.minimum((start_m + 1) * BLOCK_M, T)", "tl.minimum(start_m * BLOCK_M, T)")),
        Mistake("causal_no_skip", "the causal kernel loads every key tile and masks the ones above the diagonal: "
                "right values, but about twice the work. Stop the loop at the diagonal, "
                "min((start_m + 1) · BLOCK_M, T).",
                _fwd("hi = tl.minimum((start_m + 1) * BLOCK_M, T) if CAUSAL else T ", "hi = T ")),
        Mistake("half_accumulator", "the accumulator acc is kept in float16 between key tiles: its 11 significant "
                "bits round what each tile adds, and above 65504 it overflows. Keep m, l and acc in float32 "
                "whatever the inputs' dtype, and cast only when storing the output.",
                _fwd("acc = tl.zeros([BLOCK_M, D], dtype=tl.float32)", "acc = tl.zeros([BLOCK_M, D], dtype=tl.float16)",
                     "acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)",
                     "acc = (acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)).to(tl.float16)")),
        Mistake("torch_launcher", "the launcher computes the attention with torch: the kernel must compute it.",
                _fwd("    return o, lse\n", "    s = q @ k.transpose(-2, -1) / math.sqrt(d)\n"
                     "    if causal:\n"
                     "        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1), "
                     "float('-inf'))\n"
                     "    return torch.softmax(s, dim=-1) @ v, torch.logsumexp(s, dim=-1)\n"),
                shows=REFUSED),
    ],
    variants=[
        Variant("exp2", _fwd("s = tl.dot(q, tl.trans(k)) * scale ", "s = tl.dot(q, tl.trans(k)) * (scale * 1.4426950408889634) ",
                             "alpha = tl.exp(m_i - m_new)", "alpha = tl.exp2(m_i - m_new)",
                             "p = tl.exp(s - m_new[:, None])", "p = tl.exp2(s - m_new[:, None])",
                             "m_i + tl.log(l_i)", "(m_i + tl.log2(l_i)) * 0.6931471805599453")),
        Variant("diagonal_first", '''
@triton.jit
def attend_kernel(Q, K, V, O, LSE, T, scale, stride_b, stride_h, stride_t, H,
                  CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr):
    # heads on axis 0, query tiles on axis 1; the key tiles walked from the last one down to the first
    head, tile = tl.program_id(0), tl.program_id(1)
    base = (head // H) * stride_b + (head % H) * stride_h
    r = tile * BLOCK_M + tl.arange(0, BLOCK_M)
    c0 = tl.arange(0, BLOCK_N)
    j = tl.arange(0, D)
    q = tl.load(Q + base + r[:, None] * stride_t + j[None, :], mask=r[:, None] < T, other=0.0)
    big = tl.full([BLOCK_M], -float("inf"), tl.float32)
    total = tl.zeros([BLOCK_M], tl.float32)
    out = tl.zeros([BLOCK_M, D], tl.float32)
    if CAUSAL:
        n_tiles = tl.cdiv(tl.minimum((tile + 1) * BLOCK_M, T), BLOCK_N)
    else:
        n_tiles = tl.cdiv(T, BLOCK_N)
    for step in range(0, n_tiles):
        c = (n_tiles - 1 - step) * BLOCK_N + c0
        kt = tl.load(K + base + c[:, None] * stride_t + j[None, :], mask=c[:, None] < T, other=0.0)
        vt = tl.load(V + base + c[:, None] * stride_t + j[None, :], mask=c[:, None] < T, other=0.0)
        ok = (c[None, :] < T) & (r[:, None] >= 0)
        if CAUSAL:
            ok = ok & (c[None, :] <= r[:, None])
        s = tl.where(ok, tl.dot(q, tl.trans(kt)) * scale, -float("inf"))
        new = tl.maximum(big, tl.max(s, axis=1))
        safe = tl.where(new == -float("inf"), 0.0, new)                 # a row with no key yet: nothing to rescale
        w = tl.exp(s - safe[:, None])
        shrink = tl.exp(big - safe)
        total = total * shrink + tl.sum(w, axis=1)
        out = out * shrink[:, None] + tl.dot(w.to(vt.dtype), vt)
        big = new
    tl.store(O + base + r[:, None] * stride_t + j[None, :], (out / total[:, None]).to(O.dtype.element_ty),
             mask=r[:, None] < T)
    tl.store(LSE + head * T + r, big + tl.log(total), mask=r < T)


def flash_attention_forward(q, k, v, causal=False, block_m=16, block_n=16):
    B, H, T, d = q.shape
    out = torch.empty_like(q)
    lse = q.new_empty((B, H, T), dtype=torch.float32)
    if not (q.stride() == k.stride() == v.stride() == out.stride()):
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        out = torch.empty_like(q)
    attend_kernel[(B * H, triton.cdiv(T, block_m))](q, k, v, out, lse, T, d ** -0.5, q.stride(0), q.stride(1),
                                                     q.stride(2), H, CAUSAL=causal, BLOCK_M=block_m,
                                                     BLOCK_N=block_n, D=d)
    return out, lse
'''),
    ],
    cases=FORWARD_CASES,
)

# ---------------------------------------------------------------- predict, then measure: the tiles loaded
TILES_REF = CELLS["predicted_tiles"]

PRED_TILES = Exercise(
    name="predicted_tiles",
    cell="predicted_tiles",
    reference=TILES_REF,
    mistakes=[
        Mistake("diagonal_left_out", "the diagonal tiles are loaded too: they hold keys the tile's queries see "
                "(query t sees key t), masked inside the tile. Query tile i loads tiles 0 … i, i + 1 of them.",
                "predicted_tiles = (256, 120)"),
        Mistake("half", "exactly half would cut the diagonal tiles in two; each is loaded whole: 16 · 17 / 2.",
                "predicted_tiles = (256, 128)"),
        Mistake("query_tiles", "those are the programs (query tiles): each one loads many key tiles.",
                "predicted_tiles = (16, 16)"),
        Mistake("rows", "those count keys or rows, not tiles of 64: there are 1024 / 64 = 16 tiles along each side.",
                "predicted_tiles = (1024 * 1024, 1024 * 1025 // 2)"),
    ],
    variants=[Variant("literal", "predicted_tiles = [256, 136]"),
              Variant("loop", "predicted_tiles = (16 * 16, sum(range(1, 17)))")],
    cases=[Case("value", "key tiles loaded by the forward kernel, T=1024, 64 × 64 tiles, without and with the "
                "causal mask", kind="value", api="any", atol=0.0, rtol=0.001,
                hint="there are 1024 / 64 = 16 query tiles and 16 key tiles; without the mask each query tile loads "
                     "all 16; with it query tile i loads tiles 0 … i.",
                mistake_values={
                    "bytes": ("those look like bytes: the question counts tiles (each 64 × 64 numbers).",
                              [256 * 64 * 64 * 4.0, 136 * 64 * 64 * 4.0]),
                })],
)

# ---------------------------------------------------------------- find the bug: flash_forward_exp2
EXP2_REF = CELLS["flash_forward_exp2"]


def _exp2(*pairs):
    return patch(EXP2_REF, *pairs)


EXP2 = Exercise(
    name="flash_forward_exp2",
    cell="flash_forward_exp2",
    given=GIVEN,
    wrap="forward_probe",
    reference=EXP2_REF,
    handout="lse_base2",
    mistakes=[
        Mistake("lse_base2", "O is right but the saved log-sum-exp is not: on every row it is about 1.44 times "
                "torch.logsumexp of the scaled scores, whatever the scores are — a question of units, not of "
                "rounding.",
                _exp2("(m_i + tl.log2(l_i)) * 0.6931471805599453", "m_i + tl.log2(l_i)")),
        Mistake("lse_mixed_units", "m_i is in base-2 units and log(l_i) natural: convert the whole base-2 "
                "log-sum-exp, (m_i + log2 l_i) · ln 2.",
                _exp2("(m_i + tl.log2(l_i)) * 0.6931471805599453", "m_i + tl.log(l_i)")),
        Mistake("lse_times_log2e", "the base-2 log-sum-exp is multiplied by log2 e: going from base 2 back to base e "
                "multiplies by ln 2 = 1 / log2 e.",
                _exp2("(m_i + tl.log2(l_i)) * 0.6931471805599453", "(m_i + tl.log2(l_i)) * 1.4426950408889634")),
        Mistake("lse_without_max", "the maximum is left out of the log-sum-exp: the sum l_i was taken after "
                "subtracting m_i, so lse = (m_i + log2 l_i) · ln 2.",
                _exp2("(m_i + tl.log2(l_i)) * 0.6931471805599453", "tl.log2(l_i) * 0.6931471805599453")),
        Mistake("exp_base_e", "the weights are e^(s₂ − m₂) for scores already multiplied by log2 e: in base 2 they "
                "are 2^(s₂ − m₂) (tl.exp2), or scale the scores by 1/√d alone to use tl.exp.",
                _exp2("p = tl.exp2(s - m_new[:, None])", "p = tl.exp(s - m_new[:, None])")),
    ],
    variants=[
        Variant("log_of_sum", _exp2("(m_i + tl.log2(l_i)) * 0.6931471805599453",
                                    "m_i * 0.6931471805599453 + tl.log(l_i)")),
        Variant("divide", _exp2("(m_i + tl.log2(l_i)) * 0.6931471805599453",
                                "(m_i + tl.log2(l_i)) / 1.4426950408889634")),
    ],
    cases=[
        _fwd_case("basic", "(1, 1, T=40, 16), 32 × 32 tiles", 1, 1, 40, 16, tiles=(32, 32)),
        _fwd_case("causal", "causal, (1, 2, T=50, 16), 32 × 32 tiles", 1, 2, 50, 16, causal=True, tiles=(32, 32),
                  seed=1),
        _fwd_case("small_tiles", "causal, (2, 1, T=33, 32), 16 × 16 tiles", 2, 1, 33, 32, causal=True, seed=2),
        _fwd_case("large_logits", "scores in the tens, (1, 1, T=40, 16), 32 × 32 tiles", 1, 1, 40, 16,
                  tiles=(32, 32), scale=6.0, seed=3),
    ],
)

# ---------------------------------------------------------------- flash_attention_backward_dkdv
BWD_REF = CELLS["flash_attention_backward_dkdv"]


def _bwd(*pairs):
    return patch(BWD_REF, *pairs)


def _backward_args(b, h, t, d, causal, block_m, block_n, scale=1.0):
    """q, k, v, do drawn; o and lse of the attention of q, k, v computed in float64 (what the forward saves)."""
    def args(g):
        q, k, v, do = (torch.randn(b, h, t, d, generator=g) for _ in range(4))
        q = scale * q
        s = q.double() @ k.double().transpose(-2, -1) / d ** 0.5
        if causal:
            s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
        o, lse = s.softmax(-1) @ v.double(), s.logsumexp(-1)
        return q, k, v, o, lse, do, causal, block_m, block_n
    return args


BWD_LABELS = ["dk", "dv", "the number of query tiles loaded (tl.load calls that read q)"]


def _bwd_case(name, what, *shape, causal=False, tiles=(16, 16), scale=1.0, **kw):
    return Case(name, what, args=_backward_args(*shape, causal, *tiles, scale=scale), labels=BWD_LABELS,
                device="best", native=True, **kw)


BACKWARD = Exercise(
    name="flash_attention_backward_dkdv",
    cell="flash_attention_backward_dkdv",
    given=GIVEN,
    wrap="dkdv_probe",
    reference=BWD_REF,
    mistakes=[
        Mistake("p_without_lse", "the weights are recomputed as exp(S) without the log-sum-exp: P = exp(S − lse), "
                "one lse per query row, which both shifts and normalises.",
                _bwd("p = tl.exp(s - lse[:, None])", "p = tl.exp(s)")),
        Mistake("no_delta", "dS is P ∘ dP: the softmax's gradient subtracts D, one number per query row, "
                "D_i = dO_i · O_i: dS = P ∘ (dP − D).",
                _bwd("ds = p * (dp - delta[:, None])", "ds = p * dp")),
        Mistake("dk_unscaled", "dK misses the scale: S = Q Kᵀ / √d, so dK = dSᵀ Q / √d.",
                _bwd("(dk * scale).to(DK.dtype.element_ty)", "dk.to(DK.dtype.element_ty)")),
        Mistake("causal_skips_diagonal", "the causal loop starts one query tile late: the tile holding the key "
                "tile's first key holds queries that see it. Start at (start_n · BLOCK_N) // BLOCK_M · BLOCK_M.",
                _bwd("lo = (start_n * BLOCK_N // BLOCK_M) * BLOCK_M", "lo = (start_n * BLOCK_N // BLOCK_M + 1) * BLOCK_M")),
        Mistake("causal_no_skip", "the causal kernel loads every query tile and masks the ones before the key tile: "
                "right values, but more work. Start the loop at the query tile holding the key tile's first key.",
                _bwd("lo = (start_n * BLOCK_N // BLOCK_M) * BLOCK_M if CAUSAL else 0 ", "lo = 0 ")),
        Mistake("torch_launcher", "the launcher computes the gradients with torch: the kernel must compute them.",
                _bwd("    return dk, dv\n",
                     "    p = torch.exp(q @ k.transpose(-2, -1) / math.sqrt(d) - lse[..., None])\n"
                     "    if causal:\n"
                     "        p = p * torch.ones(T, T, device=q.device).tril()\n"
                     "    dv = p.transpose(-2, -1) @ do\n"
                     "    ds = p * (do @ v.transpose(-2, -1) - (do * o).sum(-1, keepdim=True))\n"
                     "    return ds.transpose(-2, -1) @ q / math.sqrt(d), dv\n"),
                shows=REFUSED),
    ],
    variants=[
        Variant("delta_kernel", '''
@triton.jit
def delta_kernel(O, DO, DELTA, T, stride_bh, stride_t, BLOCK_M: tl.constexpr, D: tl.constexpr):
    # D_i = dO_i · O_i for one tile of rows, computed once (FlashAttention-2's preprocessing kernel)
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    bh = tl.program_id(1)
    ptrs = bh * stride_bh + rows[:, None] * stride_t + tl.arange(0, D)[None, :]
    o = tl.load(O + ptrs, mask=rows[:, None] < T, other=0.0)
    do = tl.load(DO + ptrs, mask=rows[:, None] < T, other=0.0)
    tl.store(DELTA + bh * T + rows, tl.sum(o * do, axis=1), mask=rows < T)


@triton.jit
def dkdv_kernel(Q, K, V, DO, LSE, DELTA, DK, DV, T, scale, stride_bh, stride_t,
                CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr):
    j = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    bh = tl.program_id(1)
    e = tl.arange(0, D)
    kv = bh * stride_bh + j[:, None] * stride_t + e[None, :]
    k = tl.load(K + kv, mask=j[:, None] < T, other=0.0)
    v = tl.load(V + kv, mask=j[:, None] < T, other=0.0)
    dk = tl.zeros([BLOCK_N, D], tl.float32)
    dv = tl.zeros([BLOCK_N, D], tl.float32)
    first = 0
    if CAUSAL:
        first = (tl.program_id(0) * BLOCK_N) // BLOCK_M * BLOCK_M
    for m0 in range(first, T, BLOCK_M):
        i = m0 + tl.arange(0, BLOCK_M)
        qo = bh * stride_bh + i[:, None] * stride_t + e[None, :]
        q = tl.load(Q + qo, mask=i[:, None] < T, other=0.0)
        do = tl.load(DO + qo, mask=i[:, None] < T, other=0.0)
        lse = tl.load(LSE + bh * T + i, mask=i < T, other=0.0)
        delta = tl.load(DELTA + bh * T + i, mask=i < T, other=0.0)
        ok = (i[:, None] < T) & (j[None, :] < T)
        if CAUSAL:
            ok = ok & (j[None, :] <= i[:, None])
        p = tl.where(ok, tl.exp(tl.where(ok, tl.dot(q, tl.trans(k)) * scale, 0.0) - lse[:, None]), 0.0)
        dv = dv + tl.dot(tl.trans(p), do)
        ds = p * (tl.dot(do, tl.trans(v)) - delta[:, None]) * scale
        dk = dk + tl.dot(tl.trans(ds), q)
    tl.store(DK + kv, dk.to(DK.dtype.element_ty), mask=j[:, None] < T)
    tl.store(DV + kv, dv.to(DV.dtype.element_ty), mask=j[:, None] < T)


def flash_attention_backward_dkdv(q, k, v, o, lse, do, causal=False, block_m=16, block_n=16):
    B, H, T, d = q.shape
    q, k, v, o, do, lse = [t.contiguous() for t in (q, k, v, o, do, lse)]
    delta = torch.empty_like(lse)
    delta_kernel[(triton.cdiv(T, block_m), B * H)](o, do, delta, T, T * d, d, BLOCK_M=block_m, D=d)
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    dkdv_kernel[(triton.cdiv(T, block_n), B * H)](q, k, v, do, lse, delta, dk, dv, T, d ** -0.5, T * d, d,
                                                  CAUSAL=causal, BLOCK_M=block_m, BLOCK_N=block_n, D=d)
    return dk, dv
'''),
        Variant("exp2", _bwd("s = tl.dot(q, tl.trans(k)) * scale ", "s = tl.dot(q, tl.trans(k)) * (scale * 1.4426950408889634) ",
                             "p = tl.exp(s - lse[:, None])", "p = tl.exp2(s - lse[:, None] * 1.4426950408889634)")),
    ],
    cases=[
        _bwd_case("basic", "(B=1, H=1, T=32, d=16), 16 × 16 tiles", 1, 1, 32, 16),
        _bwd_case("ragged", "(1, 2, T=37, 16), 16 × 16 tiles: partial last tiles", 1, 2, 37, 16, seed=1),
        _bwd_case("causal", "causal, (1, 1, T=48, 16), 16 × 16 tiles", 1, 1, 48, 16, causal=True, seed=2),
        _bwd_case("causal_ragged", "causal, (2, 1, T=45, 32), 16 × 16 tiles", 2, 1, 45, 32, causal=True, seed=3),
        _bwd_case("wide_key_tiles", "causal, (1, 1, T=50, 16), 16 queries × 32 keys per tile", 1, 1, 50, 16,
                  causal=True, tiles=(16, 32), seed=4),
        _bwd_case("tall_query_tiles", "causal, (1, 1, T=50, 16), 32 queries × 16 keys per tile", 1, 1, 50, 16,
                  causal=True, tiles=(32, 16), seed=5),
        _bwd_case("short", "causal, T=5 < one tile", 1, 1, 5, 16, causal=True, seed=6),
        _bwd_case("large_logits", "scores in the tens, (1, 1, T=40, 16)", 1, 1, 40, 16, scale=4.0, seed=7),
    ],
)

POINTS = {   # what each hidden check is worth; a hidden cell's points are the sum of its checks'
    "softmax_rows": {"basic": 0.625, "power_of_two": 0.5, "wide": 0.625, "one_column": 0.5, "large_logits": 0.625,
                     "float16": 0.125},
    "flash_attention_forward": {"basic": 1, "ragged": 1, "large_logits": 1, "uniform_large_values": 1,
                                "causal": 0.75, "causal_ragged": 0.75, "wide_key_tiles": 0.625,
                                "tall_query_tiles": 0.625, "short": 0.5, "float16": 0.125, "tiles_64": 0.625},
    "predicted_tiles": {"value": 2},
    "flash_forward_exp2": {"basic": 0.75, "causal": 0.75, "small_tiles": 0.75, "large_logits": 0.75},
    "flash_attention_backward_dkdv": {"basic": 1, "ragged": 1, "large_logits": 1, "causal": 0.625,
                                      "causal_ragged": 0.625, "wide_key_tiles": 0.625, "tall_query_tiles": 0.625,
                                      "short": 0.5},
}

SECTION = Section("11_flash_attention_triton", [SOFTMAX, FORWARD, PRED_TILES, EXP2, BACKWARD], points=POINTS)
