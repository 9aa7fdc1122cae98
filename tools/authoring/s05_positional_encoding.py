"""Build source/05_positional_encoding/05_positional_encoding.ipynb: ``.venv/bin/python -m tools.authoring.s05_positional_encoding``.

Solution cells come from graders/s05_positional_encoding.py (one reference for notebook and hidden tests).
"""
from graders.s05_positional_encoding import PE_REF, ROPE_REF
from tools.authoring import setup_source
from tools.nbauthor import Notebook

SECTION = "05_positional_encoding"
nb = Notebook()

nb.md("""
# 05 · Positional encoding

Attention compares contents, never positions. In this section you will

* show that self-attention is blind to word order, and that adding positions fixes it;
* compute the sinusoidal encoding of the original Transformer by hand, then in code (graded);
* see why a fixed rotation links position `pos` to `pos + k`;
* build rotary embeddings (RoPE), the scheme of the Llama family (graded, by values and by properties).
""")

nb.setup("setup", setup_source(SECTION, "import matplotlib.pyplot as plt"))

nb.md("""
## 1 · Attention cannot see order

Shuffle the tokens, run self-attention, then put the outputs back in the original order: you get the
same outputs. Nothing in softmax(QKᵀ/√d_k)V mentions a position, so "dog bites man" and "man bites dog"
give each word the same vector.
""")

nb.code("""
torch.manual_seed(0)
attn = nn.MultiheadAttention(16, 4, batch_first=True)
x = torch.randn(1, 5, 16)                        # (B, T, d_model)
perm = torch.tensor([3, 0, 4, 1, 2])
with torch.no_grad():
    out, _ = attn(x, x, x)
    out_perm, _ = attn(x[:, perm], x[:, perm], x[:, perm])
unpermuted = torch.empty_like(out_perm)
unpermuted[:, perm] = out_perm                   # undo the shuffle
print(f"max difference after un-permuting: {(out - unpermuted).abs().max().item():.1e}")
""")

nb.md("""
The difference is float32 rounding noise. Now add a different vector to each *position* before
attention (any distinct vectors will do here) and repeat: the shuffled sentence is no longer the same input.
""")

nb.code("""
pos_vectors = torch.randn(5, 16)                 # (T, d_model): one vector per position
xp = x + pos_vectors                              # (B, T, d_model)
xs = x[:, perm] + pos_vectors                     # shuffled tokens, positions stay in place
with torch.no_grad():
    out, _ = attn(xp, xp, xp)
    out_perm, _ = attn(xs, xs, xs)
unpermuted = torch.empty_like(out_perm)
unpermuted[:, perm] = out_perm
print(f"max difference with positions added: {(out - unpermuted).abs().max().item():.2f}")
""")

nb.md("""
## 2 · Sinusoidal encoding

The original Transformer adds a fixed vector per position. Features come in pairs `(2i, 2i+1)`; pair `i`
is a sine and a cosine of the same angle, with a frequency that falls from pair to pair:

$$PE[pos, 2i] = \\sin\\left(\\frac{pos}{10000^{2i/d}}\\right), \\qquad PE[pos, 2i+1] = \\cos\\left(\\frac{pos}{10000^{2i/d}}\\right).$$

By hand for `d_model = 4`: pair 0 divides by 10000⁰ = 1 and pair 1 by 10000^(2/4) = 100. Position 0
has all angles 0, so it is [sin 0, cos 0, sin 0, cos 0] = [0, 1, 0, 1]. Position 1 has angles 1 and 0.01:
[0.841, 0.540, 0.010, 1.000]. Position 2 starts with sin 2 = 0.909 and cos 2 = −0.416.
""")

nb.code("""
def pe_by_hand(pos, d=4):
    values = []
    for i in range(d // 2):
        angle = pos / 10000 ** (2 * i / d)
        values += [math.sin(angle), math.cos(angle)]
    return "[" + ", ".join(f"{v:.3f}" for v in values) + "]"

for pos in range(3):
    print(f"position {pos}: {pe_by_hand(pos)}")
""")

nb.md("""
### Exercise 1 (4 points) · `positional_encoding(T, d_model)`

Return a float tensor of shape `(T, d_model)` (default float32) with `PE[pos, 2i] = sin(pos/10000^(2i/d_model))`
and `PE[pos, 2i+1] = cos(same)`, positions `0 … T−1`, `d_model` even. Avoid Python loops: build a `(T, 1)`
column of positions and a row of `d_model/2` frequencies and let broadcasting make the `(T, d_model/2)` angles.
""")

