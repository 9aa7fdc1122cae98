"""Write source/02_qkv_by_hand/02_qkv_by_hand.ipynb: ``python -m tools.authoring.s02_qkv_by_hand``."""
from graders.s02_qkv_by_hand import HAND_GIVEN, SA_REF, SDPA_REF, SOFTMAX_REF
from tools.authoring import hidden, setup_source
from tools.nbauthor import Notebook

SECTION = "02_qkv_by_hand"
nb = Notebook()

nb.md("""
# 02 · Queries, keys and values by hand

Attention lets every token build its new vector as a **weighted average of the other tokens' vectors**,
with weights it computes itself. In this notebook you compute that by hand, then in NumPy, then in PyTorch.

**Goals**
- read a weighted average and a softmax at a glance;
- follow `softmax(Q Kᵀ / √d_k) V` step by step, with the shape of every intermediate;
- know why the scores are divided by √d_k;
- write `softmax`, `scaled_dot_product_attention` and a `SelfAttention` module that pass hidden tests;
- check your own work against PyTorch's built-in attention.
""")
nb.setup("setup", setup_source(SECTION))

# ------------------------------------------------------------------ why not recurrence
nb.md("""
## 0 · Why attention replaced recurrent networks

Before Transformers, sequence models were recurrent (RNN, LSTM, GRU): they read one token at a time and
carry a hidden state forward. That has three costs. **Sequential:** step `t` needs the state of step
`t − 1`, so the `T` steps cannot run in parallel. **Long paths:** what token 0 says reaches token `T − 1`
only through `T − 1` updates, and fades on the way (vanishing gradients). **A bottleneck:** the whole past
must fit in one fixed-size vector. Attention lets every token look at every other token directly: all
`T × T` pairs are scored in one matrix product, and any two tokens are one step apart.
""")
nb.code("""
T, d = 512, 64
x = torch.randn(T, d)                                  # (T, d) one sequence
W_x, W_h = torch.randn(d, d) / 8, torch.randn(d, d) / 8

h, steps = torch.zeros(d), 0
for t in range(T):                                     # each step needs the previous h: no parallelism
    h = torch.tanh(x[t] @ W_x + h @ W_h)
    steps += 1

scores = x @ x.T / math.sqrt(d)                        # (T, T): every pair scored at once
out = torch.softmax(scores, dim=-1) @ x                # (T, d)
print(f"recurrence: {steps} steps, each waiting for the one before; token 0 reaches token {T - 1} "
      f"through {T - 1} updates")
print(f"attention : {scores.numel():,} scores from one matrix product; token 0 reaches token {T - 1} in 1 step")
""")
nb.md("""
The recurrent loop is a chain: a GPU, which runs thousands of operations at once, cannot spread it out.
The attention step is two large matrix products that it can. The price of attention is the `T × T` score matrix:
memory and compute grow with `T²` (section 04 measures it).
""")

