"""Build source/08_train_and_generate/08_train_and_generate.ipynb: ``.venv/bin/python -m tools.authoring.s08_train_and_generate``.

Solution cells and given code come from graders/s08_train_and_generate.py.
"""
from graders.s08_train_and_generate import (CACHE_REF, GEN_REF, LOSS_REF, MODEL_GIVEN, PROBES_GIVEN, SAMPLE_REF,
                                            STEP_REF, TASK_GIVEN)
from tools.authoring import hidden, setup_source
from tools.nbauthor import Notebook

SECTION = "08_train_and_generate"
nb = Notebook()

nb.md("""
# 08 · Train a tiny model, then let it write

Sections 02–06 built every piece of a decoder-only Transformer; this one makes one *learn* and *write*. In
this section you will

* write the next-token loss (graded) and one training step (graded), then train a tiny causal model on the
  CPU in seconds, with a progress bar and a loss curve;
* measure its accuracy and look at its attention maps: the task has a known right pattern, so you can check
  whether the model found it — and compare with the untrained model (your written answer, graded by hand);
* write greedy, temperature and top-k sampling (graded) and the generation loop (graded);
* write attention with a KV cache (graded), check that it gives the same logits as the full pass, and
  measure how much faster it generates.
""")

nb.setup("setup", setup_source(SECTION, "import time\nimport matplotlib.pyplot as plt\nfrom tqdm.auto import tqdm"))

nb.md("""
## 1 · The task: reverse a number

Each training sequence is a number of 3 to 5 digits, a separator `|`, then the same digits reversed:
`..472|274..` (`.` is padding). Padding goes on the **left** of the number and on the right of the answer,
so the separator always sits at position 5 and every sequence has 11 tokens. Run the cell with the task's
helpers: `reversal_batch(batch_size, generator)` draws a batch of token ids, `show(ids)` prints one row.
""")

nb.setup("given_task", "# Given: the toy task (just run this cell).\n" + TASK_GIVEN)

nb.code("""
g = torch.Generator().manual_seed(0)
batch = reversal_batch(4, g)                                  # (B, SEQ_LEN)
print("batch", tuple(batch.shape))
for row in batch:
    print(show(row), row.tolist())
""")

nb.md("""
Why this task? Because we know what a good model **must** attend to. A decoder-only model reads left to
right and, at every position, predicts the *next* token. At the separator (position 5) the next token is the
last digit of the number, at position 4; at position 6 it is the digit at position 3, and so on: the query
at position `p` needs the key at position `9 − p`. If attention does its job, the trained model's weight
maps show an **anti-diagonal** in the lower-left corner. The prompt digits themselves are random, so no
model can predict them: the loss has a floor above 0, and we will measure accuracy on the answer only.
""")

nb.code("""
for p in range(N_DIGITS, 2 * N_DIGITS):
    print(f"query at position {p:2d} predicts position {p + 1:2d} -> must read position {2 * N_DIGITS - 1 - p}")
""")

nb.md("""
## 2 · The model

The given `TinyGPT` is a decoder-only Transformer in the style of section 06: token and learned position
embeddings, Pre-LN blocks (here 1 block with 2 heads, `d_model = 32`), a final LayerNorm and a linear head
to 12 logits (10 digits, `|`, padding). Its `CausalSelfAttention` computes the weights explicitly and keeps
the last ones in `.weights` (shape `(B, h, T, T)`) so that we can plot them. Ignore `caches` and `attend`
for now: section 8 uses them. The next cell holds small wrappers that the hidden tests use; just run it.
""")

nb.setup("given_model", "# Given: the model (just run this cell).\n" + MODEL_GIVEN)
nb.setup("given_probes", PROBES_GIVEN)

nb.code("""
torch.manual_seed(0)
model = TinyGPT()                                             # 1 block, 2 heads, d_model 32, max_len 16
print(f"{sum(p.numel() for p in model.parameters()):,} parameters")
logits = model(batch)                                         # (B, T, vocab)
print("logits", tuple(logits.shape), "| attention weights", tuple(model.attns[0].weights.shape))
""")

