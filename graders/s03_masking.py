"""Hidden cases for section 03 · masking.

Exercises: ``causal_mask``, ``padding_mask``, ``combined_mask``,
``masked_softmax`` and the hand-computed ``masked_weights_hand``.

Convention (the course's contract): a mask is bool or 0/1, True/1 = "may
attend", broadcastable to the scores (..., T_q, T_k).  Blocked scores become
-inf before the softmax, and a row with no allowed key gets all-zero weights.

The gate test injects the k-th mistake (and variant) of every exercise into one submission.
"""
import torch

from .spec import Case, Exercise, Mistake, patch, Section, source_cells, Variant

CELLS = source_cells("03_masking")   # the source notebook: solutions and given code are read from it

# ---------------------------------------------------------------- causal_mask
# Each *_REF below is the source notebook's solution cell (read by grade_id); the BEGIN/END SOLUTION
# markers are comments, harmless when the code runs.
CAUSAL_REF = CELLS["causal_mask"]


def _causal(body):
    return f"def causal_mask(T, device=None):\n    {body}\n"


# causal_mask(T, device) builds its tensor from nothing: its `meta` case passes the case's own device
# ("$device": meta in the kernel, the CPU for the reference), so a mask that ignores `device` is graded.
CAUSAL = Exercise(
    name="causal_mask", cell="causal_mask", reference=CAUSAL_REF,
    mistakes=[
        Mistake("no_diagonal", "the diagonal is blocked: a token may attend to itself, so keep the diagonal "
                "(tril with diagonal=0).",
                _causal("return torch.tril(torch.ones(T, T, device=device), diagonal=-1).bool()")),
        Mistake("sees_next", "each token can see one future token: use tril() with diagonal=0, not 1.",
                _causal("return torch.tril(torch.ones(T, T, device=device), diagonal=1).bool()")),
        Mistake("future", "the mask lets tokens see the future (upper triangle); a causal mask is True on and "
                "BELOW the diagonal (tril).", _causal("return torch.ones(T, T, device=device).triu().bool()")),
        Mistake("inverted", "the mask is inverted: True must mean 'may attend' (on and below the diagonal), not "
                "'blocked'.", _causal("return ~torch.ones(T, T, dtype=torch.bool, device=device).tril()")),
        Mistake("all_true", "nothing is blocked: keep only the lower triangle with .tril().",
                _causal("return torch.ones(T, T, dtype=torch.bool, device=device)")),
        Mistake("ignores_device", "the device argument is ignored: the mask is created on the default device; "
                "create it directly on `device`.", _causal("return torch.ones(T, T, dtype=torch.bool).tril()"),
                shows="but device 'meta' was asked for (the device argument)", cause="fixed_device"),
        Mistake("float_mask", "the mask is a float tensor of 1.0/0.0; the contract is a bool tensor (True = may "
                "attend).", _causal("return torch.ones(T, T, device=device).tril()"),
                shows="should be a torch.bool tensor"),
    ],
    variants=[
        Variant("arange", '''
def causal_mask(T, device=None):
    i = torch.arange(T, device=device)
    return i[:, None] >= i[None, :]        # query index >= key index
'''),
        Variant("tril_float", '''
def causal_mask(T, device=None):
    return torch.tril(torch.ones((T, T), device=device)) == 1
'''),
    ],
    cases=[
        Case("T5", "T = 5", args=(5,), labels=["mask"]),
        Case("T1", "T = 1", args=(1,), labels=["mask"]),
        Case("device_kw", "T = 7 with device='cpu'", args=(7,), kwargs={"device": "cpu"}, labels=["mask"]),
        Case("meta", "T = 6 with device='meta'", device="meta", args=(6,), kwargs={"device": "$device"},
             labels=["mask"]),
    ],
)

# ---------------------------------------------------------------- padding_mask
PAD_REF = CELLS["padding_mask"]


def _lengths(*vals):
    return lambda g: (torch.tensor(vals, dtype=torch.long),)


