"""Hidden cases for section 07: probing a BERT-family model's attention.

The nbgrader gate injects the k-th mistake of every exercise at once; an exercise without a
k-th mistake keeps its correct solution in that round, so exercises may have different numbers
of mistakes and variants.

Every model-dependent reference output is computed on the SHIPPED all-MiniLM-L6-v2,
whatever model the notebook's teaching cells chose, and in float64: a float64
forward pass gives the same numbers on every CPU (to ~1e-15), so
``graders/data/07_bert_probe.pt`` can be rebuilt and compared bit for bit.
The hidden test cell of ``attention_maps`` passes the same float64 shipped model
(``load_shipped("float64")``) to ``GRADER.check`` as ``model=`` / ``tokenizer=``.

``strongest_head`` and ``special_token_share`` never need the model at grading
time: their inputs are stored tensors (the shipped model's attention on sentences
the student never sees, and random softmaxed tensors of other sizes).
"""
import torch

from .spec import Case, Exercise, Mistake, patch, Section, source_cells, Variant

CELLS = source_cells("07_bert_probe")   # the source notebook: solutions and given code are read from it

# Sentences the student never sees in the notebook.
HIDDEN_A = "The trophy didn't fit into the suitcase because it was too big."
SHORT = "The trophy didn't fit, so it broke."
HIDDEN_B = "Tokenizers split words!"
PAIR = ("The lawyer questioned the witness, and she answered calmly.", "Did the jury believe her?")


def _shipped():
    from attncourse.teach.models import load_shipped

    return load_shipped("float64")


def shipped_context():
    m = _shipped()
    return {"model": m.model, "tokenizer": m.tokenizer}


def _shipped_attention(text, pair=None):
    """(attn (L, H, T, T) float64, tokens) of the shipped model; computed at build time only."""
    m = _shipped()
    enc = m.tokenizer(text, pair, return_tensors="pt") if pair else m.tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        out = m.model(**enc, output_attentions=True)
    return torch.stack(out.attentions)[:, 0], m.tokenizer.convert_ids_to_tokens(enc["input_ids"][0])


def _random_attention(g, L, H, T, sharp=2.0):
    """A softmaxed random (L, H, T, T) tensor: every row sums to 1."""
    return (sharp * torch.randn(L, H, T, T, generator=g, dtype=torch.float64)).softmax(-1)


# ---------------------------------------------------------------------------------------------
# attention_maps
# ---------------------------------------------------------------------------------------------
# AM_REF, SH_REF and STS_CELL are the source notebook's solution cells (read by grade_id); the BEGIN/END
# SOLUTION markers are comments, harmless when the code runs.
AM_REF = CELLS["attention_maps"]

AM_SOFTMAX_AGAIN = '''
def attention_maps(sentence, model, tokenizer):
    enc = tokenizer(sentence, return_tensors="pt")
    with torch.no_grad():
        out = model(**enc, output_attentions=True)
    attn = torch.stack(out.attentions).squeeze(1)
    attn = torch.softmax(attn, dim=-1)          # "make sure the rows sum to 1"
    tokens = tokenizer.convert_ids_to_tokens(enc["input_ids"][0])
    return tokens, attn
'''

AM_TRANSPOSED = '''
def attention_maps(sentence, model, tokenizer):
    enc = tokenizer(sentence, return_tensors="pt")
    with torch.no_grad():
        out = model(**enc, output_attentions=True)
    attn = torch.stack(out.attentions).squeeze(1)
    attn = attn.transpose(-2, -1)               # rows = keys, columns = queries
    tokens = tokenizer.convert_ids_to_tokens(enc["input_ids"][0])
    return tokens, attn
'''

AM_NO_SQUEEZE = '''
def attention_maps(sentence, model, tokenizer):
    enc = tokenizer(sentence, return_tensors="pt")
    with torch.no_grad():
        out = model(**enc, output_attentions=True)
    attn = torch.stack(out.attentions)          # (L, 1, H, T, T): the batch dimension is still there
    tokens = tokenizer.convert_ids_to_tokens(enc["input_ids"][0])
    return tokens, attn
'''

AM_NO_SPECIALS = '''
def attention_maps(sentence, model, tokenizer):
    tokens = tokenizer.tokenize(sentence)       # word pieces only: no [CLS] / [SEP]
    enc = tokenizer(sentence, return_tensors="pt")
    with torch.no_grad():
        out = model(**enc, output_attentions=True)
    attn = torch.stack(out.attentions).squeeze(1)
    return tokens, attn
'''

