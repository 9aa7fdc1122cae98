"""Write source/03_masking/03_masking.ipynb: ``python -m tools.authoring.s03_masking``."""
from graders.s03_masking import CAUSAL_REF, COMBINED_REF, HAND_GIVEN, MSM_REF, PAD_REF
from tools.authoring import hidden, setup_source
from tools.nbauthor import Notebook

SECTION = "03_masking"
nb = Notebook()

nb.md("""
# 03 · Masking: what a token may not see

Attention lets every token look at every other token. Two situations need exceptions:

- **causal** (GPT-style decoders): a token may not look at tokens **after** it, because when generating
  text they do not exist yet;
- **padding**: the `[PAD]` slots of a batch (section 01) are not real tokens and must get no attention.

A **mask** says which keys each query may attend to. The course's convention, used in every section:

> A mask is a bool or 0/1 tensor, **True/1 = "may attend"**, broadcastable to the scores `(..., T_q, T_k)`.
> Blocked scores become `-inf` before the softmax, so they get weight exactly 0.

A query row with **no** allowed key is a special case; section 5 shows what goes wrong and what this
notebook's `masked_softmax` does about it.

**Goals**
- build causal and padding masks, and combine them for a padded batch;
- compute masked weights by hand;
- know why the fill value is `-inf` (or a very large negative number), never a small one;
- handle a row where nothing is allowed, without NaN.
""")
nb.setup("setup", setup_source(SECTION))

nb.md("""
## 1 · Worked example · a causal mask

Three tokens all have scores `[1, 2, 3]`. Token 1 may see only itself, token 2 tokens 1–2, token 3 all
three. Set the blocked scores to `-inf` and take the softmax of each row.
""")
nb.code("""
s = np.array([[1.0, 2.0, 3.0]] * 3)                  # (T_q=3, T_k=3)
allowed = np.tril(np.ones((3, 3))) == 1              # (3, 3) True on and below the diagonal
s = np.where(allowed, s, -np.inf)
w = np.exp(s) / np.exp(s).sum(axis=1, keepdims=True)  # exp(-inf) = 0
print(np.round(w, 3))
""")
nb.md("""
Every row sums to 1 and everything above the diagonal is 0: no token peeks at a later one.

## 2 · Worked example · a padding mask

A sentence has two real tokens and one `[PAD]`; its scores are `[0.5, 1.0, 2.0]` and the last one is padding.
""")
nb.code("""
s = np.array([0.5, 1.0, -np.inf])                    # the padding score is blocked
print(np.round(np.exp(s) / np.exp(s).sum(), 3))
""")
nb.md("""
The padding gets nothing, even though its score was the largest.

### Exercise 1 · `causal_mask(T, device=None)`

Return a bool tensor `(T, T)`, True on and below the diagonal (query `i` may see keys `0..i`), created
directly on `device`.
""")
nb.solution("causal_mask", CAUSAL_REF)
nb.code("""
print(causal_mask(4).int())
""")
nb.tests("test_causal_mask_visible", 0, """
# Visible checks: bool, shape, diagonal, and the device argument.
_m = causal_mask(4)
assert _m.dtype == torch.bool, f"return a bool tensor, got {_m.dtype}"
assert _m.shape == (4, 4), f"expected (4, 4), got {tuple(_m.shape)}"
assert bool(_m.diagonal().all()), "a token may attend to itself"
assert causal_mask(3, device="meta").device.type == "meta", "create the mask on the requested device"
print("visible causal mask checks passed")
""")
nb.tests("test_causal_mask", 3, hidden(
    'GRADER.check("causal_mask", "T5", causal_mask)',
    'GRADER.check("causal_mask", "T1", causal_mask)',
    'GRADER.check("causal_mask", "device_kw", causal_mask)'))

