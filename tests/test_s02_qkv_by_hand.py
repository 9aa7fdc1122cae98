"""Section 02's measured claims: the RNN's gradient from token 0 fades with the number of steps, and the
spread of q·k is √d for independent unit-variance components (the predict-then-measure answer, 8 for 64)."""
import math

import numpy as np
import torch


def test_rnn_jacobian_from_token_0_fades_geometrically():
    torch.manual_seed(0)                                   # the notebook's seed_everything(0) seeds torch too
    T, d = 512, 64
    x = torch.randn(T, d)
    W_x, W_h = torch.randn(d, d) / 8, torch.randn(d, d) / 8

    def rnn_state(x0, n_steps):
        h = torch.zeros(d)
        for t in range(n_steps):
            h = torch.tanh((x0 if t == 0 else x[t]) @ W_x + h @ W_h)
        return h

    norms = [torch.linalg.matrix_norm(torch.autograd.functional.jacobian(lambda x0: rnn_state(x0, n), x[0])).item()
             for n in (1, 16, 64)]
    assert norms[1] < 0.1 * norms[0] and norms[2] < 1e-6 * norms[0], norms


def test_spread_of_q_dot_k_is_sqrt_d():
    rng = np.random.default_rng(0)
    for d in (4, 64):
        dots = (rng.normal(size=(20000, d)) * rng.normal(size=(20000, d))).sum(axis=1)
        assert abs(dots.std() - math.sqrt(d)) < 0.05 * math.sqrt(d)


# ---------------------------------------------------------------------------------------------------------------
# Feedback that names what is wrong (in-process: the kernel's Grader with the judge's words, as check_now shows it).

import pytest  # noqa: E402

from tests.harness import ROOT, cell_by_id, read_nb  # noqa: E402

SECTION = "02_qkv_by_hand"


@pytest.fixture
def grader(monkeypatch):
    from attncourse.kernel.grader import Grader
    from judge.verdict import judge_record

    monkeypatch.setenv("ATTNCOURSE_ROOT", str(ROOT))
    return Grader(SECTION, judge=judge_record)


def _feedback(grader, exercise, obj, case):
    from attncourse.kernel.grader import GradingError

    try:
        grader.check(exercise, case, obj)
    except GradingError as err:
        return str(err)
    return None


def _defined(code):
    from authoring.references import PRELUDE

    ns = {}
    exec(compile(PRELUDE + code, "<cell>", "exec"), ns)   # noqa: S102 - the course's own cells
    return ns


def test_untouched_find_the_bug_handout_is_told_what_is_wrong_not_the_fix(grader):
    """check_now / grading on the untouched handout: the symptom (right only when d_k = 1, weights too sharp);
    before, "multiply Q Kᵀ by d_k ** -0.5"."""
    from authoring.references import handout_source
    from graders import load_section

    ex = load_section(SECTION).exercise("fixed_attention")
    handout = handout_source([m for m in ex.mistakes if m.key == ex.handout][0].code)
    assert handout == cell_by_id(read_nb(ROOT / "release" / SECTION / f"{SECTION}.ipynb"), "fixed_attention").source
    text = _feedback(grader, "fixed_attention", _defined(handout)["fixed_attention"], "batched")
    assert "only when d_k = 1" in text and "too sharp" in text, text
    assert "** -0.5" not in text and "sqrt" not in text, text
    assert _feedback(grader, "fixed_attention", _defined(ex.reference)["fixed_attention"], "batched") is None


def test_softmax_over_a_fixed_axis_is_named(grader):
    """A softmax fixed to axis=0 was 'matches none of the common mistakes'; now it is named."""
    fixed0 = _defined("def softmax(x, axis=-1):\n    e = np.exp(x - np.max(x, axis=0, keepdims=True))\n"
                      "    return e / e.sum(axis=0, keepdims=True)\n")["softmax"]
    text = _feedback(grader, "softmax", fixed0, "rows")
    assert "always runs over axis 0" in text and "none of the common mistakes" not in text, text


def test_softmax_visible_check_names_the_overflow_first():
    """The unstable softmax overflows to NaN on [1000, 1001, 1002]: the visible check says "subtract the max first"
    (before, "each row should sum to 1" came first and hid it); a stable softmax passes."""
    check = cell_by_id(read_nb(ROOT / "source" / SECTION / f"{SECTION}.ipynb"), "test_softmax_visible").source
    unstable = _defined("def softmax(x, axis=-1):\n    e = np.exp(x)\n    return e / e.sum(axis=axis, keepdims=True)\n")
    with np.errstate(all="ignore"), pytest.raises(AssertionError, match="subtract the max first"):
        exec(check, unstable)   # noqa: S102
    stable = _defined(cell_by_id(read_nb(ROOT / "source" / SECTION / f"{SECTION}.ipynb"), "softmax").source)
    exec(check, stable)   # noqa: S102


@pytest.mark.parametrize("name", ["scores_hand", "scaled_hand", "weights_hand", "output_hand"])
def test_by_hand_answers_are_typed_lists_and_a_computed_array_is_refused(grader, name):
    """The by-hand part takes a nested list of numbers; the same numbers as a NumPy array or a tensor (computed
    in the notebook) are refused, hidden check and visible check alike; the stub's comment gives no expression."""
    src = read_nb(ROOT / "source" / SECTION / f"{SECTION}.ipynb")
    typed = _defined(cell_by_id(src, name).source)[name]
    assert isinstance(typed, list)
    assert _feedback(grader, name, typed, "value") is None
    for computed in (np.array(typed, dtype=float), torch.tensor(typed, dtype=torch.float64)):
        text = _feedback(grader, name, computed, "value")
        assert text and "should be a list" in text, text
    stub = cell_by_id(read_nb(ROOT / "release" / SECTION / f"{SECTION}.ipynb"), name).source
    assert "@" not in stub and "Q_ex" not in stub and "K_ex" not in stub, stub
    visible = cell_by_id(src, "test_hand_visible").source
    ns = {"np": np, **{n: _defined(cell_by_id(src, n).source)[n]
                       for n in ("scores_hand", "scaled_hand", "weights_hand", "output_hand")}}
    exec("from attncourse import needs\n" + visible, dict(ns))   # noqa: S102 - typed lists pass
    ns[name] = np.array(ns[name])
    with pytest.raises(AssertionError, match="type the numbers as a nested list"):
        exec("from attncourse import needs\n" + visible, dict(ns))   # noqa: S102
