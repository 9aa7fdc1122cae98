"""Hidden cases for section 01 · tokens, ids and embeddings.

Exercises: ``build_vocab``, ``encode``, ``decode``, ``pad_batch``, ``embed``.
The notebook gives ``tokenize`` (lowercase, split on whitespace) and the
special tokens ``[PAD]`` (id 0) and ``[UNK]`` (id 1) in a locked cell.

The gate test injects the k-th mistake (and variant) of every exercise into one submission.
"""
import torch

from .spec import Case, Exercise, Mistake, Section, source_cells, Variant

CELLS = source_cells("01_tokens")   # the source notebook: solutions and given code are read from it

GIVEN = CELLS["given_tokenize"]

CORPUS_A = ["The cat sat on the mat", "the dog sat", "A cat and a dog"]
CORPUS_B = ["Attention is all you need", "you need data", "ATTENTION please"]

# ---------------------------------------------------------------- build_vocab
# Each *_REF below is the source notebook's solution cell (read by grade_id); the BEGIN/END SOLUTION
# markers are comments, harmless when the code runs.
VOCAB_REF = CELLS["build_vocab"]

# A dict with missing keys is refused naming them; one with extra keys is refused naming a few of them, unless it
# is a catalogued mistake's very dict (then that mistake is named).  The checklist below is shown for any other
# wrong vocabulary.
VOCAB_HINT = ("Check each step: start from {'[PAD]': 0, '[UNK]': 1}; split every sentence with tokenize() so "
              "words are lowercased; give a word the next free id only the first time it appears.")

BUILD_VOCAB = Exercise(
    name="build_vocab", cell="build_vocab", given=GIVEN, reference=VOCAB_REF,
    mistakes=[
        Mistake("no_specials", "the special tokens are missing: start from {'[PAD]': 0, '[UNK]': 1} and give "
                "words the ids after them.", '''
def build_vocab(corpus):
    vocab = {}
    for sentence in corpus:
        for word in tokenize(sentence):
            if word not in vocab:
                vocab[word] = len(vocab)
    return vocab
''', shows="missing the keys ['[PAD]', '[UNK]']"),
        Mistake("swapped_specials", "[PAD] and [UNK] are swapped: [PAD] is id 0, [UNK] is id 1.", '''
def build_vocab(corpus):
    vocab = {UNK: 0, PAD: 1}
    for sentence in corpus:
        for word in tokenize(sentence):
            if word not in vocab:
                vocab[word] = len(vocab)
    return vocab
'''),
        Mistake("overwrite_duplicates", "a repeated word gets a new id each time it appears; only add a word the "
                "first time (if word not in vocab).", '''
def build_vocab(corpus):
    vocab = {PAD: 0, UNK: 1}
    next_id = 2
    for sentence in corpus:
        for word in tokenize(sentence):
            vocab[word] = next_id
            next_id += 1
    return vocab
'''),
        Mistake("no_lowercase", "the words were split without lowercasing ('The' and 'the' became two entries); "
                "use the given tokenize().", '''
def build_vocab(corpus):
    vocab = {PAD: 0, UNK: 1}
    for sentence in corpus:
        for word in sentence.split():
            if word not in vocab:
                vocab[word] = len(vocab)
    return vocab
'''),
        Mistake("extra_specials", "the vocabulary has entries that are neither [PAD], [UNK] nor a word of the "
                "corpus (extra special tokens): the contract is exactly {'[PAD]': 0, '[UNK]': 1} and the corpus's "
                "words.", '''
def build_vocab(corpus):
    vocab = {PAD: 0, UNK: 1}
    for sentence in corpus:
        for word in tokenize(sentence):
            if word not in vocab:
                vocab[word] = len(vocab)
    for special in ("[BOS]", "[EOS]"):
        vocab[special] = len(vocab)
    return vocab
'''),
    ],
    variants=[
        Variant("fromkeys", '''
def build_vocab(corpus):
    words = [w for s in corpus for w in tokenize(s)]
    return {w: i for i, w in enumerate(dict.fromkeys([PAD, UNK] + words))}
'''),
        Variant("setdefault", '''
def build_vocab(corpus):
    vocab = {}
    for w in [PAD, UNK] + tokenize(" ".join(corpus)):
        vocab.setdefault(w, len(vocab))
    return vocab
'''),
    ],
    cases=[
        Case("corpus_a", "a corpus of 3 sentences with repeated and capitalised words", args=(CORPUS_A,),
             labels=["vocab"], hint=VOCAB_HINT),
        Case("corpus_b", "another corpus of 3 sentences", args=(CORPUS_B,), labels=["vocab"], hint=VOCAB_HINT),
    ],
)