nb.md("""
## 3 · The next-token loss

The model returns logits at every position; position `t` is trained to predict token `t + 1`. So the
predictions are `logits[:, :-1]` (the last position has nothing to predict) and the targets are
`tokens[:, 1:]` — the same sequence shifted by one. The loss is the cross-entropy, averaged over the
targets that are **not padding**: a padded slot is not a token to learn. An untrained model spreads its
probability over all 12 tokens, so its loss starts near ln 12; a digit that is truly random costs ln 10
even for a perfect model.
""")

nb.code("""
print(f"ln 12 = {math.log(12):.3f}, ln 10 = {math.log(10):.3f}")
tokens = batch[:1]                                            # (1, T)
print("inputs :", show(tokens[0, :-1]))
print("targets:", show(tokens[0, 1:]), "(the same row shifted left by one)")
""")

nb.md("""
### Exercise 1 (5 points) · `next_token_loss(logits, tokens, pad_id)`

`logits` is `(B, T, V)`, `tokens` is `(B, T)` (integer ids). Return the mean cross-entropy of
`logits[:, :-1]` against `tokens[:, 1:]` over the targets that are not `pad_id`, as a 0-d tensor on the
logits' device (`F.cross_entropy` takes `(N, V)` logits and `(N,)` targets, and has an `ignore_index`).
""")

nb.solution("next_token_loss", LOSS_REF)

nb.tests("test_loss_sanity", 0, """
_logits = torch.zeros(2, 4, 12)                               # uniform predictions
_tokens = torch.tensor([[1, 2, 3, PAD], [4, 5, PAD, PAD]])
_loss = next_token_loss(_logits, _tokens, PAD)
assert isinstance(_loss, torch.Tensor) and _loss.dim() == 0, "return a 0-d tensor (a single number)"
assert abs(_loss.item() - math.log(12)) < 1e-5, "uniform logits over 12 tokens should give ln 12"
print("sanity ok")
""")

nb.tests("test_loss_values", 3, hidden(
    'GRADER.check("next_token_loss", "no_padding", next_token_loss)',
    'GRADER.check("next_token_loss", "padded", next_token_loss)',
    'GRADER.check("next_token_loss", "left_padded", next_token_loss)',
))

nb.tests("test_loss_dtypes_devices", 2, hidden(
    'GRADER.check("next_token_loss", "float64", next_token_loss)',
    'GRADER.check("next_token_loss", "bfloat16", next_token_loss)',
    'GRADER.check("next_token_loss", "best_device", next_token_loss)',
    'GRADER.check("next_token_loss", "meta", next_token_loss)',
))

nb.code("""
print(f"untrained model, one batch: loss {next_token_loss(model(batch), batch, PAD).item():.3f}")
""")

nb.md("""
## 4 · One training step

Training repeats one step: forget the old gradients, compute the loss on a batch, back-propagate, limit the
size of the gradient, update the parameters. Three details decide whether it works:

* `loss.backward()` **adds** to each parameter's `.grad`, so the previous step's gradients must be cleared
  first (`optimizer.zero_grad()`);
* gradient clipping rescales all gradients together when their overall norm exceeds `max_norm`
  (`torch.nn.utils.clip_grad_norm_`), which keeps one unlucky batch from throwing the model far away;
* the loss is returned as a Python `float` (`loss.item()`): keeping the tensor would keep its whole graph.

### Exercise 2 (5 points) · `train_step(model, batch, optimizer, loss_fn, max_norm=1.0)`

Do one step in this order: `optimizer.zero_grad()`; `loss = loss_fn(model(batch), batch)`;
`loss.backward()`; `torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)`; `optimizer.step()`.
Return the loss (computed before the update) as a Python float. Use the `loss_fn` you are given, not
`next_token_loss` directly: the training loop below passes `next_token_loss` in.
""")

