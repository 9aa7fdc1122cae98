"""Build source/04_multi_head/04_multi_head.ipynb: ``.venv/bin/python -m tools.authoring.s04_multi_head``.

The solution cells come from the grader spec (graders/s04_multi_head.py), so the
notebook's reference and the hidden tests' reference are the same code.
"""
from graders.s04_multi_head import MHA_REF, PARAMS_REF
from tools.authoring import setup_source
from tools.nbauthor import Notebook

SECTION = "04_multi_head"
nb = Notebook()

nb.md("""
# 04 · Multi-head attention

One attention layer gives every token one way of looking at the others. Multi-head attention runs
several smaller attentions side by side, each with its own queries, keys and values, and mixes their
results. In this section you will

* compute the head size and count the parameters of the four projections;
* split a `(B, T, D)` tensor into heads and merge it back — and see the classic reshape bug;
* build `MultiHeadAttention` yourself (graded) and check it against `nn.MultiheadAttention`;
* watch the memory of the attention weights grow with the square of the sequence length, and meet the
  fused kernel `F.scaled_dot_product_attention`.
""")

nb.setup("setup", setup_source(SECTION, "import matplotlib.pyplot as plt"))

nb.md("""
## 1 · Why several heads?

A token often needs several relations at once: its verb, the noun a pronoun points to, its neighbours.
One softmax row is a single distribution over the other tokens, so one head has to compromise. With
`h` heads, each head gets its own `W_Q`, `W_K`, `W_V` and its own softmax, so each can look somewhere else.

The heads are not extra width: the model's `d_model` features are *divided* among them. Each head works
on `d_k = d_model / h` features, so the total work is about the same as one big head.
""")

nb.code("""
for d_model, h in [(512, 8), (768, 12)]:          # the original Transformer, BERT-base
    print(f"d_model={d_model}, heads={h}: d_k = {d_model // h}, remainder {d_model % h}")
""")

nb.md("""
The head size must divide `d_model` exactly (remainder 0), which is why implementations assert
`d_model % n_heads == 0`.

## 2 · Counting the parameters

All heads' `W_Q` side by side form one `d_model × d_model` matrix, and the same holds for `W_K` and `W_V`.
With the output projection `W_O` that makes four `d_model × d_model` matrices: for `d_model = 512`,
4 · 512² = 1,048,576 weights. Splitting into heads only reshapes them. `nn.Linear` also has one bias per
output feature. Let PyTorch count:
""")

nb.code("""
d_model = 512
qkv = nn.Linear(d_model, 3 * d_model)    # W_Q, W_K, W_V stacked: weight (3·512, 512)
out = nn.Linear(d_model, d_model)        # W_O: weight (512, 512)
weights = qkv.weight.numel() + out.weight.numel()
biases = qkv.bias.numel() + out.bias.numel()
print("weights:", weights, "= 4·d²:", 4 * d_model ** 2)
print("biases: ", biases)
print("total:  ", weights + biases)
""")

nb.md("""
### Exercise 1 (1 point) · BERT-base's attention layer

BERT-base has `d_model = 768` and 12 heads. Set `mha_params` to the number of parameters (weights **and**
biases) in one of its multi-head attention layers: Q, K, V and output projections. Use whole numbers.
""")

nb.solution("mha_params", PARAMS_REF)

nb.tests("test_mha_params", 1, """
### BEGIN HIDDEN TESTS
GRADER.check("mha_params", "value", mha_params)
### END HIDDEN TESTS
""")

nb.md("""
## 3 · Splitting into heads and merging back

`qkv(x)` gives one `(B, T, 3·D)` tensor; `.chunk(3, dim=-1)` cuts it into q, k and v, each `(B, T, D)`.
Head `i` owns features `i·d_k … (i+1)·d_k − 1` of each. To run all heads at once we want `(B, h, T, d_k)`:
first *view* the last axis as `(h, d_k)`, then *swap* the head and token axes. Watch it on a tensor whose
values say where they came from: entry = 10·token + feature.
""")

