"""Hidden cases for section 04: multi-head attention.

``MultiHeadAttention`` is graded as a module on stored weights (``qkv``, ``out``) and, by two ``attributes`` cases,
on the attributes its contract names (``n_heads``, ``d_k``), read from a freshly built module.
"""
import torch

from .spec import LIBRARY_MHA, Case, Exercise, How, Mistake, Section, Shortcut, Variant, patch, source_cells

CELLS = source_cells("04_multi_head")   # the source notebook: solutions and given code are read from it

# The source notebook's solution cell (read by grade_id).
MHA_REF = CELLS["mha"]


def _mistake(*pairs):
    return patch(MHA_REF, *pairs)


# The contract names two attributes, set in __init__ (later sections read them): what the hidden ``attributes``
# cases say when one is missing.
ATTR_MISSING = {
    "n_heads": "the module has no attribute n_heads: the contract names it; store the number of heads as "
               "self.n_heads in __init__.",
    "d_k": "the module has no attribute d_k: the contract names it; store the size of one head as "
           "self.d_k = d_model // n_heads in __init__.",
}


MHA_MISTAKES = [
    Mistake("split_no_transpose",
            "the heads are split by reshaping (B, T, D) straight to (B, h, T, d_k) without the transpose: the "
            "shapes are right but each 'head' now mixes features of several tokens. View as (B, T, h, d_k), "
            "then .transpose(1, 2).",
            _mistake("t.view(B, T, self.n_heads, self.d_k).transpose(1, 2)", "t.reshape(B, self.n_heads, T, self.d_k)")),
    Mistake("merge_no_transpose",
            "the heads are merged by reshaping (B, h, T, d_k) straight to (B, T, D): transpose back to "
            "(B, T, h, d_k) first, then reshape.",
            _mistake("(weights @ v).transpose(1, 2).reshape(B, T, D)", "(weights @ v).reshape(B, T, D)")),
    Mistake("scale_d_model",
            "the scores are divided by √d_model; each head's dot products have d_k terms, so divide by √d_k.",
            _mistake("math.sqrt(self.d_k)", "math.sqrt(D)")),
    Mistake("softmax_axis",
            "the softmax runs over the queries (dim=-2): each query's row of weights must sum to 1 over the keys, "
            "the last axis of the (B, h, T, T) scores.",
            _mistake("weights = torch.softmax(scores, dim=-1)", "weights = torch.softmax(scores, dim=-2)")),
    Mistake("no_out_proj",
            "the output projection W_O (self.out) is skipped: the concatenated heads must go through self.out.",
            _mistake("return self.out(ctx)", "return ctx")),
    Mistake("mask_inverted",
            "the mask is used the wrong way round (nn.MultiheadAttention's convention): in this course True/1 "
            "means 'may attend', so block the positions where the mask is False/0.",
            _mistake("scores.masked_fill(mask == 0,", "scores.masked_fill(mask.bool(),")),
    Mistake("renamed_attributes", ATTR_MISSING["n_heads"],
            _mistake("self.n_heads", "self.h", "self.d_k", "self.head_dim")),
    Mistake("d_k_is_d_model",
            "self.d_k must be the size of ONE head, d_model // n_heads (the contract names it), not the model "
            "width d_model.",
            _mistake("self.d_k = d_model // n_heads", "self.d_k = d_model",
                     "t.view(B, T, self.n_heads, self.d_k)", "t.view(B, T, self.n_heads, D // self.n_heads)",
                     "math.sqrt(self.d_k)", "math.sqrt(D // self.n_heads)")),
    Mistake("mask_to_cpu",
            "the mask is moved to the CPU inside forward.",
            _mistake("        if mask is not None:\n",
                     "        if mask is not None:\n            mask = mask.cpu().bool()\n"),
            shows="a tensor is created on a fixed device", cause="fixed_device"),
]

MHA_EINSUM = '''
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads, self.d_k = n_heads, d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        D = x.shape[-1]
        q, k, v = self.qkv(x).split(D, dim=-1)
        q, k, v = (t.unflatten(-1, (self.n_heads, self.d_k)) for t in (q, k, v))   # (B, T, h, d_k)
        s = torch.einsum("bqhd,bkhd->bhqk", q, k) / self.d_k ** 0.5
        if mask is not None:
            s = s.masked_fill(~mask.bool(), float("-inf"))
        w = s.softmax(-1)
        return self.out(torch.einsum("bhqk,bkhd->bqhd", w, v).flatten(-2))
'''

