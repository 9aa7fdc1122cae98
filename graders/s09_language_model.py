"""Hidden cases for section 09: a character-level language model.

Nine graded exercises: ``predicted_loss`` (predict, then measure), ``perplexity``, the model the notebook
trains — ``CausalSelfAttention`` (section 04's contract, RoPE at an explicit offset, a KV cache), ``Block``
(section 06's Pre-LN block) and ``GPT`` (the forward, with weight tying) — ``param_groups``, ``lr_at``,
``evaluate_loss`` (find the bug: the notebook hands out the ``train_mode`` mistake) and ``top_p_filter``.
Each code exercise has at least 4 known mistakes and 2 correct variants.

All but two are graded through a probe of the notebook's locked ``given_probes`` cell (``Exercise.wrap``):

* ``attention_probe(CausalSelfAttention)`` fills the module's parameters from generators seeded by their
  names, then reads x whole, or its first rows and the rest with the cache at their offset; it reports the
  outputs and the cache's keys and values.
* ``block_probe(Block)`` and ``gpt_probe(GPT)`` do the same with a stand-in (not attention: a causal running
  mean plus sin(position), with the same interface and cache) in place of the block's attention, or of the
  model's blocks, so each is graded on its own code; ``block_probe`` also reports whether the attention the block
  built is the student's own ``CausalSelfAttention``, and ``gpt_probe`` whether the head's weight *is* the
  embedding's Parameter.

* ``decay_probe(param_groups)`` builds a fresh model (the parameters of a small tied GPT, or a small
  nn.Sequential with an embedding, a LayerNorm and two linear layers), hands the student's groups to AdamW (which refuses a
  parameter listed twice) and reports each parameter's weight decay (-1: in no group).
* ``schedule_probe(lr_at)`` evaluates the schedule at every step of a stored list.
* ``eval_probe(evaluate_loss)`` builds a fresh small language model with dropout 0.5 in training mode, seeds the global
  generator (so a run with dropout left on is deterministic, and wrong) and reports the loss and whether
  the model is back in training mode.

``lr_at`` returns Python floats and has no dtype or device; ``param_groups`` has no dtype (AdamW's groups
are the same in any), so it is checked on the best device only.
"""

import torch

from .spec import HF_SAMPLING, Case, Exercise, How, Mistake, Section, Shortcut, Variant, patch, source_cells

CELLS = source_cells("09_language_model")   # the source notebook: solutions and given code are read from it

DATA_GIVEN = "from attncourse.teach.gpt import load_corpus\n\n" + CELLS["given_data"]
PROBES_GIVEN = ("from attncourse.teach.gpt import rotate as apply_rope, small_init\n\n" + CELLS["given_probes"])

V = 62   # the corpus's vocabulary

# ---------------------------------------------------------------- predicted_loss (predict, then measure)
PREDICT_REF = CELLS["predicted_loss"]

PREDICT = Exercise(
    name="predicted_loss",
    cell="predicted_loss",
    given=DATA_GIVEN,
    reference=PREDICT_REF,
    mistakes=[
        Mistake("log2", "that is log2 of the vocabulary size (bits): cross_entropy measures nats, the natural log "
                "(math.log).", "predicted_loss = math.log2(62)"),
        Mistake("log10", "that is log10 of the vocabulary size: cross_entropy uses the natural log (math.log).",
                "predicted_loss = math.log10(62)"),
        Mistake("vocab_size", "that is the vocabulary size itself, which is the untrained model's perplexity: the "
                "loss is its natural logarithm.", "predicted_loss = 62"),
        Mistake("probability", "that is the probability each character gets: the loss is -ln of it.",
                "predicted_loss = 1 / 62"),
    ],
    variants=[Variant("literal", "predicted_loss = 4.127"), Variant("minus_log", "predicted_loss = -math.log(1 / 62)")],
    cases=[Case("value", "the mean cross-entropy of the untrained model on the 62-character corpus", kind="value",
                api="any", atol=0.05,
                hint="equal logits give every one of the 62 characters probability 1/62, so the loss is "
                     "-ln(1/62) = ln 62 nats (the natural log: cross_entropy uses it)",
                mistake_values={"zero": ("an untrained model is not perfect: with equal logits each character gets "
                                          "probability 1/62.", 0.0)})],
)

# ---------------------------------------------------------------- perplexity
PPL_REF = CELLS["perplexity"]