# ---------------------------------------------------------------- encode
VOCAB_A = {"[PAD]": 0, "[UNK]": 1, "the": 2, "cat": 3, "sat": 4, "on": 5, "mat": 6, "dog": 7, "a": 8, "and": 9}

ENCODE_REF = CELLS["encode"]

ENCODE = Exercise(
    name="encode", cell="encode", given=GIVEN, reference=ENCODE_REF,
    mistakes=[
        Mistake("unk_as_pad", "unknown words were given the [PAD] id; they map to the [UNK] id (1).", '''
def encode(text, vocab):
    return [vocab.get(word, vocab[PAD]) for word in tokenize(text)]
'''),
        Mistake("no_lowercase", "the text was split without lowercasing, so capitalised known words became "
                "[UNK]; use the given tokenize().", '''
def encode(text, vocab):
    return [vocab.get(word, vocab[UNK]) for word in text.split()]
'''),
        Mistake("key_error", "an unknown word raises KeyError; use vocab.get(word, vocab['[UNK]']).", '''
def encode(text, vocab):
    return [vocab[word] for word in tokenize(text)]
''', shows="raised KeyError"),
        Mistake("unk_minus_one", "unknown words were given the id -1; they map to the [UNK] id (1).", '''
def encode(text, vocab):
    return [vocab.get(word, -1) for word in tokenize(text)]
'''),
    ],
    variants=[
        Variant("loop", '''
def encode(text, vocab):
    ids = []
    for w in tokenize(text):
        ids.append(vocab[w] if w in vocab else vocab["[UNK]"])
    return ids
'''),
        Variant("tuple", '''
def encode(text, vocab):
    unk = vocab[UNK]
    return tuple(vocab.get(w, unk) for w in text.lower().split())
'''),
    ],
    cases=[
        Case("known", "a sentence of known words, some capitalised", args=("The dog sat on THE mat", VOCAB_A),
             labels=["ids"]),
        Case("unknown", "a sentence with two unknown words", args=("a zebra and the Cat ran", VOCAB_A),
             labels=["ids"]),
    ],
)

# ---------------------------------------------------------------- decode
DECODE_REF = CELLS["decode"]

# The same vocabulary, with its entries stored in a different order than their ids.
VOCAB_SHUFFLED = {"mat": 6, "[UNK]": 1, "the": 2, "dog": 7, "a": 8, "[PAD]": 0, "and": 9, "cat": 3, "on": 5,
                  "sat": 4}