MHA_FUSED = '''
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.d_k = d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        B, T, D = x.shape
        qkv = self.qkv(x).view(B, T, 3, self.n_heads, self.d_k).permute(2, 0, 3, 1, 4)   # (3, B, h, T, d_k)
        attn_mask = None if mask is None else mask.bool()
        ctx = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], attn_mask=attn_mask)
        return self.out(ctx.transpose(1, 2).reshape(B, T, D))
'''

D, H, B, T = 16, 4, 2, 5


def mha_params_input(g, d=D):
    return {
        "qkv.weight": torch.randn(3 * d, d, generator=g) / d ** 0.5,
        "qkv.bias": 0.1 * torch.randn(3 * d, generator=g),
        "out.weight": torch.randn(d, d, generator=g) / d ** 0.5,
        "out.bias": 0.1 * torch.randn(d, generator=g),
    }


def _x(g, b=B, t=T, d=D):
    return torch.randn(b, t, d, generator=g)


def causal_mask_input(t=T):
    return torch.ones(t, t).tril().bool()


def padding_mask_input():
    # (B, 1, 1, T): the second sequence has two padding tokens, the first one
    m = torch.ones(B, 1, 1, T, dtype=torch.bool)
    m[0, ..., -1] = False
    m[1, ..., -2:] = False
    return m


def random_mask_input(g):
    # (B, 1, T, T) as 0/1 floats; every row keeps at least one key and blocks at least one
    m = (torch.rand(B, 1, T, T, generator=g) > 0.5).float()
    idx = torch.arange(T)
    m[..., idx, idx] = 1.0
    m[..., idx, (idx + 1) % T] = 0.0
    return m


def _mha_case(name, what, mask=None, **kw):
    def args(g):
        return (_x(g),)

    def params(g):
        return mha_params_input(g)

    kwargs = {} if mask is None else {"mask": mask}
    return Case(name, what, kind="module", init={"d_model": D, "n_heads": H}, args=args, params=params,
                kwargs=kwargs, seed=kw.pop("seed", 0), **kw)


MHA_LIBRARY = '''
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads, self.d_k = n_heads, d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        B, T, D = x.shape
        blocked = None
        if mask is not None:   # PyTorch's bool attn_mask is True where a key is blocked
            blocked = ~torch.broadcast_to(mask.bool(), (B, self.n_heads, T, T)).reshape(B * self.n_heads, T, T)
        xt = x.transpose(0, 1)                                          # (T, B, D)
        y, _ = F.multi_head_attention_forward(xt, xt, xt, D, self.n_heads, self.qkv.weight, self.qkv.bias,
                                              None, None, False, 0.0, self.out.weight, self.out.bias,
                                              training=False, need_weights=False, attn_mask=blocked)
        return y.transpose(0, 1)
'''


ATTR_HINT = ("self.n_heads is the number of heads the module is built with; self.d_k = d_model // n_heads is the "
             "size of one head.")