PPL = Exercise(
    name="perplexity",
    cell="perplexity",
    reference=PPL_REF,
    mistakes=[
        Mistake("unweighted", "the per-batch losses are averaged as if every batch had as many targets: weight "
                "each batch's mean loss by its count (sum of loss x count, divided by the total count).",
                patch(PPL_REF, "(losses * counts).sum() / counts.sum()", "losses.mean()")),
        Mistake("mean_of_perplexities", "the perplexities of the batches are averaged: perplexity is the "
                "exponential of the mean loss over all targets (a geometric mean), not a mean of exponentials.",
                patch(PPL_REF, "mean = (losses * counts).sum() / counts.sum()     # () : nats per target over "
                      "everything\n    return torch.exp(mean)",
                      "return (torch.exp(losses) * counts).sum() / counts.sum()")),
        Mistake("base_2", "2 ** loss treats the loss as bits: cross_entropy measures nats (natural log), so "
                "perplexity is e ** loss (torch.exp).", patch(PPL_REF, "torch.exp(mean)", "2 ** mean")),
        Mistake("total_not_mean", "the exponential of the total loss: divide the summed loss by the number of "
                "targets first.", patch(PPL_REF, "(losses * counts).sum() / counts.sum()", "(losses * counts).sum()")),
    ],
    variants=[
        Variant("dot", '''
def perplexity(losses, counts):
    w = counts.to(losses.dtype)
    return torch.dot(losses, w).div(w.sum()).exp()
'''),
        Variant("log_space", '''
def perplexity(losses, counts):
    share = counts / counts.sum()
    return torch.exp(torch.sum(losses * share))
'''),
    ],
    cases=[],
)


def _losses(n, equal=False):
    def args(g):
        losses = 1.0 + 2.5 * torch.rand(n, generator=g)
        counts = torch.full((n,), 64) if equal else torch.randint(1, 200, (n,), generator=g)
        return (losses, counts)
    return args


PPL.cases = [
    Case("one_batch", "one batch of 64 targets", args=_losses(1, equal=True)),
    Case("unequal_batches", "3 batches of different sizes", args=_losses(3), seed=1),
    Case("many_batches", "20 batches of different sizes", args=_losses(20), seed=2),
    Case("float64", "float64, 5 batches", args=_losses(5), dtype="float64", seed=3),
    Case("best_device", "on the best device (CUDA when present), 4 batches", args=_losses(4), device="best", seed=4),
    Case("meta", "on the meta device", args=_losses(4), device="meta"),
]

# ---------------------------------------------------------------- CausalSelfAttention (RoPE at an offset, KV cache)
ATTN_REF = CELLS["causal_attention"]


def _attn(*pairs):
    return patch(ATTN_REF, *pairs)


ATTN = Exercise(
    name="CausalSelfAttention",
    cell="causal_attention",
    given=PROBES_GIVEN,
    wrap="attention_probe",
    reference=ATTN_REF,
    mistakes=[
        Mistake("offset_ignored", "the new rows are rotated as positions 0, 1, ... when a cache is given: they sit at "
                "positions offset, offset + 1, ...; rotate q and k with apply_rope(·, offset).",
                _attn("q, k = apply_rope(q, offset), apply_rope(k, offset)", "q, k = apply_rope(q), apply_rope(k)")),
        Mistake("cache_not_appended", "the cache is not appended to: the new rows attend only to the new keys, and "
                "the returned cache forgets the earlier positions; concatenate past's keys and values in front of the "
                "new ones (dim=-2) and return all of them.",
                _attn("k = torch.cat([past[0], k], dim=-2)", "k = k",
                      "v = torch.cat([past[1], v], dim=-2)", "v = v",
                      "P = past[0].shape[-2]", "P = 0"),
                shows="keys has shape"),
        Mistake("mask_top_left", "the causal mask is aligned to the top left (tril() without a shift, like "
                "is_causal=True): new row i sits after the P cached positions and may see keys 0 .. P + i, "
                "i.e. tril(diagonal=P) on the (T, P + T) scores.",
                _attn(".tril(diagonal=P)", ".tril()")),
        Mistake("values_rotated", "the values are rotated too: RoPE turns only queries and keys (their dot product "
                "then depends on the distance); the values are mixed as they are.",
                _attn("q, k = apply_rope(q, offset), apply_rope(k, offset)",
                      "q, k, v = apply_rope(q, offset), apply_rope(k, offset), apply_rope(v, offset)")),
        Mistake("softmax_axis", "the softmax runs over the queries (dim=-2): each row's weights over the cached and "
                "new keys must sum to 1, the last axis of the (B, h, T, P + T) scores.",
                _attn('float("-inf")), dim=-1)', 'float("-inf")), dim=-2)')),
        Mistake("not_causal", "no causal mask: each row also attends to the keys after it (the future characters "
                "it has to predict); mask the scores so that row i sees keys up to P + i only.",
                _attn("scores.masked_fill(~seen, float(\"-inf\"))", "scores")),
    ],
    variants=[
        Variant("sdpa", '''
class CausalSelfAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads, self.d_k = n_heads, d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x, past=None, offset=0):
        B, T, _ = x.shape
        q, k, v = self.qkv(x).unflatten(-1, (3, self.n_heads, self.d_k)).transpose(1, 3).unbind(2)   # (B, h, T, d_k)
        q, k = apply_rope(q, offset=offset), apply_rope(k, offset=offset)
        if past is not None:
            k, v = torch.cat((past[0], k), -2), torch.cat((past[1], v), -2)
        P = k.shape[-2] - T
        rows = torch.arange(T, device=x.device)[:, None] + P
        mask = torch.arange(P + T, device=x.device)[None, :] <= rows
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out(y.transpose(1, 2).flatten(2)), (k, v)
'''),
        Variant("einsum", '''
class CausalSelfAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        assert d_model % n_heads == 0
        self.n_heads = n_heads
        self.d_k = d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x, past=None, offset=0):
        B, T, D = x.shape
        q, k, v = (t.reshape(B, T, self.n_heads, self.d_k).permute(0, 2, 1, 3) for t in self.qkv(x).split(D, dim=-1))
        q = apply_rope(q, offset)
        k = apply_rope(k, offset)
        if past:
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        S = k.shape[2]
        s = torch.einsum("bhtd,bhsd->bhts", q, k) * self.d_k ** -0.5
        future = torch.triu(torch.ones(T, S, dtype=torch.bool, device=x.device), diagonal=S - T + 1)
        w = s.masked_fill(future, -torch.inf).softmax(-1)
        y = torch.einsum("bhts,bhsd->bthd", w, v).reshape(B, T, D)
        return self.out(y), (k, v)
'''),
    ],
    cases=[],
)


