"""Hidden cases for section 08: train a tiny decoder-only model, then generate from it.

Seven graded exercises: ``next_token_loss``, ``train_step``, ``sample_next``, ``generate``,
``cached_attention`` (each with 4 known mistakes, ``train_step`` 5, and 2 correct variants), ``fixed_cached_sdpa`` (find the bug:
the student gets its ``is_causal`` mistake to fix; 3 more mistakes, the wrong fixes, and 2 variants) and
``predicted_cache_mib`` (predict, then measure: a value with 4 mistakes, 2 extra wrong values and 2 variants).

Three of them are graded through a *probe*, a function of the notebook's locked given code that
the hidden cells wrap the answer in (``Exercise.wrap``; the build and the tests wrap it the same
way):

* ``train_probe(train_step)`` runs three steps of the student's ``train_step`` on a fresh tiny
  bigram model (a stored weight table, with stale gradients left in it) with plain SGD and reports
  the three losses and the weight table afterwards: the parameter update, clipping and zeroing of
  gradients all show in it; and 1.0 for each loss returned as a Python float (the contract: ``loss.item()``,
  not the loss tensor, whose number is right).  It turns gradients on itself (graded calls run under ``no_grad``).
* ``with_seed(sample_next)`` calls the student's sampler with a fresh ``torch.Generator`` seeded
  with a stored seed (on the logits' device), so a sample is a deterministic answer.  The contract
  names the draw (``torch.multinomial(probs, 1, generator=generator)``), so every correct way of
  computing the probabilities draws the same tokens.
* ``generation_probe(generate)`` builds the given ``TinyGPT`` with fixed random weights (seed 0) on
  the prompt's device and generates greedily with ``pick=argmax``.
"""
import torch

from .spec import Case, Exercise, Mistake, patch, Section, source_cells, Variant

CELLS = source_cells("08_train_and_generate")   # the source notebook: solutions and given code are read from it

# ---------------------------------------------------------------- given code (locked cells of the notebook)
TASK_GIVEN = CELLS["given_task"]

MODEL_GIVEN = CELLS["given_model"]

PROBES_GIVEN = CELLS["given_probes"]

GIVEN = TASK_GIVEN + "\n\n\n" + MODEL_GIVEN + "\n\n\n" + PROBES_GIVEN


# ---------------------------------------------------------------- next_token_loss
LOSS_REF = CELLS["next_token_loss"]

LOSS = Exercise(
    name="next_token_loss",
    cell="next_token_loss",
    reference=LOSS_REF,
    mistakes=[
        Mistake("no_shift", "the targets are not shifted: position t must predict the NEXT token, so compare "
                "logits[:, :-1] with tokens[:, 1:].",
                patch(LOSS_REF, "pred = logits[:, :-1]", "pred = logits", "target = tokens[:, 1:]", "target = tokens")),
        Mistake("shift_backwards", "the shift goes the wrong way: logits[:, 1:] against tokens[:, :-1] predicts the "
                "previous token; use logits[:, :-1] against tokens[:, 1:].",
                patch(patch(LOSS_REF, "pred = logits[:, :-1]", "pred = logits[:, 1:]"),
                         "target = tokens[:, 1:]", "target = tokens[:, :-1]")),
        Mistake("pad_counted", "padding targets are counted in the loss: ignore them (ignore_index=pad_id, or a "
                "mask of target != pad_id).",
                patch(LOSS_REF, ", ignore_index=pad_id)", ")")),
        Mistake("pad_in_mean", "the padding targets are left out of the sum but still counted in the mean: "
                "divide by the number of non-padding targets.",
                patch(LOSS_REF,
                         "    return F.cross_entropy(pred.reshape(-1, pred.shape[-1]), target.reshape(-1), "
                         "ignore_index=pad_id)",
                         "    each = F.cross_entropy(pred.reshape(-1, pred.shape[-1]), target.reshape(-1), "
                         "ignore_index=pad_id, reduction='none')\n"
                         "    return each.sum() / target.numel()")),
    ],
    variants=[
        Variant("log_softmax_mask", '''
def next_token_loss(logits, tokens, pad_id):
    logp = torch.log_softmax(logits[:, :-1], dim=-1)
    target = tokens[:, 1:]
    picked = logp.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    keep = target != pad_id
    return -(picked * keep).sum() / keep.sum()
'''),
        Variant("class_dim", '''
def next_token_loss(logits, tokens, pad_id):
    return F.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:], ignore_index=pad_id)
'''),
    ],
    cases=[],
)


