"""Build source/06_transformer_block/06_transformer_block.ipynb: ``.venv/bin/python -m tools.authoring.s06_transformer_block``.

Solution cells and given code come from graders/s06_transformer_block.py.
"""
from graders.s06_transformer_block import BLOCK_REF, CROSS_REF, FAMILIES_GIVEN, FAMILY_REF, LN_REF, MHA_GIVEN
from tools.authoring import setup_source
from tools.nbauthor import Notebook

SECTION = "06_transformer_block"
nb = Notebook()

nb.md("""
# 06 · The Transformer block

A Transformer is one block repeated: multi-head attention and a small feed-forward network, each wrapped
in a residual connection and a LayerNorm. In this section you will

* count the feed-forward network's parameters and see why residuals help gradients;
* write LayerNorm by hand (graded) and assemble the block in its Post-LN and Pre-LN forms (graded);
* stack blocks into a tiny decoder-only language model with a causal mask;
* *measure* how gradients reach the first block of a deep Post-LN and Pre-LN stack;
* pick the right family (encoder-only, decoder-only, encoder-decoder) for a task (graded) and write
  cross-attention (graded).
""")

nb.setup("setup", setup_source(SECTION, "import matplotlib.pyplot as plt\nfrom attncourse import block_diagram"))

nb.md("""
## 1 · The feed-forward network

Attention mixes information *between* tokens. The feed-forward network (FFN) then processes each token on
its own: expand `d_model → d_ff` (usually 4·d_model), apply a non-linearity (GELU), project back. For
`d_model = 512`, `d_ff = 2048` that is 512·2048 + 2048 weights and biases in, 2048·512 + 512 out:
2,099,712 parameters. Weights against weights: the FFN's 2,097,152 weights are twice the 1,048,576
weights of the four attention projections (`W_Q`, `W_K`, `W_V`, `W_O`, each 512 × 512). For BERT-base
sizes (768 and 3072) the FFN has 4,722,432 parameters.
""")

nb.code("""
for d_model, d_ff in [(512, 2048), (768, 3072)]:
    ffn = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))
    weights = sum(p.numel() for n, p in ffn.named_parameters() if n.endswith("weight"))
    print(f"d_model={d_model}, d_ff={d_ff}: {sum(p.numel() for p in ffn.parameters()):,} parameters, "
          f"{weights:,} of them weights")
print(f"attention projections (weights only), d_model=512: {4 * 512 * 512:,}")
""")

nb.md("""
## 2 · Residual connections

A residual connection adds a sub-layer's input to its output: `x + f(x)`. The sub-layer only learns a
*change*, and the gradient has a direct path: if `f(x) = 0.1·x`, the slope of `f` alone is 0.1 (and
0.1 · 0.1 · … vanishes over many layers) while the slope of `x + f(x)` is 1.1. With input [1, 2] and
sub-layer output [0.1, −0.2], the residual gives [1.1, 1.8].
""")

nb.code("""
f = lambda x: 0.1 * x
g = lambda x: x + f(x)
e = 1e-6
print("slopes:", round((f(2 + e) - f(2 - e)) / (2 * e), 3), round((g(2 + e) - g(2 - e)) / (2 * e), 3))
x, fx = np.array([1, 2]), np.array([0.1, -0.2])
print("input", x, "+ sub-layer", fx, "= residual", x + fx)
""")

nb.md("""
## 3 · Layer normalisation

LayerNorm rescales each token's vector to mean 0 and variance 1 over its features (then, in
`nn.LayerNorm`, a learned scale and shift). For [1, 2, 3, 4]: mean 2.5, gaps −1.5, −0.5, 0.5, 1.5,
variance (2.25 + 0.25 + 0.25 + 2.25) / 4 = 1.25 — divided by D, not D − 1 — and standard deviation 1.118,
so the result is [−1.342, −0.447, 0.447, 1.342].

A constant vector such as [10, 10, 10, 10] has variance 0: without help we would divide 0 by 0. A small
ε inside the square root, √(var + ε), turns it into 0 / √ε = 0.
""")