def _rows(B, T, d):
    return lambda g: (torch.randn(B, T, d, generator=g),)


ATTN.cases = [
    Case("no_cache", "(2, 6, 16), 4 heads, no cache", args=lambda g: (*_rows(2, 6, 16)(g), 4, 0),
         labels=["output", "keys", "values"], seed=20),
    Case("cached_chunk", "(2, 9, 16), 2 heads: 5 rows, then 4 with the cache at offset 5",
         args=lambda g: (*_rows(2, 9, 16)(g), 2, 5), labels=["output", "keys", "values"], seed=21),
    Case("one_token", "(1, 8, 16), 4 heads: 7 rows, then one token at offset 7",
         args=lambda g: (*_rows(1, 8, 16)(g), 4, 7), labels=["output", "keys", "values"], seed=22),
    Case("float64", "float64, (2, 7, 8), 2 heads: 3 rows, then 4 at offset 3", dtype="float64",
         args=lambda g: (*_rows(2, 7, 8)(g), 2, 3), labels=["output", "keys", "values"], seed=23),
    Case("best_device", "on the best device (CUDA when present), (2, 6, 16), 4 heads: 2 rows, then 4 at offset 2",
         device="best", args=lambda g: (*_rows(2, 6, 16)(g), 4, 2), labels=["output", "keys", "values"], seed=24),
]

# ---------------------------------------------------------------- Block (Pre-LN, the cache passed on)
BLOCK_REF = CELLS["block"]


def _block(*pairs):
    return patch(BLOCK_REF, *pairs)


# The block's attention must be the student's own CausalSelfAttention (block_probe's third value: 1.0 when the attn
# it built is an instance of that class), not another attention module: the probe swaps attn for a stand-in, so
# only that value shows it.  Both mistakes below give the same output, hence one message.
OWN_ATTENTION = ("self.attn must be your CausalSelfAttention(d_model, n_heads), the class written above, not another "
                 "attention module (nn.MultiheadAttention, or a copy under another name): the model is built from "
                 "the attention you wrote.")