DECODE = Exercise(
    name="decode", cell="decode", given=GIVEN, reference=DECODE_REF,
    mistakes=[
        Mistake("keeps_pad", "the [PAD] tokens were kept; drop every id equal to vocab['[PAD]'].", '''
def decode(ids, vocab):
    id_to_word = {i: w for w, i in vocab.items()}
    return " ".join(id_to_word[int(i)] for i in ids)
'''),
        Mistake("no_spaces", "the words were joined without spaces; use ' '.join(words).", '''
def decode(ids, vocab):
    id_to_word = {i: w for w, i in vocab.items()}
    return "".join(id_to_word[int(i)] for i in ids if int(i) != vocab[PAD])
'''),
        Mistake("dict_order", "it assumes the dictionary's entries are stored in id order; build the inverse "
                "mapping {id: word for word, id in vocab.items()}.", '''
def decode(ids, vocab):
    words = list(vocab)
    return " ".join(words[i] for i in ids if i != vocab[PAD])
'''),
        Mistake("drops_unk", "the [UNK] tokens were dropped too; only [PAD] is removed, [UNK] stays visible.", '''
def decode(ids, vocab):
    id_to_word = {i: w for w, i in vocab.items()}
    return " ".join(id_to_word[i] for i in ids if i not in (vocab[PAD], vocab[UNK]))
'''),
    ],
    variants=[
        Variant("list_inverse", '''
def decode(ids, vocab):
    words = [None] * len(vocab)
    for w, i in vocab.items():
        words[i] = w
    return " ".join(words[i] for i in ids if words[i] != PAD)
'''),
        Variant("filter_then_join", '''
def decode(ids, vocab):
    inv = dict(zip(vocab.values(), vocab.keys()))
    kept = [inv[i] for i in ids if inv[i] != "[PAD]"]
    return " ".join(kept)
'''),
    ],
    cases=[
        Case("padded", "ids with an [UNK] and trailing padding", args=([2, 3, 1, 5, 2, 6, 0, 0], VOCAB_A),
             labels=["text"]),
        Case("shuffled_vocab", "a vocabulary whose entries are not stored in id order",
             args=([8, 7, 4, 1, 9, 0], VOCAB_SHUFFLED), labels=["text"]),
    ],
)

# ---------------------------------------------------------------- pad_batch
PAD_REF = CELLS["pad_batch"]

PAD_BATCH = Exercise(
    name="pad_batch", cell="pad_batch", reference=PAD_REF,
    mistakes=[
        Mistake("left_pad", "the padding was put on the left; put real tokens first and [PAD] at the end.", '''
def pad_batch(seqs, pad_id=0):
    L = max(len(s) for s in seqs)
    padded = torch.tensor([[pad_id] * (L - len(s)) + list(s) for s in seqs])
    return padded, torch.tensor([len(s) for s in seqs])
'''),
        Mistake("lengths_after_padding", "the lengths were measured after padding; report each sequence's "
                "original number of tokens.", '''
def pad_batch(seqs, pad_id=0):
    L = max(len(s) for s in seqs)
    padded = torch.tensor([list(s) + [pad_id] * (L - len(s)) for s in seqs])
    return padded, torch.tensor([len(row) for row in padded])
'''),
        Mistake("ignores_pad_id", "the pad value is hard-coded as 0; use the pad_id argument.", '''
def pad_batch(seqs, pad_id=0):
    L = max(len(s) for s in seqs)
    padded = torch.tensor([list(s) + [0] * (L - len(s)) for s in seqs])
    return padded, torch.tensor([len(s) for s in seqs])
'''),
        Mistake("lengths_list", "the lengths are a Python list; return them as a torch.Tensor of shape (B,).", '''
def pad_batch(seqs, pad_id=0):
    L = max(len(s) for s in seqs)
    padded = torch.tensor([list(s) + [pad_id] * (L - len(s)) for s in seqs])
    return padded, [len(s) for s in seqs]
''', shows="should be a torch.Tensor"),
        Mistake("float_ids", "the padded ids are floats; token ids are integers (dtype=torch.long): they index "
                "the embedding table.", '''
def pad_batch(seqs, pad_id=0):
    L = max(len(s) for s in seqs)
    padded = torch.zeros(len(seqs), L) + pad_id
    for b, s in enumerate(seqs):
        padded[b, :len(s)] = torch.tensor(s)
    return padded, torch.tensor([len(s) for s in seqs])
''', shows="should be a torch.int64 tensor"),
    ],
    variants=[
        Variant("pad_sequence", '''
def pad_batch(seqs, pad_id=0):
    tensors = [torch.as_tensor(s, dtype=torch.long) for s in seqs]
    padded = nn.utils.rnn.pad_sequence(tensors, batch_first=True, padding_value=pad_id)
    return padded, torch.tensor([len(t) for t in tensors])
'''),
        Variant("F_pad", '''
def pad_batch(seqs, pad_id=0):
    L = max(map(len, seqs))
    rows = [F.pad(torch.tensor(s, dtype=torch.int64), (0, L - len(s)), value=pad_id) for s in seqs]
    return torch.stack(rows), torch.tensor(list(map(len, seqs)), dtype=torch.int64)
'''),
    ],
    cases=[
        Case("three", "three sequences of lengths 3, 1, 5", args=([[5, 2, 9], [4], [7, 7, 3, 8, 2]],),
             labels=["padded", "lengths"]),
        Case("pad_id", "two sequences padded with pad_id=3", args=([[6, 1], [2, 5, 4, 9]],), kwargs={"pad_id": 3},
             labels=["padded", "lengths"]),
    ],
)

