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


def test_split_merge_attention_matches_nn_multihead_and_only_the_bugs_leak():
    """The notebook's leak measurement: the correct SplitMergeAttention is nn.MultiheadAttention's computation,
    no position moves when a later token changes; both reshape bugs move an earlier position."""
    from attncourse.teach.heads import SplitMergeAttention, causal_mask, future_leak

    torch.manual_seed(0)
    ours = SplitMergeAttention(16, 4)
    theirs = torch.nn.MultiheadAttention(16, 4, batch_first=True)
    with torch.no_grad():
        theirs.in_proj_weight.copy_(ours.qkv.weight)
        theirs.in_proj_bias.copy_(ours.qkv.bias)
        theirs.out_proj.weight.copy_(ours.out.weight)
        theirs.out_proj.bias.copy_(ours.out.bias)
        x = torch.randn(2, 8, 16)
        assert torch.allclose(ours(x, causal_mask(8)), theirs(x, x, x, attn_mask=~causal_mask(8))[0], atol=1e-5)
    assert future_leak(ours, T=8, changed=5)[:5].max() == 0
    for bug in ("split", "merge"):
        buggy = SplitMergeAttention(16, 4, bug)
        buggy.load_state_dict(ours.state_dict())
        assert future_leak(buggy, T=8, changed=5)[:5].max() > 1e-3, bug


def test_one_thread_restores_the_thread_count():
    from attncourse.teach.heads import one_thread

    before = torch.get_num_threads()
    with one_thread():
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