nb.solution("train_step", STEP_REF)

nb.tests("test_step_sanity", 0, """
torch.manual_seed(0)
_m = TinyGPT()
_opt = torch.optim.SGD(_m.parameters(), lr=0.1)
_b = reversal_batch(8, torch.Generator().manual_seed(0))
_before = _m.head.weight.detach().clone()
_loss = train_step(_m, _b, _opt, lambda logits, ids: logits.pow(2).mean())
assert type(_loss) is float, "return the loss as a Python float (loss.item())"
assert not torch.equal(_before, _m.head.weight), "the parameters did not change: call optimizer.step()"
print("sanity ok")
""")

nb.tests("test_step_update", 4, hidden(
    'GRADER.check("train_step", "three_steps", train_probe(train_step))',
    'GRADER.check("train_step", "max_norm", train_probe(train_step))',
    'GRADER.check("train_step", "no_clipping_needed", train_probe(train_step))',
))

nb.tests("test_step_dtypes_devices", 1, hidden(
    'GRADER.check("train_step", "float64", train_probe(train_step))',
    'GRADER.check("train_step", "best_device", train_probe(train_step))',
))

nb.md("""
## 5 · Training

400 steps of 64 fresh sequences each, with AdamW. A model this small trains fastest on one CPU thread
(several threads spend more time coordinating than computing), so the next cell asks PyTorch for one.
The progress bar comes from `tqdm`; the loss of every step is kept for the curve.
""")

nb.code("""
torch.set_num_threads(1)
torch.manual_seed(0)
model = TinyGPT()
untrained = TinyGPT()
untrained.load_state_dict(model.state_dict())                 # a copy of the starting point, for later
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
data = torch.Generator().manual_seed(1)
losses = []
start = time.perf_counter()
model.train()
for step in tqdm(range(400), desc="training"):
    batch = reversal_batch(64, data)                          # (64, SEQ_LEN)
    losses.append(train_step(model, batch, optimizer, lambda logits, ids: next_token_loss(logits, ids, PAD)))
model.eval()
print(f"400 steps in {time.perf_counter() - start:.1f} s; loss {losses[0]:.3f} at the start, "
      f"{np.mean(losses[-50:]):.3f} over the last 50 steps")
""")

nb.md("""
The curve drops fast and then flattens. It cannot reach 0: the prompt digits are random. The next cell
computes that floor for a held-out batch — every prompt digit that is a target costs ln 10 (the very first
token of a sequence is never a target), the separator and the answer digits can cost 0 — and splits the
trained model's loss into the answer part and the rest.
""")

nb.code("""
test = reversal_batch(1000, torch.Generator().manual_seed(123))   # sequences never seen in training
random_targets = (test[:, 1:N_DIGITS] != PAD).sum()              # prompt digits that are targets
all_targets = (test[:, 1:] != PAD).sum()                           # every target the loss counts
floor = random_targets * math.log(10) / all_targets
with torch.no_grad():
    logits = model(test)                                           # (1000, T, V)
answer = test.clone()
answer[:, :N_DIGITS + 1] = PAD                                     # keep only the answer tokens as targets
print(f"floor of the loss: {floor:.3f}")
print(f"trained loss on all targets: {next_token_loss(logits, test, PAD).item():.3f}, "
      f"on the answer digits only: {next_token_loss(logits, answer, PAD).item():.4f}")
pred = logits[:, N_DIGITS:-1].argmax(-1)                           # (1000, N_DIGITS): predictions of the answer
target = test[:, N_DIGITS + 1:]
real = target != PAD
print(f"answer digits right: {(pred == target)[real].float().mean().item():.1%}; "
      f"numbers fully right: {((pred == target) | ~real).all(1).float().mean().item():.1%}")

fig, ax = plt.subplots(figsize=(6, 3))
ax.plot(losses, lw=1, label="training loss")
ax.axhline(float(floor), color="gray", ls="--", label="floor (random prompt digits)")
ax.set_xlabel("step"); ax.set_ylabel("loss"); ax.set_title("Training loss"); ax.legend()
fig.tight_layout()
""")