AM_LAST_LAYER = '''
def attention_maps(sentence, model, tokenizer):
    enc = tokenizer(sentence, return_tensors="pt")
    with torch.no_grad():
        out = model(**enc, output_attentions=True)
    attn = out.attentions[-1][0]                # only the last layer: (H, T, T)
    tokens = tokenizer.convert_ids_to_tokens(enc["input_ids"][0])
    return tokens, attn
'''

AM_CAT = '''
def attention_maps(sentence, model, tokenizer):
    ids = tokenizer.encode(sentence)                                # [CLS] ... [SEP] ids
    input_ids = torch.tensor([ids])                                 # (1, T)
    with torch.inference_mode():
        out = model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), output_attentions=True)
    attn = torch.cat([a.detach().to("cpu") for a in out.attentions], dim=0)   # (L, H, T, T)
    return [tokenizer.convert_ids_to_tokens(i) for i in ids], attn
'''

ATTENTION_MAPS = Exercise(
    name="attention_maps",
    cell="attention_maps",
    reference=AM_REF,
    context=shipped_context,
    mistakes=[
        Mistake("softmax_again", "softmax is applied again to the attention weights: they are already "
                "probabilities (each row sums to 1); return them as the model gives them.", AM_SOFTMAX_AGAIN),
        Mistake("transposed", "the last two axes are swapped: attn[l, h, i, j] must be the weight that query "
                "token i (the row) gives to key token j (the column); do not transpose.", AM_TRANSPOSED),
        Mistake("no_squeeze", "the batch dimension is still there: stack the L layers and remove the batch "
                "axis of size 1 to get (L, H, T, T).", AM_NO_SQUEEZE, shows="attn has shape (6, 1, 12,"),
        Mistake("no_specials", "tokens must include the special tokens [CLS] and [SEP] (one label per row of "
                "the attention matrix): use convert_ids_to_tokens on the input ids.", AM_NO_SPECIALS,
                shows="tokens has"),
        Mistake("last_layer", "only one layer is returned: stack all L layers into (L, H, T, T).",
                AM_LAST_LAYER, shows="attn has shape (12,"),
    ],
    variants=[Variant("cat_encode", AM_CAT)],
    cases=[
        Case("short", "a short unseen sentence", args=[SHORT, "$ctx:model", "$ctx:tokenizer"],
             labels=["tokens", "attn"], dtype="float64", numerics=True, atol=1e-4, rtol=0.0),
        Case("subwords", "an unseen sentence with a word split into pieces",
             args=[HIDDEN_B, "$ctx:model", "$ctx:tokenizer"], labels=["tokens", "attn"], dtype="float64",
             numerics=True, atol=1e-4, rtol=0.0),
    ],
)

# ---------------------------------------------------------------------------------------------
# strongest_head
# ---------------------------------------------------------------------------------------------
SH_REF = CELLS["strongest_head"]

SH_ONE_INDEXED = patch(SH_REF, "return layer, head, float(w[layer, head])",
                                "return layer + 1, head + 1, float(w[layer, head])   # 1-indexed, like the paper")

SH_COLUMN = patch(SH_REF, "w = attn[:, :, i, j]", "w = attn[:, :, j, i]")

SH_HEAD_MEAN = '''
def strongest_head(attn, tokens, query, key):
    i, j = tokens.index(query), tokens.index(key)
    per_layer = attn[:, :, i, j].mean(dim=1)           # average the heads first: (L,)
    layer = int(per_layer.argmax())
    head = int(attn[layer, :, i, j].argmax())
    return layer, head, float(per_layer[layer])
'''

SH_LAST = patch(SH_REF, "i, j = tokens.index(query), tokens.index(key)    # first occurrences",
                         "i = len(tokens) - 1 - tokens[::-1].index(query)   # last occurrence\n"
                         "    j = len(tokens) - 1 - tokens[::-1].index(key)")

SH_NO_RAISE = '''
def strongest_head(attn, tokens, query, key):
    i = tokens.index(query) if query in tokens else -1      # -1 quietly means "the last token"
    j = tokens.index(key) if key in tokens else -1
    w = attn[:, :, i, j]
    flat = int(torch.argmax(w))
    layer, head = divmod(flat, w.shape[1])
    return layer, head, float(w[layer, head])
'''