# ------------------------------------------------------------------ weighted average
nb.md("""
## 1 · Attention output = a weighted average

A token that attends gets a mix of the other tokens' values. The weights are non-negative and add up to 1,
so the result sits between the values and leans toward the ones with large weights.
""")
nb.code("""
weights = np.array([0.7, 0.2, 0.1])      # (3,) how much to listen to each token; sums to 1
values = np.array([10.0, 20.0, 30.0])    # (3,) what each token offers
print(weights * values, "->", np.dot(weights, values))
""")
nb.md("""
Most of the result comes from the first value, because it has the largest weight.

## 2 · Softmax turns scores into weights

Scores can be any real numbers. `softmax(z)_i = exp(z_i) / Σ_j exp(z_j)` makes them positive and sum to 1;
a bigger score gets an exponentially bigger share.
""")
nb.code("""
z = np.array([2.0, 1.0, 0.0])             # (3,) raw scores
e = np.exp(z)
print("exp:", np.round(e, 3), " sum:", round(e.sum(), 3))
print("softmax:", np.round(e / e.sum(), 3))
""")
nb.md("""
Computed this way, `exp` overflows for large scores: `np.exp(1000.0)` is `inf`, and `inf / inf` is NaN.
Since softmax does not change when the same constant is subtracted from every score, subtract the largest
score first: then the biggest exponent is `exp(0) = 1` and nothing overflows.
""")
nb.code("""
big = np.array([1000.0, 1001.0])
with np.errstate(over="ignore", invalid="ignore"):
    print("naive:  ", np.exp(big) / np.exp(big).sum())
shifted = big - big.max()                # (2,) largest entry becomes 0
print("shifted:", np.round(np.exp(shifted) / np.exp(shifted).sum(), 3))
""")
nb.md("""
### Exercise 1 · `softmax` in NumPy

Write `softmax(x, axis=-1)`: NumPy array in, NumPy array out, normalised along `axis` (each slice along that
axis sums to 1), stable for large inputs such as `[1000, 1001]`. Use `keepdims=True` so the max and the sum
broadcast back over the right axis.
""")
nb.solution("softmax", SOFTMAX_REF)
nb.tests("test_softmax_visible", 0, """
# Visible checks: type, shape, rows sum to 1, no overflow.
_p = softmax(np.array([[1.0, 2.0, 3.0], [1000.0, 1001.0, 1002.0]]))
assert isinstance(_p, np.ndarray), "return a NumPy array"
assert _p.shape == (2, 3), f"the shape should not change, got {_p.shape}"
assert np.allclose(_p.sum(axis=-1), 1.0), "each row should sum to 1"
assert np.isfinite(_p).all(), "large scores overflowed: subtract the max first"
assert np.allclose(softmax(np.ones((2, 3)), axis=0).sum(axis=0), 1.0), "axis=0 should make each column sum to 1"
print("visible softmax checks passed")
""")
nb.tests("test_softmax", 3, hidden(
    'GRADER.check("softmax", "vector", softmax)',
    'GRADER.check("softmax", "rows", softmax)',
    'GRADER.check("softmax", "axis0", softmax)'))
nb.tests("test_softmax_stable", 1, hidden(
    'GRADER.check("softmax", "large", softmax)',
    'GRADER.check("softmax", "batched", softmax)'))

