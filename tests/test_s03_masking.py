"""Section 03's claims about PyTorch that the course's floor (torch >= 2.5) rests on.

03 teaches that ``F.scaled_dot_product_attention`` returns zeros (not NaN) for a query with no allowed key
on the CPU, and that the plain ``-inf`` recipe gives NaN there.  The zeros came with PyTorch 2.5
(``_safe_softmax``, pytorch/pytorch#133882); earlier versions return NaN, so the floor must stay at 2.5.
"""
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
