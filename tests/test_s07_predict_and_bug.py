"""Section 07's predict-then-measure, embeddings prose and find-the-bug exercise checked on the shipped model."""
from __future__ import annotations

import torch

from attncourse.teach.models import load_shipped
from authoring.references import define
from graders import load_section


def _ex(name):
    return load_section("07_bert_probe").exercise(name)


def test_attention_memory_prediction_is_measured_on_the_shipped_model():
    m = load_shipped("float32")
    enc = m.tokenizer(" ".join(["the"] * 510), return_tensors="pt")
    assert enc["input_ids"].shape[1] == 512
    with torch.no_grad():
        maps = m.model(**enc, output_attentions=True).attentions
    mib = sum(a.numel() * a.element_size() for a in maps) / 2 ** 20
    ex = _ex("predicted_attn_mib")
    assert abs(define(ex, ex.reference) - mib) < 1e-9 and mib == 72.0


def test_first_hidden_state_is_word_plus_position_plus_token_type_then_layernorm():
    m = load_shipped("float32")
    emb = m.model.embeddings
    enc = m.tokenizer("we sat on the river bank", return_tensors="pt")
    ids = enc["input_ids"]
    with torch.no_grad():
        by_hand = emb.LayerNorm(emb.word_embeddings(ids) + emb.position_embeddings(torch.arange(ids.shape[1])[None])
                                + emb.token_type_embeddings(enc["token_type_ids"]))
        first = m.model(**enc, output_hidden_states=True).hidden_states[0]
    assert torch.allclose(by_hand, first, atol=1e-5)
    assert not torch.allclose(emb.word_embeddings(ids) + emb.position_embeddings(torch.arange(ids.shape[1])[None]),
                              first, atol=1e-2)   # word + position alone is not the first hidden state


def test_received_attention_handout_averages_the_wrong_axis():
    ex = _ex("received_attention")
    ref = define(ex, ex.reference)
    buggy = define(ex, [m for m in ex.mistakes if m.key == ex.handout][0].code)
    attn = torch.zeros(1, 1, 3, 3)
    attn[..., 0] = 1.0                                    # every query puts all its weight on key 0
    tokens = ["[CLS]", "a", "[SEP]"]
    assert torch.equal(ref(attn, tokens), torch.tensor([[1.0, 0.0, 0.0]]))
    assert not torch.equal(buggy(attn, tokens), ref(attn, tokens))