nb.code("""
x = np.array([1., 2., 3., 4.])
print("mean", x.mean(), "gaps", x - x.mean(), "squared", (x - x.mean()) ** 2)
print("variance", x.var(), "std", round(float(np.sqrt(x.var())), 3))
print("normalised", np.round((x - x.mean()) / np.sqrt(x.var() + 1e-5), 3))
c = np.array([10., 10., 10., 10.])
print("constant  ", (c - c.mean()) / np.sqrt(c.var() + 1e-5))
""")

nb.md("""
**Why LayerNorm and not BatchNorm?** BatchNorm, the normaliser of CNNs, computes each feature's mean and
variance *across the batch* (and here across positions too), so a token's output depends on which other
sentences share its batch and on their padding, and it needs running averages at inference. LayerNorm uses
only the token's own features: the same token gives the same output whatever else is in the batch, for any
sequence length. The cell changes the *other* sentence of a batch of two and measures how much the first
sentence's output moves.
""")
nb.code("""
torch.manual_seed(0)
batch = torch.randn(2, 5, 8)                       # (B=2, T=5, d=8)
other = batch.clone()
other[1] = 10 * torch.randn(5, 8)                  # replace sentence 1 only
bn, ln = nn.BatchNorm1d(8), nn.LayerNorm(8)        # BatchNorm1d wants (B, d, T)
for name, norm in [("BatchNorm", lambda t: bn(t.transpose(1, 2)).transpose(1, 2)), ("LayerNorm", ln)]:
    change = (norm(batch)[0] - norm(other)[0]).abs().max().item()
    print(f"{name}: sentence 0's output moved by {change:.3f} when sentence 1 changed")
""")

nb.md("""
### Exercise 1 (5 points) · `layer_norm(x, eps=1e-5)`

Normalise over the last dimension, with no learned parameters: subtract the mean, divide by
√(variance + eps) with the variance divided by D (biased). Any shape `(..., D)`; keep the input's
device and dtype.
""")

nb.solution("layer_norm", LN_REF)

nb.tests("test_ln_shapes", 0, """
_y = layer_norm(torch.tensor([[1., 2., 3., 4.]]))
assert _y.shape == (1, 4), "layer_norm must keep the shape"
assert abs(_y.mean().item()) < 1e-6, "each row should have mean 0"
assert torch.isfinite(layer_norm(torch.full((2, 4), 10.0))).all(), "a constant row must not give NaN"
print("shapes ok")
""")

nb.tests("test_ln_values", 3, """
### BEGIN HIDDEN TESTS
GRADER.check("layer_norm", "batched", layer_norm)
GRADER.check("layer_norm", "one_token", layer_norm)
GRADER.check("layer_norm", "eps", layer_norm)
GRADER.check("layer_norm", "tiny_variance", layer_norm)
### END HIDDEN TESTS
""")

nb.tests("test_ln_dtypes_devices", 2, """
### BEGIN HIDDEN TESTS
GRADER.check("layer_norm", "float64", layer_norm)
GRADER.check("layer_norm", "bfloat16", layer_norm)
GRADER.check("layer_norm", "best_device", layer_norm)
GRADER.check("layer_norm", "meta", layer_norm)
### END HIDDEN TESTS
""")

nb.md("""
Your function agrees with `nn.LayerNorm` (whose scale starts at 1 and shift at 0):
""")

nb.code("""
x = torch.randn(2, 5, 16)
compare("layer_norm vs nn.LayerNorm", layer_norm(x), nn.LayerNorm(16)(x), atol=1e-5)
""")

