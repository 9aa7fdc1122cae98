"""Hidden cases for section 02 · Q, K, V by hand.

Exercises: the NumPy ``softmax``; the PyTorch ``scaled_dot_product_attention``;
the ``SelfAttention`` module; four hand-computed values of a new 3-token
example (``scores_hand``, ``scaled_hand``, ``weights_hand``, ``output_hand``).

``softmax`` and ``scaled_dot_product_attention`` are what the student builds: a library softmax
(``scipy.special.softmax``, a detour through ``torch.softmax``) and ``F.scaled_dot_product_attention`` are
refused there (``How``: the kernel records the calls; ``shortcuts`` lose those points).  ``SelfAttention`` may
call ``F.scaled_dot_product_attention`` inside (its new part is the projections; a variant does).

The gate test injects the k-th mistake (variant) of *every* exercise into one
submission; an exercise without a k-th entry keeps its solution in that round.
"""
import torch

from .spec import SDPA as SDPA_CALL, SOFTMAX as LIBRARY_SOFTMAX
from .spec import Case, Exercise, How, Mistake, Section, Shortcut, Variant, patch, source_cells

CELLS = source_cells("02_qkv_by_hand")   # the source notebook: solutions and given code are read from it

# ---------------------------------------------------------------- softmax (NumPy)
# Each *_REF below is the source notebook's solution cell (read by grade_id); the BEGIN/END SOLUTION
# markers are comments, harmless when the code runs.
SOFTMAX_REF = CELLS["softmax"]

SOFTMAX = Exercise(
    name="softmax",
    cell="softmax",
    reference=SOFTMAX_REF,
    mistakes=[
        Mistake("unstable", "exp() overflows for large scores; subtract the row maximum (keepdims=True) before np.exp.",
                '''
def softmax(x, axis=-1):
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)
'''),
        Mistake("no_keepdims", "the sum is taken without keepdims=True, so it broadcasts along the wrong axis; "
                "use e.sum(axis=axis, keepdims=True).",
                '''
def softmax(x, axis=-1):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / e.sum(axis=axis)
'''),
        Mistake("ignores_axis", "the axis argument is ignored (always the last axis); pass axis=axis to max and sum.",
                '''
def softmax(x, axis=-1):
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)
'''),
        Mistake("sum_all", "the exponentials are divided by the sum over the whole array; normalise along axis only "
                "(e.sum(axis=axis, keepdims=True)).",
                '''
def softmax(x, axis=-1):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / e.sum()
'''),
        Mistake("axis_0", "the softmax always runs over axis 0 (down each column), whatever `axis` says: take the "
                "max and the sum along `axis` (axis=axis, keepdims=True).",
                '''
def softmax(x, axis=-1):
    e = np.exp(x - np.max(x, axis=0, keepdims=True))
    return e / e.sum(axis=0, keepdims=True)
'''),
        Mistake("axis_1", "the softmax always runs over axis 1, which is the last axis only for a matrix: take the "
                "max and the sum along `axis` (axis=axis, keepdims=True), so that a batch (..., n) and axis=0 work "
                "too.",
                '''
def softmax(x, axis=-1):
    e = np.exp(x - np.max(x, axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)
'''),
        Mistake("returns_torch", "it returns a torch tensor; this exercise is NumPy in, NumPy out (use np.exp, np.max).",
                '''
def softmax(x, axis=-1):
    return torch.softmax(torch.as_tensor(x), dim=axis)
''', shows="should be a NumPy array"),
    ],
    how=How(refuse=(LIBRARY_SOFTMAX,)),
    shortcuts=[
        Shortcut("scipy_partial", "import functools\nimport scipy.special\n\n"
                 "softmax = functools.partial(scipy.special.softmax, axis=-1)\n"),
        Shortcut("scipy_wrapped", "import scipy.special\n\n\ndef softmax(x, axis=-1):\n"
                 "    return scipy.special.softmax(x, axis=axis)\n"),
        Shortcut("torch_detour", "def softmax(x, axis=-1):\n"
                 "    return torch.softmax(torch.from_numpy(np.asarray(x)), dim=axis).numpy()\n"),
    ],
    variants=[
        Variant("logsumexp", '''
def softmax(x, axis=-1):
    m = np.max(x, axis=axis, keepdims=True)
    lse = m + np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True))   # log of the normaliser
    return np.exp(x - lse)
'''),
        Variant("moveaxis", '''
def softmax(x, axis=-1):
    z = np.moveaxis(np.array(x, dtype=np.float64), axis, -1)
    z = np.exp(z - z.max(-1)[..., None])
    z = z / z.sum(-1)[..., None]
    return np.moveaxis(z, -1, axis)
'''),
    ],
    cases=[
        Case("vector", "a single row of 5 scores", api="numpy", args=lambda g: (torch.randn(5, generator=g) * 2,)),
        Case("rows", "a 4x4 matrix, softmax over each row", api="numpy",
             args=lambda g: (torch.randn(4, 4, generator=g) * 2,)),
        Case("axis0", "a 4x3 matrix with axis=0 (each column sums to 1)", api="numpy",
             args=lambda g: (torch.randn(4, 3, generator=g),), kwargs={"axis": 0}),
        Case("large", "large scores around 1000 (numerical stability)", api="numpy", dtype="float64",
             args=lambda g: (1000.0 + 3 * torch.randn(3, 4, generator=g),)),
        Case("batched", "a (2, 3, 5) batch in float64", api="numpy", dtype="float64",
             args=lambda g: (torch.randn(2, 3, 5, generator=g) * 3,)),
    ],
)