MHA = Exercise(
    name="MultiHeadAttention",
    cell="mha",
    reference=MHA_REF,
    mistakes=MHA_MISTAKES,
    variants=[Variant("einsum", MHA_EINSUM), Variant("fused_sdpa", MHA_FUSED)],
    # The heads are what the student builds: PyTorch's own multi-head attention is refused; the scaled dot-product
    # attention inside may be F.scaled_dot_product_attention (the fused_sdpa variant).
    how=How(refuse=(LIBRARY_MHA,)),
    shortcuts=[Shortcut("library_mha", MHA_LIBRARY, keeps=("attributes", "attributes_two_heads"))],
    cases=[
        _mha_case("unmasked", "a batch of 2, T=5, d_model=16, 4 heads, no mask"),
        _mha_case("causal", "a (T, T) causal mask", mask=lambda g: causal_mask_input()),
        _mha_case("padding", "a (B, 1, 1, T) padding mask", mask=lambda g: padding_mask_input()),
        _mha_case("full_mask", "a (B, 1, T, T) mask of 0/1 floats", mask=random_mask_input),
        _mha_case("float64", "float64, padding mask", mask=lambda g: padding_mask_input(), dtype="float64", seed=1),
        _mha_case("bfloat16", "bfloat16, causal mask", mask=lambda g: causal_mask_input(), dtype="bfloat16", seed=2),
        _mha_case("best_device", "on the best device (CUDA when present), padding mask",
                  mask=lambda g: padding_mask_input(), device="best", seed=3),
        _mha_case("meta", "on the meta device, causal mask", mask=lambda g: causal_mask_input(), device="meta"),
        _mha_case("meta_padding", "on the meta device, padding mask", mask=lambda g: padding_mask_input(), device="meta"),
        Case("two_heads", "d_model=12, 2 heads, T=3", kind="module", init={"d_model": 12, "n_heads": 2},
             args=lambda g: (_x(g, b=3, t=3, d=12),), params=lambda g: mha_params_input(g, 12), seed=4),
        Case("attributes", "its attributes n_heads and d_k, built with d_model=24, 3 heads", kind="attributes",
             api="any", init={"d_model": 24, "n_heads": 3}, labels=["n_heads", "d_k"], hint=ATTR_HINT),
        Case("attributes_two_heads", "its attributes n_heads and d_k, built with d_model=12, 2 heads",
             kind="attributes", api="any", init={"d_model": 12, "n_heads": 2}, labels=["n_heads", "d_k"],
             hint=ATTR_HINT),
    ],
    messages={f"attribute.{name}": text for name, text in ATTR_MISSING.items()},
)

PARAMS_REF = CELLS["mha_params"]

MHA_PARAMS = Exercise(
    name="mha_params",
    cell="mha_params",
    reference=PARAMS_REF,
    mistakes=[
        Mistake("no_bias", "the biases are missing: each of the four nn.Linear layers also has d_model biases.",
                "mha_params = 4 * 768 * 768"),
        Mistake("three_proj", "only Q, K and V are counted: the output projection W_O is a fourth d_model × d_model "
                "layer.", "mha_params = 3 * (768 * 768 + 768)"),
        Mistake("one_head", "only one head's slice is counted: splitting into heads does not change the size of the "
                "four d_model × d_model projections.", "mha_params = 4 * (768 * 64 + 64)"),
        Mistake("times_heads", "the count is multiplied by the number of heads: the heads share the four "
                "projections (each head owns a slice of them), so the head count does not appear.",
                "mha_params = 12 * 4 * (768 * 768 + 768)"),
        Mistake("one_bias", "only one bias vector is counted: each of the four layers has its own d_model biases.",
                "mha_params = 4 * 768 * 768 + 768"),
        Mistake("one_projection", "only one projection is counted: there are four (Q, K, V and the output W_O).",
                "mha_params = 768 * 768 + 768"),
    ],
    variants=[Variant("expanded", "mha_params = 4 * 768 * 768 + 4 * 768"), Variant("literal", "mha_params = 2362368")],
    cases=[Case("value", "the parameter count of a 768-wide, 12-head attention layer", kind="value", api="any",
                atol=0.5)],
)


# ---------------------------------------------------------------- predict, then measure: attention-weights memory
PRED_MIB = Exercise(
    name="predicted_weights_mib", cell="predicted_weights_mib", reference=CELLS["predicted_weights_mib"],
    mistakes=[
        Mistake("one_head", "4 MiB is ONE head's (T, T) matrix; each of the 12 heads keeps its own.",
                "predicted_weights_mib = 1024 * 1024 * 4 / 2**20"),
        Mistake("no_bytes", "12 is the number of weights in Mi (2^20 numbers), not their size: each float32 "
                "number takes 4 bytes.", "predicted_weights_mib = 12 * 1024 * 1024 / 2**20"),
        Mistake("linear_in_T", "the weights are counted as T per head; each head scores every query against every "
                "key, so it holds T x T of them.", "predicted_weights_mib = 12 * 1024 * 4 / 2**20"),
        Mistake("all_layers", "576 MiB is all 12 layers; the question asks for one layer.",
                "predicted_weights_mib = 12 * 12 * 1024 * 1024 * 4 / 2**20"),
    ],
    variants=[Variant("literal", "predicted_weights_mib = 48"),
              Variant("bytes_first", "n_bytes = 12 * 1024 ** 2 * 4\npredicted_weights_mib = n_bytes / 1024 / 1024")],
    cases=[Case("value", "MiB of one GPT-2-small layer's attention weights at T = 1024, float32", kind="value",
                api="any", atol=0.5,
                mistake_values={"decimal_mb": ("50.3 is the size in MB (10^6 bytes); the question asks for MiB "
                                               "(2^20 bytes).", 12 * 1024 * 1024 * 4 / 1e6),
                                "d_model": ("the head size or d_model does not enter: the weights are (h, T, T), "
                                            "one number per (query, key) pair and head.", 12 * 1024 * 64 * 4 / 2**20)},
                hint="One layer holds one (T, T) matrix per head: 12 x 1024 x 1024 numbers of 4 bytes, "
                     "divided by 2^20 bytes per MiB.")],
)