# ------------------------------------------------------------------ Q, K, V
nb.md("""
## 3 · Queries, keys and values

Start from the token vectors `X` of shape `(T, d_model)`. Three learned matrices project them:

- `Q = X W_Q` — what each token is looking for;
- `K = X W_K` — what each token offers to be matched against;
- `V = X W_V` — what each token hands over once matched.

**Attention as a soft dictionary lookup.** A Python dict returns the value of the one key that equals the
query. Attention softens both halves: every key is scored by its *similarity* to the query, and the answer
is a weighted blend of *all* the values.
""")
nb.code("""
table = {"cat": 1.0, "dog": 2.0, "car": 3.0}
print("hard lookup, table['dog'] ->", table["dog"])
keys = np.array([[1.0, 0.0], [0.9, 0.2], [0.0, 1.0]])   # (3, 2) cat, dog, car as vectors
values = np.array([1.0, 2.0, 3.0])                       # (3,)
query = np.array([0.9, 0.1])                             # (2,) "something like a cat or a dog"
s = keys @ query * 4                                     # (3,) similarity scores
w = np.exp(s - s.max()) / np.exp(s - s.max()).sum()      # (3,) softmax
print("soft lookup weights:", np.round(w, 3), "-> blended value", round(float(w @ values), 3))
""")
nb.md("""
Then four steps:

| step | formula | shape |
|---|---|---|
| scores | `S = Q Kᵀ` | `(T, d_k) @ (d_k, T) = (T, T)` |
| scale | `S / √d_k` | `(T, T)` |
| weights | softmax of each row | `(T, T)`, rows sum to 1 |
| output | `A V` | `(T, T) @ (T, d_v) = (T, d_v)` |

Row `i` of the weights says how token `i` spreads its attention over all tokens (itself included).

### Worked example · two tokens

`Q = K = I` (each token matches only itself) and `V = [[1, 2], [3, 4]]`, with `d_k = 2`.
""")
nb.code("""
Q2 = K2 = np.eye(2)                          # (T=2, d_k=2)
V2 = np.array([[1.0, 2.0], [3.0, 4.0]])      # (2, d_v=2)
S2 = Q2 @ K2.T / np.sqrt(2)                  # (2, 2) scaled scores
A2 = np.exp(S2) / np.exp(S2).sum(axis=1, keepdims=True)   # (2, 2) row-wise softmax
print("scaled scores:\\n", np.round(S2, 3))
print("weights:\\n", np.round(A2, 2))
print("output:\\n", np.round(A2 @ V2, 2))     # (2, 2)
""")
nb.md("""
Each token keeps about two thirds of its own value and takes a third from the other one.

### Worked example · three tokens

`Q = K = V = X` with rows `[1, 0]`, `[0, 1]`, `[1, 1]` (the projections are identities).
""")
nb.code("""
X3 = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])   # (T=3, d=2)
Wq = Wk = Wv = np.eye(2)                               # (2, 2) identity projections
Q3, K3, V3 = X3 @ Wq, X3 @ Wk, X3 @ Wv                 # each (3, 2)
S3 = Q3 @ K3.T                                         # (3, 3) raw scores
A3 = np.exp(S3 / np.sqrt(2)) / np.exp(S3 / np.sqrt(2)).sum(axis=1, keepdims=True)   # (3, 3)
print("raw scores:\\n", S3)
print("weights:\\n", np.round(A3, 2))
print("output:\\n", np.round(A3 @ V3, 2))              # (3, 2)
print("row sums:", A3.sum(axis=1))
""")
nb.md("""
Token 1 = `[1, 0]` matches itself and token 3 equally and token 2 least; token 3 = `[1, 1]` matches itself
best. Every row sums to 1.

**Why separate `W_Q`, `W_K` and `W_V`?** With identity projections, as here, the scores `X Xᵀ` are
*symmetric* — token `a` scores `b` exactly as `b` scores `a` — and a token's score with itself, `|x|²`, tends
to win. But "what I am looking for", "what I offer to be matched on" and "what I pass on" are different roles:
a pronoun looks for a noun, not for another pronoun. Separate learned matrices give each role its own
projection, so scores can be asymmetric and the value passed on can differ from the key that matched.
""")
nb.code("""
rng = np.random.default_rng(1)
Wq_r, Wk_r = rng.normal(size=(2, 2)), rng.normal(size=(2, 2))   # (2, 2) two different projections
S_same = X3 @ X3.T                                               # (3, 3) Q = K = X
S_sep = (X3 @ Wq_r) @ (X3 @ Wk_r).T                              # (3, 3) Q = X W_Q, K = X W_K
print("Q = K: symmetric scores?", np.allclose(S_same, S_same.T))
print("separate W_Q, W_K: symmetric scores?", np.allclose(S_sep, S_sep.T))
""")
nb.md("""

### Worked example · random 4-dim projections

Three tokens embedded in 4 dimensions, projection matrices drawn with `np.random.default_rng(0)` and
rounded to one decimal (as in a lesson this course draws on), so the numbers can be checked by hand.
""")
nb.code("""
X4 = np.array([[1.0, 0.0, 1.0, 0.0],     # "the"
               [0.0, 1.0, 0.0, 1.0],     # "cat"
               [1.0, 1.0, 0.0, 0.0]])    # "sat"     (T=3, d_model=4)
rng = np.random.default_rng(0)
Wq4 = np.round(rng.normal(0, 1, size=(4, 4)), 1)   # (d_model=4, d_k=4)
Wk4 = np.round(rng.normal(0, 1, size=(4, 4)), 1)
Wv4 = np.round(rng.normal(0, 1, size=(4, 4)), 1)
Q4, K4, V4 = X4 @ Wq4, X4 @ Wk4, X4 @ Wv4            # each (3, 4)
S4 = Q4 @ K4.T / np.sqrt(4)                          # (3, 3), scale 1/√4
A4 = np.exp(S4 - S4.max(axis=1, keepdims=True))
A4 = A4 / A4.sum(axis=1, keepdims=True)              # (3, 3)
with np.printoptions(precision=3, suppress=True):
    print("scaled scores:\\n", S4)
    print("weights:\\n", A4)
    print("output:\\n", A4 @ V4)                      # (3, 4)
""")
nb.md("""
Each row is a different mix: "the" keeps about half its attention on itself, "sat" gives about two
thirds to itself. The heatmap shows the same matrix with token labels: rows attend, columns are attended to.
""")
nb.code("""
attention_heatmap(A4, keys=["the", "cat", "sat"], title="Weights of the 4-dim example");
""")

