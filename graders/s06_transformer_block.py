"""Hidden cases for section 06: LayerNorm, the Transformer block, cross-attention, the three families."""
import re

import torch

from .s04_multi_head import causal_mask_input, padding_mask_input
from .spec import LAYER_NORM, Case, Exercise, How, Mistake, Section, Shortcut, Variant, patch, source_cells

CELLS = source_cells("06_transformer_block")   # the source notebook: solutions and given code are read from it

# The notebook's locked cell with a multi-head attention module for the block exercise: section 04's
# contract (same constructor, submodules qkv/out, n_heads/d_k, masks, output), built another way so that
# it does not hand out section 04's answer (tests/test_leaks.py checks that no solution line is given away).
MHA_GIVEN = CELLS["given_mha"]


# ---------------------------------------------------------------- layer_norm
LN_REF = CELLS["layer_norm"]

LN = Exercise(
    name="layer_norm",
    cell="layer_norm",
    reference=LN_REF,
    mistakes=[
        Mistake("unbiased", "the variance is the unbiased one (divided by D − 1); LayerNorm divides by D: "
                "x.var(dim=-1, unbiased=False) or the mean of the squared gaps.",
                patch(LN_REF, "((x - mean) ** 2).mean(dim=-1, keepdim=True)", "x.var(dim=-1, keepdim=True)")),
        Mistake("eps_outside", "ε is added after the square root; it belongs inside: sqrt(var + eps). The difference "
                "shows on inputs whose variance is tiny.",
                patch(LN_REF, "torch.sqrt(var + eps)", "(torch.sqrt(var) + eps)")),
        Mistake("wrong_dim", "the statistics are taken over the wrong axis: each token (the last dimension) is "
                "normalised on its own, so use dim=-1.",
                patch(LN_REF, "dim=-1", "dim=0")),
        Mistake("tokens_dim", "the statistics are taken over the tokens (dim=-2): each token is normalised over its "
                "own features, the last dimension, so that other tokens cannot change it.",
                patch(LN_REF, "dim=-1", "dim=-2")),
        Mistake("no_center", "the mean is not subtracted from x in the output: return (x - mean) / sqrt(var + eps).",
                patch(LN_REF, "return (x - mean) /", "return x /")),
        Mistake("fixed_eps", "the eps argument is ignored (a fixed 1e-5 is used): use the eps that is passed in.",
                patch(LN_REF, "torch.sqrt(var + eps)", "torch.sqrt(var + 1e-5)")),
        Mistake("no_eps", "ε is missing: divide by sqrt(var + eps), which also keeps a constant row from "
                "dividing 0 by 0.",
                patch(LN_REF, "torch.sqrt(var + eps)", "torch.sqrt(var)")),
    ],
    variants=[
        Variant("torch_var", '''
def layer_norm(x, eps=1e-5):
    var, mean = torch.var_mean(x, dim=-1, unbiased=False, keepdim=True)
    return (x - mean) * torch.rsqrt(var + eps)
'''),
        Variant("var_correction0", '''
def layer_norm(x, eps=1e-5):
    centred = x - x.mean(-1, keepdim=True)
    return centred / (torch.var(x, dim=-1, correction=0, keepdim=True) + eps).sqrt()
'''),
    ],
    # "written with tensor operations of your own": the library's normalisations are refused (the kernel records
    # the calls); the shortcuts lose those points.
    how=How(refuse=(LAYER_NORM,)),
    shortcuts=[
        Shortcut("functional", '''
def layer_norm(x, eps=1e-5):
    return F.layer_norm(x, x.shape[-1:], eps=eps)
'''),
        Shortcut("module", '''
def layer_norm(x, eps=1e-5):
    ln = nn.LayerNorm(x.shape[-1], eps=eps, elementwise_affine=False)
    return ln(x)
'''),
        Shortcut("group_norm", '''
def layer_norm(x, eps=1e-5):
    flat = x.reshape(-1, 1, x.shape[-1])                 # one group per token: a layer norm in disguise
    return F.group_norm(flat, 1, eps=eps).reshape(x.shape)
'''),
    ],
    cases=[
        Case("batched", "a (2, 5, 8) batch", args=lambda g: (3 * torch.randn(2, 5, 8, generator=g) + 1,)),
        Case("one_token", "a single vector of 6 features", args=lambda g: (torch.randn(6, generator=g),)),
        Case("tiny_variance", "rows with a tiny variance, and a constant row (float64)", dtype="float64", numerics=True,
             args=lambda g: (torch.cat([0.5 + 1e-3 * torch.randn(3, 8, generator=g), torch.full((1, 8), 10.0)]),)),
        Case("eps", "eps=0.1", args=lambda g: (0.5 * torch.randn(4, 8, generator=g),), kwargs={"eps": 0.1}),
        Case("float64", "float64, (3, 16)", dtype="float64", args=lambda g: (torch.randn(3, 16, generator=g),)),
        Case("bfloat16", "bfloat16, (2, 3, 8)", dtype="bfloat16", args=lambda g: (torch.randn(2, 3, 8, generator=g),)),
        Case("best_device", "on the best device (CUDA when present)", device="best",
             args=lambda g: (torch.randn(2, 4, 8, generator=g),)),
        Case("meta", "on the meta device", device="meta", args=lambda g: (torch.randn(2, 4, 8, generator=g),)),
    ],
)