# ---------------------------------------------------------------- predict, then measure: the spread of q·k
PREDICTED_STD = Exercise(
    name="predicted_std", cell="predicted_std", reference=CELLS["predicted_std"],
    mistakes=[
        Mistake("variance", "64 is the variance of q · k (64 independent terms of variance 1 add up); the standard "
                "deviation is its square root.", "predicted_std = 64"),
        Mistake("scaled", "1 is the spread AFTER dividing by √d_k; the raw score q · k spreads more, the more "
                "terms it sums.", "predicted_std = 1"),
        Mistake("mean", "0 is the mean of q · k, not its spread: the 64 products q_i k_i average to 0 but do "
                "not cancel exactly; their variances add.", "predicted_std = 0"),
    ],
    variants=[Variant("sqrt", "predicted_std = math.sqrt(64)"), Variant("power", "predicted_std = 64 ** 0.5")],
    cases=[Case("value", "the standard deviation of q · k for d_k = 64 (independent, unit-variance components)",
                kind="value", api="any", atol=0.5,
                mistake_values={"d_squared": ("4096 = 64² would be the variance of a sum of 64 copies of ONE "
                                              "product; independent terms add their variances: 64, so the "
                                              "spread is √64.", 4096.0),
                                "one_over_sqrt": ("0.125 = 1/√64 is the spread of q · k / d_k; the raw score is "
                                                  "not divided by anything.", 0.125)},
                hint="q · k sums 64 independent products q_i k_i, each of mean 0 and variance 1: the variances "
                     "add, and the standard deviation is the square root of the total.")],
)

# ---------------------------------------------------------------- scaled dot-product attention
SDPA_REF = CELLS["sdpa"]


def _mask(g, *shape):
    """A random bool mask with the first key always allowed (no empty row)."""
    m = torch.rand(*shape, generator=g) > 0.4
    m[..., 0] = True
    return m


def _very_negative(g):
    """float64 scores around -2500: a fill value of -1e2 or -1e3 sits ABOVE them and leaks."""
    Q = torch.randn(2, 3, 4, generator=g) * 0.5
    K = torch.randn(2, 5, 4, generator=g) * 0.5
    Q[..., 0] = 50.0
    K[..., 0] = -100.0           # q·k ≈ -5000, scaled by 1/√4 → ≈ -2500
    V = torch.randn(2, 5, 3, generator=g)
    return Q, K, V


