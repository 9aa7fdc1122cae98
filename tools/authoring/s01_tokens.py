"""Write source/01_tokens/01_tokens.ipynb: ``python -m tools.authoring.s01_tokens``."""
from graders.s01_tokens import DECODE_REF, EMBED_REF, ENCODE_REF, GIVEN, PAD_REF, VOCAB_REF
from tools.authoring import hidden, setup_source
from tools.nbauthor import Notebook

SECTION = "01_tokens"
nb = Notebook()

nb.md("""
# 01 · From text to vectors: tokens, ids and embeddings

A Transformer never sees letters. Before any attention happens, text goes through a short pipeline:

**text → tokens → token ids → embedding vectors**, so a sentence of `T` tokens becomes a matrix of shape
`(T, d_model)`. That matrix is the input of every later section.

**Goals**
- split text into tokens and map them to integer ids with a vocabulary, and back;
- handle unknown words (`[UNK]`) and batches of different lengths (`[PAD]`);
- see why real models split words into sub-words;
- turn ids into vectors with an embedding table, three equivalent ways.
""")
nb.setup("setup", setup_source(SECTION))

nb.md("""
**How your work is checked.** After each exercise a *visible checks* cell runs a few quick asserts (the
type, the shape, one easy case): they tell you at once whether you are on track, and they carry no points,
because they run in your own kernel. Every point comes from the *hidden checks* that follow them: the
autograder runs your code on inputs you do not see and judges the result outside your kernel, and when
something is wrong its feedback names the most likely mistake.

## 1 · Tokens and ids

A **token** is a piece of text the model treats as one unit: here, a word. A **vocabulary** gives each token
an integer id; decoding reverses the dictionary.

### Worked example · "I love AI"
""")
nb.code("""
vocab_small = {"I": 0, "love": 1, "AI": 2}
ids = [vocab_small[t] for t in "I love AI".split()]      # T=3 ids
inverse = {i: t for t, i in vocab_small.items()}
print(ids, " ".join(inverse[i] for i in ids))
""")
nb.md("""
A usable vocabulary needs two **special tokens**:

- `[PAD]` (id 0) fills the empty slots when sentences of different lengths share one batch;
- `[UNK]` (id 1) stands for any word the vocabulary has never seen.

The course's word tokenizer lowercases and splits on whitespace; it is given (read-only):
""")
nb.setup("given_tokenize", GIVEN.strip("\n") + '\n\nprint(tokenize("The cat SAT"))')

nb.md("""
### Exercise 1 · `build_vocab(corpus)`

`corpus` is a list of sentences. Return a dict `word -> id` that starts with `{"[PAD]": 0, "[UNK]": 1}`
and then gives every new word (from `tokenize`) the next free id, **in order of first appearance**.
A word seen again keeps its first id.
""")
nb.solution("build_vocab", VOCAB_REF)
nb.code("""
corpus = ["The cat sat on the mat", "The dog sat on the log", "A cat saw a dog"]
vocab = build_vocab(corpus)
print(len(vocab), "entries:", vocab)
""")
nb.tests("test_build_vocab_visible", 0, """
# Visible checks: special tokens first, ids 0..n-1, every corpus word present.
_v = build_vocab(["b a", "a c"])
assert isinstance(_v, dict), "return a dict word -> id"
assert _v.get("[PAD]") == 0 and _v.get("[UNK]") == 1, "[PAD] must be id 0 and [UNK] id 1"
assert sorted(_v.values()) == list(range(len(_v))), "ids should be 0, 1, 2, ... without gaps"
assert {"a", "b", "c"} <= set(_v), "every word of the corpus needs an id"
print("visible vocabulary checks passed")
""")
nb.tests("test_build_vocab", 3, hidden(
    'GRADER.check("build_vocab", "corpus_a", build_vocab)',
    'GRADER.check("build_vocab", "corpus_b", build_vocab)'))