nb.md("""
### Exercise 2 · `padding_mask(lengths, max_len)`

`lengths` is a `torch.long` tensor `(B,)` (as returned by `pad_batch` in section 01). Return a bool tensor
`(B, max_len)`, True at the real tokens (positions `0 .. length-1`, padding is on the right), on `lengths`'
device.
""")
nb.solution("padding_mask", PAD_REF)
nb.code("""
print(padding_mask(torch.tensor([3, 1]), 4).int())
""")
nb.tests("test_padding_mask_visible", 0, """
# Visible checks: bool and shape.
_m = padding_mask(torch.tensor([2, 4, 1]), 4)
assert _m.dtype == torch.bool, f"return a bool tensor, got {_m.dtype}"
assert _m.shape == (3, 4), f"expected (B, max_len) = (3, 4), got {tuple(_m.shape)}"
print("visible padding mask checks passed")
""")
nb.tests("test_padding_mask", 3, hidden(
    'GRADER.check("padding_mask", "batch", padding_mask)',
    'GRADER.check("padding_mask", "longer", padding_mask)'))
nb.tests("test_padding_mask_device", 1, hidden('GRADER.check("padding_mask", "meta", padding_mask)'))

nb.md("""
## 3 · Your turn, by hand

Scaled scores of a new 3-token example (rows = queries). Apply a **causal** mask and compute the weights:
blocked entries are exactly 0, and each row's allowed entries follow a softmax over the allowed scores only.
Type the `(3, 3)` result as **`masked_weights_hand`** (an array or a list of lists); two or three
decimals are enough.
""")
nb.setup("hand_example", HAND_GIVEN.strip("\n") + "\nprint(S_ex.shape)")
nb.solution("masked_weights_hand", """
# masked_weights_hand = the causally masked weights of S_ex, shape (3, 3)
### BEGIN SOLUTION
masked_weights_hand = [[1.0, 0.0, 0.0], [0.818, 0.182, 0.0], [0.078, 0.574, 0.348]]
### END SOLUTION
""")
nb.tests("test_masked_weights_hand_visible", 0, """
# Visible checks: shape and row sums only (the values are checked by hidden tests).
assert np.shape(masked_weights_hand) == (3, 3), "one row per query, one column per key"
assert np.allclose(np.sum(masked_weights_hand, axis=1), 1.0, atol=0.02), "each row should sum to 1"
print("shape and row sums look right")
""")
nb.tests("test_masked_weights_hand", 3, hidden('GRADER.check("masked_weights_hand", "value", masked_weights_hand)'))

nb.md("""
## 4 · Causal and padding together

In a padded batch for a decoder, query `i` of sequence `b` may see key `j` when **both** hold: `j <= i`
(causal) and `j < lengths[b]` (a real token). The causal part is `(T, T)`, the padding part `(B, T)` and
blocks **keys** (the last axis), so it is broadcast as `(B, 1, T)`.

### Exercise 3 · `combined_mask(lengths, T)`

Return a bool tensor `(B, T, T)` with `mask[b, i, j] = (j <= i) and (j < lengths[b])`, on `lengths`' device.
Write it self-contained (each exercise is graded on its own, so do not call your functions above).
""")
nb.solution("combined_mask", COMBINED_REF)
nb.tests("test_combined_mask_visible", 0, """
# Visible checks: bool and shape.
_m = combined_mask(torch.tensor([3, 2]), 4)
assert _m.dtype == torch.bool, f"return a bool tensor, got {_m.dtype}"
assert _m.shape == (2, 4, 4), f"expected (B, T, T) = (2, 4, 4), got {tuple(_m.shape)}"
print("visible combined mask checks passed")
""")
nb.tests("test_combined_mask", 3, hidden(
    'GRADER.check("combined_mask", "batch", combined_mask)',
    'GRADER.check("combined_mask", "single", combined_mask)'))
nb.tests("test_combined_mask_device", 1, hidden('GRADER.check("combined_mask", "meta", combined_mask)'))