nb.code("""
B, T, D, h = 1, 3, 4, 2
d_k = D // h
x = (10 * torch.arange(T)[:, None] + torch.arange(D)).float().expand(B, T, D)   # (B, T, D)
print(x[0])
heads = x.view(B, T, h, d_k).transpose(1, 2)   # (B, T, h, d_k) -> (B, h, T, d_k)
print("shape:", tuple(heads.shape))
print("head 0 (features 0-1 of every token):\\n", heads[0, 0])
print("head 1 (features 2-3 of every token):\\n", heads[0, 1])
""")

nb.md("""
Merging is the same two steps backwards: transpose to `(B, T, h, d_k)`, then reshape to `(B, T, D)`.
`transpose` only changes strides, so use `.reshape` (or `.contiguous().view`) after it.
""")

nb.code("""
merged = heads.transpose(1, 2).reshape(B, T, D)   # (B, h, T, d_k) -> (B, T, h, d_k) -> (B, T, D)
print("round trip exact:", torch.equal(merged, x))
""")

nb.md("""
### The classic bug: reshape without the transpose

`x.reshape(B, h, T, d_k)` has the right shape, so nothing crashes. But reshape reads the memory in order,
so "head 0" now holds token 0's features 0–3 and then token 1's features 0–1: rows from different
tokens are glued together. The model still trains, just worse — the kind of bug that shapes never reveal.
""")

nb.code("""
wrong = x.reshape(B, h, T, d_k)     # (B, h, T, d_k): right shape ...
print("same shape:", wrong.shape == heads.shape)
print("... wrong head 0:\\n", wrong[0, 0])
print("values equal:", torch.equal(wrong, heads))
""")

nb.md("""
## 4 · Exercise 2 (9 points) · `MultiHeadAttention`

Write the module. The contract (the hidden tests load their own weights into exactly these names):

* `__init__(self, d_model, n_heads)` sets `self.n_heads`, `self.d_k = d_model // n_heads`,
  `self.qkv = nn.Linear(d_model, 3 * d_model)` and `self.out = nn.Linear(d_model, d_model)`;
* q, k and v are the three consecutive `d_model`-wide chunks of `self.qkv(x)`, in that order;
  head `i` uses features `[i*d_k:(i+1)*d_k]` of each;
* `forward(x, mask=None)` takes `x` of shape `(B, T, d_model)` and returns `(B, T, d_model)`:
  scaled dot-product attention in every head (scale by √d_k), heads merged, then `self.out`;
* `mask` is bool or 0/1, True/1 = *may attend*, broadcastable to `(B, n_heads, T, T)`: `(T, T)`,
  `(B, 1, 1, T)` and `(B, 1, T, T)` all work. Blocked scores become −∞ before the softmax.

Create nothing on a fixed device or dtype: the hidden tests run it on the CPU, on a GPU when there is
one, on PyTorch's shape-only `meta` device, and in float64 and bfloat16.
""")

nb.solution("mha", MHA_REF)

nb.tests("test_mha_shapes", 0, """
torch.manual_seed(0)
_m = MultiHeadAttention(16, 4)
assert _m.d_k == 4 and _m.n_heads == 4, "d_k should be d_model // n_heads"
assert tuple(_m.qkv.weight.shape) == (48, 16), "qkv should be nn.Linear(d_model, 3 * d_model)"
_x = torch.randn(2, 5, 16)
assert _m(_x).shape == (2, 5, 16), "the output should have the input's shape (B, T, d_model)"
for _mask in [torch.ones(5, 5).tril().bool(), torch.ones(2, 1, 1, 5, dtype=torch.bool), torch.ones(2, 1, 5, 5)]:
    assert _m(_x, _mask).shape == (2, 5, 16), f"a mask of shape {tuple(_mask.shape)} should work"
print("shapes ok")
""")

nb.tests("test_mha_basic", 3, """
### BEGIN HIDDEN TESTS
GRADER.check("MultiHeadAttention", "unmasked", MultiHeadAttention)
GRADER.check("MultiHeadAttention", "two_heads", MultiHeadAttention)
### END HIDDEN TESTS
""")

