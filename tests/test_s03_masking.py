"""Section 03's claims about PyTorch that the course's floor (torch >= 2.5) rests on.

03 teaches that ``F.scaled_dot_product_attention`` returns zeros (not NaN) for a query with no allowed key
on the CPU, and that the plain ``-inf`` recipe gives NaN there.  The zeros came with PyTorch 2.5
(``_safe_softmax``, pytorch/pytorch#133882); earlier versions return NaN, so the floor must stay at 2.5.
"""
import pytest
import torch
import torch.nn.functional as F


def _row_blocked():
    allowed = torch.ones(3, 3, dtype=torch.bool).tril()
    allowed[0] = False                                    # query 0 may attend to nothing
    return allowed


def test_sdpa_returns_zeros_for_a_query_with_no_allowed_key():
    q = torch.randn(1, 3, 4, generator=torch.Generator().manual_seed(0))
    out = F.scaled_dot_product_attention(q, q, q, attn_mask=_row_blocked())
    assert torch.equal(out[0, 0], torch.zeros(4)), out[0, 0]
    assert torch.isfinite(out).all()


def test_plain_minus_inf_recipe_gives_nan_there():
    s = torch.randn(3, 3).masked_fill(~_row_blocked(), float("-inf"))
    w = torch.softmax(s, dim=-1)
    assert torch.isnan(w[0]).all() and torch.isfinite(w[1:]).all()


def test_causal_mask_blocks_T_times_T_minus_1_over_2():
    for T in (1, 6, 1024):
        assert int((~torch.ones(T, T, dtype=torch.bool).tril()).sum()) == T * (T - 1) // 2


def test_masked_weights_by_hand_are_a_typed_list_and_a_computed_array_is_refused(monkeypatch):
    """As in 02: the by-hand matrix is taken as a nested list of numbers; the same numbers as an array or a tensor
    (computed in the notebook) are refused by the hidden check."""
    import numpy as np
    import torch

    from attncourse.kernel.grader import Grader, GradingError
    from judge.verdict import judge_record
    from tests.harness import ROOT, cell_by_id, read_nb

    monkeypatch.setenv("ATTNCOURSE_ROOT", str(ROOT))
    grader = Grader("03_masking", judge=judge_record)
    ns = {"np": np}
    exec(cell_by_id(read_nb(ROOT / "source" / "03_masking" / "03_masking.ipynb"), "masked_weights_hand").source, ns)  # noqa: S102
    typed = ns["masked_weights_hand"]
    grader.check("masked_weights_hand", "value", typed)
    for computed in (np.array(typed), torch.tensor(typed)):
        with pytest.raises(GradingError, match="should be a list"):
            grader.check("masked_weights_hand", "value", computed)