# ------------------------------------------------------------------ sqrt(d_k)
nb.md("""
## 4 · Why divide by √d_k

A dot product of two random vectors with `d` independent unit-variance entries is a sum of `d` terms, so its
variance is about `d` and its spread (standard deviation) about √d. Large scores make the softmax nearly
one-hot, and a nearly one-hot softmax has almost no gradient. Dividing by √d_k brings the spread back near 1.
""")
nb.code("""
rng = np.random.default_rng(0)
for d in (4, 64):
    q = rng.normal(size=(20000, d))           # (20000, d) random queries
    k = rng.normal(size=(20000, d))           # (20000, d) random keys
    dots = (q * k).sum(axis=1)                # (20000,) one dot product per pair
    print(d, round(dots.std(), 1), "-> after / sqrt(d):", round((dots / np.sqrt(d)).std(), 2),
          "  after / d:", round((dots / d).std(), 3))
""")
nb.md("""
The spread is about 2 for `d = 4` and about 8 for `d = 64`, as √d predicts; after scaling both are near 1.

**Why √d_k and not d_k?** The spread grows like √d, so √d is what cancels it. Dividing by `d` overshoots:
the spread becomes `1/√d` — 0.5 for `d = 4` and 0.125 for `d = 64` above — so the bigger the head, the
flatter every softmax, until attention can no longer prefer one key over another.

## 5 · A common error: `Q @ K`

The scores compare every query with every key, so the inner sizes must match: `(T, d_k) @ (d_k, T)`.
Forgetting the transpose asks for `(T, d_k) @ (T, d_k)`, which fails (the wording depends on your NumPy version).
""")
nb.code("""
Qe = Ke = np.ones((3, 2))                     # (3, 2) each
try:
    Qe @ Ke
except ValueError as err:
    print("ValueError:", str(err)[:70])
print("fixed: Q @ K.T has shape", (Qe @ Ke.T).shape)   # (3, 2) @ (2, 3) = (3, 3)
""")