nb.md("""
## 6 · What did attention learn?

Plot both heads of the trained model for one test sequence, next to the same heads before training. Rows
are queries, columns keys; the causal mask leaves the upper triangle empty.
""")

nb.code("""
example = test[:1]                                                  # (1, T)
labels = list(show(example[0]))
fig, axes = plt.subplots(2, 2, figsize=(10, 9))
for row, (name, m) in enumerate([("trained", model), ("untrained", untrained)]):
    with torch.no_grad():
        m(example)
    for h in range(2):
        attention_heatmap(m.attns[0].weights[0, h], keys=labels, queries=labels, ax=axes[row, h],
                          title=f"{name}, head {h}", colorbar=False)
fig.tight_layout()
""")

nb.md("""
A picture can fool the eye, so measure it. For every query that predicts an answer digit (positions 5 to
9, when the next token is not padding), take the weight it puts on the mirrored key `9 − p`, and average
over the 1000 test sequences, per head. Compare with the trained model's heads, the untrained ones, and a
query that spreads its weight evenly over the keys it may see. The last column counts how often the
mirrored digit is the head's single strongest key.
""")

nb.code("""
def mirror_stats(m, ids):
    \"\"\"Per head: mean weight on the mirrored key, and how often it is the strongest key.\"\"\"
    with torch.no_grad():
        m(ids)
    w = m.attns[0].weights                                          # (B, h, T, T)
    p = torch.arange(N_DIGITS, 2 * N_DIGITS)                        # the answer-predicting queries
    rows = w[:, :, p, :]                                            # (B, h, 5, T)
    on_mirror = rows[:, :, torch.arange(len(p)), 2 * N_DIGITS - 1 - p]   # (B, h, 5)
    strongest = rows.argmax(-1) == (2 * N_DIGITS - 1 - p)           # (B, h, 5)
    valid = (ids[:, p + 1] != PAD)[:, None, :].expand_as(on_mirror)    # the next token is a digit
    return [(on_mirror[:, h][valid[:, h]].mean().item(), strongest[:, h][valid[:, h]].float().mean().item())
            for h in range(w.shape[1])]

uniform = (1 / (torch.arange(N_DIGITS, 2 * N_DIGITS) + 1.0)).mean().item()
print(f"{'':10s} {'head':>4s} {'weight on mirror':>17s} {'mirror strongest':>17s}")
for name, m in [("trained", model), ("untrained", untrained)]:
    for h, (weight, top) in enumerate(mirror_stats(m, test)):
        print(f"{name:10s} {h:4d} {weight:17.2f} {top:17.1%}")
print(f"{'uniform':10s} {'':4s} {uniform:17.2f}")
""")

nb.md("""
### Your analysis (3 points, graded by hand)

In 3–5 sentences, using the numbers **your** notebook printed above: what does each head of the trained
model attend to when it predicts an answer digit, and how does that compare with the same head before
training and with the uniform spread? Does the trained pattern match the anti-diagonal the task needs?
Say one thing these weights do *not* tell you about how the model gets the answer right.
""")