SH_LOOPS = '''
def strongest_head(attn, tokens, query, key):
    missing = [t for t in (query, key) if t not in tokens]
    if missing:
        raise ValueError(f"not in the tokens: {missing}")
    q = tokens.index(query)
    k = tokens.index(key)
    best = (None, None, -1.0)
    for layer in range(attn.shape[0]):
        for head in range(attn.shape[1]):
            weight = attn[layer, head, q, k].item()
            if weight > best[2]:
                best = (layer, head, weight)
    return best
'''


def _toy_tokens():
    return ["[CLS]", "the", "cat", "sat", "on", "the", "mat", ".", "[SEP]"]


STRONGEST_HEAD = Exercise(
    messages={"raises.no_message": "say which token is missing"},
    name="strongest_head",
    cell="strongest_head",
    reference=SH_REF,
    mistakes=[
        Mistake("one_indexed", "the layer and head are 1-indexed: return 0-indexed positions, so that "
                "attn[layer, head] is the head you found (papers often count from 1; tensors do not).",
                SH_ONE_INDEXED),
        Mistake("column", "query and key are swapped: the weight that the query token gives to the key token "
                "is in the query's row, attn[:, :, i_query, j_key].", SH_COLUMN),
        Mistake("head_mean", "the heads are averaged before taking the maximum: search all L x H single heads "
                "and return the weight of the best single head.", SH_HEAD_MEAN),
        Mistake("last_occurrence", "use the FIRST occurrence of a repeated token (list.index), not the last.",
                SH_LAST),
        Mistake("no_raise", "a token that is not in the sentence must raise ValueError naming it, not fall back "
                "to another position.", SH_NO_RAISE, shows="nothing was raised"),
    ],
    variants=[Variant("loops", SH_LOOPS)],
    cases=[
        Case("coref", "the shipped model's attention on an unseen sentence, query 'it', key 'trophy'",
             args=lambda g: [*_shipped_attention(HIDDEN_A), "it", "trophy"],
             labels=["layer", "head", "weight"]),
        Case("repeated", "a random 3-layer, 5-head attention tensor where the query token occurs twice",
             args=lambda g: [_random_attention(g, 3, 5, 9), _toy_tokens(), "the", "mat"],
             labels=["layer", "head", "weight"], seed=1),
        Case("key_repeated", "a random 4-layer, 7-head attention tensor where the key token occurs twice",
             args=lambda g: [_random_attention(g, 4, 7, 9), _toy_tokens(), "cat", "the"],
             labels=["layer", "head", "weight"], seed=2),
        Case("missing_query", "a query token that is not in the sentence", kind="raises", raises=["ValueError"],
             args=lambda g: [_random_attention(g, 2, 3, 9), _toy_tokens(), "dog", "mat"]),
        Case("missing_key", "a key token that is not in the sentence", kind="raises", raises=["ValueError"],
             args=lambda g: [_random_attention(g, 2, 3, 9), _toy_tokens(), "cat", "rug"]),
    ],
)

# ---------------------------------------------------------------------------------------------
# special_token_share
# ---------------------------------------------------------------------------------------------
# The notebook's setup cell imports string; the reference adds that import in front of the cell.
STS_CELL = CELLS["special_token_share"]

STS_REF = "\nimport string\n" + STS_CELL

STS_ROWS = patch(STS_REF, "to_group = attn[:, :, :, cols].sum(dim=-1)", "to_group = attn[:, :, cols, :].sum(dim=-2)")

STS_MEAN_KEYS = patch(STS_REF, "to_group = attn[:, :, :, cols].sum(dim=-1)",
                                "to_group = attn[:, :, :, cols].mean(dim=-1)")

STS_ANY_PUNCT = patch(STS_REF, "all(c in string.punctuation for c in tok)",
                                "any(c in string.punctuation for c in tok)")

STS_FIRST_SEP = patch(STS_REF, '"[SEP]": [j for j, t in enumerate(tokens) if t == "[SEP]"],',
                                '"[SEP]": [tokens.index("[SEP]")],')

# the group's columns summed over the queries (the rows) instead of over the columns
STS_SUM_QUERIES = patch(STS_REF, "to_group = attn[:, :, :, cols].sum(dim=-1)", "to_group = attn[:, :, :, cols].sum(dim=-2)")
STS_SOFTMAX = patch(STS_REF, "    shares = {}\n", "    attn = attn.softmax(dim=-1)\n    shares = {}\n")