# ------------------------------------------------------------------ by hand
nb.md("""
## 6 · Your turn, by hand

A new example with three tokens and `d_k = 2` (so the scale is `1/√2`). Work each step on paper or with a
calculator (NumPy as a calculator is fine), then **type the numbers** as arrays or nested lists, rows =
queries. Two or three decimals are enough: the hidden tests accept an error up to `0.01`.
""")
nb.setup("hand_example", HAND_GIVEN.strip("\n") + "\nprint(Q_ex.shape, K_ex.shape, V_ex.shape)")
nb.md("**a)** The raw scores `Q_ex Kᵀ_ex`, shape `(3, 3)`: set **`scores_hand`**.")
nb.solution("scores_hand", """
# scores_hand = the raw scores Q_ex @ K_ex.T, shape (3, 3)
### BEGIN SOLUTION
scores_hand = [[1, 3, 4], [0, 1, 2], [2, 2, 0]]
### END SOLUTION
""")
nb.md("**b)** The scaled scores (divide by √d_k), shape `(3, 3)`: set **`scaled_hand`**.")
nb.solution("scaled_hand", """
# scaled_hand = the scores divided by √d_k, shape (3, 3)
### BEGIN SOLUTION
scaled_hand = [[0.707, 2.121, 2.828], [0.0, 0.707, 1.414], [1.414, 1.414, 0.0]]
### END SOLUTION
""")
nb.md("**c)** The attention weights (softmax of each row), shape `(3, 3)`: set **`weights_hand`**.")
nb.solution("weights_hand", """
# weights_hand = the softmax of each row of scaled_hand, shape (3, 3)
### BEGIN SOLUTION
weights_hand = [[0.074, 0.306, 0.620], [0.140, 0.284, 0.576], [0.446, 0.446, 0.108]]
### END SOLUTION
""")
nb.md("**d)** The output (weights times `V_ex`), shape `(3, 2)`: set **`output_hand`**.")
nb.solution("output_hand", """
# output_hand = weights_hand @ V_ex, shape (3, 2)
### BEGIN SOLUTION
output_hand = [[3.869, 2.463], [3.736, 2.288], [1.542, 2.000]]
### END SOLUTION
""")
nb.tests("test_hand_visible", 0, """
# Visible checks: shapes and row sums only (the values are checked by hidden tests).
assert np.shape(scores_hand) == (3, 3), "scores: one row per query, one column per key"
assert np.shape(scaled_hand) == (3, 3), "scaled scores have the same shape as the scores"
assert np.shape(weights_hand) == (3, 3), "weights: (T_q, T_k)"
assert np.allclose(np.sum(weights_hand, axis=1), 1.0, atol=0.02), "each row of weights should sum to 1"
assert np.shape(output_hand) == (3, 2), "output: one row per query, d_v columns"
print("shapes look right")
""")
nb.tests("test_scores_hand", 2, hidden('GRADER.check("scores_hand", "value", scores_hand)'))
nb.tests("test_scaled_hand", 1, hidden('GRADER.check("scaled_hand", "value", scaled_hand)'))
nb.tests("test_weights_hand", 1, hidden('GRADER.check("weights_hand", "value", weights_hand)'))
nb.tests("test_output_hand", 1, hidden('GRADER.check("output_hand", "value", output_hand)'))

# ------------------------------------------------------------------ sdpa
nb.md("""
## 7 · Scaled dot-product attention in PyTorch

Same four steps, for tensors with any leading batch dimensions: `Q (..., T_q, d_k)`, `K (..., T_k, d_k)`,
`V (..., T_k, d_v)`. Use `K.transpose(-2, -1)` so the batch dimensions stay in front.

The optional `mask` (bool or 0/1, broadcastable to the scores `(..., T_q, T_k)`) says which keys each query
**may attend to**: True/1 = allowed. Blocked scores become `-inf` before the softmax, so they get weight
exactly 0. Section 03 is all about masks; here you only need that one line.

### Exercise 2 · `scaled_dot_product_attention(Q, K, V, mask=None) -> (output, weights)`

Return the output `(..., T_q, d_v)` and the weights `(..., T_q, T_k)`, on the input's device and dtype
(create no tensor on a fixed device).
""")
nb.solution("sdpa", SDPA_REF)
nb.tests("test_sdpa_visible", 0, """
# Visible checks: shapes, rows sum to 1, blocked keys get 0.
_Q, _K, _V = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
_out, _w = scaled_dot_product_attention(_Q, _K, _V)
assert _out.shape == (2, 3, 6), f"output should be (B, T_q, d_v) = (2, 3, 6), got {tuple(_out.shape)}"
assert _w.shape == (2, 3, 5), f"weights should be (B, T_q, T_k) = (2, 3, 5), got {tuple(_w.shape)}"
assert torch.allclose(_w.sum(-1), torch.ones(2, 3)), "each row of weights should sum to 1"
_m = torch.ones(3, 5, dtype=torch.bool)
_m[:, -1] = False
_, _w = scaled_dot_product_attention(_Q, _K, _V, mask=_m)
assert torch.all(_w[..., -1] == 0), "a blocked key (mask False) must get weight 0"
print("visible attention checks passed")
""")
nb.tests("test_sdpa", 3, hidden(
    'GRADER.check("scaled_dot_product_attention", "batched", scaled_dot_product_attention)',
    'GRADER.check("scaled_dot_product_attention", "float64", scaled_dot_product_attention)'))