# ---------------------------------------------------------------- TransformerBlock
BLOCK_REF = CELLS["transformer_block"]


def _block(*pairs):
    code = BLOCK_REF
    for old, new in pairs:
        code = patch(code, old, new)
    return code


BLOCK = Exercise(
    name="TransformerBlock",
    cell="transformer_block",
    given=MHA_GIVEN,
    reference=BLOCK_REF,
    mistakes=[
        Mistake("ln_swapped", "Pre-LN and Post-LN are swapped: pre_ln=True normalises *before* each sub-layer "
                "(x + attn(ln1(x))), pre_ln=False after the residual add (ln1(x + attn(x))).",
                _block(("if self.pre_ln:", "if not self.pre_ln:"))),
        Mistake("no_attn_residual", "the residual connection around attention is missing: add the sub-layer's "
                "input back (x + attn(...)).",
                _block(("x = x + self.attn(self.ln1(x), mask)", "x = self.attn(self.ln1(x), mask)"),
                       ("x = self.ln1(x + self.attn(x, mask))", "x = self.ln1(self.attn(x, mask))"))),
        Mistake("no_ffn_residual", "the residual connection around the feed-forward network is missing: add its "
                "input back (x + ffn(...)).",
                _block(("x = x + self.ffn(self.ln2(x))", "x = self.ffn(self.ln2(x))"),
                       ("x = self.ln2(x + self.ffn(x))", "x = self.ln2(self.ffn(x))"))),
        Mistake("mask_dropped", "the mask is not passed to the attention layer: call self.attn(..., mask).",
                _block(("self.attn(self.ln1(x), mask)", "self.attn(self.ln1(x))"),
                       ("self.attn(x, mask)", "self.attn(x)"))),
        Mistake("relu", "the feed-forward network uses ReLU; the contract's FFN uses nn.GELU().",
                _block(("nn.GELU()", "nn.ReLU()"))),
        Mistake("one_layernorm", "the same LayerNorm (ln1) is used for both sub-layers: the feed-forward "
                "sub-layer has its own, ln2.",
                _block(("x = x + self.ffn(self.ln2(x))", "x = x + self.ffn(self.ln1(x))"),
                       ("x = self.ln2(x + self.ffn(x))", "x = self.ln1(x + self.ffn(x))"))),
    ],
    variants=[
        Variant("helper", '''
class TransformerBlock(nn.Module):
    def __init__(self, d_model=64, n_heads=4, d_ff=None, pre_ln=False):
        super().__init__()
        d_ff = d_ff or 4 * d_model
        self.pre_ln = pre_ln
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.ffn = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))

    def _sublayer(self, x, f, ln):
        return x + f(ln(x)) if self.pre_ln else ln(x + f(x))

    def forward(self, x, mask=None):
        x = self._sublayer(x, lambda h: self.attn(h, mask), self.ln1)
        return self._sublayer(x, self.ffn, self.ln2)
'''),
        Variant("functional_ln", '''
class TransformerBlock(nn.Module):
    def __init__(self, d_model=64, n_heads=4, d_ff=None, pre_ln=False):
        super().__init__()
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ln1 = nn.LayerNorm(d_model)
        self.ln2 = nn.LayerNorm(d_model)
        hidden = d_ff if d_ff is not None else 4 * d_model
        self.ffn = nn.Sequential(nn.Linear(d_model, hidden), nn.GELU(), nn.Linear(hidden, d_model))
        self.pre_ln = pre_ln

    def _ln(self, ln, x):
        return F.layer_norm(x, ln.normalized_shape, ln.weight, ln.bias, ln.eps)

    def forward(self, x, mask=None):
        if not self.pre_ln:
            h = self._ln(self.ln1, x + self.attn(x, mask=mask))
            return self._ln(self.ln2, h + self.ffn(h))
        h = x + self.attn(self._ln(self.ln1, x), mask=mask)
        return h + self.ffn(self._ln(self.ln2, h))
'''),
    ],
    cases=[],
)