nb.manual("analysis", 3, r"""
### BEGIN SOLUTION
**Rubric (3 points).** Grade against the student's own printout: their run's numbers may differ.

* **1 point — the trained heads, with numbers.** Quotes the printed weight on the mirrored key (and/or the
  share of queries where it is the strongest key) for each trained head, and says which head(s) follow the
  anti-diagonal `p → 9 − p`. A head that the printout shows does *not* follow it must not be described as
  doing so (with this notebook's seed both heads usually do, one of them sometimes less on the last digit).
* **1 point — the comparison.** Compares with the untrained heads and the uniform spread using the printed
  numbers (untrained ≈ uniform: close to the printed uniform value, the mirror rarely the strongest key),
  and concludes that training created the pattern. A claim the printout contradicts: 0.
* **1 point — a limit.** Names one thing the weights do not show, e.g. what the values carry (the digit's
  identity vs its position), the role of the MLP and the residual stream, that high weight is not proof
  the model *uses* that key (an ablation would test it), or that this holds for this task and seed only.

*Sample answer (the student quotes their own printed numbers where the brackets are):* "After training,
both heads put almost all of their weight on the mirrored digit: head 0 averages [printed weight] and
picks it as the strongest key for [printed share] of the queries, head 1 likewise. Before training the
same heads gave it about what a uniform spread gives ([printed untrained] vs [printed uniform]) and it was
rarely their strongest key, so the anti-diagonal was learned. The weights show where each query reads,
not what the value vectors carry or how the MLP turns that into the logit; zeroing a head and
re-measuring accuracy would show whether the model needs it."
### END SOLUTION
""")

nb.md(r"""
## 7 · Choosing the next token

The model gives logits for the next token; a *decoding rule* turns them into one token id.

* **Greedy**: always the most likely token (`argmax`). Deterministic; can repeat itself in long texts.
* **Temperature** $\tau$: divide the logits by $\tau$ before the softmax. $\tau < 1$ sharpens the
  distribution (towards greedy), $\tau > 1$ flattens it (more surprising tokens). $\tau = 0$ means greedy.
* **Top-k**: keep only the $k$ largest logits (the rest get $-\infty$), then sample: the long tail of
  unlikely tokens can never be drawn.

Sampling uses random numbers. To make it reproducible — and gradeable — every draw takes a
`torch.Generator`: two generators seeded alike give the same tokens.
""")

nb.code("""
logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0])             # (V,): one position's logits
for tau in [0.5, 1.0, 2.0]:
    print(f"temperature {tau}: probabilities", np.round(torch.softmax(logits / tau, -1).numpy(), 3))
top2 = logits.masked_fill(logits < torch.topk(logits, 2).values[-1], float("-inf"))
print("top-2 at temperature 1:  probabilities", np.round(torch.softmax(top2, -1).numpy(), 3))
""")

nb.md("""
### Exercise 3 (5 points) · `sample_next(logits, temperature=1.0, top_k=None, generator=None)`

`logits` is `(B, V)`; return a `(B,)` tensor of token ids (int64, on the logits' device).

* `temperature == 0`: greedy, `logits.argmax(dim=-1)`.
* Otherwise divide the logits by `temperature`; if `top_k` is given, set every logit below the row's k-th
  largest to `-inf`; softmax; then draw **exactly** with
  `torch.multinomial(probs, num_samples=1, generator=generator)` (shape `(B, 1)`) and drop the last axis.
  The hidden tests pass seeded generators and compare the tokens drawn, so use this one call.
""")

nb.solution("sample_next", SAMPLE_REF)

nb.tests("test_sample_sanity", 0, """
_l = torch.tensor([[0.0, 3.0, 1.0], [2.0, 0.0, 1.0]])
_g = sample_next(_l, temperature=0)
assert _g.shape == (2,) and _g.dtype == torch.int64, "return one int64 token id per row: shape (B,)"
assert _g.tolist() == [1, 0], "temperature 0 should pick the largest logit of each row"
_a = sample_next(_l.repeat(50, 1), generator=torch.Generator().manual_seed(0))
_b = sample_next(_l.repeat(50, 1), generator=torch.Generator().manual_seed(0))
assert torch.equal(_a, _b), "two generators with the same seed must give the same tokens: pass generator on"
assert (sample_next(_l.repeat(50, 1), top_k=1, generator=torch.Generator().manual_seed(1)) == _g.repeat(50)).all(), \\
    "top_k=1 must always give the largest logit"
print("sanity ok")
""")