def _tokens(g, B=3, T=7, V=6, pad=5, n_pad=(0, 2, 3)):
    t = torch.randint(0, V - 1, (B, T), generator=g)
    for i, k in enumerate(n_pad[:B]):
        if k:
            t[i, -k:] = pad
    return t


def _loss_case(name, what, pad_rows=(0, 2, 3), left=False, **kw):
    def args(g):
        logits = 2 * torch.randn(3, 7, 6, generator=g)
        t = _tokens(g, n_pad=pad_rows)
        if left:
            t = t.flip(1)
        return (logits, t, 5)
    return Case(name, what, args=args, **kw)


LOSS.cases = [
    _loss_case("no_padding", "B=3, T=7, 6 tokens, no padding", pad_rows=(0, 0, 0)),
    _loss_case("padded", "right padding of 0, 2 and 3 tokens", seed=1),
    _loss_case("left_padded", "left padding", left=True, seed=2),
    _loss_case("float64", "float64, right padding", dtype="float64", seed=3),
    _loss_case("bfloat16", "bfloat16, right padding", dtype="bfloat16", seed=4),
    _loss_case("best_device", "on the best device (CUDA when present), right padding", device="best", seed=5),
    _loss_case("meta", "on the meta device", device="meta"),
]

# ---------------------------------------------------------------- train_step
STEP_REF = CELLS["train_step"]

STEP = Exercise(
    name="train_step",
    cell="train_step",
    given=GIVEN,
    wrap="train_probe",
    reference=STEP_REF,
    mistakes=[
        Mistake("returns_tensor", "train_step should return loss.item() (a Python float), not the loss tensor: a "
                "tensor keeps the whole step's graph (and its memory) alive in a list of losses.",
                patch(STEP_REF, "    return loss.item()", "    return loss")),
        Mistake("no_zero_grad", "the old gradients are not cleared: .backward() ADDS to p.grad, so call "
                "optimizer.zero_grad() before the backward pass of every step.",
                patch(STEP_REF, "    optimizer.zero_grad()                                   # forget the "
                         "previous step's gradients\n", "")),
        Mistake("no_step", "the parameters never change: after backward (and clipping) call optimizer.step().",
                patch(STEP_REF, "    optimizer.step()                                        # p <- p - lr * "
                         "p.grad (for SGD)\n", "")),
        Mistake("no_clip", "the gradient norm is not clipped: call torch.nn.utils.clip_grad_norm_(model.parameters(), "
                "max_norm) between backward() and step().",
                patch(STEP_REF, "    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n", "")),
        Mistake("fixed_max_norm", "the max_norm argument is ignored (a fixed 1.0 is used): clip to the max_norm "
                "that is passed in.",
                patch(STEP_REF, "clip_grad_norm_(model.parameters(), max_norm)",
                         "clip_grad_norm_(model.parameters(), 1.0)")),
    ],
    variants=[
        Variant("manual_clip", '''
def train_step(model, batch, optimizer, loss_fn, max_norm=1.0):
    for p in model.parameters():
        p.grad = None
    loss = loss_fn(model(batch), batch)
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    norm = torch.sqrt(sum((g ** 2).sum() for g in grads))
    scale = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    for g in grads:
        g.mul_(scale)
    optimizer.step()
    return float(loss)
'''),
        Variant("set_to_none", '''
def train_step(model, batch, optimizer, loss_fn, max_norm=1.0):
    model.zero_grad(set_to_none=True)
    logits = model(batch)
    loss = loss_fn(logits, batch)
    loss.backward()
    nn.utils.clip_grad_norm_(list(model.parameters()), max_norm=max_norm)
    optimizer.step()
    return loss.detach().item()
'''),
    ],
    cases=[],
)

V_PROBE = 6


def _step_args(g, lr=0.05, max_norm=1.0, n=3):
    table = torch.randn(V_PROBE, V_PROBE, generator=g)
    batches = [torch.randint(0, V_PROBE, (4, 5), generator=g) for _ in range(n)]
    return (table, batches, lr, max_norm)