PADDING = Exercise(
    name="padding_mask", cell="padding_mask", reference=PAD_REF,
    mistakes=[
        Mistake("inverted", "the mask is inverted: True must mark the real tokens, False the padding.",
                patch(PAD_REF, "positions[None, :] < lengths", "positions[None, :] >= lengths")),
        Mistake("one_pad_too_many", "one padding position per row is marked real: position p is real when "
                "p < length (strictly).", patch(PAD_REF, "<", "<=")),
        Mistake("last_token_lost", "the last real token of each row is marked as padding: positions start at 0, "
                "so p is real when p < length.", patch(PAD_REF, "torch.arange(max_len,", "torch.arange(1, max_len + 1,")),
        Mistake("left_padding", "the mask assumes padding on the left; the course pads on the right (real tokens "
                "first).", patch(PAD_REF, "positions[None, :] < lengths[:, None]",
                                           "positions[None, :] >= max_len - lengths[:, None]")),
        Mistake("fixed_device", "the positions are created on a fixed device.",
                patch(PAD_REF, "torch.arange(max_len, device=lengths.device)", "torch.arange(max_len)"),
                shows="created on a fixed device"),
        Mistake("long_mask", "the mask holds 0/1 integers; the contract is a bool tensor (True = real token).",
                patch(PAD_REF, "return positions[None, :] < lengths[:, None]",
                      "return (positions[None, :] < lengths[:, None]).long()"),
                shows="should be a torch.bool tensor"),
    ],
    variants=[
        Variant("expand", '''
def padding_mask(lengths, max_len):
    B = lengths.shape[0]
    pos = torch.arange(max_len, device=lengths.device).expand(B, max_len)
    return pos < lengths.unsqueeze(1)
'''),
        Variant("cumsum", '''
def padding_mask(lengths, max_len):
    ones = torch.ones(lengths.shape[0], max_len, dtype=torch.long, device=lengths.device)
    return ones.cumsum(dim=1) <= lengths[:, None]
'''),
    ],
    cases=[
        Case("batch", "lengths (3, 1, 5, 2) and max_len 5", args=lambda g: (torch.tensor([3, 1, 5, 2]), 5),
             labels=["mask"]),
        Case("longer", "lengths (2, 4) and max_len 6", args=lambda g: (torch.tensor([2, 4]), 6), labels=["mask"]),
        Case("meta", "lengths on the meta device", device="meta", args=lambda g: (torch.tensor([2, 3, 1]), 4),
             labels=["mask"]),
    ],
)

# ---------------------------------------------------------------- combined_mask
COMBINED_REF = CELLS["combined_mask"]

COMBINED = Exercise(
    name="combined_mask", cell="combined_mask", reference=COMBINED_REF,
    mistakes=[
        Mistake("or", "the two masks were combined with OR; a key must be allowed by BOTH (use &).",
                patch(COMBINED_REF, "causal[None, :, :] & real", "causal[None, :, :] | real")),
        Mistake("no_padding", "the padding keys are not blocked: also require key j < length (the padding mask).",
                patch(COMBINED_REF, "causal[None, :, :] & real[:, None, :]",
                                     "causal[None, :, :].expand(lengths.shape[0], T, T)")),
        Mistake("no_causal", "future keys are not blocked: also require key j <= query i (the causal mask).",
                patch(COMBINED_REF, "causal[None, :, :] & real[:, None, :]",
                                     "real[:, None, :].expand(lengths.shape[0], T, T)")),
        Mistake("padding_on_queries", "the padding mask was applied to the query axis; it blocks KEYS (the last "
                "axis): real[:, None, :].", patch(COMBINED_REF, "real[:, None, :]", "real[:, :, None]")),
        Mistake("fixed_device", "the causal part is created on a fixed device.", '''
def combined_mask(lengths, T):
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    real = torch.arange(T, device=lengths.device)[None, :] < lengths[:, None]
    return causal[None] & real[:, None, :]
''', shows="created on a fixed device"),
        Mistake("float_mask", "the mask is a float tensor of 1.0/0.0; the contract is a bool tensor (True = may "
                "attend).", patch(COMBINED_REF, "return causal[None, :, :] & real[:, None, :]",
                                  "return (causal[None, :, :] & real[:, None, :]).float()"),
                shows="should be a torch.bool tensor"),
    ],
    variants=[
        Variant("tril_and_loop", '''
def combined_mask(lengths, T):
    out = torch.zeros(lengths.shape[0], T, T, dtype=torch.bool, device=lengths.device)
    causal = torch.ones(T, T, dtype=torch.bool, device=lengths.device).tril()
    keys = torch.arange(T, device=lengths.device)
    for b in range(lengths.shape[0]):
        out[b] = causal & (keys < lengths[b])
    return out
'''),
        Variant("logical_and", '''
def combined_mask(lengths, T):
    j = torch.arange(T, device=lengths.device)
    i = j.unsqueeze(-1)
    return torch.logical_and(j <= i, (j < lengths.view(-1, 1, 1)))
'''),
    ],
    cases=[
        Case("batch", "lengths (4, 2, 3), T = 4", args=lambda g: (torch.tensor([4, 2, 3]), 4), labels=["mask"]),
        Case("single", "one sequence of length 3 padded to T = 5", args=lambda g: (torch.tensor([3]), 5),
             labels=["mask"]),
        Case("meta", "lengths on the meta device", device="meta", args=lambda g: (torch.tensor([2, 3]), 3),
             labels=["mask"]),
    ],
)