# ---------------------------------------------------------------- embed
EMBED_REF = CELLS["embed"]


def _ids_and_table(shape, V=7, d=4):
    def make(g):
        ids = torch.randint(0, V - 2, shape, generator=g)   # the last rows of the table are never used
        return ids, torch.randn(V, d, generator=g)
    return make


EMBED = Exercise(
    name="embed", cell="embed", reference=EMBED_REF,
    mistakes=[
        Mistake("off_by_one", "the ids were shifted by one; id i selects row i of the table (ids start at 0).", '''
def embed(ids, table):
    return table[ids - 1]
'''),
        Mistake("fixed_dtype", "the one-hot matrix has a fixed dtype.", '''
def embed(ids, table):
    return F.one_hot(ids, num_classes=table.shape[0]).float() @ table
''', shows="created with a fixed dtype"),
        Mistake("fixed_device", "the one-hot matrix is created on a fixed device.", '''
def embed(ids, table):
    eye = torch.eye(table.shape[0], dtype=table.dtype)
    return eye[ids] @ table
''', shows="created on a fixed device"),
        Mistake("one_hot_size", "F.one_hot without num_classes makes max(ids)+1 columns, not one per vocabulary "
                "entry; pass num_classes=table.shape[0].", '''
def embed(ids, table):
    return F.one_hot(ids).to(table.dtype) @ table
''', shows="shapes cannot be multiplied"),
    ],
    variants=[
        Variant("indexing", '''
def embed(ids, table):
    return table[ids]
'''),
        Variant("nn_embedding", '''
def embed(ids, table):
    return F.embedding(ids, table)
'''),
    ],
    cases=[
        Case("batched", "ids of shape (2, 3), a table of 7 rows, d_model=4", args=_ids_and_table((2, 3)),
             labels=["embeddings"]),
        Case("float64", "a float64 table and a single sequence of 5 ids", dtype="float64",
             args=_ids_and_table((5,)), labels=["embeddings"], seed=1),
        Case("bfloat16", "a bfloat16 table", dtype="bfloat16", args=_ids_and_table((2, 4)),
             labels=["embeddings"], seed=2),
        Case("meta", "on the meta device", device="meta", args=_ids_and_table((2, 3)), labels=["embeddings"],
             seed=3),
        Case("best_device", "on the best device (CUDA when present)", device="best", args=_ids_and_table((2, 3)),
             labels=["embeddings"], seed=4),
    ],
)

POINTS = {   # what each hidden check is worth; a hidden cell's points are the sum of its checks'
    "build_vocab": {"corpus_a": 1.5, "corpus_b": 1.5},
    "encode": {"known": 1.5, "unknown": 1.5},
    "decode": {"padded": 1, "shuffled_vocab": 1},
    "pad_batch": {"three": 1.5, "pad_id": 1.5},
    "embed": {"batched": 3, "float64": 0.25, "bfloat16": 0.25, "meta": 0.25, "best_device": 0.25},
}

SECTION = Section("01_tokens", [BUILD_VOCAB, ENCODE, DECODE, PAD_BATCH, EMBED], points=POINTS)