nb.tests("test_sdpa_masked", 2, hidden(
    'GRADER.check("scaled_dot_product_attention", "masked", scaled_dot_product_attention)',
    'GRADER.check("scaled_dot_product_attention", "mask01", scaled_dot_product_attention)'))
nb.tests("test_sdpa_very_negative", 1, hidden(
    'GRADER.check("scaled_dot_product_attention", "very_negative", scaled_dot_product_attention)'))
nb.tests("test_sdpa_dtype_device", 1, hidden(
    'GRADER.check("scaled_dot_product_attention", "bfloat16", scaled_dot_product_attention)',
    'GRADER.check("scaled_dot_product_attention", "meta", scaled_dot_product_attention)'))
nb.md("""
**Check it yourself.** The 4-dim example through your function gives back the NumPy weights, and PyTorch's
fused `F.scaled_dot_product_attention` (which returns only the output) agrees on a random batch.
""")
nb.code("""
out4, w4 = scaled_dot_product_attention(torch.tensor(Q4), torch.tensor(K4), torch.tensor(V4))
_ = compare("4-dim example weights", w4, A4)
Qb, Kb, Vb = torch.randn(2, 5, 16), torch.randn(2, 5, 16), torch.randn(2, 5, 16)   # (B=2, T=5, d_k=16)
out_b, w_b = scaled_dot_product_attention(Qb, Kb, Vb)
_ = compare("vs F.scaled_dot_product_attention", out_b, F.scaled_dot_product_attention(Qb, Kb, Vb))
causal = torch.ones(5, 5, dtype=torch.bool).tril()       # (5, 5) True on and below the diagonal
out_c, _ = scaled_dot_product_attention(Qb, Kb, Vb, mask=causal)
_ = compare("masked vs F.sdpa", out_c, F.scaled_dot_product_attention(Qb, Kb, Vb, attn_mask=causal))
""")
nb.md("""
**Attention alone ignores order.** Shuffle the tokens, run attention, un-shuffle the output: you get the same
result. Nothing in `softmax(Q Kᵀ / √d_k) V` knows positions; section 05 adds them.
""")
nb.code("""
perm = torch.tensor([2, 0, 4, 1, 3])
out_p, _ = scaled_dot_product_attention(Qb[:, perm], Kb[:, perm], Vb[:, perm])   # (2, 5, 16)
unshuffled = torch.empty_like(out_p)
unshuffled[:, perm] = out_p
print("permutation-equivariant:", torch.allclose(unshuffled, out_b, atol=1e-6))
""")