nb.md("""
### Exercise 2 · `encode(text, vocab)` and `decode(ids, vocab)`

- `encode` returns a list of ints, one per token of `tokenize(text)`; a word missing from `vocab` becomes
  the id of `[UNK]`.
- `decode` returns the words joined by single spaces; `[PAD]` ids are dropped, an `[UNK]` id stays visible as
  `[UNK]`. Do not assume the dict is stored in id order: build the inverse mapping.
""")
nb.solution("encode", ENCODE_REF)
nb.solution("decode", DECODE_REF)
nb.code("""
ids = encode("The zebra sat on the mat", vocab)
print(ids)
print(decode(ids + [0, 0], vocab))          # trailing [PAD] ids disappear
""")
nb.tests("test_encode_decode_visible", 0, """
# Visible checks on a toy vocabulary: a round trip, and an unknown word.
_v = {"[PAD]": 0, "[UNK]": 1, "hello": 2, "world": 3}
assert list(encode("hello world", _v)) == [2, 3], "known words map to their ids"
assert list(encode("Hello there", _v))[1] == 1, "an unknown word maps to the [UNK] id"
assert decode([2, 3, 0], _v) == "hello world", "decode joins words with spaces and drops [PAD]"
print("visible encode/decode checks passed")
""")
nb.tests("test_encode", 3, hidden(
    'GRADER.check("encode", "known", encode)',
    'GRADER.check("encode", "unknown", encode)'))
nb.tests("test_decode", 2, hidden(
    'GRADER.check("decode", "padded", decode)',
    'GRADER.check("decode", "shuffled_vocab", decode)'))

nb.md("""
## 2 · Real tokenizers split words into sub-words

A word vocabulary has two problems: it grows with every new word, and every unseen word collapses into the
same `[UNK]`. Real models use **sub-word** tokenizers: frequent words stay whole, rare ones are cut into known
pieces, so almost nothing is unknown. Here is the WordPiece tokenizer of the small BERT-family model shipped
with the course (offline). Pieces starting with `##` continue the previous piece.
""")
nb.code("""
from attncourse.models import load_tokenizer

tok = load_tokenizer()
sentence = "The animal didn't cross the street because it was untiringly tired"
pieces = tok.tokenize(sentence)
print(pieces)
print(tok.convert_tokens_to_ids(pieces)[:6], "...  vocabulary size:", tok.vocab_size)
print("our word vocabulary:", encode(sentence, vocab))
""")
nb.md("""
`didn't` becomes three pieces (`didn`, `'`, `t`) and a rare word is cut into sub-words, while our word
vocabulary turns every unseen word into the `[UNK]` id. The ids differ between tokenizers, but the idea is the
same: text in, a list of integer ids out.

## 3 · Batches: padding to equal length

A batch is one tensor, so all its rows need the same length. Shorter sequences are padded **on the right**
with `[PAD]`, and we keep the real lengths: section 03 turns them into a mask so that attention ignores
the padding.

### Exercise 3 · `pad_batch(seqs, pad_id=0) -> (padded, lengths)`

`seqs` is a list of lists of ids. Return `padded`, a `torch.long` tensor `(B, max_len)` with the real ids
first and `pad_id` after them, and `lengths`, a `torch.long` tensor `(B,)` with each sequence's original
length.
""")
nb.solution("pad_batch", PAD_REF)
nb.code("""
batch_ids = [encode(s, vocab) for s in corpus[:2] + ["a dog sat"]]
padded, lengths = pad_batch(batch_ids)
print(padded)                 # (B=3, max_len)
print(lengths)                # (3,)
""")
nb.tests("test_pad_batch_visible", 0, """
# Visible checks: types and shapes.
_p, _l = pad_batch([[4, 5], [6]])
assert isinstance(_p, torch.Tensor) and isinstance(_l, torch.Tensor), "return two tensors (padded, lengths)"
assert _p.shape == (2, 2) and _l.shape == (2,), f"expected shapes (2, 2) and (2,), got {tuple(_p.shape)}, {tuple(_l.shape)}"
assert _p.dtype == torch.long, "ids are integers: use dtype=torch.long"
print("visible padding checks passed")
""")
nb.tests("test_pad_batch", 3, hidden(
    'GRADER.check("pad_batch", "three", pad_batch)',
    'GRADER.check("pad_batch", "pad_id", pad_batch)'))