SDPA_CASES = [
    Case("batched", "a batch of 2, 3 queries, 4 keys, d_k=8, no mask",
         args=lambda g: (torch.randn(2, 3, 8, generator=g), torch.randn(2, 4, 8, generator=g),
                         torch.randn(2, 4, 5, generator=g)), labels=["output", "weights"]),
    Case("masked", "a batch of 2 with a bool mask (B, T_q, T_k)",
         args=lambda g: (torch.randn(2, 4, 6, generator=g), torch.randn(2, 5, 6, generator=g),
                         torch.randn(2, 5, 3, generator=g)),
         kwargs={"mask": lambda g: _mask(g, 2, 4, 5)}, labels=["output", "weights"], seed=1),
    Case("mask01", "a 0/1 float mask (T_q, T_k) broadcast over a batch of 3",
         args=lambda g: (torch.randn(3, 4, 8, generator=g), torch.randn(3, 4, 8, generator=g),
                         torch.randn(3, 4, 8, generator=g)),
         kwargs={"mask": lambda g: torch.tril(torch.ones(4, 4))}, labels=["output", "weights"], seed=2),
    Case("very_negative", "float64 scores around -2500 with a mask (a small finite fill leaks here)",
         dtype="float64", numerics=True, args=_very_negative, kwargs={"mask": lambda g: _mask(g, 2, 3, 5)},
         labels=["output", "weights"], seed=3),
    Case("float64", "float64 inputs without batch dims", dtype="float64",
         args=lambda g: (torch.randn(3, 8, generator=g), torch.randn(3, 8, generator=g),
                         torch.randn(3, 8, generator=g)), labels=["output", "weights"], seed=4),
    Case("bfloat16", "bfloat16 inputs with a mask", dtype="bfloat16",
         args=lambda g: (torch.randn(2, 4, 8, generator=g), torch.randn(2, 4, 8, generator=g),
                         torch.randn(2, 4, 8, generator=g)),
         kwargs={"mask": lambda g: _mask(g, 2, 4, 4)}, labels=["output", "weights"], seed=5),
    Case("meta", "on the meta device with a mask", device="meta",
         args=lambda g: (torch.randn(2, 3, 8, generator=g), torch.randn(2, 3, 8, generator=g),
                         torch.randn(2, 3, 8, generator=g)),
         kwargs={"mask": lambda g: _mask(g, 2, 3, 3)}, labels=["output", "weights"], seed=6),
    Case("best_device", "on the best device (CUDA when present) with a mask", device="best",
         args=lambda g: (torch.randn(2, 3, 8, generator=g), torch.randn(2, 4, 8, generator=g),
                         torch.randn(2, 4, 8, generator=g)),
         kwargs={"mask": lambda g: _mask(g, 2, 3, 4)}, labels=["output", "weights"], seed=7),
]

SDPA = Exercise(
    name="scaled_dot_product_attention",
    cell="sdpa",
    reference=SDPA_REF,
    mistakes=[
        Mistake("no_scale", "the scores are not divided by √d_k; divide Q @ Kᵀ by math.sqrt(d_k).",
                patch(SDPA_REF, " / math.sqrt(d_k)", "")),
        Mistake("softmax_axis", "the softmax runs over the wrong axis: each row (one query, all keys) must sum "
                "to 1, so use dim=-1.", patch(SDPA_REF, "dim=-1", "dim=-2")),
        Mistake("scale_dk", "the scores are divided by d_k instead of √d_k.",
                patch(SDPA_REF, "math.sqrt(d_k)", "d_k")),
        Mistake("mask_inverted", "the mask is inverted: True/1 means 'may attend', so block the positions where "
                "the mask is False/0 (masked_fill(mask == 0, ...)).",
                patch(SDPA_REF, "~mask.bool()", "mask.bool()")),
        Mistake("small_fill", "blocked scores are filled with a small finite number (like -1e3), which can be "
                "larger than real scores and leaks weight; fill with float('-inf') (or a very large "
                "negative number such as torch.finfo(dtype).min).",
                patch(SDPA_REF, 'float("-inf")', "-1e3")),
    ],
    how=How(refuse=(SDPA_CALL,)),
    shortcuts=[
        Shortcut("fused", '''
def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask.bool(), float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    out = F.scaled_dot_product_attention(Q, K, V, attn_mask=None if mask is None else mask.bool())
    return out, weights
'''),
    ],
    variants=[
        Variant("einsum_where", '''
def scaled_dot_product_attention(Q, K, V, mask=None):
    s = torch.einsum("...qd,...kd->...qk", Q, K) / Q.shape[-1] ** 0.5
    if mask is not None:
        s = torch.where(mask == 0, torch.finfo(s.dtype).min, s)
    w = s.softmax(-1)
    return torch.einsum("...qk,...kd->...qd", w, V), w
'''),
        Variant("fill_1e4", '''
def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = torch.matmul(Q, K.mT) * Q.size(-1) ** -0.5
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), -1e4)
    weights = F.softmax(scores, dim=-1)
    return torch.matmul(weights, V), weights
'''),
    ],
    cases=SDPA_CASES,
)