# The probe's third value is 1.0 for each loss train_step returned as a Python float (0.0: a tensor or anything
# else): a loss tensor has the right number but breaks the contract, and only that value tells them apart.
_STEP_LABELS = ["losses", "weights after", "the type of each returned loss (a Python float)"]

STEP.cases = [
    Case("three_steps", "three SGD steps on a bigram model, max_norm=1.0", args=lambda g: _step_args(g),
         labels=_STEP_LABELS),
    Case("max_norm", "three SGD steps, max_norm=0.25, lr=0.2", args=lambda g: _step_args(g, lr=0.2, max_norm=0.25),
         labels=_STEP_LABELS, seed=1),
    Case("no_clipping_needed", "three SGD steps with a max_norm no gradient reaches (1e6)",
         args=lambda g: _step_args(g, lr=0.01, max_norm=1e6), labels=_STEP_LABELS, seed=2),
    Case("float64", "float64, max_norm=2.0", args=lambda g: _step_args(g, max_norm=2.0), dtype="float64",
         labels=_STEP_LABELS, seed=3),
    Case("best_device", "on the best device (CUDA when present)", args=lambda g: _step_args(g), device="best",
         labels=_STEP_LABELS, seed=4),
]

# ---------------------------------------------------------------- sample_next
SAMPLE_REF = CELLS["sample_next"]

SAMPLE = Exercise(
    name="sample_next",
    cell="sample_next",
    given=GIVEN,
    wrap="with_seed",
    reference=SAMPLE_REF,
    mistakes=[
        Mistake("temperature_multiplies", "the logits are multiplied by the temperature: divide them "
                "(logits / temperature), so that a low temperature sharpens and a high one flattens.",
                patch(SAMPLE_REF, "scaled = logits / temperature", "scaled = logits * temperature")),
        Mistake("temperature_on_probs", "the temperature is applied to the probabilities: dividing them by a "
                "constant changes nothing once they are renormalised; divide the LOGITS before the softmax.",
                patch(patch(SAMPLE_REF, "scaled = logits / temperature", "scaled = logits"),
                         "probs = torch.softmax(scaled, dim=-1)", "probs = torch.softmax(scaled, dim=-1) / temperature")),
        Mistake("softmax_batch", "the softmax runs over the batch (dim=0): each row of logits (B, V) is one "
                "distribution over the vocabulary, so normalise over the last axis (dim=-1).",
                patch(SAMPLE_REF, "probs = torch.softmax(scaled, dim=-1)", "probs = torch.softmax(scaled, dim=0)")),
        Mistake("top_k_ignored", "top_k is ignored: keep only the k largest logits of each row (the others get "
                "-inf) before the softmax.",
                patch(SAMPLE_REF, "    if top_k is not None:\n", "    if False:\n")),
        Mistake("top_k_keeps_one", "top-k keeps only the largest logit: compare with the k-th largest value "
                "(torch.topk(...).values[:, -1:]), not the largest.",
                patch(SAMPLE_REF, ".values[:, -1:]", ".values[:, :1]")),
    ],
    variants=[
        Variant("kthvalue", '''
def sample_next(logits, temperature=1.0, top_k=None, generator=None):
    if not temperature:
        return torch.max(logits, dim=-1).indices
    z = logits / temperature
    if top_k:
        cut = torch.kthvalue(z, z.shape[-1] - top_k + 1, dim=-1, keepdim=True).values
        z = torch.where(z >= cut, z, torch.full_like(z, -float("inf")))
    p = torch.exp(z - z.max(dim=-1, keepdim=True).values)
    p = p / p.sum(dim=-1, keepdim=True)
    return torch.multinomial(p, 1, generator=generator).squeeze(1)
'''),
        Variant("scatter", '''
def sample_next(logits, temperature=1.0, top_k=None, generator=None):
    if temperature == 0:
        return logits.argmax(-1)
    z = logits / temperature
    if top_k is not None:
        vals, idx = z.topk(top_k, dim=-1)
        z = torch.full_like(z, float("-inf")).scatter(-1, idx, vals)
    return torch.multinomial(F.softmax(z, dim=-1), num_samples=1, generator=generator).view(-1)
'''),
    ],
    cases=[],
)


def _logits(g, B=64, V=10):
    return 1.5 * torch.randn(B, V, generator=g)


