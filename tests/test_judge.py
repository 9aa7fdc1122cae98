"""The judge outside the kernel, in-process and fast: what the kernel may see, records, binding to cells.

The end-to-end proof (real nbgrader runs, real tricks) is tests/test_tamper.py; these
tests pin down the pieces: the kernel's inputs hold no secret, the call parser, the
record round trip, and the rule that records must answer the locked cell's checks
exactly, in order.
"""
from __future__ import annotations

import functools

import pytest
import torch
from nbformat.notebooknode import NotebookNode

from attncourse.protocol.calls import check_calls
from attncourse.protocol.cases import SECRET, StoredCase
from attncourse.kernel.grader import run
from judge.autograded import KEY
from judge.preprocessors import judge_cell, reference_data
from attncourse.kernel.encode import encode
from attncourse.protocol.records import MIME, decode
from tests.harness import ROOT
from tests.sections import with_grader


@functools.lru_cache(maxsize=None)
def _data(section):
    return reference_data(str(ROOT), section)


@pytest.mark.parametrize("section", with_grader())
def test_kernel_inputs_hold_no_secret(section):
    full, shared = _data(section)
    assert "messages" not in shared and set(shared) == {"section", "cases"}
    assert shared["cases"].keys() == full["cases"].keys()
    for key, case in shared["cases"].items():
        assert not set(SECRET) & set(case), key
        # everything else the kernel needs to run the case is kept
        assert {k: v for k, v in full["cases"][key].items() if k not in SECRET}.keys() == case.keys(), key


def test_stored_case_round_trip_keeps_the_stored_form():
    full, _ = _data("02_qkv_by_hand")
    for key, case in full["cases"].items():
        assert StoredCase.from_dict(case).to_dict().keys() == case.keys(), key


def test_check_calls_reads_the_cell_like_python():
    src = '''### BEGIN HIDDEN TESTS
# GRADER.check("commented", "out", f)
GRADER.check("softmax", "rows", softmax)
GRADER .check( 'softmax' ,
    "axis0", softmax)
x = "GRADER.check('in', 'a string')"
GRADER.check("attention_maps", "short", attention_maps, model=SHIPPED.model, tokenizer=SHIPPED.tokenizer)
GRADER.check(name, "case", f)
### END HIDDEN TESTS'''
    assert check_calls(src) == [("softmax", "rows"), ("softmax", "axis0"), ("attention_maps", "short"),
                                ("?", "case")]
    assert check_calls("print('no checks')") == []


class Sub(torch.Tensor):
    pass


def test_records_round_trip_and_refuse_to_look_inside_subclasses():
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    g = decode(encode((t, [1, 2.5], {"a": True}, "x")))
    assert g.kind == "tuple" and g.items[0].shape == (2, 3) and g.items[0].dtype == "torch.float32"
    assert g.items[0].array.tolist() == t.tolist()
    assert [i.value for i in g.items[1].items] == [1, 2.5] and g.items[2].keys == ["a"]
    assert decode(encode(t.as_subclass(Sub))).kind == "other"
    meta = decode(encode(torch.empty(2, 3, device="meta")))
    assert meta.array is None and meta.device == "meta"


def _cell(source, outputs):
    return NotebookNode(cell_type="code", source=source, metadata={"nbgrader": {"grade": True, "points": 2}},
                        outputs=outputs)


def _records(section, calls, answer):
    """Records as the kernel would publish them for ``calls`` answered by ``answer``."""
    _, shared = _data(section)
    out = []
    for n, (ex, case) in enumerate(calls, 1):
        rec = {"v": 1, "n": n, "exercise": ex, "case": case}
        rec.update(run(StoredCase.from_dict(shared["cases"][f"{ex}:{case}"]), answer, {}))
        out.append(NotebookNode(output_type="display_data", data={MIME: rec, "text/plain": "checked"}, metadata={}))
    return out


def _sdpa_source():
    from graders import load_section
    from authoring.references import define

    ex = load_section("02_qkv_by_hand").exercise("scaled_dot_product_attention")
    return define(ex, ex.reference), define(ex, ex.mistakes[0].code)


SRC = 'GRADER.check("scaled_dot_product_attention", "batched", f)\n' \
      'GRADER.check("scaled_dot_product_attention", "masked", f)\n'
CALLS = [("scaled_dot_product_attention", "batched"), ("scaled_dot_product_attention", "masked")]