D, H, B, T = 16, 4, 2, 5


def _block_params(g, d=D, d_ff=4 * D):
    s = d ** -0.5
    return {
        "attn.qkv.weight": s * torch.randn(3 * d, d, generator=g), "attn.qkv.bias": 0.1 * torch.randn(3 * d, generator=g),
        "attn.out.weight": s * torch.randn(d, d, generator=g), "attn.out.bias": 0.1 * torch.randn(d, generator=g),
        "ln1.weight": 1 + 0.2 * torch.randn(d, generator=g), "ln1.bias": 0.1 * torch.randn(d, generator=g),
        "ln2.weight": 1 + 0.2 * torch.randn(d, generator=g), "ln2.bias": 0.1 * torch.randn(d, generator=g),
        "ffn.0.weight": s * torch.randn(d_ff, d, generator=g), "ffn.0.bias": 0.1 * torch.randn(d_ff, generator=g),
        "ffn.2.weight": d_ff ** -0.5 * torch.randn(d, d_ff, generator=g), "ffn.2.bias": 0.1 * torch.randn(d, generator=g),
    }


def _block_case(name, what, pre_ln, mask=None, d_ff=None, **kw):
    init = {"d_model": D, "n_heads": H, "pre_ln": pre_ln}
    if d_ff is not None:
        init["d_ff"] = d_ff
    return Case(name, what, kind="module", init=init,
                args=lambda g: (torch.randn(B, T, D, generator=g),),
                params=lambda g: _block_params(g, D, d_ff or 4 * D),
                kwargs={} if mask is None else {"mask": mask}, **kw)


BLOCK.cases = [
    _block_case("post_ln", "Post-LN, no mask", False),
    _block_case("post_ln_causal", "Post-LN, (T, T) causal mask", False, mask=lambda g: causal_mask_input(T), seed=1),
    _block_case("pre_ln", "Pre-LN, no mask", True, seed=2),
    _block_case("pre_ln_padding", "Pre-LN, (B, 1, 1, T) padding mask", True, mask=lambda g: padding_mask_input(), seed=3),
    _block_case("d_ff", "Post-LN with d_ff=24, causal mask", False, mask=lambda g: causal_mask_input(T), d_ff=24, seed=4),
    _block_case("float64", "Pre-LN in float64, causal mask", True, mask=lambda g: causal_mask_input(T), dtype="float64", seed=5),
    _block_case("bfloat16", "Post-LN in bfloat16, padding mask", False, mask=lambda g: padding_mask_input(), dtype="bfloat16",
                seed=6),
    _block_case("best_device", "Pre-LN on the best device (CUDA when present), causal mask", True,
                mask=lambda g: causal_mask_input(T), device="best", seed=7),
    _block_case("meta_post", "Post-LN on the meta device, causal mask", False, mask=lambda g: causal_mask_input(T),
                device="meta"),
    _block_case("meta_pre", "Pre-LN on the meta device, padding mask", True, mask=lambda g: padding_mask_input(),
                device="meta"),
    Case("defaults", "the default sizes (d_model=64, 4 heads, d_ff=256), Post-LN", kind="module", init={},
         args=lambda g: (torch.randn(1, 3, 64, generator=g),), params=lambda g: _block_params(g, 64, 256), seed=8),
]

# ---------------------------------------------------------------- cross-attention
CROSS_REF = CELLS["cross_attention"]