# ---------------------------------------------------------------- find the bug: attention without the scale
FIXED_REF = CELLS["fixed_attention"]


def _fixed_args(g, *batch, t_q=3, t_k=5, d_k=8, d_v=4):
    return (1.5 * torch.randn(*batch, t_q, d_k, generator=g), 1.5 * torch.randn(*batch, t_k, d_k, generator=g),
            torch.randn(*batch, t_k, d_v, generator=g))


FIXED_ATTENTION = Exercise(
    name="fixed_attention", cell="fixed_attention", reference=FIXED_REF, handout="no_scale",
    mistakes=[
        # The handout's own bug: its message says what the student can observe, not the line that fixes it.
        Mistake("no_scale", "the output matches softmax(Q Kᵀ / √d_k) V only when d_k = 1: for larger d_k the "
                "weights are too sharp (each row closer to one-hot than it should be), and the sharper the bigger "
                "d_k is.",
                patch(FIXED_REF, " * K.size(-1) ** -0.5", " " * len(" * K.size(-1) ** -0.5"))),
        Mistake("scale_dk", "the scores are divided by d_k instead of √d_k: that overshoots, and the bigger d_k "
                "the flatter every softmax.",
                patch(FIXED_REF, " * K.size(-1) ** -0.5", " / K.size(-1)".ljust(len(" * K.size(-1) ** -0.5")))),
        Mistake("scale_dv", "the scale uses the size of the VALUES (V's last axis); √d_k is the size of the "
                "query and key vectors that the dot products sum over.",
                patch(FIXED_REF, "K.size(-1) ** -0.5", "V.size(-1) ** -0.5")),
        Mistake("scale_T", "the scores are divided by √T_k (the number of keys); the scale is √d_k, the length of "
                "each query and key vector.", patch(FIXED_REF, "K.size(-1) ** -0.5", "K.size(-2) ** -0.5")),
        Mistake("softmax_axis", "the softmax runs over the queries (dim=-2): each query's row of weights must sum "
                "to 1 over the keys (dim=-1).", patch(FIXED_REF, "scores.softmax(dim=-1)", "scores.softmax(dim=-2)")),
    ],
    variants=[
        Variant("sdpa", "def fixed_attention(Q, K, V):\n    return F.scaled_dot_product_attention(Q, K, V)\n"),
        Variant("matmul", "def fixed_attention(Q, K, V):\n"
                "    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])\n"
                "    return torch.softmax(scores, dim=-1) @ V\n"),
    ],
    cases=[
        Case("batched", "a batch of 2, T_q=3, T_k=5, d_k=8, d_v=4", args=lambda g: _fixed_args(g, 2),
             labels=["output"]),
        Case("float64", "float64, no batch dims, T_q=4, T_k=6, d_k=16, d_v=3", dtype="float64",
             args=lambda g: _fixed_args(g, t_q=4, t_k=6, d_k=16, d_v=3), labels=["output"], seed=1),
        Case("best_device", "on the best device (CUDA when present), a (2, 2) batch", device="best",
             args=lambda g: _fixed_args(g, 2, 2, t_q=5, t_k=4, d_k=9, d_v=6), labels=["output"], seed=2),
    ],
)

# ---------------------------------------------------------------- SelfAttention module
SA_REF = CELLS["self_attention"]


def _sa_params(g, d_model=6, d_k=4):
    return {name: torch.randn(d_k, d_model, generator=g) / d_model ** 0.5
            for name in ("W_q.weight", "W_k.weight", "W_v.weight")}