nb.md("""
## 4 · The block

A `MultiHeadAttention` with section 04's contract is given below (run the cell). It does what your
section 04 module does, but hands the scores, mask, softmax and weighted sum to PyTorch's fused kernel
`F.scaled_dot_product_attention`. The block has two sub-layers, attention and the FFN, each with a
residual and a LayerNorm. Where the LayerNorm sits gives two forms:

* **Post-LN** (the original 2017 Transformer, BERT): `x = ln1(x + attn(x))`, then `x = ln2(x + ffn(x))`.
* **Pre-LN** (GPT-2 and later, most LLMs): `x = x + attn(ln1(x))`, then `x = x + ffn(ln2(x))`;
  the residual path is never normalised.

Input and output have the same shape `(B, T, d_model)`, which is why blocks stack.
""")

nb.setup("given_mha", "# Given: multi-head attention with section 04's contract (just run this cell).\n" + MHA_GIVEN)

nb.md("""
The two forms, drawn with the shape on every arrow (`B = 2` sentences, `T = 5` tokens, `d_model = 16`,
4 heads, `d_ff = 64`). Everything between blocks is `(B, T, d_model)`; only the inside of attention (per-head
Q, K, V and the `(T, T)` weights) and of the FFN (`d_ff` wide) differ.
""")
nb.code("""
fig, axes = plt.subplots(1, 2, figsize=(12, 8.4))
block_diagram(batch=2, seq=5, d_model=16, n_heads=4, pre_ln=False, ax=axes[0])
block_diagram(batch=2, seq=5, d_model=16, n_heads=4, pre_ln=True, ax=axes[1])
plt.show()
""")

nb.md("""
### Exercise 2 (7 points) · `TransformerBlock`

Contract: `TransformerBlock(d_model=64, n_heads=4, d_ff=None, pre_ln=False)` (`d_ff` defaults to
4·d_model) with sub-modules `attn = MultiHeadAttention(d_model, n_heads)`, `ln1`, `ln2`
(`nn.LayerNorm(d_model)`) and `ffn = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))`.
`forward(x, mask=None)` computes the Post-LN or Pre-LN form above, passing `mask` to the attention. No dropout.
""")

nb.solution("transformer_block", BLOCK_REF)

nb.tests("test_block_shapes", 0, """
torch.manual_seed(0)
_b = TransformerBlock(16, 4)
assert isinstance(_b.attn, MultiHeadAttention) and isinstance(_b.ffn, nn.Sequential), "use the contract's sub-modules"
assert _b.ffn[0].out_features == 64, "d_ff should default to 4 * d_model"
_x = torch.randn(2, 5, 16)
assert _b(_x).shape == (2, 5, 16), "the block must keep the shape (B, T, d_model)"
assert TransformerBlock(16, 4, pre_ln=True)(_x, torch.ones(5, 5).tril().bool()).shape == (2, 5, 16)
print("shapes ok")
""")

nb.tests("test_block_post_ln", 3, """
### BEGIN HIDDEN TESTS
GRADER.check("TransformerBlock", "post_ln", TransformerBlock)
GRADER.check("TransformerBlock", "post_ln_causal", TransformerBlock)
GRADER.check("TransformerBlock", "d_ff", TransformerBlock)
GRADER.check("TransformerBlock", "defaults", TransformerBlock)
### END HIDDEN TESTS
""")

nb.tests("test_block_pre_ln", 2, """
### BEGIN HIDDEN TESTS
GRADER.check("TransformerBlock", "pre_ln", TransformerBlock)
GRADER.check("TransformerBlock", "pre_ln_padding", TransformerBlock)
### END HIDDEN TESTS
""")

nb.tests("test_block_dtypes_devices", 2, """
### BEGIN HIDDEN TESTS
GRADER.check("TransformerBlock", "float64", TransformerBlock)
GRADER.check("TransformerBlock", "bfloat16", TransformerBlock)
GRADER.check("TransformerBlock", "best_device", TransformerBlock)
GRADER.check("TransformerBlock", "meta_post", TransformerBlock)
GRADER.check("TransformerBlock", "meta_pre", TransformerBlock)
### END HIDDEN TESTS
""")

nb.md("""
Shape tracking through one block, for a batch of 2 sentences of 5 tokens, `d_model = 16`, `d_ff = 64`:
""")