CROSS = Exercise(
    name="cross_attention",
    cell="cross_attention",
    reference=CROSS_REF,
    mistakes=[
        Mistake("roles_swapped", "the roles are swapped: the queries come from the decoder (x_dec @ W_q), the keys "
                "and values from the encoder.",
                patch(patch(patch(CROSS_REF, "Q = x_dec @ W_q", "Q = x_enc @ W_q"),
                                  "K = x_enc @ W_k", "K = x_dec @ W_k"), "V = x_enc @ W_v", "V = x_dec @ W_v")),
        Mistake("keys_from_decoder", "the keys come from the decoder: in cross-attention both keys and values come "
                "from the encoder's output (x_enc @ W_k, x_enc @ W_v).",
                patch(CROSS_REF, "K = x_enc @ W_k", "K = x_dec @ W_k")),
        Mistake("values_from_decoder", "the values come from the decoder: the decoder reads the encoder's "
                "information, so V = x_enc @ W_v.",
                patch(CROSS_REF, "V = x_enc @ W_v", "V = x_dec @ W_v")),
        Mistake("no_scale", "the scores are not divided by √d_k.",
                patch(CROSS_REF, " / math.sqrt(K.shape[-1])", "")),
        Mistake("softmax_axis", "the softmax runs over the decoder axis: each query's weights over the encoder "
                "tokens (the last axis) must sum to 1.",
                patch(CROSS_REF, "torch.softmax(scores, dim=-1)", "torch.softmax(scores, dim=-2)")),
        Mistake("mask_ignored", "the mask is ignored: padded encoder tokens must get weight 0 "
                "(masked_fill(mask == 0, -inf) before the softmax).",
                patch(CROSS_REF, "    if mask is not None:\n", "    if False:\n")),
    ],
    variants=[Variant("einsum", '''
def cross_attention(x_dec, x_enc, W_q, W_k, W_v, mask=None):
    q = torch.einsum("...td,dk->...tk", x_dec, W_q)
    k = torch.einsum("...sd,dk->...sk", x_enc, W_k)
    v = torch.einsum("...sd,dv->...sv", x_enc, W_v)
    s = torch.einsum("...tk,...sk->...ts", q, k) * k.shape[-1] ** -0.5
    if mask is not None:
        s = torch.where(mask.bool(), s, torch.finfo(s.dtype).min)
    w = s.softmax(dim=-1)
    return torch.einsum("...ts,...sv->...tv", w, v), w
'''), Variant("mT_where", '''
def cross_attention(x_dec, x_enc, W_q, W_k, W_v, mask=None):
    K = torch.matmul(x_enc, W_k)
    scores = torch.matmul(torch.matmul(x_dec, W_q), K.mT) / K.size(-1) ** 0.5
    if mask is not None:
        scores = torch.where(mask.bool(), scores, float("-inf"))
    weights = F.softmax(scores, dim=-1)
    return torch.matmul(weights, torch.matmul(x_enc, W_v)), weights
''')],
    cases=[],
)


def _cross_args(g, batch=(2,), t_dec=3, t_enc=5, d=8, d_k=4, d_v=6):
    return (torch.randn(*batch, t_dec, d, generator=g), torch.randn(*batch, t_enc, d, generator=g),
            torch.randn(d, d_k, generator=g), torch.randn(d, d_k, generator=g), torch.randn(d, d_v, generator=g))


def _enc_padding(t_enc=5):
    m = torch.ones(2, 1, t_enc, dtype=torch.bool)    # (B, 1, T_enc): broadcast over the decoder's queries
    m[0, 0, -1] = False
    m[1, 0, -2:] = False
    return m