# ---------------------------------------------------------------- masked_softmax
MSM_REF = CELLS["masked_softmax"]


def _msm_mask(g, *shape):
    m = torch.rand(*shape, generator=g) > 0.4
    m[..., 0] = True
    return m


def _empty_row(g):
    scores = torch.randn(2, 3, 4, generator=g)
    mask = _msm_mask(g, 2, 3, 4)
    mask[0, 1] = False          # query 1 of sequence 0 may attend to nothing
    mask[1, 2] = False
    return scores, mask


MSM = Exercise(
    name="masked_softmax", cell="masked_softmax", reference=MSM_REF,
    mistakes=[
        Mistake("fill_zero", "blocked scores were set to 0 (or to a value not far below the real scores), so "
                "they still get weight; set them to -inf before the softmax.", patch(MSM_REF, 'float("-inf")', "0.0")),
        Mistake("small_fill", "blocked scores were filled with a small finite number (like -1e3) that can be "
                "larger than real scores, so weight leaks; use -inf (or torch.finfo(dtype).min).",
                patch(MSM_REF, 'float("-inf")', "-1e3")),
        Mistake("after_softmax", "the mask was applied after the softmax, so allowed weights no longer sum to 1; "
                "block the scores before the softmax.", '''
def masked_softmax(scores, mask):
    return torch.softmax(scores, dim=-1) * mask
'''),
        Mistake("softmax_axis", "the softmax runs over the queries (dim=-2): each query's row of weights, over the "
                "keys it may see, must sum to 1, so normalise over the last axis (dim=-1).",
                patch(MSM_REF, 'float("-inf")), dim=-1)', 'float("-inf")), dim=-2)')),
        Mistake("nan_rows", "a row with no allowed key is NaN.", '''
def masked_softmax(scores, mask):
    return torch.softmax(scores.masked_fill(mask == 0, float("-inf")), dim=-1)
'''),
        Mistake("uniform_rows", "a row with no allowed key got equal weights on blocked keys; the course defines "
                "such a row as all zeros (zero the blocked positions after the softmax).", '''
def masked_softmax(scores, mask):
    return torch.softmax(scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min), dim=-1)
'''),
    ],
    variants=[
        Variant("where_nan_to_num", '''
def masked_softmax(scores, mask):
    s = torch.where(mask.bool(), scores, torch.finfo(scores.dtype).min)
    w = F.softmax(s, dim=-1)
    return torch.where(mask.bool(), w, torch.zeros((), dtype=w.dtype, device=w.device))
'''),
        Variant("manual_exp", '''
def masked_softmax(scores, mask):
    allowed = mask != 0
    s = scores.masked_fill(~allowed, float("-inf"))
    m = s.amax(dim=-1, keepdim=True).nan_to_num(neginf=0.0)   # an empty row has max -inf: use 0 instead
    e = torch.exp(s - m)                                      # blocked: exp(-inf) = 0
    return e / e.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(e.dtype).tiny)
'''),
    ],
    cases=[
        Case("causal", "a batch of 2, scores (2, 4, 4), a causal bool mask (4, 4)",
             args=lambda g: (torch.randn(2, 4, 4, generator=g) * 2, torch.ones(4, 4, dtype=torch.bool).tril()),
             labels=["weights"]),
        Case("padding01", "scores (3, 4, 5) and a 0/1 padding mask (3, 1, 5)", seed=1,
             args=lambda g: (torch.randn(3, 4, 5, generator=g),
                             (torch.arange(5)[None, :] < torch.tensor([5, 2, 3])[:, None]).float()[:, None, :]),
             labels=["weights"]),
        Case("very_negative", "float64 scores around -1000 (a small finite fill leaks here)", dtype="float64", seed=2,
             numerics=True,
             args=lambda g: (-1000 + torch.randn(2, 3, 5, generator=g) * 3, _msm_mask(g, 2, 3, 5)),
             labels=["weights"]),
        Case("float64", "float64 scores with a bool mask", dtype="float64", seed=3,
             args=lambda g: (torch.randn(3, 4, generator=g), _msm_mask(g, 3, 4)), labels=["weights"]),
        Case("bfloat16", "bfloat16 scores with a causal mask", dtype="bfloat16", seed=4,
             args=lambda g: (torch.randn(2, 5, 5, generator=g), torch.ones(5, 5).tril().bool()), labels=["weights"]),
        Case("meta", "on the meta device", device="meta", seed=5,
             args=lambda g: (torch.randn(2, 3, 3, generator=g), _msm_mask(g, 2, 3, 3)), labels=["weights"]),
        Case("best_device", "on the best device (CUDA when present)", device="best", seed=7,
             args=lambda g: (torch.randn(2, 3, 4, generator=g), _msm_mask(g, 2, 3, 4)), labels=["weights"]),
        Case("empty_row", "a row whose every key is blocked (course rule: all-zero weights)", seed=6,
             args=_empty_row, labels=["weights"]),
    ],
)