# ---------------------------------------------------------------- find the bug: merging heads
MERGE_REF = CELLS["fixed_merge_heads"]
MERGE_LINE = "return ctx.transpose(1, 2).reshape(B, T, h * d_k)"


def _ctx(g, b=2, h=3, t=4, d_k=5):
    return (torch.randn(b, h, t, d_k, generator=g),)


FIXED_MERGE = Exercise(
    name="fixed_merge_heads", cell="fixed_merge_heads", reference=MERGE_REF, handout="merge_no_transpose",
    mistakes=[
        # The handout's own bug: its message says what the student can observe, not the line that fixes it.
        Mistake("merge_no_transpose", "the shape is right, but row t of the result does not hold token t's "
                "features: with 2 heads or more, row 0 holds head 0's features of tokens 0, 1, …, not every head's "
                "features of token 0 (compare row 0 with ctx[:, :, 0] on a tiny input).",
                patch(MERGE_REF, MERGE_LINE, "return ctx.reshape(B, T, h * d_k)".ljust(len(MERGE_LINE)))),
        Mistake("swapped_T_dk", "the transpose swaps T and d_k (axes 2 and 3); the head axis (1) and the token "
                "axis (2) must swap, so that each token's heads end up side by side.",
                patch(MERGE_REF, MERGE_LINE, "return ctx.transpose(2, 3).reshape(B, T, h * d_k)")),
        Mistake("head_minor", "the features are interleaved across heads (feature 0 of every head, then feature "
                "1, ...); token t's row must hold head 0's d_k features, then head 1's: permute to "
                "(B, T, h, d_k), not (B, T, d_k, h).",
                patch(MERGE_REF, MERGE_LINE, "return ctx.permute(0, 2, 3, 1).reshape(B, T, h * d_k)")),
        Mistake("swapped_B_h", "the transpose swaps the batch and head axes (0 and 1); the head axis (1) and the "
                "token axis (2) must swap, so that each token's heads end up side by side.",
                patch(MERGE_REF, MERGE_LINE, "return ctx.transpose(0, 1).reshape(B, T, h * d_k)")),
    ],
    variants=[Variant("permute_flatten", "def fixed_merge_heads(ctx):\n    return ctx.permute(0, 2, 1, 3).flatten(2)\n"),
              Variant("cat_heads", "def fixed_merge_heads(ctx):\n    return torch.cat(ctx.unbind(dim=1), dim=-1)\n")],
    cases=[
        Case("batched", "B=2, h=3, T=4, d_k=5", args=_ctx, labels=["merged"]),
        Case("float64", "float64, B=1, h=4, T=3, d_k=2", dtype="float64", args=lambda g: _ctx(g, 1, 4, 3, 2),
             labels=["merged"], seed=1),
        Case("best_device", "on the best device (CUDA when present), B=3, h=2, T=5, d_k=3", device="best",
             args=lambda g: _ctx(g, 3, 2, 5, 3), labels=["merged"], seed=2),
    ],
)

POINTS = {   # what each hidden check is worth; a hidden cell's points are the sum of its checks'
    "mha_params": {"value": 1},
    "MultiHeadAttention": {"unmasked": 2.25, "two_heads": 2.25, "attributes": 0.5, "attributes_two_heads": 0.375,
                           "float64": 0.125, "bfloat16": 0.125, "best_device": 0.125, "meta": 0.125,
                           "meta_padding": 0.125, "causal": 1, "padding": 1, "full_mask": 1},
    "fixed_merge_heads": {"batched": 1.75, "float64": 0.125, "best_device": 0.125},
    "predicted_weights_mib": {"value": 1},
}

SECTION = Section("04_multi_head", [MHA, MHA_PARAMS, PRED_MIB, FIXED_MERGE], points=POINTS)