SA_CASES = [
    Case("batched", "a batch of 2 sequences of 5 tokens, d_model=6, d_k=4", kind="module",
         init={"d_model": 6, "d_k": 4}, params=_sa_params,
         args=lambda g: (torch.randn(2, 5, 6, generator=g) * 2,), labels=["out", "weights"]),
    Case("masked", "a causal mask (T, T) broadcast over a batch of 2", kind="module",
         init={"d_model": 6, "d_k": 4}, params=_sa_params,
         args=lambda g: (torch.randn(2, 5, 6, generator=g) * 2,),
         kwargs={"mask": lambda g: torch.tril(torch.ones(5, 5, dtype=torch.bool))},
         labels=["out", "weights"], seed=1),
    Case("float64", "float64, one unbatched sequence of 4 tokens", kind="module", dtype="float64",
         init={"d_model": 6, "d_k": 4}, params=_sa_params,
         args=lambda g: (torch.randn(4, 6, generator=g) * 2,), labels=["out", "weights"], seed=2),
    Case("bfloat16", "bfloat16 with a causal mask", kind="module", dtype="bfloat16",
         init={"d_model": 6, "d_k": 4}, params=_sa_params,
         args=lambda g: (torch.randn(2, 4, 6, generator=g),),
         kwargs={"mask": lambda g: torch.tril(torch.ones(4, 4, dtype=torch.bool))},
         labels=["out", "weights"], seed=3),
    Case("meta", "on the meta device", kind="module", device="meta",
         init={"d_model": 6, "d_k": 4}, params=_sa_params,
         args=lambda g: (torch.randn(2, 5, 6, generator=g),), labels=["out", "weights"], seed=4),
    Case("best_device", "on the best device (CUDA when present), causal mask", kind="module", device="best",
         init={"d_model": 6, "d_k": 4}, params=_sa_params, args=lambda g: (torch.randn(2, 5, 6, generator=g),),
         kwargs={"mask": lambda g: torch.tril(torch.ones(5, 5, dtype=torch.bool))}, labels=["out", "weights"], seed=5),
]

SELF_ATTENTION = Exercise(
    name="SelfAttention",
    cell="self_attention",
    reference=SA_REF,
    mistakes=[
        Mistake("no_scale", "the scores are not divided by √d_k; divide Q @ Kᵀ by math.sqrt(self.d_k).",
                patch(SA_REF, " / math.sqrt(self.d_k)", "")),
        Mistake("scale_d_model", "the scores are divided by √d_model; the scale is √d_k, the size of the "
                "query/key vectors.", patch(SA_REF, "self.d_k = d_k", "self.d_k = d_model")),
        Mistake("values_from_K", "the weights multiply K instead of V; the output is weights @ V.",
                patch(SA_REF, "return weights @ V", "return weights @ K")),
        Mistake("softmax_axis", "the softmax runs over the wrong axis: each query's row must sum to 1 (dim=-1).",
                patch(SA_REF, "dim=-1", "dim=-2")),
        Mistake("fixed_device", "a tensor is created on a fixed device.", patch(SA_REF, 
            "        if mask is not None:\n",
            "        if mask is None:\n            mask = torch.ones(x.shape[-2], x.shape[-2], dtype=torch.bool)\n"
            "        if mask is not None:\n"), shows="created on a fixed device"),
        Mistake("with_bias", "the projections have biases: the contract's W_q, W_k and W_v are "
                "nn.Linear(d_model, d_k, bias=False).", patch(SA_REF, "d_k, bias=False)", "d_k)"),
                shows="the contract does not name"),
    ],
    variants=[
        Variant("torch_sdpa", '''
class SelfAttention(nn.Module):
    """Output from PyTorch's fused kernel; the weights computed separately for inspection."""
    def __init__(self, d_model, d_k):
        super().__init__()
        self.W_q = nn.Linear(d_model, d_k, bias=False)
        self.W_k = nn.Linear(d_model, d_k, bias=False)
        self.W_v = nn.Linear(d_model, d_k, bias=False)

    def forward(self, x, mask=None):
        q, k, v = self.W_q(x), self.W_k(x), self.W_v(x)
        m = None if mask is None else mask.bool()
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
        s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if m is not None:
            s = s.masked_fill(~m, float("-inf"))
        return out, s.softmax(dim=-1)
'''),
        Variant("einsum", '''
class SelfAttention(nn.Module):
    def __init__(self, d_model, d_k):
        super().__init__()
        self.W_q, self.W_k, self.W_v = (nn.Linear(d_model, d_k, bias=False) for _ in range(3))

    def forward(self, x, mask=None):
        q = self.W_q(x) / self.W_q.out_features ** 0.5
        s = torch.einsum("...id,...jd->...ij", q, self.W_k(x))
        if mask is not None:
            s = torch.where(mask.bool(), s, torch.finfo(s.dtype).min)
        w = torch.softmax(s, dim=-1)
        return torch.einsum("...ij,...jd->...id", w, self.W_v(x)), w
'''),
    ],
    cases=SA_CASES,
)