nb.solution("positional_encoding", PE_REF)

nb.tests("test_pe_shapes", 0, """
_pe = positional_encoding(5, 8)
assert isinstance(_pe, torch.Tensor) and _pe.shape == (5, 8), "expected a (T, d_model) tensor"
assert _pe.dtype == torch.float32, "use the default float dtype"
assert torch.allclose(_pe[0], torch.tensor([0., 1.] * 4)), "position 0 should be [0, 1, 0, 1, ...]"
print("shapes ok")
""")

nb.tests("test_pe_values", 4, """
### BEGIN HIDDEN TESTS
GRADER.check("positional_encoding", "table_5x8", positional_encoding)
GRADER.check("positional_encoding", "one_position", positional_encoding)
GRADER.check("positional_encoding", "d6", positional_encoding)
GRADER.check("positional_encoding", "long", positional_encoding)
### END HIDDEN TESTS
""")

nb.md("""
The table for 5 positions and 8 features: the first pair turns fast (a full turn every 2π ≈ 6.3
positions), the last pair so slowly that it barely leaves [0, 1] here.
""")

nb.code("""
np.set_printoptions(precision=3, suppress=True)
print(positional_encoding(5, 8).numpy())
print(f"2π = {2 * math.pi:.1f}")
""")

nb.code("""
pe = positional_encoding(64, 64)                   # (T, d_model)
fig, ax = plt.subplots(figsize=(6, 4))
im = ax.imshow(pe.numpy(), cmap="RdBu", aspect="auto", vmin=-1, vmax=1)
ax.set_xlabel("feature (2i = sin, 2i+1 = cos)")
ax.set_ylabel("position")
ax.set_title("Sinusoidal positional encoding, d_model = 64")
fig.colorbar(im, ax=ax)
plt.show()
""")

nb.md("""
Left columns change quickly from row to row, right columns slowly: every row is a different mix of
waves, so every position gets its own pattern.

## 3 · Moving by k positions is a rotation

Pair `i` of position `pos` is the point (sin a, cos a) with a = pos·ω_i, ω_i = 10000^(−2i/d). Moving k
positions adds k·ω_i to the angle, and adding an angle is a rotation — one that depends on k, not on pos.
So `PE[pos + k] = M_k · PE[pos]` for one fixed block-diagonal matrix `M_k`. That makes "k tokens back"
something a linear layer can learn.
""")

nb.code("""
T, d, k = 20, 8, 3
pe = positional_encoding(T + k, d).double()                       # (T + k, d)
omega = 10000 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)
M = torch.zeros(d, d, dtype=torch.float64)
for i, w in enumerate(omega):
    c, s = math.cos(k * w), math.sin(k * w)
    M[2*i:2*i+2, 2*i:2*i+2] = torch.tensor([[c, s], [-s, c]])   # acts on (sin, cos)
shifted = pe[:T] @ M.T                                             # (T, d): M_k · PE[pos] for every pos
print(f"max |PE[pos+{k}] - M_{k} PE[pos]| over {T} positions: {(shifted - pe[k:]).abs().max().item():.1e}")
""")

nb.md("""
## 4 · Rotary embeddings (RoPE)

Most open LLMs (Llama, Mistral, Qwen) do not add anything to the embeddings. They **rotate** the queries
and keys inside every attention layer: pair `(2i, 2i+1)` of the vector at position `t` turns by the angle
`t·θ_i` with `θ_i = 10000^(−2i/d)`:

$$(a, b) \\mapsto (a\\cos t\\theta_i - b\\sin t\\theta_i,\\; a\\sin t\\theta_i + b\\cos t\\theta_i).$$

Rotations keep lengths, and the dot product of a query rotated by mθ and a key rotated by nθ only sees
the difference (m − n)θ. So attention scores depend on *relative* positions, with no extra parameters.
A 2-D example: the vector [1, 0] at positions 0 to 3 with θ = 1 radian.
""")

nb.code("""
for t in range(4):
    a, b = 1.0, 0.0
    c, s = math.cos(t * 1.0), math.sin(t * 1.0)
    print(f"t={t}: ({a * c - b * s:+.3f}, {a * s + b * c:+.3f})  length {math.hypot(a * c - b * s, a * s + b * c):.3f}")
""")