nb.tests("test_sample_values", 3, hidden(
    'GRADER.check("sample_next", "greedy", with_seed(sample_next))',
    'GRADER.check("sample_next", "temperature", with_seed(sample_next))',
    'GRADER.check("sample_next", "hot", with_seed(sample_next))',
    'GRADER.check("sample_next", "top_k", with_seed(sample_next))',
    'GRADER.check("sample_next", "top_k_temperature", with_seed(sample_next))',
))

nb.tests("test_sample_dtypes_devices", 2, hidden(
    'GRADER.check("sample_next", "float64", with_seed(sample_next))',
    'GRADER.check("sample_next", "bfloat16", with_seed(sample_next))',
    'GRADER.check("sample_next", "best_device", with_seed(sample_next))',
    'GRADER.check("sample_next", "meta", with_seed(sample_next))',
))

nb.md("""
How often is each of the five tokens drawn, in 10,000 draws, under each rule?
""")

nb.code("""
many = logits.repeat(10_000, 1)                                 # (10000, V)
for name, options in [("greedy", dict(temperature=0)), ("temperature 0.5", dict(temperature=0.5)),
                      ("temperature 2.0", dict(temperature=2.0)), ("top-2", dict(top_k=2))]:
    drawn = sample_next(many, generator=torch.Generator().manual_seed(0), **options)
    print(f"{name:16s}", torch.bincount(drawn, minlength=5).tolist())
""")

nb.md("""
## 8 · The generation loop

Generating is a loop: run the model on the tokens so far, take the logits of the **last** position, pick a
token, append it, repeat. A model with learned positions can read at most `max_len` tokens, so a long
sequence is cropped to its last `max_len` tokens before each call (the given model raises a `ValueError`
if it gets more).

### Exercise 4 (4 points) · `generate(model, prompt, n_new, pick)`

`prompt` is `(B, T0)` token ids; `model(ids)` returns `(B, T, V)` logits and has `model.max_len`; `pick`
maps the last position's logits `(B, V)` to `(B,)` token ids (e.g. a `sample_next` with fixed options).
Append `n_new` tokens one at a time, feeding the model `ids[:, -model.max_len:]`, and return all
`(B, T0 + n_new)` ids, prompt first.
""")

nb.solution("generate", GEN_REF)

nb.tests("test_generate_sanity", 0, """
torch.manual_seed(0)
_m = TinyGPT(max_len=6).eval()
_p = torch.tensor([[1, 2, 3], [4, 5, 6]])
with torch.no_grad():
    _out = generate(_m, _p, 5, lambda last: last.argmax(-1))
assert _out.shape == (2, 8), "return the prompt and the n_new new tokens: (B, T0 + n_new)"
assert torch.equal(_out[:, :3], _p), "the output must start with the prompt"
print("sanity ok")
""")

nb.tests("test_generate_values", 3, hidden(
    'GRADER.check("generate", "short", generation_probe(generate))',
    'GRADER.check("generate", "past_max_len", generation_probe(generate))',
    'GRADER.check("generate", "one_token", generation_probe(generate))',
))

nb.tests("test_generate_devices", 1, hidden(
    'GRADER.check("generate", "best_device", generation_probe(generate))',
    'GRADER.check("generate", "meta", generation_probe(generate))',
))

nb.md("""
Now let the trained model reverse numbers it has never seen: the prompt is everything up to and including
the separator, and it writes 5 tokens. Only the first n tokens after `|` are scored, n being the number's
length (the model was never trained on what follows them). Greedy decoding against sampling at a high
temperature with top-3: how often does a less likely digit win, and how many numbers survive it?
""")

