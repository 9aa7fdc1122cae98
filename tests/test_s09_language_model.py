"""Section 09: the shipped corpus, the split the notebook makes, the reference model's cache and tying, and the
package's sampler (``attncourse.teach.gpt.generate``) on that model."""
from __future__ import annotations

import ast
import inspect
import math
import re
from pathlib import Path

import pytest
import torch

from tests.harness import ROOT

DATA = ROOT / "attncourse" / "data"


def test_corpus_is_small_plain_and_documented():
    corpus = DATA / "kjv_genesis_exodus.txt"
    assert corpus.stat().st_size <= 1_000_000, "the corpus must stay within 1 MB"
    text = corpus.read_text(encoding="utf-8")
    assert text.isascii() and text.endswith("\n")
    readme = (DATA / "README.md").read_text(encoding="utf-8")
    for word in ("Source", "Licence", "public domain", "kjv_genesis_exodus.txt"):
        assert word in readme, f"attncourse/data/README.md must state {word!r}"
    lines = text.splitlines()
    assert f"{len(lines):,} lines" in readme and f"{len(text):,} characters" in readme, "README's counts are stale"


def test_load_corpus_reads_the_installed_package():
    from attncourse.teach.gpt import load_corpus

    assert load_corpus() == (DATA / "kjv_genesis_exodus.txt").read_text(encoding="utf-8")


def test_corpus_ships_with_the_package():
    text = (ROOT / "pyproject.toml").read_text()
    assert "package-data" in text and "data/*.txt" in text, "pyproject must install attncourse/data with the package"


def _given_data():
    from graders.s09_language_model import DATA_GIVEN

    ns: dict = {}
    exec("import torch\n" + DATA_GIVEN, ns)
    return ns