_LABELS = ["output", "weights"]
CROSS.cases = [
    Case("batched", "B=2, T_dec=3, T_enc=5", args=_cross_args, labels=_LABELS),
    Case("same_length", "T_dec = T_enc = 4", args=lambda g: _cross_args(g, t_dec=4, t_enc=4), labels=_LABELS, seed=1),
    Case("padding", "a (B, 1, T_enc) encoder padding mask", args=_cross_args,
         kwargs={"mask": lambda g: _enc_padding()}, labels=_LABELS, seed=2),
    Case("unbatched", "one sequence pair, T_dec=2, T_enc=6", args=lambda g: _cross_args(g, batch=(), t_dec=2, t_enc=6),
         labels=_LABELS, seed=3),
    Case("float64", "float64, padding mask", dtype="float64", args=_cross_args,
         kwargs={"mask": lambda g: _enc_padding()}, labels=_LABELS, seed=4),
    Case("bfloat16", "bfloat16", dtype="bfloat16", args=lambda g: _cross_args(g, t_dec=4, t_enc=4), labels=_LABELS,
         seed=5),
    Case("best_device", "on the best device (CUDA when present), padding mask", device="best", args=_cross_args,
         kwargs={"mask": lambda g: _enc_padding()}, labels=_LABELS, seed=6),
    Case("meta", "on the meta device, padding mask", device="meta", args=_cross_args,
         kwargs={"mask": lambda g: _enc_padding()}, labels=_LABELS),
]

# ---------------------------------------------------------------- pick the family
FAMILIES_GIVEN = CELLS["families_given"]

FAMILY_REF = CELLS["family"]


def _family(**changes):
    code = FAMILY_REF
    for key, value in changes.items():
        code = re.sub(rf'"{key}": \w+,', f'"{key}": {value},', code)
    return code


FAMILY = Exercise(
    name="family",
    cell="family",
    given=FAMILIES_GIVEN,
    reference=FAMILY_REF,
    mistakes=[
        Mistake("all_decoder", "every task got the decoder-only family. Large decoder-only models can be prompted to "
                "do almost anything, but the question asks which family each task's classic model is built as: tasks "
                "that only need to understand a whole input, or that read one sequence and write another, have their "
                "own.",
                _family(a="DECODER_ONLY", c="DECODER_ONLY", e="DECODER_ONLY")),
        Mistake("understanding_as_generation", "tasks that only label or classify their input were given a family "
                "that generates text; a model that sees the whole input in both directions fits them.",
                _family(a="ENCODER_DECODER", c="ENCODER_DECODER")),
        Mistake("seq2seq_as_encoder", "the summary was given a family that writes no text; writing a new sequence "
                "needs a decoder (here with an encoder that reads the article).",
                _family(e="ENCODER_ONLY")),
        Mistake("seq2seq_as_decoder", "the summary was given the decoder-only family. Decoder-only models do "
                "summarise when prompted, but the task names T5 and BART, which are built as encoder-decoders: an "
                "encoder reads the article, a decoder writes the summary.",
                _family(e="DECODER_ONLY")),
        Mistake("understanding_as_decoder", "tasks that only label or classify their input were given the "
                "decoder-only family, which sees only the left context of each token.",
                _family(a="DECODER_ONLY", c="DECODER_ONLY")),
        Mistake("continuation_as_seq2seq", "tasks that continue a text were given the encoder-decoder family; "
                "continuing a text is next-token prediction on one sequence.",
                _family(b="ENCODER_DECODER", d="ENCODER_DECODER")),
    ],
    variants=[
        Variant("dict_call", "family = dict(a=ENCODER_ONLY, b=DECODER_ONLY, c=ENCODER_ONLY, d=DECODER_ONLY, "
                "e=ENCODER_DECODER)"),
        Variant("strings", "family = {k: v for k, v in zip('abcde', ['encoder-only', 'decoder-only', "
                "'encoder-only', 'decoder-only', 'encoder-decoder'])}"),
    ],
    cases=[Case("answers", "the family for each of the five tasks", kind="value", api="any",
                hint="Some tasks have the wrong family: for each, ask whether it only reads (understands) its input, "
                     "continues a text, or reads one sequence and writes another.")],
)

# ---------------------------------------------------------------- who can translate
TRANSLATE_REF = CELLS["can_translate"]
_DEC_FALSE = {"encoder-only": False, "decoder-only": False, "encoder-decoder": True}