nb.code("""
prompts = test[:, :N_DIGITS + 1]                                  # (1000, 6): padding, digits, separator
real = test[:, N_DIGITS + 1:] != PAD                              # (1000, 5): the scored answer tokens
dice = torch.Generator().manual_seed(0)
rules = {"greedy": lambda last: sample_next(last, temperature=0),
         "temperature 3, top-3": lambda last: sample_next(last, 3.0, 3, dice)}
written = {}
with torch.no_grad():
    for name, pick in rules.items():
        written[name] = generate(model, prompts, N_DIGITS, pick)  # (1000, SEQ_LEN)
        wrong = (written[name][:, N_DIGITS + 1:] != test[:, N_DIGITS + 1:]) & real
        print(f"{name:21s}: {(~wrong.any(1)).float().mean().item():.1%} of the 1000 numbers reversed correctly, "
              f"{wrong.sum().item()} wrong digits")
for i in range(4):
    n = int((prompts[i] < 10).sum())                              # how many digits this number has
    scored = slice(N_DIGITS + 1, N_DIGITS + 1 + n)
    print(f"{show(prompts[i]):>8s}", "  ".join(f"{name}: {show(out[i, scored])}" for name, out in written.items()))
""")

nb.md(r"""
## 9 · The KV cache

The loop above re-runs the model on the whole sequence for every new token, although the keys and values
of the earlier tokens never change (the mask stops them from seeing the new ones). A **KV cache** keeps
them: after the prompt has been read once, each step feeds only the newest token, computes its query, key
and value, appends the key and value to the cache, and attends over everything cached: each step does
the work of one token instead of re-doing all the tokens so far.

The one subtle point is the mask. If `T_past` tokens are cached and `T_new` arrive at once (the whole
prompt, or a chunk), new token `i` sits at position `T_past + i` and may see keys `0 … T_past + i`:
a causal mask shifted right by `T_past`.

### Exercise 5 (6 points) · `cached_attention(q, k, v, cache=None)`

`q`, `k`, `v` are the new tokens' `(B, h, T_new, d_k)`; `cache` is `None` or a tuple `(K_past, V_past)`
of `(B, h, T_past, d_k)` tensors. Concatenate the cache and the new keys (and values) along the time axis
(old first), compute scaled dot-product attention of the new queries over all of them with the shifted
causal mask, and return `(output, (K, V))`: the output `(B, h, T_new, d_k)` and the grown cache,
`(B, h, T_past + T_new, d_k)` each. The given model calls it as `attend(q, k, v, cache)`.
""")

nb.solution("cached_attention", CACHE_REF)

nb.tests("test_cache_sanity", 0, """
torch.manual_seed(0)
_q, _k, _v = torch.randn(3, 1, 2, 5, 4).unbind(0)             # each (B=1, h=2, T=5, d_k=4)
_full, (_K, _V) = cached_attention(_q, _k, _v)
assert _full.shape == (1, 2, 5, 4) and _K.shape == (1, 2, 5, 4), "output (B, h, T_new, d_k), cache (B, h, T, d_k)"
_a, _c = cached_attention(_q[:, :, :3], _k[:, :, :3], _v[:, :, :3])
_b, _c = cached_attention(_q[:, :, 3:], _k[:, :, 3:], _v[:, :, 3:], _c)
assert _c[0].shape == (1, 2, 5, 4), "the returned cache must hold the old and the new keys"
assert torch.allclose(torch.cat([_a, _b], dim=2), _full, atol=1e-5), \\
    "3 tokens then 2 more (with the cache) must give the same output as all 5 at once"
print("sanity ok")
""")

nb.tests("test_cache_values", 4, hidden(
    'GRADER.check("cached_attention", "prefill", cached_attention)',
    'GRADER.check("cached_attention", "decode", cached_attention)',
    'GRADER.check("cached_attention", "chunk", cached_attention)',
))

nb.tests("test_cache_dtypes_devices", 2, hidden(
    'GRADER.check("cached_attention", "float64", cached_attention)',
    'GRADER.check("cached_attention", "bfloat16", cached_attention)',
    'GRADER.check("cached_attention", "best_device", cached_attention)',
    'GRADER.check("cached_attention", "meta", cached_attention)',
))

nb.md("""
Plug it into the trained model (`model(ids, caches, attend=cached_attention)` returns the logits of the new
tokens and the caches of every block): read the first 6 tokens of some test sequences at once, then feed
the other 5 one at a time. The logits must equal the full pass's, up to float32 rounding.
""")