# ------------------------------------------------------------------ SelfAttention
nb.md("""
## 8 · A self-attention layer

In self-attention `Q`, `K` and `V` all come from the same input `x` through three learned linear maps.

### Exercise 3 · `class SelfAttention(nn.Module)`

- `__init__(self, d_model, d_k)`: three projections `W_q`, `W_k`, `W_v`, each
  `nn.Linear(d_model, d_k, bias=False)` (the hidden tests load weights into exactly these names);
- `forward(x, mask=None) -> (out, weights)`: `x (..., T, d_model)` → `out (..., T, d_k)`,
  `weights (..., T, T)`; the same mask rule as above.

Write the attention steps inside `forward` (each exercise is graded on its own, so do not call your
function from Exercise 2).
""")
nb.solution("self_attention", SA_REF)
nb.tests("test_self_attention_visible", 0, """
# Visible checks: the contract's parameter names and the shapes.
_attn = SelfAttention(d_model=16, d_k=8)
for _name in ("W_q", "W_k", "W_v"):
    _lin = getattr(_attn, _name, None)
    assert isinstance(_lin, nn.Linear), f"{_name} should be an nn.Linear"
    assert _lin.weight.shape == (8, 16) and _lin.bias is None, f"{_name} should be nn.Linear(d_model, d_k, bias=False)"
_out, _w = _attn(torch.randn(2, 6, 16))
assert _out.shape == (2, 6, 8), f"out should be (B, T, d_k) = (2, 6, 8), got {tuple(_out.shape)}"
assert _w.shape == (2, 6, 6), f"weights should be (B, T, T) = (2, 6, 6), got {tuple(_w.shape)}"
print("visible SelfAttention checks passed")
""")
nb.tests("test_self_attention", 4, hidden(
    'GRADER.check("SelfAttention", "batched", SelfAttention)',
    'GRADER.check("SelfAttention", "masked", SelfAttention)',
    'GRADER.check("SelfAttention", "float64", SelfAttention)'))
nb.tests("test_self_attention_dtype_device", 1, hidden(
    'GRADER.check("SelfAttention", "bfloat16", SelfAttention)',
    'GRADER.check("SelfAttention", "meta", SelfAttention)'))
nb.md("""
Run it on one sentence of 6 tokens. The weights of an **untrained** layer carry no meaning yet; section 07
looks at a trained model. Every row still sums to 1.
""")
nb.code("""
seed_everything(0)
tokens = ["The", "cat", "sat", "on", "the", "mat"]
x = torch.randn(1, len(tokens), 16)                     # (B=1, T=6, d_model=16)
attn = SelfAttention(d_model=16, d_k=16)
with torch.no_grad():
    out, w = attn(x)                                     # (1, 6, 16), (1, 6, 6)
print(tuple(out.shape), tuple(w.shape), "row sums:", w[0].sum(-1))
from pathlib import Path
Path("figures").mkdir(exist_ok=True)                     # your PNGs go here, next to this notebook
attention_heatmap(w[0], keys=tokens, title="Untrained self-attention (my SelfAttention)",
                  savepath="figures/02_my_self_attention.png");
print("saved figures/02_my_self_attention.png")
""")

# ------------------------------------------------------------------ summary
nb.md("""
## Summary

- Attention output = weighted average of value vectors; the weights come from a row-wise softmax.
- `Attention(Q, K, V) = softmax(Q Kᵀ / √d_k) V`, shapes `(T, d_k) → (T, T) → (T, d_v)`.
- Dividing by √d_k keeps the score spread near 1, whatever the key size.
- Subtract the row maximum before `exp`; the softmax does not change and nothing overflows.
- A mask sets blocked scores to `-inf` before the softmax: they get weight exactly 0.
- Self-attention alone is permutation-equivariant: it does not see order.
- Unlike a recurrent network, attention scores all token pairs at once: parallel, and any two tokens are
  one step apart; the price is `T²` memory and compute.

### Checkpoint

- [ ] I can compute a 3-token attention by hand and check it with NumPy.
- [ ] I can say the shape of `Q Kᵀ`, the weights and the output without running code.
- [ ] I can explain why the scale is √d_k and not d_k.
- [ ] My `softmax` is stable for `[1000, 1001]`.
- [ ] My `scaled_dot_product_attention` matches `F.scaled_dot_product_attention`, with and without a mask.
- [ ] My `SelfAttention` uses `W_q`, `W_k`, `W_v` without bias and works on CPU, GPU and any float dtype.
- [ ] `figures/02_my_self_attention.png` holds my layer's heatmap, and I can read a row of it.
""")

if __name__ == "__main__":
    print(nb.save(f"source/{SECTION}/{SECTION}.ipynb"))