STS_MASKS = '''
import string

def special_token_share(attn, tokens):
    def mask(pred):                                                   # (T,) 0/1 column selector
        return torch.tensor([1.0 if pred(t) else 0.0 for t in tokens], dtype=attn.dtype, device=attn.device)

    punct = set(string.punctuation)
    masks = {"[CLS]": mask(lambda t: t == "[CLS]"),
             "[SEP]": mask(lambda t: t == "[SEP]"),
             "punct": mask(lambda t: bool(t) and set(t) <= punct)}
    L, H, T, _ = attn.shape
    return {k: [float(x) for x in torch.einsum("lhqk,k->l", attn, m) / (H * T)] for k, m in masks.items()}
'''


def _pair_attention(g):
    attn, tokens = _shipped_attention(*PAIR)
    return [attn, tokens]


def _toy_pair_tokens():
    return ["[CLS]", "wait", ",", "what", "?", "[SEP]", "no", "##pe", "!", "!", "[SEP]"]


SPECIAL_TOKEN_SHARE = Exercise(
    name="special_token_share",
    cell="special_token_share",
    reference=STS_REF,
    mistakes=[
        Mistake("rows", "the share is read from the wrong axis: attention TO a token is its column "
                "(attn[..., :, j], summed over the chosen key positions), not its row.", STS_ROWS),
        Mistake("sum_over_queries", "the group's columns are summed over the queries (dim=-2) instead of over the "
                "group's key positions: first add, for each query, its weights on the group's columns (the last "
                "axis), then average over heads and queries.", STS_SUM_QUERIES),
        Mistake("mean_over_keys", "the weights to the group's key positions are averaged instead of summed: "
                "a share is the total weight a query gives to all positions of the group.", STS_MEAN_KEYS),
        Mistake("any_punct", "a token counts as punctuation only when ALL its characters are punctuation "
                "(with any(), [CLS], [SEP] and every ##piece would count).", STS_ANY_PUNCT),
        Mistake("first_sep", "every [SEP] position counts (a sentence pair has two), not only the first.",
                STS_FIRST_SEP),
        Mistake("softmax_again", "softmax is applied again to the attention weights: they already sum to 1 "
                "over the keys; use them as they are.", STS_SOFTMAX),
    ],
    variants=[Variant("masks_einsum", STS_MASKS)],
    cases=[
        Case("pair", "the shipped model's attention on an unseen sentence pair (two [SEP])",
             args=_pair_attention, labels=["shares"]),
        Case("random", "a random 3-layer, 4-head attention tensor over a short sentence pair",
             args=lambda g: [_random_attention(g, 3, 4, 11, sharp=1.5), _toy_pair_tokens()],
             labels=["shares"], seed=3),
    ],
)


# ---------------------------------------------------------------------------------------------
# predict, then measure: the memory of all attention maps at T = 512
# ---------------------------------------------------------------------------------------------
MIB_REF = CELLS["attn_mib"]

ATTN_MIB = Exercise(
    name="predicted_attn_mib",
    cell="attn_mib",
    reference=MIB_REF,
    mistakes=[
        Mistake("one_layer", "only one layer is counted: every one of the 6 layers keeps its own maps.",
                patch(MIB_REF, "6 * 12 * 512", "12 * 512")),
        Mistake("no_heads", "one map per layer is counted: every one of the 12 heads has its own T x T map.",
                patch(MIB_REF, "6 * 12 * 512", "6 * 512")),
        Mistake("linear_in_t", "the maps are counted as T numbers each: an attention map is T x T (every query "
                "has a weight for every key), so memory grows with T².",
                patch(MIB_REF, "512 * 512", "512")),
        Mistake("float64", "float32 numbers take 4 bytes, not 8.", patch(MIB_REF, "* 4 /", "* 8 /")),
    ],
    variants=[Variant("literal", "predicted_attn_mib = 72"),
              Variant("bytes", "n_numbers = 6 * 12 * 512 ** 2\npredicted_attn_mib = n_numbers * 4 / 1024 / 1024")],
    cases=[Case("value", "the MiB of all attention maps of the shipped MiniLM at T = 512, float32", kind="value",
                api="any", atol=0.5,
                hint="6 layers x 12 heads x 512 x 512 weights, 4 bytes each: 75,497,472 bytes, divided by 2^20.",
                mistake_values={
                    "bytes": ("that is the number of bytes: the answer is in MiB (divide by 2^20).",
                              6 * 12 * 512 * 512 * 4),
                    "megabytes": ("that is in MB (10^6 bytes): 1 MiB is 2^20 = 1,048,576 bytes.",
                                  6 * 12 * 512 * 512 * 4 / 1e6),
                    "numbers": ("that counts the weights, not bytes: each float32 weight takes 4 bytes.",
                                6 * 12 * 512 * 512 / 2 ** 20),
                })],
)