# ---------------------------------------------------------------- hand-computed masked weights
HAND_GIVEN = CELLS["hand_example"]

_HELPERS = '''
def _msm(s, allowed):
    e = np.where(allowed, np.exp(s - s.max(axis=-1, keepdims=True)), 0.0)
    den = e.sum(axis=-1, keepdims=True)
    return e / np.where(den == 0, 1.0, den)
_tril = np.tril(np.ones((3, 3))) == 1
'''


def _mw(expr):
    """A whole solution cell (the notebook gives only S_ex): the helpers, then the assignment, typed as a nested
    list (``.tolist()`` stands for the typing: the reference data stores nested lists, the judge refuses an array)."""
    return f"{_HELPERS}masked_weights_hand = np.asarray({expr}).tolist()"


MASKED_HAND = Exercise(
    name="masked_weights_hand", cell="masked_weights_hand", given=HAND_GIVEN,
    reference=_mw("_msm(S_ex, _tril)"),
    mistakes=[
        Mistake("no_mask", "no mask was applied: the causal mask blocks every key after the query (upper "
                "triangle).", _mw("_msm(S_ex, np.ones((3, 3)) == 1)")),
        Mistake("after_softmax", "the weights were zeroed after a full softmax without renormalising; block the "
                "scores (-inf) BEFORE the softmax so each row still sums to 1.",
                _mw("_msm(S_ex, np.ones((3, 3)) == 1) * _tril")),
        Mistake("upper", "the upper triangle was kept; a causal mask keeps keys on and BELOW the diagonal.",
                _mw("_msm(S_ex, np.triu(np.ones((3, 3))) == 1)")),
        Mistake("fill_zero", "blocked scores were replaced by 0 instead of -inf, so they still got weight.",
                _mw("_msm(np.where(_tril, S_ex, 0.0), np.ones((3, 3)) == 1)")),
        Mistake("no_diagonal", "the diagonal was blocked too: a token may attend to itself.",
                _mw("_msm(S_ex, np.tril(np.ones((3, 3)), -1) == 1)")),
    ],
    variants=[
        Variant("typed_lists", "masked_weights_hand = [[1, 0, 0], [0.8176, 0.1824, 0], [0.0777, 0.5741, 0.3482]]"),
        Variant("rounded_2dp", _mw("np.round(_msm(S_ex, _tril), 2)")),
    ],
    cases=[Case("value", "the causally masked weights of the 3-token example", kind="value", api="any", atol=0.01)],
)

# (SECTION is defined at the end of this file)

# ---------------------------------------------------------------- predict, then measure: blocked entries
BLOCKED_T6 = Exercise(
    name="blocked_T6", cell="blocked_T6", reference=CELLS["blocked_T6"],
    mistakes=[
        Mistake("allowed", "21 is the number of ALLOWED entries (on and below the diagonal); the question asks "
                "for the blocked ones, above the diagonal.", "blocked_T6 = 21"),
        Mistake("both_triangles", "30 counts both off-diagonal triangles; a causal mask blocks only the upper one "
                "(keys after the query).", "blocked_T6 = 30"),
        Mistake("half", "18 is half of the 36 entries; the diagonal is allowed, so fewer than half are blocked.",
                "blocked_T6 = 18"),
    ],
    variants=[Variant("formula", "blocked_T6 = 6 * 5 // 2"), Variant("sum", "blocked_T6 = sum(range(6))")],
    cases=[Case("value", "the number of blocked entries of a 6 x 6 causal mask", kind="value", api="any",
                atol=0.01,
                mistake_values={"all": ("36 is every entry of the mask; only the keys after each query are "
                                        "blocked.", 36.0)},
                hint="Row i (from 0) blocks the keys after it: T - 1 - i of them. Add 5 + 4 + ... + 0.")],
)