nb.code("""
block = TransformerBlock(d_model=16, n_heads=4)
x = torch.randn(2, 5, 16)                          # (B, T, d_model)
print("input        ", tuple(x.shape))
a = block.attn(x)                                  # (B, T, d_model)
print("attention    ", tuple(a.shape))
h = block.ffn[0](x + a)                            # (B, T, d_ff)
print("inside FFN   ", tuple(h.shape))
print("block output ", tuple(block(x).shape))      # (B, T, d_model)
""")

nb.md("""
**Same numbers as `nn.TransformerEncoderLayer`.** PyTorch's encoder layer is this block (with
`activation="gelu"`, `dropout=0`, `batch_first=True`; `norm_first=True` is Pre-LN). Copy your block's
weights into it and compare: its `in_proj` packs Q, K and V in the same order as `qkv`, and its boolean
`src_mask` marks **blocked** positions, the opposite of ours. The last line compares your Post-LN block
with PyTorch's *Pre-LN* layer: that one must be WRONG — if your Pre-LN and Post-LN were swapped, the first
two lines would be WRONG instead.
""")
nb.code("""
def as_torch_layer(block, norm_first):
    \"\"\"nn.TransformerEncoderLayer holding a copy of `block`'s weights.\"\"\"
    d_model, d_ff = block.ln1.normalized_shape[0], block.ffn[0].out_features
    layer = nn.TransformerEncoderLayer(d_model, block.attn.n_heads, d_ff, dropout=0.0, activation="gelu",
                                       batch_first=True, norm_first=norm_first).eval()
    pairs = [(layer.self_attn.in_proj_weight, block.attn.qkv.weight), (layer.self_attn.in_proj_bias, block.attn.qkv.bias),
             (layer.self_attn.out_proj.weight, block.attn.out.weight), (layer.self_attn.out_proj.bias, block.attn.out.bias),
             (layer.linear1.weight, block.ffn[0].weight), (layer.linear1.bias, block.ffn[0].bias),
             (layer.linear2.weight, block.ffn[2].weight), (layer.linear2.bias, block.ffn[2].bias),
             (layer.norm1.weight, block.ln1.weight), (layer.norm1.bias, block.ln1.bias),
             (layer.norm2.weight, block.ln2.weight), (layer.norm2.bias, block.ln2.bias)]
    with torch.no_grad():
        for theirs, ours in pairs:
            theirs.copy_(ours)
    return layer


torch.manual_seed(0)
x = torch.randn(2, 5, 16)                                  # (B, T, d_model)
causal = torch.ones(5, 5, dtype=torch.bool).tril()         # ours: True = may attend
for pre_ln in (False, True):
    ours = TransformerBlock(d_model=16, n_heads=4, pre_ln=pre_ln).eval()
    theirs = as_torch_layer(ours, norm_first=pre_ln)
    with torch.no_grad():
        compare(f"{'Pre' if pre_ln else 'Post'}-LN, causal", ours(x, causal), theirs(x, src_mask=~causal), atol=1e-5)
post = TransformerBlock(d_model=16, n_heads=4, pre_ln=False).eval()
with torch.no_grad():
    compare("Post-LN vs norm_first", post(x), as_torch_layer(post, norm_first=True)(x), atol=1e-5)
""")