SAMPLE.cases = [
    Case("greedy", "temperature=0 (greedy)", args=lambda g: (_logits(g),), kwargs={"temperature": 0.0}),
    Case("temperature", "temperature=0.5, seed 1", args=lambda g: (_logits(g), 1), kwargs={"temperature": 0.5}, seed=1),
    Case("hot", "temperature=2.0, seed 2", args=lambda g: (_logits(g), 2), kwargs={"temperature": 2.0}, seed=2),
    Case("top_k", "top_k=3, temperature=1.0, seed 3", args=lambda g: (_logits(g), 3), kwargs={"top_k": 3}, seed=3),
    Case("top_k_temperature", "top_k=4, temperature=0.7, seed 4", args=lambda g: (_logits(g), 4),
         kwargs={"top_k": 4, "temperature": 0.7}, seed=4),
    Case("float64", "float64, top_k=5, temperature=1.5, seed 5", args=lambda g: (_logits(g), 5),
         kwargs={"top_k": 5, "temperature": 1.5}, dtype="float64", seed=5),
    Case("bfloat16", "bfloat16, greedy", args=lambda g: (_logits(g),), kwargs={"temperature": 0.0}, dtype="bfloat16",
         seed=6),
    Case("best_device", "on the best device (CUDA when present), top_k=1, seed 7", args=lambda g: (_logits(g), 7),
         kwargs={"top_k": 1, "temperature": 0.8}, device="best", seed=7),
    Case("meta", "on the meta device, top_k=3, seed 8", args=lambda g: (_logits(g), 8),
         kwargs={"top_k": 3, "temperature": 0.9}, device="meta"),
]

# ---------------------------------------------------------------- generate
GEN_REF = CELLS["generate"]

GEN = Exercise(
    name="generate",
    cell="generate",
    given=GIVEN,
    wrap="generation_probe",
    reference=GEN_REF,
    mistakes=[
        Mistake("first_position", "the next token is picked from the FIRST position's logits: the prediction for "
                "the next token is at the last position, logits[:, -1].",
                patch(GEN_REF, "pick(logits[:, -1, :])", "pick(logits[:, 0, :])")),
        Mistake("prompt_only", "the model always reads the prompt, not the growing sequence: feed it the tokens "
                "generated so far (prompt plus new tokens).",
                patch(GEN_REF, "logits = model(ids[:, -model.max_len:])", "logits = model(prompt[:, -model.max_len:])")),
        Mistake("crop_start", "past max_len the model is fed the FIRST max_len tokens: keep the LAST ones "
                "(ids[:, -model.max_len:]), which include the newest token.",
                patch(GEN_REF, "ids[:, -model.max_len:]", "ids[:, :model.max_len]")),
        Mistake("no_crop", "the whole sequence is fed once it is longer than the model's max_len: crop it to the "
                "last model.max_len tokens.",
                patch(GEN_REF, "ids[:, -model.max_len:]", "ids"), shows="feed it the last max_len tokens only"),
    ],
    variants=[
        Variant("list", '''
def generate(model, prompt, n_new, pick):
    out = prompt.clone()
    for step in range(n_new):
        window = out[:, max(0, out.shape[1] - model.max_len):]
        nxt = pick(model(window)[:, -1])
        out = torch.cat((out, nxt.unsqueeze(1)), dim=-1)
    return out
'''),
        Variant("preallocated", '''
def generate(model, prompt, n_new, pick):
    B, T0 = prompt.shape
    ids = torch.zeros(B, T0 + n_new, dtype=prompt.dtype, device=prompt.device)
    ids[:, :T0] = prompt
    for t in range(T0, T0 + n_new):
        ids[:, t] = pick(model(ids[:, max(0, t - model.max_len):t])[:, -1])
    return ids
'''),
    ],
    cases=[],
)


def _prompt(g, B=3, T0=3):
    return torch.randint(0, 10, (B, T0), generator=g)