nb.md("""
### Exercise 2 (7 points) · `apply_rope(x)`

`x` has shape `(..., T, d)` with `d` even: positions are the second-to-last axis, starting at 0 (a
`(T, d)` input or a `(B, h, T, d)` batch of heads). Return a tensor of the same shape, device and dtype in
which pair `(2i, 2i+1)` at position `t` is rotated by `t · 10000^(−2i/d)`. Keep the pairs interleaved
(features 0 and 1 form pair 0, 2 and 3 pair 1, …). Tip: compute the angles in at least float32, even for
a bfloat16 input, and cast cos and sin to `x.dtype`.

*Layouts.* This interleaved layout is the one of the RoFormer paper. Hugging Face's Llama code uses the
"rotate-half" layout instead: feature `i` is paired with feature `i + d/2`. The two are the same rotation
up to a fixed permutation of the features, so each keeps lengths and makes `q·k` depend on `m − n` only —
but their weights are not interchangeable: checkpoints trained with one layout need their `W_Q`/`W_K` rows
permuted to be used with the other.

The hidden tests check your values *and* the two properties: lengths preserved, and
`rope(q)[m] · rope(k)[n]` depending on `m − n` only.
""")

nb.solution("apply_rope", ROPE_REF)

nb.tests("test_rope_shapes", 0, """
_x = torch.randn(2, 3, 5, 8)
_y = apply_rope(_x)
assert _y.shape == _x.shape and _y.dtype == _x.dtype, "apply_rope must keep the shape and dtype"
assert torch.allclose(_y[..., 0, :], _x[..., 0, :], atol=1e-6), "position 0 turns by angle 0: unchanged"
assert not torch.allclose(_y[..., 1, :], _x[..., 1, :]), "position 1 should be rotated"
print("shapes ok")
""")

nb.tests("test_rope_values", 3, """
### BEGIN HIDDEN TESTS
GRADER.check("apply_rope", "unbatched", apply_rope)
GRADER.check("apply_rope", "heads", apply_rope)
### END HIDDEN TESTS
""")

nb.tests("test_rope_dtypes_devices", 2, """
### BEGIN HIDDEN TESTS
GRADER.check("apply_rope", "float64", apply_rope)
GRADER.check("apply_rope", "bfloat16", apply_rope)
GRADER.check("apply_rope", "best_device", apply_rope)
GRADER.check("apply_rope", "meta", apply_rope)
### END HIDDEN TESTS
""")

nb.tests("test_rope_properties", 2, """
### BEGIN HIDDEN TESTS
GRADER.check("apply_rope", "properties", apply_rope)
GRADER.check("apply_rope", "properties_best", apply_rope)
### END HIDDEN TESTS
""")

nb.md("""
See the relative-position property with your function: put one query vector at every position and one
key vector at every position, rotate both, and compare scores whose positions differ by the same amount.
""")

nb.code("""
torch.manual_seed(3)
T, d = 8, 16
q = apply_rope(torch.randn(d).expand(T, d))        # (T, d): the same query at every position
k = apply_rope(torch.randn(d).expand(T, d))        # (T, d): the same key at every position
scores = q @ k.T                                   # (T, T): query at m, key at n
for m, n in [(2, 0), (5, 3), (7, 5), (3, 3), (6, 6)]:
    print(f"m={m}, n={n}, m-n={m - n}: score {scores[m, n].item():+.4f}")
print(f"lengths kept: {torch.allclose(q.norm(dim=-1), q[0].norm().expand(T))}")
""")

nb.md("""
## 5 · Two more schemes, one line each

* **Learned positions** (BERT, GPT-2): an `nn.Embedding(max_len, d_model)` table added to the tokens —
  simple, but it knows no position beyond `max_len`.
* **ALiBi** (BLOOM, MPT): no vectors at all; each head adds `−slope · (m − n)` to the score of query `m`
  and key `n`, so far-away tokens get a linear penalty.

## Summary

* Self-attention is permutation-equivariant: without positions, word order is invisible.
* Sinusoidal encoding: pair `i` = (sin, cos) of `pos · 10000^(−2i/d)`, added to the embeddings; a shift
  by k positions is a fixed rotation.
* RoPE rotates queries and keys instead, so scores depend on `m − n`; lengths are unchanged.

### Checkpoint — move on when you can …

- [ ] show with code that attention without positions ignores order;
- [ ] compute a sinusoidal encoding for a small `d_model` by hand;
- [ ] explain why `PE[pos + k]` is a rotation of `PE[pos]`;
- [ ] implement RoPE and test its two properties;
- [ ] name where learned positions and ALiBi differ from both.
""")

if __name__ == "__main__":
    print(nb.save(f"source/{SECTION}/{SECTION}.ipynb"))