def _verdict(outputs):
    cell = _cell(SRC, outputs)
    judge_cell(cell, check_calls(SRC), _data("02_qkv_by_hand")[0])
    errors = [o for o in cell.outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
    return errors, text, cell


def test_correct_records_pass_and_are_replaced_by_verdict_lines():
    good, _ = _sdpa_source()
    errors, text, cell = _verdict(_records("02_qkv_by_hand", CALLS, good))
    assert not errors and text.count("✓") == 2
    assert not any(MIME in (o.get("data") or {}) for o in cell.outputs)


def test_a_wrong_answer_is_named_without_the_reference():
    _, wrong = _sdpa_source()
    errors, text, cell = _verdict(_records("02_qkv_by_hand", CALLS, wrong))
    v = cell.metadata[KEY]
    assert not errors and v["score"] == 0 and v["zeroed"] is None   # its checks failed: no error, score 0
    assert all("Most likely cause" in c["message"] for c in v["checks"]) and text.count("✗") == 2


def test_a_cell_scores_the_points_of_the_checks_that_pass():
    """Credit per check: one right and one wrong record earn the right one's points, with no error output before
    the judge's score (nbgrader reads the first execute_result as the cell's partial credit)."""
    from nbgrader.utils import determine_grade

    from judge.preprocessors import score_output

    good, wrong = _sdpa_source()
    recs = _records("02_qkv_by_hand", CALLS[:1], good) + _records("02_qkv_by_hand", CALLS[1:], wrong)
    recs[1].data[MIME]["n"] = 2
    errors, text, cell = _verdict(recs)
    v = cell.metadata[KEY]
    weights = [c["weight"] for c in v["checks"]]
    assert not errors and [c["passed"] for c in v["checks"]] == [True, False]
    assert v["score"] == weights[0] == v["checks"][0]["points"] and sum(weights) == v["points"] == 2.0
    cell.outputs.append(score_output(v))
    assert determine_grade(cell) == (weights[0], 2.0)
    assert f"of 2 points: 1 of 2 checks failed" in text and text.count(" / ") == 2   # each check's points shown


@pytest.mark.parametrize("tamper", ["missing", "extra", "repeated", "reordered", "other_case", "none"])
def test_records_not_bound_to_the_cell_score_zero(tamper):
    good, _ = _sdpa_source()
    recs = _records("02_qkv_by_hand", CALLS, good)
    extra = _records("02_qkv_by_hand", [("scaled_dot_product_attention", "float64")], good)
    recs = {"missing": recs[:1], "extra": recs + extra, "repeated": recs + recs[1:],
            "reordered": recs[::-1], "other_case": [recs[0], extra[0]], "none": []}[tamper]
    errors, _, _ = _verdict(recs)
    assert [e.ename for e in errors] == ["TamperingSuspected"], tamper
    assert "tampering suspected" in errors[0].evalue


def test_the_same_correct_records_pass_the_binding_control():
    """Control for the test above: the honest records of the same cell pass."""
    good, _ = _sdpa_source()
    assert not _verdict(_records("02_qkv_by_hand", CALLS, good))[0]


def test_a_record_claiming_another_device_is_refused():
    good, _ = _sdpa_source()
    recs = _records("02_qkv_by_hand", CALLS, good)
    recs[0].data[MIME]["device"] = "cuda:0"
    errors, _, _ = _verdict(recs)
    assert errors and "tampering suspected" in errors[0].evalue


def _words(section, exercise, case, code):
    """The judge's words for ``code`` (a solution cell) on one hidden case of ``section``'s ``exercise``."""
    from graders import load_section
    from authoring.references import define

    ex = load_section(section).exercise(exercise)
    src = f'GRADER.check("{exercise}", "{case}", f)\n'
    cell = _cell(src, _records(section, [(exercise, case)], define(ex, code)))
    judge_cell(cell, check_calls(src), _data(section)[0])
    return " ".join(c["message"] or "" for c in cell.metadata[KEY]["checks"])


def _softmax_verdict(code):
    """02's softmax on its 'large' case (scores around 1000)."""
    return _words("02_qkv_by_hand", "softmax", "large", code)


def test_nan_from_a_catalogued_mistake_is_named_and_other_nan_gets_the_general_causes():
    """NaN in an answer is first matched against the mistakes' outputs (the unstable softmax's NaN are its own),
    and only an unexplained NaN gets the general list of causes; a correct answer passes either way."""
    from graders import load_section

    unstable = next(m for m in load_section("02_qkv_by_hand").exercise("softmax").mistakes if m.key == "unstable")
    named = _softmax_verdict(unstable.code)
    assert "Most likely cause: exp() overflows" in named and "contains NaN" not in named
    other = _softmax_verdict('''
import numpy as np
def softmax(x, axis=-1):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True) * np.where(x > x.mean(), np.nan, 1.0)
''')
    assert "contains NaN. Common causes" in other and "Most likely cause" not in other
    assert _softmax_verdict('''
import numpy as np
def softmax(x, axis=-1):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)
''') == ""


def _mask_verdict(code):
    """03's causal_mask on its 'meta' case (device="$device": the case's own)."""
    return _words("03_masking", "causal_mask", "meta", code)


def test_a_device_argument_and_an_exact_dtype_are_graded():
    """What only visible checks asserted is graded: a mask made on the default device instead of the one asked
    for, and a float mask where the contract (and the reference) is bool."""
    ref = "def causal_mask(T, device=None):\n    return torch.ones(T, T, dtype=torch.bool, device=device).tril()\n"
    assert _mask_verdict(ref) == ""
    assert "created on a fixed device" in _mask_verdict(ref.replace(", device=device", ""))
    assert "should be a torch.bool tensor, got torch.float32" in _mask_verdict(ref.replace("dtype=torch.bool", "dtype=torch.float32"))


def test_a_device_asked_for_is_not_called_the_inputs():
    """causal_mask has no input tensor: its device comes from the device argument, and the message says so."""
    ref = "def causal_mask(T, device=None):\n    return torch.ones(T, T, dtype=torch.bool, device=device).tril()\n"
    words = _mask_verdict(ref.replace(", device=device", ""))
    assert "mask is on device 'cpu' but device 'meta' was asked for (the device argument)" in words
    assert "the input was on" not in words


def _vocab_verdict(code, case="corpus_a"):
    return _words("01_tokens", "build_vocab", case, code)


def test_extra_keys_of_a_dict_are_refused_naming_a_few():
    """A dict with every expected key and more is wrong: a catalogued mistake's very dict is named, any other
    names its first extra keys (a few, with how many more)."""
    from graders import load_section

    ex = load_section("01_tokens").exercise("build_vocab")
    assert _vocab_verdict(ex.reference) == ""
    extra = ex.reference.replace("    return vocab",
                                 "    for i in range(40):\n        vocab[f'w{i}'] = len(vocab)\n    return vocab")
    words = _vocab_verdict(extra)
    assert "vocab has keys it should not have: ['w0', 'w1', 'w2', 'w3', 'w4'] and 35 more" in words
    assert "'w5'" not in words
    specials = next(m for m in ex.mistakes if m.key == "extra_specials")
    words = _vocab_verdict(specials.code, "corpus_b")
    assert "['[BOS]', '[EOS]']" in words and f"Most likely cause: {specials.message}" in words


def test_the_attributes_a_module_contract_names_are_graded():
    """04's MultiHeadAttention must have n_heads and d_k: a missing one and a wrong value are named."""
    from graders import load_section
    from graders.s04_multi_head import ATTR_MISSING

    ex = load_section("04_multi_head").exercise("MultiHeadAttention")
    verdict = functools.partial(_words, "04_multi_head", "MultiHeadAttention", "attributes")
    assert verdict(ex.reference) == ""
    no_dk = ex.reference.replace("self.d_k", "self.head_size")
    assert ATTR_MISSING["d_k"] in verdict(no_dk)
    wrong = next(m for m in ex.mistakes if m.key == "d_k_is_d_model")
    assert f"The attribute self.d_k is wrong. Most likely cause: {wrong.message}" in verdict(wrong.code)


def test_a_raising_check_never_stops_the_cells_later_checks(tmp_path, monkeypatch):
    """In the grading kernel every check records what happened to it: the student's code raising, or the grader
    itself failing to run or describe the answer, is that check's record; the next check runs as ever."""
    from attncourse.kernel import grader as kernel
    from attncourse.protocol.cases import INPUTS_FILE

    torch.save(_data("02_qkv_by_hand")[1], tmp_path / INPUTS_FILE)
    monkeypatch.chdir(tmp_path)
    published = []
    monkeypatch.setattr(kernel, "_publish_record", lambda rec, text: published.append(rec))
    g = kernel.Grader("02_qkv_by_hand")
    assert g.autograding
    good, _ = _sdpa_source()

    def raises(*args, **kwargs):
        raise RuntimeError("boom")

    ex = "scaled_dot_product_attention"
    g.check(ex, "batched", raises)
    real = kernel.encode_answer
    monkeypatch.setattr(kernel, "encode_answer", lambda x: 1 / 0)     # the grader's own failure
    g.check(ex, "masked", good)
    monkeypatch.setattr(kernel, "encode_answer", real)
    g.check(ex, "float64", good)
    assert [r["case"] for r in published] == ["batched", "masked", "float64"]
    assert published[0]["error"]["type"] == "RuntimeError"
    assert "could not run or describe the answer (ZeroDivisionError)" in published[1]["problem"]
    assert "answer" in published[2] and "problem" not in published[2]