CAN_TRANSLATE = Exercise(
    name="can_translate",
    cell="can_translate",
    given=FAMILIES_GIVEN,
    reference=TRANSLATE_REF,
    mistakes=[
        Mistake("decoder_cannot", "decoder-only models translate too: a prompt such as 'English: ... French:' makes "
                "the translation a continuation, and large GPT-style models are strong translators. The "
                "encoder-decoder was built for translation, but it is not the only family that can do it.",
                patch(TRANSLATE_REF, "DECODER_ONLY: True", "DECODER_ONLY: False")),
        Mistake("encoder_can", "an encoder-only model reads and labels its input; on its own it writes no new "
                "sequence, so it cannot translate.",
                patch(TRANSLATE_REF, "ENCODER_ONLY: False", "ENCODER_ONLY: True")),
        Mistake("encdec_cannot", "the encoder-decoder is the family translation was invented for (the original "
                "Transformer): an encoder reads the English, a decoder writes the French.",
                patch(TRANSLATE_REF, "ENCODER_DECODER: True", "ENCODER_DECODER: False")),
    ],
    variants=[
        Variant("comprehension", "can_translate = {f: f != ENCODER_ONLY for f in (ENCODER_ONLY, DECODER_ONLY, "
                "ENCODER_DECODER)}"),
        Variant("strings", "can_translate = {'decoder-only': True, 'encoder-decoder': True, 'encoder-only': False}"),
    ],
    cases=[Case("value", "which of the three families can translate", kind="value", api="any",
                hint="For each family ask: can it write a new sequence at all, and can the task be written as a "
                     "text to continue?",
                mistake_values={"only_encdec": (
                    "decoder-only models translate too: a prompt such as 'English: ... French:' makes the "
                    "translation a continuation. The encoder-decoder was built for translation, but it is not "
                    "the only family that can do it.", _DEC_FALSE)})],
)

# ---------------------------------------------------------------- predict, then measure: a block's parameters
PARAMS_REF = CELLS["block_params"]
_ATTN, _FFN, _LNS = 4 * (768 * 768 + 768), 768 * 3072 + 3072 + 3072 * 768 + 768, 2 * 2 * 768

BLOCK_PARAMS = Exercise(
    name="block_params",
    cell="block_params",
    reference=PARAMS_REF,
    mistakes=[
        Mistake("no_layernorm", "the two LayerNorms are missing: each nn.LayerNorm(d_model) learns a scale and a "
                "shift of d_model values.", f"block_params = {_ATTN} + {_FFN}"),
        Mistake("ln_scale_only", "each LayerNorm is counted with one vector: it learns a scale AND a shift "
                "(2 · d_model values each).", f"block_params = {_ATTN} + {_FFN} + 2 * 768"),
        Mistake("no_bias", "the biases are missing: every nn.Linear (the four projections and both FFN layers) "
                "also has one bias per output feature.",
                f"block_params = 4 * 768 * 768 + 2 * 768 * 3072 + {_LNS}"),
        Mistake("d_ff_equal", "the FFN is counted as d_model wide inside: d_ff defaults to 4 · d_model = 3072.",
                f"block_params = {_ATTN} + 2 * 768 * 768 + 768 + 768 + {_LNS}"),
    ],
    variants=[Variant("sum", f"block_params = {_ATTN} + {_FFN} + {_LNS}"), Variant("literal", "block_params = 7087872")],
    cases=[Case("value", "the parameter count of TransformerBlock(d_model=768, n_heads=12)", kind="value",
                api="any", atol=0.5,
                hint="Count sub-module by sub-module: attention = 4 · (768·768 + 768) (section 04), "
                     "FFN = 768·3072 + 3072 + 3072·768 + 768 (section 1), and two LayerNorms of 2 · 768 each.",
                mistake_values={
                    "attention_only": ("only the attention layer is counted: the FFN (about two thirds of the "
                                       "block) and the two LayerNorms belong to the block too.", _ATTN),
                    "ffn_only": ("only the feed-forward network is counted: add the attention layer's four "
                                 "projections and the two LayerNorms.", _FFN),
                    "times_heads": ("the attention is counted once per head: the heads share the four "
                                    "d_model × d_model projections.", 12 * _ATTN + _FFN + _LNS),
                })],
)

# ---------------------------------------------------------------- find the bug: RMSNorm
RMS_REF = CELLS["rms_norm"]