# ---------------------------------------------------------------------------------------------
# find the bug: received_attention
# ---------------------------------------------------------------------------------------------
RA_REF = CELLS["received_attention"]

RA_EINSUM = '''
def received_attention(attn, tokens):
    w = torch.tensor([0.0 if t in ("[CLS]", "[SEP]") else 1.0 for t in tokens], dtype=attn.dtype, device=attn.device)
    return torch.einsum("lhqk,q->lk", attn, w / w.sum()) / attn.shape[1]
'''

RA_LOOP = '''
def received_attention(attn, tokens):
    keep = [i for i, t in enumerate(tokens) if t not in {"[CLS]", "[SEP]"}]
    per_head = torch.stack([attn[:, :, i, :] for i in keep]).mean(dim=0)    # (L, H, T)
    return per_head.mean(dim=1)
'''

RECEIVED = Exercise(
    name="received_attention",
    cell="received_attention",
    reference=RA_REF,
    handout="wrong_axis",
    mistakes=[
        # The handout's own bug: its message says what the student can observe, not the line that fixes it.
        Mistake("wrong_axis", "entry [l, j] is the weight position j GIVES to the words (its own row, averaged), "
                "not the weight it RECEIVES from them: on a tensor where every query puts all its weight on key 0, "
                "key 0 should receive 1 and every other key 0.",
                patch(RA_REF, "from_words = attn[:, :, words, :]                  # (L, H, n_words, T)",
                      "from_words = attn[:, :, :, words]                  # (L, H, T, n_words)",
                      "from_words.mean(dim=2)", "from_words.mean(dim=3)")),
        Mistake("specials_kept", "the [CLS] and [SEP] queries are averaged in: leave out the special tokens' rows "
                "and average over the word queries only.",
                patch(RA_REF, "[t not in (\"[CLS]\", \"[SEP]\") for t in tokens]", "[True for t in tokens]")),
        Mistake("sep_kept", "the [SEP] queries are averaged in: leave out every special token's row, [SEP] "
                "(there may be two) as well as [CLS].",
                patch(RA_REF, "[t not in (\"[CLS]\", \"[SEP]\") for t in tokens]", "[t != \"[CLS]\" for t in tokens]")),
        Mistake("heads_summed", "the heads are summed: average over the H heads as well as over the word queries.",
                patch(RA_REF, "from_words.mean(dim=2).mean(dim=1)", "from_words.mean(dim=2).sum(dim=1)")),
    ],
    variants=[Variant("einsum", RA_EINSUM), Variant("loop", RA_LOOP)],
    cases=[
        Case("shipped", "the shipped model's attention on an unseen sentence",
             args=lambda g: list(_shipped_attention(HIDDEN_A)), labels=["received"]),
        Case("pair", "the shipped model's attention on an unseen sentence pair (two [SEP])",
             args=_pair_attention, labels=["received"]),
        Case("random", "a random 3-layer, 4-head attention tensor over a short sentence pair",
             args=lambda g: [_random_attention(g, 3, 4, 11, sharp=1.5), _toy_pair_tokens()],
             labels=["received"], seed=31),
        Case("float64", "a random float64 attention tensor", dtype="float64",
             args=lambda g: [_random_attention(g, 2, 5, 9), _toy_tokens()], labels=["received"], seed=32),
        Case("best_device", "a random attention tensor on the best device (CUDA when present)", device="best",
             args=lambda g: [_random_attention(g, 2, 3, 11), _toy_pair_tokens()], labels=["received"], seed=33),
    ],
)

POINTS = {   # what each hidden check is worth; a hidden cell's points are the sum of its checks'
    "attention_maps": {"short": 3, "subwords": 2},
    "predicted_attn_mib": {"value": 2},
    "strongest_head": {"coref": 1, "repeated": 1, "key_repeated": 1, "missing_query": 0.5, "missing_key": 0.5},
    "special_token_share": {"pair": 2, "random": 2},
    "received_attention": {"shipped": 0.875, "pair": 0.875, "random": 0.75, "float64": 0.25, "best_device": 0.25},
}

SECTION = Section("07_bert_probe", [ATTENTION_MAPS, ATTN_MIB, STRONGEST_HEAD, SPECIAL_TOKEN_SHARE, RECEIVED],
                  points=POINTS)