def test_split_is_disjoint_and_complete():
    """The notebook's prose: a random tenth of the verses is held out, no verse is in both parts."""
    ns = _given_data()
    verses, val_ids = ns["verses"], ns["val_ids"]
    assert len(val_ids) == len(verses) // 10
    train_ids = set(range(len(verses))) - val_ids
    assert not (train_ids & val_ids)
    assert len(ns["train_text"]) + len(ns["val_text"]) == len(ns["text"])
    assert ns["train_text"] == "".join(verses[i] for i in sorted(train_ids))
    assert ns["val_text"] == "".join(verses[i] for i in sorted(val_ids))
    x, y = ns["get_batch"](ns["val_data"], 4, 16, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (4, 16) and torch.equal(x[:, 1:], y[:, :-1])


def _apply_rope(x):   # section 05's contract, written out: pair (2i, 2i+1) at position t turned by t / 10000^(2i/d)
    T, d = x.shape[-2], x.shape[-1]
    out = x.clone()
    for t in range(T):
        for i in range(d // 2):
            a, b = x[..., t, 2 * i], x[..., t, 2 * i + 1]
            ang = t / 10000 ** (2 * i / d)
            out[..., t, 2 * i] = a * math.cos(ang) - b * math.sin(ang)
            out[..., t, 2 * i + 1] = a * math.sin(ang) + b * math.cos(ang)
    return out


def test_rotate_is_section_05s_rope_with_an_offset():
    from attncourse.teach.gpt import rotate

    x = torch.randn(2, 3, 9, 8, dtype=torch.float64)
    full = _apply_rope(x)
    assert torch.allclose(rotate(x), full, atol=1e-5)
    assert torch.allclose(rotate(x[..., 5:, :], offset=5), full[..., 5:, :], atol=1e-5)


def _reference_model():
    """The notebook's reference CausalSelfAttention, Block and GPT (its solution cells), with what they need."""
    from graders.s09_language_model import ATTN_REF, BLOCK_REF, GPT_REF

    ns: dict = {}
    exec("import math\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"
         "from attncourse.teach.gpt import rotate as apply_rope, small_init\n"
         + ATTN_REF + "\n\n" + BLOCK_REF + "\n\n" + GPT_REF, ns)
    return ns["GPT"]


@pytest.mark.parametrize("dropout", [0.0, 0.2])
def test_reference_cache_matches_the_full_pass_and_head_is_tied(dropout):
    GPT = _reference_model()
    torch.manual_seed(0)
    model = GPT(20, d_model=32, n_heads=4, n_layers=2, max_len=24, dropout=dropout).eval()
    assert model.head.weight is model.embed.weight
    assert sum(p is model.embed.weight for p in model.parameters()) == 1
    ids = torch.randint(0, 20, (3, 17))
    with torch.no_grad():
        full = model(ids)
        a, cache = model(ids[:, :9], [])
        b, cache = model(ids[:, 9:12], cache, 9)              # a chunk of 3 at offset 9
        c, cache = model(ids[:, 12:13], cache, 12)            # one token at offset 12
        d, cache = model(ids[:, 13:], cache, 13)
    assert torch.allclose(torch.cat([a, b, c, d], dim=1), full, atol=1e-5)
    assert cache[0][0].shape == (3, 4, 17, 8)
    with torch.no_grad():                                     # the offset is explicit: a wrong one changes the logits
        _, start = model(ids[:, :9], [])
        wrong, _ = model(ids[:, 9:12], start, 0)
    assert (wrong - b).abs().max() > 1e-5


def test_generate_stops_restores_mode_and_runs_past_max_len():
    from attncourse.teach.gpt import generate

    GPT = _reference_model()
    torch.manual_seed(0)
    model = GPT(10, d_model=16, n_heads=2, n_layers=1, max_len=8, dropout=0.1).train()
    prompt = torch.tensor([[1, 2, 3]])
    out = generate(model, prompt, 20, generator=torch.Generator().manual_seed(0))
    assert out.shape == (1, 23) and torch.equal(out[:, :3], prompt) and model.training
    stop = int(out[0, 5])
    short = generate(model, prompt, 20, stop=stop, generator=torch.Generator().manual_seed(0))
    assert short.shape[1] <= 6 and int(short[0, -1]) == stop
    assert generate(model, prompt, 12, temperature=0).shape == (1, 15)   # past max_len: the window is re-read
    greedy = generate(model, prompt, 5, temperature=0)                   # within max_len: the cache all the way
    ids, model = prompt, model.eval()                                    # generate turned dropout off too
    with torch.no_grad():
        for _ in range(5):                                               # the same tokens without a cache
            ids = torch.cat([ids, model(ids)[:, -1:].argmax(-1)], dim=1)
    assert torch.equal(greedy, ids)


def test_top_k_and_the_filter_hook_of_the_given_sampler():
    from attncourse.teach.gpt import choose, generate

    logits = torch.log(torch.tensor([[0.1, 0.5, 0.05, 0.3, 0.05]]))
    draws = torch.stack([choose(logits, top_k=2, generator=torch.Generator().manual_seed(s)) for s in range(50)])
    assert set(draws.flatten().tolist()) == {1, 3}
    draws = torch.stack([choose(logits, top_k=1, generator=torch.Generator().manual_seed(s)) for s in range(20)])
    assert set(draws.flatten().tolist()) == {1}
    seen = []

    def only_token_4(z):                                   # a filter gets the temperature-scaled logits (B, V)
        seen.append(z.clone())
        return torch.full_like(z, float("-inf")).index_fill(-1, torch.tensor([4]), 0.0)

    assert choose(logits, temperature=2.0, filter=only_token_4).tolist() == [4]
    assert torch.allclose(seen[0], logits / 2.0)
    assert choose(logits, temperature=0, filter=only_token_4).tolist() == [1]   # greedy: no filter
    torch.manual_seed(0)
    model = _reference_model()(10, d_model=16, n_heads=2, n_layers=1, max_len=8)
    out = generate(model, torch.tensor([[1, 2]]), 5, filter=only_token_4)
    assert out[0, 2:].tolist() == [4] * 5


_TOP_P = re.compile(r"top_?p|nucleus", re.I)


def test_the_course_package_does_not_implement_top_p():
    """Section 09's graded exercise is top-p filtering: the installed package must not hand it out (its sampler,
    ``choose`` and ``generate``, once took a ``top_p`` argument).  No function of attncourse, in any .py file, has a parameter or
    a name, nor defines a function or variable, that spells top-p or nucleus."""
    import attncourse
    from attncourse.teach.gpt import choose, generate

    for fn in (choose, generate):
        assert not any(_TOP_P.search(name) for name in inspect.signature(fn).parameters), fn
    found = []
    package = Path(attncourse.__file__).resolve().parent
    files = sorted(package.rglob("*.py"))
    assert any(f.name == "gpt.py" for f in files)
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.append(node.name)
            if isinstance(node, ast.arg):
                names.append(node.arg)
            if isinstance(node, ast.Name):
                names.append(node.id)
            if isinstance(node, ast.Attribute):
                names.append(node.attr)
            if isinstance(node, ast.keyword) and node.arg:
                names.append(node.arg)
            found += [f"{path.relative_to(package)}:{node.lineno} {n}" for n in names if _TOP_P.search(n)]
    assert not found, f"attncourse implements top-p, the answer of section 09's exercise: {found}"


def test_top_p_keeps_the_most_likely_token_even_for_p_0():
    """The contract: the most likely token is always kept. The reference once returned all -inf for p = 0; now it
    keeps exactly the argmax of each row there, and the hidden case p_0 names the all -inf answer."""
    from graders import load_section
    from tests.harness import ROOT, cell_by_id, read_nb

    src = cell_by_id(read_nb(ROOT / "source" / "09_language_model" / "09_language_model.ipynb"), "top_p_filter").source
    ns = {"torch": torch}
    exec(src, ns)   # noqa: S102 - the course's own solution cell
    logits = torch.randn(6, 11, generator=torch.Generator().manual_seed(0))
    for p in (0.0, 1e-9):
        kept = ~torch.isinf(ns["top_p_filter"](logits, p))
        assert torch.equal(kept, torch.nn.functional.one_hot(logits.argmax(-1), 11).bool()), p
    ex = load_section("09_language_model").exercise("top_p_filter")
    assert "p_0" in [c.name for c in ex.cases]
    old = [m for m in ex.mistakes if m.key == "none_at_p0"][0].code
    ns_old = {"torch": torch}
    exec(old, ns_old)   # noqa: S102
    assert torch.isinf(ns_old["top_p_filter"](logits, 0.0)).all()   # the answer the named mistake stands for