# ---------------------------------------------------------------- hand-computed: a new 3-token example
# The notebook gives these (locked cell `hand_example`); the student types each step as a nested list of numbers.
HAND_GIVEN = CELLS["hand_example"]

_HELPERS = '''
def _sm(z, axis=-1):
    e = np.exp(z - z.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)
'''


def _value_case(what):
    return [Case("value", what, kind="value", api="any", atol=0.01)]


# The hand-computed mistakes that are the same cause as the PyTorch exercises' (one row each in the class report).
HAND_CAUSES = {"not_scaled": "no_scale", "by_d_k": "scale_dk", "columns": "softmax_axis"}


def _hand(name, cell, ref, mistakes, variant, what):
    """A matrix the student types by hand: every answer here is a nested list of numbers (``.tolist()`` stands for
    the typing), so the reference data stores nested lists and the judge refuses an array or a tensor."""
    return Exercise(
        name=name, cell=cell, given=HAND_GIVEN, reference=f"{_HELPERS}{name} = ({ref}).tolist()",
        # mistakes and variants are whole solution cells: each carries its own helper
        mistakes=[Mistake(k, msg, f"{_HELPERS}{name} = np.asarray({code}).tolist()", cause=HAND_CAUSES.get(k))
                  for k, msg, code in mistakes],
        variants=[Variant("typed_lists", variant),
                  Variant("rounded_2dp", f"{_HELPERS}{name} = np.round({ref}, 2).tolist()")],
        cases=_value_case(f"{what} of the 3-token example"),
    )


SCORES_HAND = _hand(
    "scores_hand", "scores_hand", "Q_ex @ K_ex.T",
    [("transposed", "the scores are transposed: row i is query i against every key, S[i, j] = q_i · k_j "
      "(Q @ Kᵀ, not K @ Qᵀ).", "K_ex @ Q_ex.T"),
     ("already_scaled", "these are already divided by √d_k; the raw scores come before scaling.",
      "Q_ex @ K_ex.T / np.sqrt(2)"),
     ("q_with_q", "the queries were compared with themselves; compare each query with the keys (Q @ Kᵀ).",
      "Q_ex @ Q_ex.T"),
     ("keys_with_values", "the values were used as keys; the scores are Q @ Kᵀ.", "Q_ex @ V_ex.T"),
     ("first_dim_only", "only the first coordinate was multiplied; a dot product adds all d_k products.",
      "np.outer(Q_ex[:, 0], K_ex[:, 0])")],
    "scores_hand = [[1, 3, 4], [0, 1, 2], [2, 2, 0]]", "the raw scores")

SCALED_HAND = _hand(
    "scaled_hand", "scaled_hand", "Q_ex @ K_ex.T / np.sqrt(2)",
    [("not_scaled", "these are the raw scores: divide every entry by √d_k = √2.", "Q_ex @ K_ex.T"),
     ("by_d_k", "the scores were divided by d_k; divide by √d_k.", "Q_ex @ K_ex.T / 2"),
     ("times_sqrt", "the scores were multiplied by √d_k; divide by it.", "Q_ex @ K_ex.T * np.sqrt(2)"),
     ("by_sqrt_T", "the scores were divided by √T (number of tokens); the scale is √d_k (size of a key).",
      "Q_ex @ K_ex.T / np.sqrt(3)"),
     ("transposed", "the scaled scores are transposed: row i belongs to query i (Q @ Kᵀ, not K @ Qᵀ).",
      "K_ex @ Q_ex.T / np.sqrt(2)")],
    "scaled_hand = [[0.7071, 2.1213, 2.8284], [0.0, 0.7071, 1.4142], [1.4142, 1.4142, 0.0]]", "the scaled scores")