RMS = Exercise(
    name="rms_norm",
    cell="rms_norm",
    reference=RMS_REF,
    handout="wrong_axis",
    mistakes=[
        # The handout's own bug: its message says what the student can observe, not the line that fixes it.
        Mistake("wrong_axis", "a token's output depends on the other tokens of its sequence: change one token and "
                "the outputs of the others change too, and a sequence of a single token comes out as about ±weight "
                "in every feature. The contract normalises each token by its own features alone.",
                patch(RMS_REF, "ms = x.pow(2).mean(dim=-1, keepdim=True)          # (..., 1): mean square",
                      "ms = x.pow(2).mean(dim=-2, keepdim=True)          # (..., 1, D): mean square")),
        Mistake("centred", "the mean is subtracted: that is LayerNorm. RMSNorm divides x itself by its root mean "
                "square, with no centring.",
                patch(RMS_REF, "return x * torch.rsqrt", "return (x - x.mean(dim=-1, keepdim=True)) * torch.rsqrt")),
        Mistake("no_weight", "the learned scale is missing: multiply the normalised vector by weight.",
                patch(RMS_REF, "torch.rsqrt(ms + eps) * weight", "torch.rsqrt(ms + eps)")),
        Mistake("eps_outside", "ε is added after the square root; it belongs inside: 1 / sqrt(mean square + eps).",
                patch(RMS_REF, "torch.rsqrt(ms + eps)", "1 / (ms.sqrt() + eps)")),
    ],
    variants=[
        Variant("functional", """
def rms_norm(x, weight, eps=1e-6):
    return F.rms_norm(x, x.shape[-1:], weight, eps)
"""),
        Variant("sqrt", """
def rms_norm(x, weight, eps=1e-6):
    rms = torch.sqrt((x * x).mean(-1, keepdim=True) + eps)
    return weight * (x / rms)
"""),
    ],
    cases=[
        Case("batched", "a (2, 5, 8) batch and a learned weight",
             args=lambda g: (3 * torch.randn(2, 5, 8, generator=g) + 1, 1 + 0.3 * torch.randn(8, generator=g)), seed=21),
        Case("eps", "eps=0.1 on small values, (4, 3, 6)",
             args=lambda g: (0.2 * torch.randn(4, 3, 6, generator=g), 1 + 0.3 * torch.randn(6, generator=g)),
             kwargs={"eps": 0.1}, seed=22),
        Case("float64", "float64, (3, 4, 16)", dtype="float64",
             args=lambda g: (torch.randn(3, 4, 16, generator=g), 1 + 0.3 * torch.randn(16, generator=g)), seed=23),
        Case("bfloat16", "bfloat16, (2, 3, 8)", dtype="bfloat16",
             args=lambda g: (torch.randn(2, 3, 8, generator=g), 1 + 0.3 * torch.randn(8, generator=g)), seed=24),
        Case("best_device", "on the best device (CUDA when present)", device="best",
             args=lambda g: (torch.randn(2, 4, 8, generator=g), 1 + 0.3 * torch.randn(8, generator=g)), seed=25),
        Case("meta", "on the meta device", device="meta",
             args=lambda g: (torch.randn(2, 4, 8, generator=g), torch.ones(8))),
    ],
)

POINTS = {   # what each hidden check is worth; a hidden cell's points are the sum of its checks'
    "layer_norm": {"batched": 1.125, "one_token": 1.125, "eps": 1.125, "tiny_variance": 1.125, "float64": 0.125,
                   "bfloat16": 0.125, "best_device": 0.125, "meta": 0.125},
    "TransformerBlock": {"post_ln": 1.125, "post_ln_causal": 1.125, "d_ff": 1.125, "defaults": 1, "float64": 0.125,
                         "bfloat16": 0.125, "best_device": 0.125, "meta_post": 0.125, "meta_pre": 0.125, "pre_ln": 1,
                         "pre_ln_padding": 1},
    "block_params": {"value": 2},
    "family": {"answers": 2},
    "can_translate": {"value": 1},
    "cross_attention": {"same_length": 1.375, "batched": 1.375, "unbatched": 1.375, "padding": 1.375,
                        "bfloat16": 0.125, "float64": 0.125, "best_device": 0.125, "meta": 0.125},
    "rms_norm": {"batched": 1.25, "eps": 1.25, "float64": 0.125, "bfloat16": 0.125, "best_device": 0.125,
                 "meta": 0.125},
}

SECTION = Section("06_transformer_block", [LN, BLOCK, BLOCK_PARAMS, CROSS, FAMILY, CAN_TRANSLATE, RMS], points=POINTS)