GEN.cases = [
    Case("short", "3 prompts of 3 tokens, 4 new tokens", args=lambda g: (_prompt(g), 4)),
    Case("past_max_len", "2 prompts of 5 tokens, 7 new tokens (past max_len=8)", args=lambda g: (_prompt(g, 2, 5), 7),
         seed=1),
    Case("one_token", "one prompt of 1 token, 6 new tokens", args=lambda g: (_prompt(g, 1, 1), 6), seed=2),
    Case("best_device", "on the best device (CUDA when present), past max_len", device="best",
         args=lambda g: (_prompt(g, 2, 6), 5), seed=3),
    Case("meta", "on the meta device, past max_len", device="meta", args=lambda g: (_prompt(g, 2, 6), 5)),
]

# ---------------------------------------------------------------- cached_attention
CACHE_REF = CELLS["cached_attention"]

CACHE = Exercise(
    name="cached_attention",
    cell="cached_attention",
    reference=CACHE_REF,
    mistakes=[
        Mistake("no_offset", "the causal mask ignores the cached positions: new token i sits at position "
                "T_past + i, so it may see keys 0 … T_past + i (tril with diagonal=T_past).",
                patch(CACHE_REF, ".tril(t_all - t_new)", ".tril()")),
        Mistake("no_mask", "the new tokens see each other's future when several come at once (e.g. the whole "
                "prompt): mask key j > T_past + i.",
                patch(CACHE_REF, "scores.masked_fill(~seen, float(\"-inf\"))", "scores")),
        Mistake("no_scale", "the scores are not divided by √d_k (q.shape[-1] is d_k): the cached path must compute "
                "exactly what the full pass computes.",
                patch(CACHE_REF, " / math.sqrt(q.shape[-1])", "")),
        Mistake("softmax_axis", "the softmax runs over the new queries (dim=-2): each new token's weights over the "
                "cached and new keys must sum to 1 (dim=-1).",
                patch(CACHE_REF, 'float("-inf")), dim=-1)', 'float("-inf")), dim=-2)')),
        Mistake("new_first", "the new keys are put before the cached ones: the cache holds the earlier positions, "
                "so concatenate (cache, new) along the time axis.",
                patch(patch(CACHE_REF, "torch.cat([cache[0], k], dim=-2)", "torch.cat([k, cache[0]], dim=-2)"),
                         "torch.cat([cache[1], v], dim=-2)", "torch.cat([v, cache[1]], dim=-2)")),
    ],
    variants=[
        Variant("sdpa", '''
def cached_attention(q, k, v, cache=None):
    if cache is not None:
        past_k, past_v = cache
        k, v = torch.cat((past_k, k), -2), torch.cat((past_v, v), -2)
    offset = k.shape[-2] - q.shape[-2]
    rows = torch.arange(q.shape[-2], device=q.device)[:, None] + offset
    cols = torch.arange(k.shape[-2], device=q.device)[None, :]
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=cols <= rows)
    return out, (k, v)
'''),
        Variant("einsum_where", '''
def cached_attention(q, k, v, cache=None):
    K = k if cache is None else torch.cat([cache[0], k], dim=2)
    V = v if cache is None else torch.cat([cache[1], v], dim=2)
    past = K.shape[2] - q.shape[2]
    s = torch.einsum("bhid,bhjd->bhij", q, K) * q.shape[-1] ** -0.5
    i = torch.arange(q.shape[2], device=q.device).view(-1, 1)
    j = torch.arange(K.shape[2], device=q.device).view(1, -1)
    s = torch.where(j <= i + past, s, torch.finfo(s.dtype).min)
    return torch.einsum("bhij,bhjd->bhid", s.softmax(-1), V), (K, V)
'''),
    ],
    cases=[],
)


def _qkv(g, B=2, H=2, t_new=3, t_past=0, d=4):
    q, k, v = (torch.randn(B, H, t_new, d, generator=g) for _ in range(3))
    if not t_past:
        return (q, k, v)
    cache = (torch.randn(B, H, t_past, d, generator=g), torch.randn(B, H, t_past, d, generator=g))
    return (q, k, v, cache)