nb.code("""
ids = test[:8]                                                     # (8, T)
with torch.no_grad():
    full = model(ids)                                              # (8, T, V)
    first, caches = model(ids[:, :6], None, attend=cached_attention)   # (8, 6, V): the prompt at once
    steps = [first]
    for t in range(6, ids.shape[1]):
        one, caches = model(ids[:, t:t + 1], caches, attend=cached_attention)   # (8, 1, V)
        steps.append(one)
cached = torch.cat(steps, dim=1)                                   # (8, T, V)
print("cache holds", tuple(caches[0][0].shape), "keys per block")
print(f"largest |cached - full| logit difference: {(cached - full).abs().max().item():.1e}")
""")

nb.md("""
Now the speed. A given greedy loop with the cache (the prompt read once, then one token per step) against
your `generate`, which re-reads everything, on a larger untrained `TinyGPT` (2 blocks, 4 heads,
`d_model = 64`) writing 200 tokens after an 8-token prompt, 2 sequences at once.
""")

nb.code("""
def generate_cached(model, prompt, n_new, attend):
    \"\"\"Greedy generation with a KV cache: the prompt once, then only the newest token per step.\"\"\"
    out = [prompt]
    logits, caches = model(prompt, None, attend=attend)            # (B, T0, V)
    for _ in range(n_new):
        newest = logits[:, -1].argmax(-1, keepdim=True)            # (B, 1)
        out.append(newest)
        logits, caches = model(newest, caches, attend=attend)      # (B, 1, V)
    return torch.cat(out, dim=1)

torch.manual_seed(1)
big = TinyGPT(d_model=64, n_heads=4, n_layers=2, max_len=256).eval()
prompt = torch.randint(0, 10, (2, 8))                              # (2, 8)
timings = {}
with torch.no_grad():
    for name, run in [("without cache", lambda: generate(big, prompt, 200, lambda last: last.argmax(-1))),
                      ("with cache", lambda: generate_cached(big, prompt, 200, cached_attention))]:
        start = time.perf_counter()
        timings[name] = (run(), time.perf_counter() - start)
(slow, t_slow), (fast, t_fast) = timings["without cache"], timings["with cache"]
print(f"same 200 tokens: {torch.equal(slow, fast)}")
print(f"without cache {t_slow:.2f} s, with cache {t_fast:.2f} s: {t_slow / t_fast:.1f}x faster")
""")

nb.md("""
The cache trades memory for time: per block it stores `2 · B · h · T · d_k` numbers (keys and values),
which is why long-context serving is often limited by cache memory rather than by compute. The cached
loop above works only while all positions fit in `max_len`; past that, real systems drop or compress old
entries.

## Summary

* A decoder-only model is trained on the next-token loss: predictions `logits[:, :-1]`, targets
  `tokens[:, 1:]`, padding ignored. Random parts of the data put a floor under the loss.
* One training step: zero the gradients, forward, loss, backward, clip, step; return `loss.item()`.
* On a task with a known answer, attention maps can be *checked*: the trained heads follow the
  anti-diagonal that reversal needs; the untrained ones spread their weight.
* Decoding: greedy, temperature (divide the logits), top-k (keep the k largest); seeded generators make
  sampling reproducible.
* Generation appends one token at a time; a KV cache keeps past keys and values so each step only
  processes the newest token, with the causal mask shifted by the cache length.

### Checkpoint — move on when you can …

- [ ] write the next-token loss and say why its floor is above 0 here;
- [ ] list the steps of a training step in order, and what goes wrong without `zero_grad`;
- [ ] read an attention map of the trained model and measure the pattern instead of eyeballing it;
- [ ] explain what temperature and top-k do to the distribution;
- [ ] explain what a KV cache stores, why its mask is shifted, and what it costs.
""")

if __name__ == "__main__":
    print(nb.save(f"source/{SECTION}/{SECTION}.ipynb"))