ATTN_COPY = "\n".join(line for line in ATTN_REF.splitlines()
                      if line.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION"))


BLOCK = Exercise(
    name="Block",
    cell="block",
    given=PROBES_GIVEN + "\n\n" + ATTN_REF,
    wrap="block_probe",
    reference=BLOCK_REF,
    mistakes=[
        Mistake("no_attn_residual", "the residual around attention is missing: x = x + drop(attn(ln1(x))), the "
                "sub-layer's input added back.",
                _block("x = x + self.drop(a)", "x = self.drop(a)")),
        Mistake("no_ffn_residual", "the residual around the MLP is missing: x = x + drop(ffn(ln2(x))).",
                _block("x = x + self.drop(self.ffn(self.ln2(x)))", "x = self.drop(self.ffn(self.ln2(x)))")),
        Mistake("post_ln", "the LayerNorms sit after the residual adds (Post-LN): this block is Pre-LN, "
                "x + attn(ln1(x)), then x + ffn(ln2(x)); the residual path is never normalised.",
                _block("a, kv = self.attn(self.ln1(x), past, offset)", "a, kv = self.attn(x, past, offset)",
                       "x = x + self.drop(a)", "x = self.ln1(x + self.drop(a))",
                       "x = x + self.drop(self.ffn(self.ln2(x)))", "x = self.ln2(x + self.drop(self.ffn(x)))")),
        Mistake("cache_not_passed", "the cache and the offset are not passed to the attention: call "
                "self.attn(ln1(x), past, offset), so that a cached chunk sees the earlier positions.",
                _block("self.attn(self.ln1(x), past, offset)", "self.attn(self.ln1(x))"), shows="keys has shape"),
        Mistake("offset_not_passed", "the offset is not passed to the attention: a cached chunk is then rotated as "
                "positions 0, 1, ...; call self.attn(ln1(x), past, offset).",
                _block("self.attn(self.ln1(x), past, offset)", "self.attn(self.ln1(x), past)")),
        Mistake("torch_attention", OWN_ATTENTION,
                _block("self.attn = CausalSelfAttention(d_model, n_heads)",
                       "self.attn = nn.MultiheadAttention(d_model, n_heads, batch_first=True)")),
        Mistake("copied_attention", OWN_ATTENTION,
                patch(ATTN_COPY, "class CausalSelfAttention(nn.Module):", "class MyAttention(nn.Module):") + "\n\n\n"
                + _block("self.attn = CausalSelfAttention(d_model, n_heads)", "self.attn = MyAttention(d_model, n_heads)")),
    ],
    variants=[
        Variant("sublayer", '''
class Block(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.0):
        super().__init__()
        self.attn = CausalSelfAttention(d_model, n_heads)
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.ffn = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))
        self.drop = nn.Dropout(dropout)

    def forward(self, x, past=None, offset=0):
        out, cache = self.attn(self.ln1(x), past=past, offset=offset)
        h = x + self.drop(out)
        return h + self.drop(self.ffn(self.ln2(h))), cache
'''),
        Variant("functional_ln", '''
class Block(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.0):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads)
        hidden = 4 * d_model
        self.ffn = nn.Sequential(nn.Linear(d_model, hidden), nn.GELU(), nn.Linear(hidden, d_model))
        self.drop = nn.Dropout(p=dropout)

    def forward(self, x, past=None, offset=0):
        ln = lambda m, t: F.layer_norm(t, m.normalized_shape, m.weight, m.bias, m.eps)
        a, kv = self.attn(ln(self.ln1, x), past, offset)
        x = self.drop(a) + x
        return self.drop(self.ffn(ln(self.ln2, x))) + x, kv
'''),
    ],
    cases=[],
)

_BLOCK_LABELS = ["output", "keys", "the type of self.attn (your CausalSelfAttention)"]

BLOCK.cases = [
    Case("no_cache", "(2, 6, 16), no cache", args=lambda g: (*_rows(2, 6, 16)(g), 0), labels=_BLOCK_LABELS,
         seed=30),
    Case("cached", "(2, 9, 16): 5 rows, then 4 with the cache at offset 5", args=lambda g: (*_rows(2, 9, 16)(g), 5),
         labels=_BLOCK_LABELS, seed=31),
    Case("float64", "float64, (1, 7, 8): 6 rows, then one at offset 6", dtype="float64",
         args=lambda g: (*_rows(1, 7, 8)(g), 6), labels=_BLOCK_LABELS, seed=32),
    Case("best_device", "on the best device (CUDA when present), (2, 6, 16): 3 rows, then 3 at offset 3",
         device="best", args=lambda g: (*_rows(2, 6, 16)(g), 3), labels=_BLOCK_LABELS, seed=33),
]

# ---------------------------------------------------------------- GPT (forward, weight tying)
GPT_REF = CELLS["gpt"]


def _gpt(*pairs):
    return patch(GPT_REF, *pairs)


GPT = Exercise(
    name="GPT",
    cell="gpt",
    given=PROBES_GIVEN + "\n\n" + ATTN_REF + "\n\n" + BLOCK_REF,
    wrap="gpt_probe",
    reference=GPT_REF,
    mistakes=[
        Mistake("tied_by_copy", "the head's weight is a copy of the embedding, not the same Parameter: the two "
                "then drift apart in training; assign the Parameter itself (self.head.weight = self.embed.weight).",
                _gpt("self.head.weight = self.embed.weight",
                     "self.head.weight = nn.Parameter(self.embed.weight.detach().clone())")),
        Mistake("offset_from_zero", "the blocks get offset 0 when reading with a cache: a cached chunk sits at "
                "positions offset, offset + 1, ...; pass the offset on to every block.",
                _gpt("h, kv = block(h, past, offset)", "h, kv = block(h, past)")),
        Mistake("cache_not_passed", "the blocks never see the cache: give block i its entry cache[i], so that a "
                "cached chunk attends to the earlier positions.",
                _gpt("h, kv = block(h, past, offset)", "h, kv = block(h, None, offset)")),
        Mistake("no_final_norm", "the final LayerNorm is skipped: the head reads ln_f(h).",
                _gpt("logits = self.head(self.ln_f(h))", "logits = self.head(h)")),
    ],
    variants=[
        Variant("tie_other_way", '''
class GPT(nn.Module):
    def __init__(self, vocab_size, d_model=64, n_heads=4, n_layers=2, max_len=64, dropout=0.0):
        super().__init__()
        self.max_len = max_len
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.embed = nn.Embedding(vocab_size, d_model)
        self.embed.weight = self.head.weight
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(d_model, n_heads, dropout) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)
        small_init(self)

    def forward(self, idx, cache=None, offset=0):
        h = self.drop(self.embed(idx))
        new_cache = []
        for i, blk in enumerate(self.blocks):
            h, kv = blk(h, past=None if not cache else cache[i], offset=offset)
            new_cache.append(kv)
        logits = self.head(self.ln_f(h))
        if cache is None:
            return logits
        return logits, new_cache
'''),
        Variant("zip_cache", '''
class GPT(nn.Module):
    def __init__(self, vocab_size, d_model=64, n_heads=4, n_layers=2, max_len=64, dropout=0.0):
        super().__init__()
        self.max_len = max_len
        self.embed = nn.Embedding(vocab_size, d_model)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList([Block(d_model, n_heads, dropout) for _ in range(n_layers)])
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.head.weight = self.embed.weight
        small_init(self)

    def forward(self, idx, cache=None, offset=0):
        x = self.drop(self.embed(idx))
        pasts = cache if cache else [None] * len(self.blocks)
        kvs = []
        for block, past in zip(self.blocks, pasts):
            x, kv = block(x, past, offset)
            kvs.append(kv)
        logits = F.linear(self.ln_f(x), self.embed.weight)
        return logits if cache is None else (logits, kvs)
'''),
    ],
    cases=[],
)


def _ids(B, T, vocab=12):
    return lambda g: (torch.zeros(1), torch.randint(0, vocab, (B, T), generator=g), vocab)


GPT.cases = [
    Case("full", "2 sequences of 9 tokens, 2 stand-in blocks, no cache", args=lambda g: (*_ids(2, 9)(g), 2, 0),
         api="any", labels=["logits", "head is the embedding"], seed=40),
    Case("cached", "2 sequences of 9 tokens: 5, then 4 with the cache at offset 5",
         args=lambda g: (*_ids(2, 9)(g), 2, 5), api="any", labels=["logits", "head is the embedding"], seed=41),
    Case("one_token", "3 blocks, 7 tokens, then one at offset 7", args=lambda g: (*_ids(1, 8)(g), 3, 7), api="any",
         labels=["logits", "head is the embedding"], seed=42),
    Case("float64", "float64, 2 sequences of 6 tokens: 2, then 4 at offset 2", dtype="float64",
         args=lambda g: (*_ids(2, 6)(g), 2, 2), api="any", labels=["logits", "head is the embedding"], seed=43),
    Case("best_device", "on the best device (CUDA when present): 4 tokens, then 3 at offset 4", device="best",
         args=lambda g: (*_ids(2, 7)(g), 1, 4), api="any", labels=["logits", "head is the embedding"], seed=44),
]

# ---------------------------------------------------------------- param_groups
GROUPS_REF = CELLS["param_groups"]

GROUPS = Exercise(
    name="param_groups",
    cell="param_groups",
    given=PROBES_GIVEN,
    wrap="decay_probe",
    reference=GROUPS_REF,
    mistakes=[
        Mistake("tied_spared", "the embedding (and so the output head tied to it) is kept out of decay: it is a "
                "matrix like any linear weight, and as the head every row of it gets a gradient at every step; "
                "decay every parameter with two or more dimensions.",
                '''
def param_groups(model, weight_decay):
    embedding = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    decay = [p for p in model.parameters() if p.dim() >= 2 and id(p) not in embedding]
    keep = [p for p in model.parameters() if p.dim() < 2 or id(p) in embedding]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": keep, "weight_decay": 0.0}]
'''),
        Mistake("biases_only", "only the biases are spared: LayerNorm gains and shifts are vectors too and are not "
                "decayed; decay only parameters with two or more dimensions.",
                '''
def param_groups(model, weight_decay):
    decay = [p for n, p in model.named_parameters() if not n.endswith("bias")]
    keep = [p for n, p in model.named_parameters() if n.endswith("bias")]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": keep, "weight_decay": 0.0}]
'''),
        Mistake("tied_twice", "the tied matrix is in both groups (once as the head's weight, once as the "
                "embedding): list each parameter once, e.g. by going through model.parameters().",
                '''
def param_groups(model, weight_decay):
    decay, keep = [], []
    for m in model.modules():
        if isinstance(m, nn.Linear):
            decay.append(m.weight)
            if m.bias is not None:
                keep.append(m.bias)
        else:
            keep.extend(m.parameters(recurse=False))
    return [{"params": decay, "weight_decay": weight_decay}, {"params": keep, "weight_decay": 0.0}]
''', shows="some parameters appear in more than one parameter group"),
        Mistake("fixed_decay", "the weight_decay argument is ignored (a fixed 0.1 is used): put the value that "
                "is passed in into the decayed group.",
                patch(GROUPS_REF, '"weight_decay": weight_decay}', '"weight_decay": 0.1}')),
    ],
    variants=[
        Variant("by_module", '''
def param_groups(model, weight_decay):
    seen, decay, keep = set(), [], []
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            if id(p) in seen:
                continue
            seen.add(id(p))
            (decay if p.ndim > 1 else keep).append(p)
    return [dict(params=decay, weight_decay=weight_decay), dict(params=keep, weight_decay=0.0)]
'''),
        Variant("named", '''
def param_groups(model, weight_decay):
    params = dict(model.named_parameters())
    return [{"params": [p for n, p in params.items() if p.ndim >= 2], "weight_decay": weight_decay},
            {"params": [p for n, p in params.items() if p.ndim < 2], "weight_decay": 0.0}]
'''),
    ],
    cases=[],
)

_like = lambda g: torch.zeros(1)   # noqa: E731  (its device is the model's)
GROUPS.cases = [
    Case("gpt", "a tied GPT's parameters, 2 blocks, weight_decay=0.1", args=lambda g: (_like(g), 0.1, 2, "gpt"),
         api="any"),
    Case("deeper", "a tied GPT's parameters, 3 blocks, weight_decay=0.3", args=lambda g: (_like(g), 0.3, 3, "gpt"),
         api="any", seed=1),
    Case("mlp", "an untied model: embedding, LayerNorm, two linear layers; weight_decay=0.05",
         args=lambda g: (_like(g), 0.05, 0, "mlp"), api="any", seed=2),
    Case("best_device", "a tied GPT's parameters on the best device (CUDA when present)",
         args=lambda g: (_like(g), 0.1, 2, "gpt"), api="any", device="best", seed=3),
]

# ---------------------------------------------------------------- lr_at
LR_REF = CELLS["lr_at"]

LR = Exercise(
    name="lr_at",
    cell="lr_at",
    given=PROBES_GIVEN,
    wrap="schedule_probe",
    reference=LR_REF,
    mistakes=[
        Mistake("warmup_from_zero", "the warm-up is off by one: step s must use max_lr * (s + 1) / warmup_steps, "
                "so that step 0 already learns and the last warm-up step reaches max_lr.",
                patch(LR_REF, "max_lr * (step + 1) / warmup_steps", "max_lr * step / warmup_steps")),
        Mistake("no_min_lr", "the cosine ends at 0, not at min_lr: scale it between min_lr and max_lr.",
                patch(LR_REF, "min_lr + 0.5 * (max_lr - min_lr) * (1 + math.cos(math.pi * progress))",
                      "0.5 * max_lr * (1 + math.cos(math.pi * progress))")),
        Mistake("progress_from_zero", "the cosine's progress counts from step 0, not from the end of the warm-up: "
                "progress = (step - warmup_steps) / (total_steps - warmup_steps), so the cosine starts at max_lr.",
                patch(LR_REF, "(step - warmup_steps) / (total_steps - warmup_steps)", "step / total_steps")),
        Mistake("no_floor", "after total_steps the rate climbs back up the cosine: from total_steps on, return "
                "min_lr.", patch(LR_REF, "    if step >= total_steps:\n        return min_lr\n", "")),
    ],
    variants=[
        Variant("min_form", '''
def lr_at(step, max_lr, warmup_steps, total_steps, min_lr):
    if step >= warmup_steps:
        t = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return min_lr + (max_lr - min_lr) * (math.cos(math.pi * t) + 1) / 2
    return (step + 1) / warmup_steps * max_lr
'''),
        Variant("torch_cos", '''
def lr_at(step, max_lr, warmup_steps, total_steps, min_lr):
    if step + 1 <= warmup_steps:
        return float(max_lr * (step + 1) / warmup_steps)
    t = torch.tensor(min(step, total_steps) - warmup_steps, dtype=torch.float64) / (total_steps - warmup_steps)
    return float(min_lr + (max_lr - min_lr) * 0.5 * (1 + torch.cos(torch.pi * t)))
'''),
    ],
    cases=[],
)

LR.cases = [
    Case("short", "steps 0-29, warm-up 5, total 25, max 1e-3, min 1e-4",
         args=lambda g: (list(range(30)), 1e-3, 5, 25, 1e-4), api="any"),
    Case("long_warmup", "steps 0-119, warm-up 40, total 100, max 3e-3, min 3e-4",
         args=lambda g: (list(range(120)), 3e-3, 40, 100, 3e-4), api="any", seed=1),
    Case("past_the_end", "steps 600-1000 after a 600-step schedule", args=lambda g: (list(range(590, 1001, 10)),
         6e-4, 60, 600, 6e-5), api="any", seed=2),
    Case("min_lr_zero", "steps 0-49, warm-up 10, total 50, min_lr 0", args=lambda g: (list(range(50)), 0.01, 10, 50,
         0.0), api="any", seed=3),
]

# ---------------------------------------------------------------- evaluate_loss (find the bug)
EVAL_REF = CELLS["evaluate_loss"]

EVAL = Exercise(
    name="evaluate_loss",
    cell="evaluate_loss",
    given=PROBES_GIVEN,
    wrap="eval_probe",
    reference=EVAL_REF,
    handout="train_mode",
    mistakes=[
        # The handout's own bug: its message says what the student can observe, not the line that fixes it.
        Mistake("train_mode", "two calls on the same batches give different losses, both above the loss the model "
                "really has: dropout still drops activations while the loss is measured (torch.no_grad() stops the "
                "gradients; it does not change what the layers do).",
                patch(EVAL_REF, "    was_training = model.training\n    model.eval()\n", "",
                      "    model.train(was_training)\n", "")),
        Mistake("mean_of_means", "the batches' mean losses are averaged as if every batch had as many targets: "
                "sum the loss over all targets and divide by their number.",
                patch(EVAL_REF, 'F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum").item()',
                      "F.cross_entropy(logits.flatten(0, 1), y.flatten()).item()",
                      "n += y.numel()", "n += 1")),
        Mistake("left_in_eval", "the model is left in eval mode: it came in training mode and must leave in the mode "
                "it came in, or the training that follows runs without dropout.",
                patch(EVAL_REF, "    model.train(was_training)\n", "")),
        Mistake("inputs_as_targets", "the loss compares the predictions with the inputs x: the targets are y, the "
                "inputs shifted by one.", patch(EVAL_REF, "y.flatten(), reduction", "x.flatten(), reduction")),
    ],
    variants=[
        Variant("concatenate", '''
def evaluate_loss(model, batches):
    mode = model.training
    model.train(False)
    with torch.inference_mode():
        logits = torch.cat([model(x).reshape(-1, model(x).shape[-1]) for x, _ in batches])
        targets = torch.cat([y.reshape(-1) for _, y in batches])
        loss = F.cross_entropy(logits, targets)
    model.train(mode)
    return float(loss)
'''),
        Variant("log_softmax", '''
def evaluate_loss(model, batches):
    was = model.training
    model.eval()
    try:
        with torch.no_grad():
            nll, count = torch.zeros(()), 0
            for x, y in batches:
                logp = model(x).log_softmax(dim=-1)
                nll = nll + -logp.gather(-1, y.unsqueeze(-1)).sum().cpu().double()
                count += y.numel()
    finally:
        if was:
            model.train()
    return (nll / count).item()
'''),
    ],
    cases=[],
)


def _batches(sizes, T=8):
    def args(g):
        xs = [torch.randint(0, 12, (b, T), generator=g) for b in sizes]
        ys = [torch.randint(0, 12, (b, T), generator=g) for b in sizes]
        return (torch.zeros(1), xs, ys)   # the first: the model's dtype and device
    return args


EVAL.cases = [
    Case("two_batches", "2 batches of 4 sequences of 8 tokens", args=_batches([4, 4]), api="any"),
    Case("unequal_batches", "batches of 5, 1 and 2 sequences", args=_batches([5, 1, 2]), api="any", seed=1),
    Case("one_batch", "one batch of 3 sequences of 12 tokens", args=_batches([3], T=12), api="any", seed=2),
    Case("float64", "a float64 model, batches of 2 and 6", args=_batches([2, 6]), dtype="float64", api="any",
         seed=3),
    Case("best_device", "on the best device (CUDA when present), batches of 3 and 1", args=_batches([3, 1]),
         device="best", api="any", seed=4),
]

# ---------------------------------------------------------------- top_p_filter
TOPP_REF = CELLS["top_p_filter"]
_KEEP_FIRST = "    drop[..., 0] = False                                    # the most likely token stays, even for p = 0\n"

TOPP = Exercise(
    name="top_p_filter",
    cell="top_p_filter",
    reference=TOPP_REF,
    mistakes=[
        Mistake("none_at_p0", "with p = 0 every token is set to -inf: the most likely token is always kept, whatever "
                "p is (the probability before it, 0, has already reached p = 0, so keep the first token explicitly).",
                patch(TOPP_REF, _KEEP_FIRST, "")),
        Mistake("drops_crossing", "the token at which the total reaches p is dropped: it belongs to the nucleus "
                "(keep a token while the probability BEFORE it is below p), so the most likely token always stays.",
                patch(TOPP_REF, "drop = before >= p ", "drop = probs.cumsum(dim=-1) >= p", _KEEP_FIRST, "")),
        Mistake("unsorted", "the probabilities are summed in vocabulary order: sort them from most to least "
                "likely first, then put the mask back in vocabulary order.",
                patch(TOPP_REF, "torch.sort(torch.softmax(logits, dim=-1), dim=-1, descending=True)",
                      "torch.softmax(logits, dim=-1), torch.arange(logits.shape[-1], device=logits.device)"
                      ".expand(logits.shape)")),
        Mistake("mask_in_sorted_order", "the mask is computed in sorted order but applied in vocabulary order: "
                "scatter it back through the sort's indices.",
                patch(TOPP_REF, "torch.zeros_like(drop).scatter(-1, order, drop)", "drop")),
        Mistake("fill_zero", "the removed logits are set to 0, which still has probability e^0 after the softmax: "
                "set them to -inf.", patch(TOPP_REF, 'float("-inf")', "0.0")),
    ],
    variants=[
        Variant("ascending", '''
def top_p_filter(logits, p):
    probs, order = torch.softmax(logits, dim=-1).sort(dim=-1)
    tail = probs.cumsum(dim=-1) <= 1 - p
    tail[..., -1] = False                                      # the most likely token (last here) always stays
    drop = tail.scatter(-1, order, tail)
    return logits.masked_fill(drop, -torch.inf)
'''),
        Variant("gather_threshold", '''
def top_p_filter(logits, p):
    probs = logits.softmax(-1)
    s, _ = probs.sort(-1, descending=True)
    ahead = torch.cat([torch.zeros_like(s[..., :1]), s.cumsum(-1)[..., :-1]], dim=-1)
    n_keep = (ahead < p).sum(-1, keepdim=True).clamp(min=1)
    cutoff = s.gather(-1, n_keep - 1)
    return torch.where(probs >= cutoff, logits, torch.full_like(logits, float("-inf")))
'''),
    ],
    # the nucleus rule is what the student writes: transformers' logits processors are refused
    how=How(refuse=(HF_SAMPLING,)),
    shortcuts=[Shortcut("hf_warper", '''
from transformers import TopPLogitsWarper


def top_p_filter(logits, p):
    return TopPLogitsWarper(top_p=float(p))(None, logits)
''')],
    cases=[],
)


def _topp(B=8, Vb=20, scale=2.0):
    return lambda g: (scale * torch.randn(B, Vb, generator=g),)


TOPP.cases = [
    Case("p_0.9", "8 rows of 20 logits, p=0.9", args=_topp(), kwargs={"p": 0.9}),
    Case("p_0.5", "8 rows of 20 logits, p=0.5", args=_topp(), kwargs={"p": 0.5}, seed=1),
    Case("tiny_p", "p=0.01: only the most likely token", args=_topp(), kwargs={"p": 0.01}, seed=2),
    Case("p_0", "p=0: the most likely token still kept", args=_topp(), kwargs={"p": 0.0}, seed=6),
    Case("peaked", "sharp logits (scale 5), p=0.8", args=_topp(scale=5.0), kwargs={"p": 0.8}, seed=3),
    Case("float64", "float64, p=0.7", args=_topp(), kwargs={"p": 0.7}, dtype="float64", seed=4),
    Case("best_device", "on the best device (CUDA when present), p=0.9", args=_topp(), kwargs={"p": 0.9},
         device="best", seed=5),
    Case("meta", "on the meta device, p=0.9", args=_topp(), kwargs={"p": 0.9}, device="meta"),
]

POINTS = {   # what each hidden check is worth; a hidden cell's points are the sum of its checks'
    "predicted_loss": {"value": 2},
    "perplexity": {"one_batch": 0.875, "unequal_batches": 0.875, "many_batches": 0.875, "float64": 0.125,
                   "best_device": 0.125, "meta": 0.125},
    "CausalSelfAttention": {"no_cache": 2, "cached_chunk": 1.875, "one_token": 1.875, "float64": 0.125,
                            "best_device": 0.125},
    "Block": {"no_cache": 1.875, "cached": 1.875, "float64": 0.125, "best_device": 0.125},
    "GPT": {"full": 1.625, "cached": 1.625, "one_token": 1.5, "float64": 0.125, "best_device": 0.125},
    "param_groups": {"gpt": 1.375, "deeper": 1.25, "mlp": 1.25, "best_device": 0.125},
    "lr_at": {"short": 1, "long_warmup": 1, "past_the_end": 1, "min_lr_zero": 1},
    "evaluate_loss": {"two_batches": 1.25, "unequal_batches": 1.25, "one_batch": 1.25, "float64": 0.125,
                      "best_device": 0.125},
    "top_p_filter": {"p_0.9": 1.125, "p_0.5": 1, "tiny_p": 1, "peaked": 1, "p_0": 0.5, "float64": 0.125,
                     "best_device": 0.125, "meta": 0.125},
}

SECTION = Section("09_language_model", [PREDICT, PPL, ATTN, BLOCK, GPT, GROUPS, LR, EVAL, TOPP], points=POINTS)