_CL = ["output", "cache"]
CACHE.cases = [
    Case("prefill", "no cache yet, 4 new tokens (the prompt)", args=lambda g: _qkv(g, t_new=4), labels=_CL),
    Case("decode", "4 cached tokens, 1 new token", args=lambda g: _qkv(g, t_new=1, t_past=4), labels=_CL, seed=1),
    Case("chunk", "3 cached tokens, 2 new tokens at once", args=lambda g: _qkv(g, t_new=2, t_past=3), labels=_CL,
         seed=2),
    Case("float64", "float64, 5 cached tokens, 3 new", args=lambda g: _qkv(g, t_new=3, t_past=5), dtype="float64",
         labels=_CL, seed=3),
    Case("bfloat16", "bfloat16, 2 cached tokens, 2 new", args=lambda g: _qkv(g, t_new=2, t_past=2), dtype="bfloat16",
         labels=_CL, seed=4),
    Case("best_device", "on the best device (CUDA when present), 3 cached, 2 new", device="best",
         args=lambda g: _qkv(g, t_new=2, t_past=3), labels=_CL, seed=5),
    Case("meta", "on the meta device, 3 cached, 2 new", device="meta", args=lambda g: _qkv(g, t_new=2, t_past=3),
         labels=_CL),
]

# ---------------------------------------------------------------- fixed_cached_sdpa (find the bug)
# The student's notebook shows the ``is_causal`` mistake's code in the solution cell (``handout``); the source
# keeps the fix.  Every case has tokens in the cache: with T_past = 0 the top-left and bottom-right masks
# coincide, so a prefill case would give the unfixed handout its points.
FIXED_REF = CELLS["fixed_cached_sdpa"]
_FIXED_MASK_LINES = ("    t_new, t_all = q.shape[2], k.shape[2]\n"
                     "    allowed = torch.ones(t_new, t_all, dtype=torch.bool, device=q.device).tril(t_all - t_new)"
                     "   # bottom-right\n")
FIXED_HANDOUT = patch(FIXED_REF, _FIXED_MASK_LINES, "", "attn_mask=allowed)  ", "is_causal=True)     ")

FIXED = Exercise(
    name="fixed_cached_sdpa",
    cell="fixed_cached_sdpa",
    reference=FIXED_REF,
    handout="is_causal",
    mistakes=[
        # The handout's own bug: its message says what the student can observe, not the line that fixes it.
        Mistake("is_causal", "with tokens already in the cache, the new tokens see too few keys: during decoding "
                "the one new token reads only key 0 (the prompt's first token) instead of all T_past + 1 keys, and "
                "new token i of a chunk reads keys 0 … i. With an empty cache the output is right.",
                FIXED_HANDOUT),
        Mistake("no_mask", "the mask is gone: one new token may indeed see every key, but when several arrive at "
                "once (the prompt, a chunk) each sees the later ones. Keep a causal mask, shifted by T_past.",
                patch(FIXED_HANDOUT, ", is_causal=True)", ")")),
        Mistake("inverted_mask", "the mask is inverted: for F.scaled_dot_product_attention a bool attn_mask is True "
                "where a query MAY attend (as in section 03).",
                patch(FIXED_REF, "attn_mask=allowed)", "attn_mask=~allowed)")),
        Mistake("float_mask", "a 0/1 float mask is ADDED to the scores, so it blocks nothing: pass the bool mask "
                "(True = may attend), or 0 / -inf as floats.",
                patch(FIXED_REF, "attn_mask=allowed)", "attn_mask=allowed.to(q.dtype))")),
    ],
    variants=[
        Variant("explicit_softmax", '''
def fixed_cached_sdpa(q, k, v, cache=None):
    if cache is not None:
        k, v = torch.cat((cache[0], k), 2), torch.cat((cache[1], v), 2)
    past = k.shape[2] - q.shape[2]
    i = torch.arange(q.shape[2], device=q.device)[:, None]
    j = torch.arange(k.shape[2], device=q.device)[None, :]
    s = torch.einsum("bhid,bhjd->bhij", q, k) / math.sqrt(q.shape[-1])
    return s.masked_fill(j > i + past, float("-inf")).softmax(-1) @ v, (k, v)
'''),
        Variant("lower_right_bias", '''
from torch.nn.attention.bias import causal_lower_right


def fixed_cached_sdpa(q, k, v, cache=None):
    if cache is not None:
        k = torch.cat([cache[0], k], dim=2)
        v = torch.cat([cache[1], v], dim=2)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(q.shape[2], k.shape[2]))
    return out, (k, v)
'''),
    ],
    cases=[
        Case("decode", "4 cached tokens, 1 new token (a decoding step)", args=lambda g: _qkv(g, t_new=1, t_past=4),
             labels=_CL, seed=11),
        Case("chunk", "3 cached tokens, 2 new tokens at once", args=lambda g: _qkv(g, t_new=2, t_past=3), labels=_CL,
             seed=12),
        Case("long_chunk", "5 cached tokens, 3 new, 4 heads", args=lambda g: _qkv(g, H=4, t_new=3, t_past=5),
             labels=_CL, seed=13),
        Case("best_device", "on the best device (CUDA when present), 2 cached, 1 new", device="best",
             args=lambda g: _qkv(g, t_new=1, t_past=2), labels=_CL, seed=14),
    ],
)