nb.tests("test_mha_masks", 3, """
### BEGIN HIDDEN TESTS
GRADER.check("MultiHeadAttention", "causal", MultiHeadAttention)
GRADER.check("MultiHeadAttention", "padding", MultiHeadAttention)
GRADER.check("MultiHeadAttention", "full_mask", MultiHeadAttention)
### END HIDDEN TESTS
""")

nb.tests("test_mha_dtypes", 1, """
### BEGIN HIDDEN TESTS
GRADER.check("MultiHeadAttention", "float64", MultiHeadAttention)
GRADER.check("MultiHeadAttention", "bfloat16", MultiHeadAttention)
### END HIDDEN TESTS
""")

nb.tests("test_mha_devices", 2, """
### BEGIN HIDDEN TESTS
GRADER.check("MultiHeadAttention", "best_device", MultiHeadAttention)
GRADER.check("MultiHeadAttention", "meta", MultiHeadAttention)
GRADER.check("MultiHeadAttention", "meta_padding", MultiHeadAttention)
### END HIDDEN TESTS
""")

nb.md("""
## 5 · Same numbers as `nn.MultiheadAttention`

PyTorch's module stores the same four projections under other names: `in_proj_weight` is our
`qkv.weight` (q, k, v rows stacked in that order), `out_proj` is our `out`. Copy the weights across and
the outputs agree to float32 rounding.

Watch the masks: the two conventions are **opposite**. In this course True/1 means *may attend*. In
`nn.MultiheadAttention` a boolean `attn_mask` marks positions that are **not allowed** (True = blocked),
so our causal mask must be inverted with `~` before passing it.
""")

nb.code("""
torch.manual_seed(1)
d_model, n_heads, T = 16, 4, 6
ours = MultiHeadAttention(d_model, n_heads)
theirs = nn.MultiheadAttention(d_model, n_heads, batch_first=True)
with torch.no_grad():
    theirs.in_proj_weight.copy_(ours.qkv.weight)   # (3·d_model, d_model)
    theirs.in_proj_bias.copy_(ours.qkv.bias)
    theirs.out_proj.weight.copy_(ours.out.weight)
    theirs.out_proj.bias.copy_(ours.out.bias)

x = torch.randn(2, T, d_model)                      # (B, T, d_model)
causal = torch.ones(T, T, dtype=torch.bool).tril()  # ours: True = may attend
with torch.no_grad():
    a = ours(x, causal)
    b, _ = theirs(x, x, x, attn_mask=~causal)       # theirs: True = blocked
compare("ours vs nn.MultiheadAttention", a, b, atol=1e-5)
""")

nb.md("""
## 6 · Memory grows with T²

Every head keeps a `(T, T)` matrix of weights, so their memory grows with the *square* of the sequence
length: doubling T makes it four times bigger. The cell below runs the score step for a few lengths and
measures the weights tensor that comes out (one sequence, 8 heads, float32).
""")

nb.code("""
lengths = [64, 128, 256, 512, 1024]
n_heads, d_k = 8, 64
sizes_mb = []
for T in lengths:
    q = torch.randn(1, n_heads, T, d_k)                  # (1, h, T, d_k)
    w = torch.softmax(q @ q.transpose(-2, -1) / math.sqrt(d_k), dim=-1)   # (1, h, T, T)
    sizes_mb.append(w.nelement() * w.element_size() / 2**20)
    print(f"T={T:5d}: weights {tuple(w.shape)} = {sizes_mb[-1]:7.2f} MiB")
print("growth per doubling:", [round(b / a, 1) for a, b in zip(sizes_mb, sizes_mb[1:])])

fig, ax = plt.subplots(figsize=(5, 3.5))
ax.loglog(lengths, sizes_mb, "o-", base=2, label="measured weights tensor")
ax.loglog(lengths, [sizes_mb[0] * (T / lengths[0]) ** 2 for T in lengths], "--", base=2, label="∝ T²")
ax.set_xlabel("sequence length T")
ax.set_ylabel("MiB (one sequence, 8 heads)")
ax.set_title("Attention weights memory")
ax.legend()
plt.show()
""")