nb.md("""
### Exercise (manual, 2 points) · The block on paper

Draw the **Post-LN** block for `B = 4` sentences of `T = 12` tokens, `d_model = 32`, **2** heads and
`d_ff = 128`, from input to output: every box (attention, the adds, the LayerNorms, the FFN), the two
residual paths, and the shape on every arrow — including Q, K and V per head and the attention weights.
Write it in the cell below as a list from input to output (or attach a photo/drawing saved in
`figures/`), *then* check yourself with
`block_diagram(batch=4, seq=12, d_model=32, n_heads=2, d_ff=128, pre_ln=False)`.
""")
nb.manual("block_diagram", 2, r"""
### BEGIN SOLUTION
**Rubric (2 points).**

* **1 point — the order and the residuals.** Post-LN: attention → add → LayerNorm (ln1) → FFN → add →
  LayerNorm (ln2); the first residual carries the block's input to the first add, the second carries
  ln1's output to the second add. A Pre-LN order (LayerNorm before each sub-layer): 0.
* **1 point — the shapes.** Between boxes `(4, 12, 32)` everywhere; Q, K, V per head `(4, 2, 12, 16)`
  (`d_k = 32 / 2`); attention weights `(4, 2, 12, 12)`; inside the FFN `(4, 12, 128)`. One wrong shape
  (e.g. weights `(4, 12, 12)` without the heads, or `d_k = 32`): 0.

*Sample:* x (4, 12, 32) → multi-head attention [Q, K, V (4, 2, 12, 16); weights (4, 2, 12, 12)] →
(4, 12, 32) → + x → (4, 12, 32) → ln1 → (4, 12, 32) → FFN [(4, 12, 128) inside] → (4, 12, 32) → + ln1's
output → ln2 → output (4, 12, 32).
### END SOLUTION
""")

nb.md("""
## 5 · A tiny decoder-only model

Stack blocks, add token and (learned) position embeddings in front, a final LayerNorm and a linear layer
to vocabulary logits at the end, and pass a **causal** mask to every block: that is the skeleton of GPT and
Llama. The mask is built on the input's device, so the model runs unchanged on a GPU.
""")

nb.code("""
class TinyDecoder(nn.Module):
    def __init__(self, vocab=50, d_model=32, n_heads=4, n_layers=2, max_len=16):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList(TransformerBlock(d_model, n_heads, pre_ln=True) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, ids):                                   # ids: (B, T) token ids
        T = ids.shape[1]
        h = self.tok(ids) + self.pos(torch.arange(T, device=ids.device))   # (B, T, d_model)
        causal = torch.ones(T, T, dtype=torch.bool, device=ids.device).tril()  # (T, T)
        for blk in self.blocks:
            h = blk(h, causal)                                # (B, T, d_model)
        return self.head(self.ln_f(h))                        # (B, T, vocab)

torch.manual_seed(0)
model = TinyDecoder().eval()
ids = torch.randint(0, 50, (2, 8))                            # (B, T)
logits = model(ids)
print("logits", tuple(logits.shape))
changed = ids.clone()
changed[:, -1] = (changed[:, -1] + 1) % 50                    # change only the last token
diff = (model(changed) - logits).abs().amax(dim=(0, 2))       # (T,): change per position
print("change at positions 0-6:", diff[:-1].max().item(), "| at the last position:", diff[-1].item() > 0)
""")

nb.md("""
Changing the last token leaves every earlier position's logits exactly unchanged: with the causal mask,
no position can see the future.

## 6 · Post-LN or Pre-LN? A measurement

The original paper used Post-LN; almost every recent model uses Pre-LN, because deep Post-LN stacks are hard
to train without a careful learning-rate warm-up. The usual explanation is about gradients: in Post-LN
every residual path passes through a LayerNorm, in Pre-LN an untouched identity path runs from the loss to
the first block. Let us measure instead of believing it: 24-block stacks at initialisation, a next-token
loss on random tokens, and the gradient norm of each block's parameters (averages over three seeds).
""")