WEIGHTS_HAND = _hand(
    "weights_hand", "weights_hand", "_sm(Q_ex @ K_ex.T / np.sqrt(2))",
    [("columns", "the softmax was taken over columns; each ROW (one query) must sum to 1.",
      "_sm(Q_ex @ K_ex.T / np.sqrt(2), axis=0)"),
     ("not_scaled", "the softmax was applied to unscaled scores; divide by √d_k first.", "_sm(Q_ex @ K_ex.T)"),
     ("by_d_k", "the scores were divided by d_k before the softmax; divide by √d_k.", "_sm(Q_ex @ K_ex.T / 2)"),
     ("no_exp", "each row was divided by its sum without exponentiating; softmax is exp(s) / Σ exp(s).",
      "(lambda s: s / s.sum(axis=1, keepdims=True))(Q_ex @ K_ex.T / np.sqrt(2))"),
     ("whole_matrix", "the exponentials were divided by the sum over the whole matrix; normalise each row.",
      "(lambda e: e / e.sum())(np.exp(Q_ex @ K_ex.T / np.sqrt(2)))")],
    "weights_hand = [[0.074, 0.306, 0.620], [0.140, 0.284, 0.576], [0.446, 0.446, 0.108]]", "the attention weights")

OUTPUT_HAND = _hand(
    "output_hand", "output_hand", "_sm(Q_ex @ K_ex.T / np.sqrt(2)) @ V_ex",
    [("used_K", "the weights multiplied K instead of V; the output is weights @ V.",
      "_sm(Q_ex @ K_ex.T / np.sqrt(2)) @ K_ex"),
     ("not_scaled", "the scores were not divided by √d_k before the softmax.", "_sm(Q_ex @ K_ex.T) @ V_ex"),
     ("columns", "the softmax was taken over columns; each row of weights must sum to 1 before @ V.",
      "_sm(Q_ex @ K_ex.T / np.sqrt(2), axis=0) @ V_ex"),
     ("weights_transposed", "the weights were transposed before multiplying V; use weights @ V, row i = query i.",
      "_sm(Q_ex @ K_ex.T / np.sqrt(2)).T @ V_ex"),
     ("by_d_k", "the scores were divided by d_k instead of √d_k before the softmax.",
      "_sm(Q_ex @ K_ex.T / 2) @ V_ex")],
    "output_hand = [[3.869, 2.463], [3.736, 2.288], [1.542, 2.000]]", "the output")

POINTS = {   # what each hidden check is worth; a hidden cell's points are the sum of its checks'
    "softmax": {"vector": 1, "rows": 1, "axis0": 1, "large": 0.5, "batched": 0.5},
    "predicted_std": {"value": 1},
    "scores_hand": {"value": 2},
    "scaled_hand": {"value": 1},
    "weights_hand": {"value": 1},
    "output_hand": {"value": 1},
    "scaled_dot_product_attention": {"batched": 3.5, "float64": 0.125, "bfloat16": 0.125, "meta": 0.125,
                                     "best_device": 0.125, "masked": 1, "mask01": 1, "very_negative": 1},
    "fixed_attention": {"batched": 1.75, "float64": 0.125, "best_device": 0.125},
    "SelfAttention": {"batched": 2.25, "masked": 2.25, "float64": 0.125, "bfloat16": 0.125, "meta": 0.125,
                      "best_device": 0.125},
}

SECTION = Section("02_qkv_by_hand", [SOFTMAX, PREDICTED_STD, SDPA, FIXED_ATTENTION, SELF_ATTENTION, SCORES_HAND,
                                     SCALED_HAND, WEIGHTS_HAND, OUTPUT_HAND], points=POINTS, titles={
    "no_scale": "the scores are not divided by √d_k",
    "scale_dk": "the scores are divided by d_k instead of √d_k",
    "softmax_axis": "the softmax runs over the wrong axis (each query's row of weights must sum to 1)",
})