# ---------------------------------------------------------------- predicted_cache_mib (predict, then measure)
PREDICT_REF = CELLS["predicted_cache_mib"]

PREDICT = Exercise(
    name="predicted_cache_mib",
    cell="predicted_cache_mib",
    reference=PREDICT_REF,
    mistakes=[
        Mistake("half", "half the size: the cache holds the values as well as the keys (and each float16 number "
                "is 2 bytes).", "predicted_cache_mib = 32 * 4096 * 128 * 32 * 2 / 2 ** 20"),
        Mistake("one_block", "that is one block's cache: each of the 32 blocks keeps its own keys and values.",
                "predicted_cache_mib = 2 * 32 * 4096 * 128 * 2 / 2 ** 20"),
        Mistake("float32", "float16 takes 2 bytes a number, not 4.",
                "predicted_cache_mib = 2 * 32 * 4096 * 128 * 32 * 4 / 2 ** 20"),
        Mistake("d_model_per_head", "d_k = 128 is per head (32 heads × 128 = d_model = 4096 in all): counting "
                "d_model for every head counts 32 times too much.",
                "predicted_cache_mib = 2 * 32 * 4096 * 4096 * 32 * 2 / 2 ** 20"),
    ],
    variants=[Variant("literal", "predicted_cache_mib = 2048"),
              Variant("bytes_then_mib", "cache_bytes = 2 * 32 * 32 * 128 * 4096 * 2\npredicted_cache_mib = cache_bytes / 1024 / 1024")],
    cases=[Case("value", "the KV cache of Llama-2-7B for 4096 tokens, in MiB", kind="value", api="any", atol=0.0,
                rtol=0.02,
                hint="Per block the cache holds keys AND values, each (B, h, T, d_k): 2 · 32 · 4096 · 128 numbers "
                     "for one sequence; times 32 blocks; times 2 bytes (float16); divided by 2^20 bytes per MiB.",
                mistake_values={"megabytes": ("that is in MB (10^6 bytes): the answer is asked in MiB (2^20 "
                                              "bytes).", 2 * 32 * 4096 * 128 * 32 * 2 / 1e6),
                                "gib": ("that is in GiB: the answer is asked in MiB (2^20 bytes).", 2.0)})],
)

POINTS = {   # what each hidden check is worth; a hidden cell's points are the sum of its checks'
    "next_token_loss": {"no_padding": 1.5, "padded": 1.5, "left_padded": 1.5, "float64": 0.125, "bfloat16": 0.125,
                        "best_device": 0.125, "meta": 0.125},
    "train_step": {"three_steps": 1.625, "max_norm": 1.625, "no_clipping_needed": 1.5, "float64": 0.125,
                   "best_device": 0.125},
    "sample_next": {"greedy": 1, "temperature": 0.875, "hot": 0.875, "top_k": 0.875, "top_k_temperature": 0.875,
                    "float64": 0.125, "bfloat16": 0.125, "best_device": 0.125, "meta": 0.125},
    "generate": {"short": 1.25, "past_max_len": 1.25, "one_token": 1.25, "best_device": 0.125, "meta": 0.125},
    "cached_attention": {"prefill": 1.875, "decode": 1.875, "chunk": 1.75, "float64": 0.125, "bfloat16": 0.125,
                         "best_device": 0.125, "meta": 0.125},
    "fixed_cached_sdpa": {"decode": 1.375, "chunk": 1.25, "long_chunk": 1.25, "best_device": 0.125},
    "predicted_cache_mib": {"value": 2},
}

SECTION = Section("08_train_and_generate", [LOSS, STEP, SAMPLE, GEN, CACHE, FIXED, PREDICT], points=POINTS)