nb.md("""
At T = 1024 one layer's weights already take 32 MiB per sequence; a batch, many layers and the copies
kept for the backward pass multiply that.

**Compute grows the same way.** Per layer and sequence, the four projections cost `4 · T · d_model²`
multiply-adds (linear in `T`); the scores `Q Kᵀ` and the weighted sum `A V` cost `T² · d_k` each per head,
`2 · T² · d_model` over all heads (quadratic in `T`). The two are equal at `T = 2 · d_model`; past that the
`T²` part dominates.
""")
nb.code("""
d_model = 512
for T in lengths + [2048, 4096]:
    proj = 4 * T * d_model**2                          # Q, K, V and output projections
    attn = 2 * T**2 * d_model                          # Q Kᵀ and A V, all heads
    print(f"T={T:5d}: projections {proj / 1e9:6.2f} G, attention {attn / 1e9:6.2f} G multiply-adds "
          f"({attn / (proj + attn):4.0%} of the layer's attention block)")
""")
nb.md("""

## 7 · The fused kernel: `F.scaled_dot_product_attention`

`F.scaled_dot_product_attention(q, k, v, ...)` does the whole attention step in one call and picks a
backend from its inputs. On a CUDA GPU, **FlashAttention** runs only when no `attn_mask` is passed —
`is_causal=True` asks for the causal pattern without a mask tensor — while an explicit `attn_mask` sends the
call to the memory-efficient kernel (or the plain math path); on a CPU a fused C++ kernel does the work.
The fused kernels never store the `(T, T)` weights, but an explicit `(T, T)` mask is itself a T²-sized
tensor: for causal attention prefer `is_causal=True`. (On a GPU, `torch.backends.cuda.can_use_flash_attention`
with `debug=True` tells you why a call cannot use FlashAttention; this rule comes from PyTorch's
documentation — the course's test machine has no GPU to measure it.) Its boolean mask follows *our*
convention (True = may attend). The price: it returns only the output, **no weights**. Use it for training
and inference; compute the weights explicitly, as in your module, when you want to look at them.
""")

nb.code("""
torch.manual_seed(2)
q, k, v = torch.randn(3, 2, 4, 6, 8).unbind(0)            # each (B, h, T, d_k)
causal = torch.ones(6, 6, dtype=torch.bool).tril()
w = torch.softmax((q @ k.transpose(-2, -1) / math.sqrt(8)).masked_fill(~causal, float("-inf")), dim=-1)
explicit = w @ v                                           # (B, h, T, d_k)
fused = F.scaled_dot_product_attention(q, k, v, is_causal=True)     # (B, h, T, d_k); no mask tensor, no weights
masked = F.scaled_dot_product_attention(q, k, v, attn_mask=causal)  # same result; a GPU cannot use FlashAttention here
compare("explicit vs is_causal=True", explicit, fused, atol=1e-5)
compare("explicit vs attn_mask", explicit, masked, atol=1e-5)
""")

nb.md("""
## Summary

* Multi-head attention = `h` attentions on `d_k = d_model / h` features each, concatenated, then `W_O`.
* The four projections hold 4·d_model² weights (plus 4·d_model biases), whatever `h` is.
* Split: view `(B, T, h, d_k)`, then transpose to `(B, h, T, d_k)`; merge: transpose back, then reshape.
  Reshaping without the transpose keeps the shapes and scrambles the values.
* `nn.MultiheadAttention` computes the same thing, but its boolean mask means *blocked*.
* The weights take memory ∝ T²; `F.scaled_dot_product_attention` avoids storing them but returns none.

### Checkpoint — move on when you can …

- [ ] compute the head size from `d_model` and the number of heads;
- [ ] count the parameters of a multi-head attention layer, with and without biases;
- [ ] write the split and merge of heads with shape comments, and explain why the transpose matters;
- [ ] translate a mask between this course's convention and `nn.MultiheadAttention`'s;
- [ ] say when to use `F.scaled_dot_product_attention` and what you give up.
""")

if __name__ == "__main__":
    print(nb.save(f"source/{SECTION}/{SECTION}.ipynb"))