nb.md("""
## 5 · Which fill value?

Blocked scores must end up with weight 0. `-inf` does that exactly, because `exp(-inf) = 0`. A finite fill
only works when it is **far below every real score**: the weight that leaks to a blocked key is about
`exp(fill - score)`. Below, two real scores and one blocked key, first with ordinary scores and then with
strongly negative ones. Raw scores have no fixed range — they scale with the lengths of the query and
key vectors, which training is free to grow — so the -500 row is a constructed example of the rule, not a
typical value.
""")
nb.code("""
for real in ([2.0, 1.0], [-500.0, -501.0]):
    print("real scores", real)
    for fill in (0.0, -10.0, -100.0, -1e3, -1e4, float("-inf")):
        s = torch.tensor(real + [fill], dtype=torch.float64)   # (3,) last key blocked
        print(f"   fill {fill:>8}: weight on the blocked key = {torch.softmax(s, -1)[-1].item():.2e}")
""")
nb.md("""
With ordinary scores, a fill of `0` leaks a lot and `-10` a little. With scores around -500, the fills `0`,
`-10` and `-100` sit **above** the real scores and take almost all the weight, while `-1e3`, `-1e4` and `-inf`
are fine. The rule: the fill must be far below every real score, and `-inf` always is.

So why do real code bases use a large finite number such as `-1e4`, `-1e9` or `torch.finfo(dtype).min`?

- **Low precision.** In float16 the most negative finite number is about -65504; `-1e9` does not fit and
  becomes `-inf` anyway, and `-1e4` fits. bfloat16 has float32's range.
- **No NaN for empty rows.** If every key of a row is blocked, a softmax over all `-inf` computes
  `exp(-inf - (-inf))`, which is NaN, and NaN then spreads through every later layer. With a finite fill the
  row becomes uniform instead: no NaN, but also not what we want.
""")
nb.code("""
print("float16 min:", torch.finfo(torch.float16).min, "  bfloat16 min:", torch.finfo(torch.bfloat16).min)
print("-1e9 in float16 :", torch.tensor(-1e9, dtype=torch.float16).item())
print("-1e4 in float16 :", torch.tensor(-1e4, dtype=torch.float16).item())
empty = torch.tensor([1.0, 2.0, 3.0])
print("all -inf        :", torch.softmax(empty.masked_fill(torch.ones(3, dtype=torch.bool), float("-inf")), -1))
print("all finfo.min   :", torch.softmax(empty.masked_fill(torch.ones(3, dtype=torch.bool), torch.finfo(torch.float32).min), -1))
""")
nb.md("""
**`masked_softmax`'s rule for a row with no allowed key: all-zero weights** (so its output is a zero
vector). One way that works with any fill: after the softmax, set the blocked positions to 0 with
`weights.masked_fill(~allowed, 0.0)`. Blocked entries were 0 or NaN (all blocked), and become exactly 0.

The rule belongs to `masked_softmax` (exercise 4), not to every module of the course. The attention modules of
sections 02, 04 and 06 are only ever given masks in which each query has an allowed key — a causal mask always
allows the diagonal, and a padded sequence has at least one real token — and the plain `-inf` recipe gives NaN
for an all-blocked row. PyTorch's `F.scaled_dot_product_attention` returns zeros there on the CPU (in the
PyTorch version the cell prints; other versions and backends may differ). The cell below shows both on one
such row.
""")
nb.code("""
q = torch.randn(1, 3, 4)                                # (B, T, d): 3 queries and keys
blocked_first = torch.ones(3, 3, dtype=torch.bool).tril()
blocked_first[0] = False                                # query 0 may attend to nothing
w = torch.softmax((q @ q.transpose(-2, -1)).masked_fill(~blocked_first, float("-inf")), dim=-1)
print("plain -inf recipe, row 0:", w[0, 0])
print("F.scaled_dot_product_attention, row 0 of the output:",
      F.scaled_dot_product_attention(q, q, q, attn_mask=blocked_first)[0, 0])
print("PyTorch", torch.__version__, "on", q.device)
""")
nb.md("""
### Exercise 4 · `masked_softmax(scores, mask)`

`scores (..., T_q, T_k)`, `mask` bool or 0/1, broadcastable to `scores`. Return the weights, same shape,
dtype and device as `scores`: blocked keys get 0, each row's allowed keys follow a softmax, and a row with no
allowed key is all zeros. It must hold for any float dtype and for strongly negative scores.
""")
nb.solution("masked_softmax", MSM_REF)
nb.tests("test_masked_softmax_visible", 0, """
# Visible checks: shape, blocked keys are 0, allowed keys sum to 1.
_s = torch.randn(2, 4, 4)
_w = masked_softmax(_s, torch.ones(4, 4, dtype=torch.bool).tril())
assert _w.shape == (2, 4, 4), f"the weights keep the scores' shape, got {tuple(_w.shape)}"
assert torch.all(_w.triu(1) == 0), "blocked keys must get weight exactly 0"
assert torch.allclose(_w.sum(-1), torch.ones(2, 4)), "each row with allowed keys should sum to 1"
print("visible masked softmax checks passed")
""")
nb.tests("test_masked_softmax", 3, hidden(
    'GRADER.check("masked_softmax", "causal", masked_softmax)',
    'GRADER.check("masked_softmax", "padding01", masked_softmax)',
    'GRADER.check("masked_softmax", "float64", masked_softmax)'))