nb.code("""
def block_grad_norms(pre_ln, n_layers=24, d_model=32, seed=0):
    torch.manual_seed(seed)
    blocks = nn.ModuleList(TransformerBlock(d_model, 4, pre_ln=pre_ln) for _ in range(n_layers))
    emb, head = nn.Embedding(50, d_model), nn.Linear(d_model, 50)
    final_ln = nn.LayerNorm(d_model) if pre_ln else nn.Identity()   # Pre-LN stacks end with a LayerNorm
    ids = torch.randint(0, 50, (8, 16))                              # (B, T)
    causal = torch.ones(16, 16, dtype=torch.bool).tril()
    h = emb(ids)                                                     # (B, T, d_model)
    for blk in blocks:
        h = blk(h, causal)
    logits = head(final_ln(h))                                       # (B, T, vocab)
    loss = F.cross_entropy(logits[:, :-1].reshape(-1, 50), ids[:, 1:].reshape(-1))
    loss.backward()
    return [torch.sqrt(sum((p.grad ** 2).sum() for p in blk.parameters())).item() for blk in blocks]

show = [0, 5, 11, 17, 23]
print("block:      " + "".join(f"{i + 1:>8d}" for i in show))
for name, pre in [("Post-LN", False), ("Pre-LN", True)]:
    norms = np.mean([block_grad_norms(pre, seed=s) for s in range(3)], axis=0)   # (n_layers,)
    print(f"{name:8s}    " + "".join(f"{norms[i]:8.3f}" for i in show),
          f"  first/last {norms[0] / norms[-1]:.2f}")
""")

nb.md("""
What the numbers show here, honestly: the Post-LN stack's gradient norms are about the same at every
depth, so its first block is **not** starved in this setup. The Pre-LN stack's gradients *shrink* from the
first block to the last, and its last blocks get about half of what Post-LN's get: Pre-LN's residual stream
grows with depth and the final LayerNorm divides by it.

How this relates to Xiong et al. (2020), exactly: the paper analyses Post-LN and Pre-LN at
initialisation and measures gradient norms per layer in full-size models. It reports that Post-LN's
gradients are largest near the output (hence its need for a learning-rate warm-up), while Pre-LN's stay
about the same from layer to layer. Our toy measurement agrees only in part: Post-LN's norms rise mildly
toward the output, in the paper's direction; Pre-LN's *fall* toward the output, which the paper does not
report for its models. Neither result supports the popular shortcut "Post-LN's first block gets vanishing
gradients".
One measurement at initialisation on a toy model, not a training run; try `n_layers=12` or `d_model=64`.

## 7 · Three families

* **Encoder-only** (BERT): blocks without a causal mask; every token sees the whole input. Built to
  *understand*: classify, tag, embed.
* **Decoder-only** (GPT, Llama): blocks with a causal mask, trained to predict the next token. Built to
  *generate* a continuation.
* **Encoder-decoder** (the original Transformer, T5): an encoder reads the input; a decoder writes a new
  sequence, looking at the encoder's output through cross-attention. Built to *turn one sequence into another*.

### Exercise 3 (3 points) · Pick the family

Run the cell with the three names, then set `family` to a dict mapping each letter to one of them:
(a) classify customer reviews as positive or negative; (b) write the next sentence of a story;
(c) translate English to French; (d) mark each word of a sentence as a person, a place or neither;
(e) a chatbot that writes its reply one token at a time, continuing the conversation;
(f) read a long article and write a short summary of it, as T5 and BART were built to do.
""")

nb.setup("families_given", "# Given: the three answers to choose from (just run this cell).\n" + FAMILIES_GIVEN)

nb.solution("family", FAMILY_REF)

nb.tests("test_family_format", 0, """
assert isinstance(family, dict) and sorted(family) == list("abcdef"), "family needs the keys 'a' ... 'f'"
assert set(family.values()) <= {ENCODER_ONLY, DECODER_ONLY, ENCODER_DECODER}, "use the three given names"
print("format ok")
""")

nb.tests("test_family", 3, """
### BEGIN HIDDEN TESTS
GRADER.check("family", "answers", family)
### END HIDDEN TESTS
""")

