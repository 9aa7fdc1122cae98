"""Section 04's claim about ``is_causal=True``: it aligns the causal triangle top-left when T_q != T_k.

With a KV cache the new queries are the last T_q of T_k positions, so the right mask is the bottom-right
triangle; the notebook shows that is_causal=True gives the top-left one and that an explicit bottom-right
mask (or ``causal_lower_right``) matches a full causal pass.  A PyTorch release that changed the alignment
would make the notebook's lesson wrong: this test says so first.
"""
import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right


def _qkv(t=6, d=8):
    g = torch.Generator().manual_seed(3)
    return torch.randn(3, 1, 1, t, d, generator=g).unbind(0)


def test_is_causal_is_top_left_when_fewer_queries_than_keys():
    q, k, v = _qkv()
    T_past, T_new = 4, 2
    full = F.scaled_dot_product_attention(q, k, v, is_causal=True)[..., T_past:, :]
    q_new = q[..., T_past:, :]
    top_left = torch.ones(T_new, T_past + T_new, dtype=torch.bool).tril()
    bottom_right = torch.ones(T_new, T_past + T_new, dtype=torch.bool).tril(diagonal=T_past)
    fused = F.scaled_dot_product_attention(q_new, k, v, is_causal=True)
    assert torch.allclose(fused, F.scaled_dot_product_attention(q_new, k, v, attn_mask=top_left), atol=1e-6)
    assert not torch.allclose(fused, full, atol=1e-3)
    assert torch.allclose(F.scaled_dot_product_attention(q_new, k, v, attn_mask=bottom_right), full, atol=1e-6)
    lower_right = causal_lower_right(T_new, T_past + T_new)
    assert torch.allclose(F.scaled_dot_product_attention(q_new, k, v, attn_mask=lower_right), full, atol=1e-6)


def test_one_new_token_needs_no_mask():
    q, k, v = _qkv()
    full = F.scaled_dot_product_attention(q, k, v, is_causal=True)[..., -1:, :]
    assert torch.allclose(F.scaled_dot_product_attention(q[..., -1:, :], k, v), full, atol=1e-6)


def test_gpt2_small_layer_weights_take_48_mib():
    w = torch.empty(1, 12, 1024, 1024)
    assert w.nelement() * w.element_size() / 2**20 == 48