nb.tests("test_masked_softmax_fill", 1, hidden('GRADER.check("masked_softmax", "very_negative", masked_softmax)'))
nb.tests("test_masked_softmax_dtype_device", 1, hidden(
    'GRADER.check("masked_softmax", "bfloat16", masked_softmax)',
    'GRADER.check("masked_softmax", "meta", masked_softmax)'))
nb.tests("test_masked_softmax_empty_row", 1, hidden('GRADER.check("masked_softmax", "empty_row", masked_softmax)'))

nb.md("""
## 6 · Putting it together: masked attention on a padded batch

Two sentences, padded to the same length; causal and padding masks combined, then the masked softmax and the
weighted sum of values. The heatmap shows the second sentence: a lower triangle, and no weight on `[PAD]`.
""")
nb.code("""
seed_everything(0)
sentences = [["the", "cat", "sat", "on", "mat"], ["a", "dog", "ran", "[PAD]", "[PAD]"]]
lengths = torch.tensor([5, 3])                          # (B=2,)
B, T, d_k = 2, 5, 8
Q, K, V = torch.randn(B, T, d_k), torch.randn(B, T, d_k), torch.randn(B, T, d_k)   # each (B, T, d_k)
mask = combined_mask(lengths, T)                        # (B, T, T)
weights = masked_softmax(Q @ K.transpose(-2, -1) / math.sqrt(d_k), mask)   # (B, T, T)
out = weights @ V                                       # (B, T, d_k)
print("weight on padding keys:", weights[1, :, 3:].abs().max().item())
print("row sums of sentence 2:", weights[1].sum(-1))
attention_heatmap(weights[1], keys=sentences[1], title="Causal + padding mask");
""")

nb.md("""
## Summary

- A mask says which keys a query may attend to: True/1 = allowed, broadcastable to `(..., T_q, T_k)`.
- Causal: `(T, T)`, True on and below the diagonal. Padding: `(B, T)`, True at real tokens, broadcast over
  queries as `(B, 1, T)`. Combined with AND.
- Blocked scores become `-inf` **before** the softmax; masking after the softmax breaks the row sums.
- A finite fill must be far below every real score; `-1e4` or `finfo(dtype).min` are practical in low
  precision, a small fill like `-10` leaks.
- A row with no allowed key: softmax over all `-inf` is NaN; `masked_softmax` defines it as all zeros
  (as `F.scaled_dot_product_attention` does on the CPU); the other modules are never given such a row.

### Checkpoint

- [ ] I can draw the causal mask for `T = 4` and the padding mask for lengths `[3, 1]`.
- [ ] I can compute masked weights by hand.
- [ ] I can explain why `0` is a wrong fill value and when `-1e4` is fine.
- [ ] I know what happens to a fully masked row, and how my code avoids NaN.
- [ ] My masks and `masked_softmax` create nothing on a fixed device.
""")

if __name__ == "__main__":
    print(nb.save(f"source/{SECTION}/{SECTION}.ipynb"))