nb.md("""
## 4 · Embeddings: from ids to vectors

An **embedding table** is a learned matrix of shape `(vocab_size, d_model)`: row `i` is the vector of token
`i`. Looking up ids picks rows, so `T` ids become a `(T, d_model)` matrix (a 6-token sentence with
`d_model = 512` becomes a 6 × 512 matrix). The table is trained like any other weight.

Picking row `i` is the same as multiplying a **one-hot** row vector (a 1 at position `i`, 0 elsewhere) by the
table: that is why an embedding is just a linear layer applied to one-hot inputs.
""")
nb.code("""
seed_everything(0)
d_model = 4
table = torch.randn(len(vocab), d_model)                 # (V, d_model)
ids_t = torch.tensor(encode("the cat sat", vocab))      # (T=3,)
one_hot = F.one_hot(ids_t, num_classes=len(vocab))      # (3, V)
print(one_hot)
print(table[ids_t])                                      # (3, d_model)
""")
nb.md("""
### The course's device and dtype rule

From this exercise on, every graded function and module must run **unchanged** on whatever device and
dtype its inputs come with. The hidden tests call it on the CPU, on a GPU when the grading machine has one,
in float64 and bfloat16, and on PyTorch's `meta` device — a device whose tensors have a shape and a dtype
but no values, so any tensor your code creates on a *fixed* device shows up there as a mismatch, even on a
CPU-only grader. The rule: create new tensors from the inputs — `torch.zeros(n, device=x.device,
dtype=x.dtype)`, `torch.ones_like(x)`, `x.new_zeros(n)` — never with a bare `torch.zeros(n)`.
""")
nb.code("""
x = torch.empty(2, 3, device="meta", dtype=torch.bfloat16)   # shape and dtype only, no values
print("bare torch.zeros :", torch.zeros(3).device, torch.zeros(3).dtype)             # fixed: cpu, float32
print("from the input   :", torch.zeros(3, device=x.device, dtype=x.dtype).device,
      x.new_zeros(3).dtype)                                                           # follows x
try:
    x + torch.zeros(3)          # a CPU tensor meets a meta tensor
except Exception as err:
    print(type(err).__name__ + ":", str(err).splitlines()[0][:90])
""")
nb.md("""
### Exercise 4 · `embed(ids, table)`

Return the embeddings of `ids` (any shape, `torch.long`) as **one-hot @ table**: shape
`ids.shape + (d_model,)`, with the table's dtype and device. Make the one-hot matrix with one column per
vocabulary entry (`table.shape[0]`) and in the table's dtype, on the table's device.
""")
nb.solution("embed", EMBED_REF)
nb.tests("test_embed_visible", 0, """
# Visible checks: shape and dtype.
_t = torch.randn(5, 3, dtype=torch.float64)
_e = embed(torch.tensor([[0, 4], [2, 2]]), _t)
assert _e.shape == (2, 2, 3), f"expected ids.shape + (d_model,) = (2, 2, 3), got {tuple(_e.shape)}"
assert _e.dtype == torch.float64, "keep the table's dtype"
print("visible embedding checks passed")
""")
nb.tests("test_embed", 3, hidden(
    'GRADER.check("embed", "batched", embed)',
    'GRADER.check("embed", "float64", embed)'))
nb.tests("test_embed_dtype_device", 1, hidden(
    'GRADER.check("embed", "bfloat16", embed)',
    'GRADER.check("embed", "meta", embed)'))
nb.md("""
Three ways, one result: your one-hot product, plain indexing and PyTorch's `nn.Embedding` holding the same table.
""")
nb.code("""
emb_layer = nn.Embedding.from_pretrained(table)          # a layer whose weight is our table
batch_vectors = embed(padded, table)                     # (B=3, max_len, d_model)
print(tuple(padded.shape), "->", tuple(batch_vectors.shape))
_ = compare("one-hot vs indexing", batch_vectors, table[padded])
_ = compare("one-hot vs nn.Embedding", batch_vectors, emb_layer(padded))
""")

nb.md("""
## Summary

- Text → tokens → ids → vectors: a sentence of `T` tokens becomes a `(T, d_model)` matrix.
- A vocabulary maps tokens to ids; `[PAD]` (0) fills batches, `[UNK]` (1) catches unseen words.
- Sub-word tokenizers (WordPiece) split rare words into known pieces, so almost nothing is unknown.
- Batches are padded on the right; the real lengths are kept for the masks of section 03.
- An embedding lookup = one-hot @ table = `nn.Embedding`.

### Checkpoint

- [ ] I can build a vocabulary with `[PAD]` and `[UNK]`, encode a sentence and decode it back.
- [ ] I can explain what happens to an unknown word in a word vocabulary and in WordPiece.
- [ ] I can pad a batch and say the shapes of `padded` and `lengths`.
- [ ] I can explain why looking up a row equals a one-hot vector times the table.
""")

if __name__ == "__main__":
    print(nb.save(f"source/{SECTION}/{SECTION}.ipynb"))