nb.md("""
## 8 · Cross-attention

In an encoder-decoder model every decoder block has a second attention layer. Its **queries come from the
decoder** (the tokens being written), its **keys and values from the encoder's output** (the input being
read). The weights are therefore `T_dec × T_enc`: one row per decoder token, one column per encoder token,
and each row sums to 1. No causal mask is needed here (the whole input may be read), but padded encoder
tokens are masked.

### Exercise 4 (6 points) · `cross_attention`

`cross_attention(x_dec, x_enc, W_q, W_k, W_v, mask=None)`: `x_dec` is `(..., T_dec, d_model)`, `x_enc`
is `(..., T_enc, d_model)`, the projections are matrices `(d_model, d_k)`, `(d_model, d_k)`,
`(d_model, d_v)`. Return `(output, weights)` of shapes `(..., T_dec, d_v)` and `(..., T_dec, T_enc)`,
scaling by √d_k. `mask` (True/1 = may attend) broadcasts to the weights, e.g. `(B, 1, T_enc)` for padding.
""")

nb.solution("cross_attention", CROSS_REF)

nb.tests("test_cross_shapes", 0, """
torch.manual_seed(0)
_out, _w = cross_attention(torch.randn(2, 3, 8), torch.randn(2, 5, 8), torch.randn(8, 4), torch.randn(8, 4),
                           torch.randn(8, 6))
assert _w.shape == (2, 3, 5), "weights should be (B, T_dec, T_enc)"
assert _out.shape == (2, 3, 6), "output should be (B, T_dec, d_v)"
assert torch.allclose(_w.sum(-1), torch.ones(2, 3)), "each decoder token's weights should sum to 1"
print("shapes ok")
""")

nb.tests("test_cross_values", 4, """
### BEGIN HIDDEN TESTS
GRADER.check("cross_attention", "same_length", cross_attention)
GRADER.check("cross_attention", "batched", cross_attention)
GRADER.check("cross_attention", "unbatched", cross_attention)
GRADER.check("cross_attention", "padding", cross_attention)
### END HIDDEN TESTS
""")

nb.tests("test_cross_dtypes_devices", 2, """
### BEGIN HIDDEN TESTS
GRADER.check("cross_attention", "bfloat16", cross_attention)
GRADER.check("cross_attention", "float64", cross_attention)
GRADER.check("cross_attention", "best_device", cross_attention)
GRADER.check("cross_attention", "meta", cross_attention)
### END HIDDEN TESTS
""")

nb.md("""
Three decoder tokens reading a five-token input, of which the last is padding:
""")

nb.code("""
torch.manual_seed(4)
x_enc, x_dec = torch.randn(1, 5, 8), torch.randn(1, 3, 8)          # (B, T_enc, d), (B, T_dec, d)
W_q, W_k, W_v = (torch.randn(3, 8, 8) / 8 ** 0.5).unbind(0)     # each (d_model, d_k)
pad = torch.tensor([[[True, True, True, True, False]]])           # (B, 1, T_enc)
out, w = cross_attention(x_dec, x_enc, W_q, W_k, W_v, pad)
print("weights", tuple(w.shape), "output", tuple(out.shape))
attention_heatmap(w[0], keys=["enc0", "enc1", "enc2", "enc3", "<pad>"], queries=["dec0", "dec1", "dec2"],
                  title="Cross-attention weights (T_dec x T_enc)");
""")

nb.md("""
## Summary

* Block = attention and FFN, each with a residual and a LayerNorm; Post-LN normalises after the add,
  Pre-LN before the sub-layer.
* LayerNorm: mean 0, variance 1 per token (variance divided by D, ε inside the square root).
* The FFN holds most of a block's parameters.
* Decoder-only = blocks with a causal mask; encoder-only = no mask; encoder-decoder adds cross-attention
  (queries from the decoder, keys and values from the encoder).

### Checkpoint — move on when you can …

- [ ] count an FFN's parameters and say why residuals help gradients;
- [ ] compute LayerNorm by hand and explain ε;
- [ ] write the block in both forms and draw it from memory with shapes;
- [ ] explain what the gradient measurement shows, and what it does not;
- [ ] pick a family for a task and explain cross-attention's shapes.
""")

if __name__ == "__main__":
    print(nb.save(f"source/{SECTION}/{SECTION}.ipynb"))