# ---------------------------------------------------------------- find the bug: causal attention
FIXED_REF = CELLS["fixed_causal_attention"]


def _qkv(g, *batch, t=5, d=4, scale=1.5):
    return tuple(scale * torch.randn(*batch, t, d, generator=g) for _ in range(3))


FIXED_CAUSAL = Exercise(
    name="fixed_causal_attention", cell="fixed_causal_attention", reference=FIXED_REF,
    handout="after_softmax",
    mistakes=[
        # The handout's own bug: its message says what the student can observe, not the line that fixes it.
        Mistake("after_softmax", "the future keys get weight 0, but the rows of weights no longer sum to 1: row i "
                "sums to less than 1 whenever keys come after query i (only the last row is right), so the outputs "
                "come out too small.",
                patch(FIXED_REF, 'scores.masked_fill(future, float("-inf")).softmax(dim=-1)',
                      "scores.softmax(dim=-1).masked_fill(future, 0.0)")),
        Mistake("fill_zero", "the blocked scores are filled with 0 before the softmax: 0 is an ordinary score, so "
                "the future keys still get weight exp(0) / sum. Fill them with float('-inf').",
                patch(FIXED_REF, 'float("-inf")).softmax', "0.0).softmax")),
        Mistake("inverted", "the mask is inverted: `future` is True ABOVE the diagonal (keys after the query), and "
                "those are the scores to block; masked_fill(~future, ...) blocks the past instead.",
                patch(FIXED_REF, "masked_fill(future,", "masked_fill(~future,")),
        Mistake("sees_next", "each token also sees the next one: `future` must block every key after the query, "
                "starting right above the diagonal (triu with diagonal=1).",
                patch(FIXED_REF, ".triu(diagonal=1)", ".triu(diagonal=2)")),
        Mistake("softmax_axis", "the softmax now runs over the queries (dim=-2); each query's row of weights "
                "must sum to 1 over the keys (dim=-1).",
                patch(FIXED_REF, 'float("-inf")).softmax(dim=-1)', 'float("-inf")).softmax(dim=-2)')),
    ],
    variants=[
        Variant("where", '''
def fixed_causal_attention(Q, K, V):
    T = Q.shape[-2]
    allowed = torch.ones(T, T, dtype=torch.bool, device=Q.device).tril()
    scores = torch.where(allowed, Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1]), float("-inf"))
    return torch.softmax(scores, dim=-1) @ V
'''),
        Variant("sdpa_is_causal", '''
def fixed_causal_attention(Q, K, V):
    return F.scaled_dot_product_attention(Q, K, V, is_causal=True)   # T_q == T_k here
'''),
    ],
    cases=[
        Case("batched", "a batch of 2, T=5, d_k=4", args=lambda g: _qkv(g, 2), labels=["output"]),
        Case("float64", "float64, a (2, 3) batch of heads, T=4", dtype="float64",
             args=lambda g: _qkv(g, 2, 3, t=4, d=6), labels=["output"], seed=1),
        Case("best_device", "on the best device (CUDA when present)", device="best",
             args=lambda g: _qkv(g, 3, t=6), labels=["output"], seed=2),
    ],
)

POINTS = {   # what each hidden check is worth; a hidden cell's points are the sum of its checks'
    "causal_mask": {"T5": 1.375, "T1": 1.375, "device_kw": 0.125, "meta": 0.125},
    "blocked_T6": {"value": 1},
    "padding_mask": {"batch": 2, "longer": 1.875, "meta": 0.125},
    "masked_weights_hand": {"value": 3},
    "combined_mask": {"batch": 2, "single": 1.875, "meta": 0.125},
    "masked_softmax": {"causal": 1.75, "padding01": 1.75, "float64": 0.125, "bfloat16": 0.125, "meta": 0.125,
                       "best_device": 0.125, "very_negative": 1, "empty_row": 1},
    "fixed_causal_attention": {"batched": 1.75, "float64": 0.125, "best_device": 0.125},
}

SECTION = Section("03_masking", [CAUSAL, BLOCKED_T6, PADDING, COMBINED, MSM, MASKED_HAND, FIXED_CAUSAL], points=POINTS)
