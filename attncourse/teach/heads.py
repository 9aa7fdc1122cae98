"""Section 04's head split and merge, done right and with the reshape bug, measured under a causal mask.

* :class:`SplitMergeAttention` — ``SplitMergeAttention(d_model, n_heads, bug=None)``: multi-head self-attention
  with the course's contract (``qkv``, ``out``; ``forward(x, mask=None)``, True = may attend) whose split into
  heads (``bug="split"``) or merge of the heads (``bug="merge"``) can be a plain reshape without the transpose.
* :func:`future_leak` — how far a *later* token moves an *earlier* position's output under a causal mask.
* :class:`TinyCharModel`, :func:`char_ids`, :func:`train_chars`, :func:`window_losses`, :func:`generate_chars` —
  a one-block character model around any such attention module, trained for a few seconds of CPU on the
  shipped text; its loss at every position and at the last one; its greedy or sampled generation.

Written independently of the graded answers of section 04 (the fused attention kernel does the attention;
``unflatten``/``permute`` split the heads).
"""
from __future__ import annotations

import contextlib

import torch
import torch.nn as nn
import torch.nn.functional as F

BUGS = (None, "split", "merge")


@contextlib.contextmanager
def one_thread():
    """Run the enclosed torch code on one CPU thread (tensors this small run faster than when split across
    busy cores), then restore the thread count."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


class SplitMergeAttention(nn.Module):
    """Multi-head self-attention; ``bug`` = None (correct), "split" or "merge" (reshape without the transpose)."""

    def __init__(self, d_model: int, n_heads: int, bug: str | None = None):
        super().__init__()
        assert bug in BUGS, f"bug must be one of {BUGS}"
        assert d_model % n_heads == 0, "d_model must be a multiple of n_heads"
        self.n_heads, self.bug = n_heads, bug
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):                                        # x: (B, T, D)
        B, T, D = x.shape
        h = self.n_heads
        parts = self.qkv(x).split(D, dim=-1)                                # 3 x (B, T, D)
        if self.bug == "split":                                             # memory order: rows of several tokens
            q, k, v = (p.reshape(B, h, T, D // h) for p in parts)           # (B, h, T, d_k)
        else:
            q, k, v = (p.unflatten(-1, (h, D // h)).permute(0, 2, 1, 3) for p in parts)   # (B, h, T, d_k)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None if mask is None else mask.bool())
        if self.bug == "merge":
            y = y.reshape(B, T, D)                                          # (B, h, T, d_k) read in memory order
        else:
            y = y.permute(0, 2, 1, 3).flatten(2)                            # (B, T, h, d_k) -> (B, T, D)
        return self.out(y)                                                  # (B, T, D)


def causal_mask(T: int, device=None) -> torch.Tensor:
    """(T, T) bool, True on and below the diagonal (may attend)."""
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()


@torch.no_grad()
def future_leak(attention: nn.Module, T: int = 8, changed: int = 5, seed: int = 0) -> torch.Tensor:
    """Run ``attention`` causally on a random (1, T, d_model) input and on a copy whose token ``changed`` is
    replaced; return, per position, the largest change of the output (T,). A causal module moves only
    positions >= ``changed``."""
    g = torch.Generator().manual_seed(seed)
    d_model = attention.out.in_features
    x = torch.randn(1, T, d_model, generator=g)                             # (1, T, D)
    x2 = x.clone()
    x2[0, changed] = torch.randn(d_model, generator=g)                      # a different token at `changed`
    mask = causal_mask(T)
    return (attention(x2, mask) - attention(x, mask)).abs().amax(dim=(0, 2))   # (T,)


def char_ids(text: str):
    """(ids (N,) long, chars): the text as ids into its sorted set of characters."""
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    return torch.tensor([index[c] for c in text]), chars


class TinyCharModel(nn.Module):
    """Token + learned position embeddings, one Pre-LN block (the given attention, causal; a GELU MLP), logits."""

    def __init__(self, attention: nn.Module, vocab_size: int, d_model: int, max_len: int):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        self.norm1, self.norm2, self.norm_f = nn.LayerNorm(d_model), nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = attention
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, idx):                                                 # idx: (B, T)
        T = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))    # (B, T, D)
        x = x + self.attn(self.norm1(x), causal_mask(T, idx.device))        # (B, T, D)
        x = x + self.mlp(self.norm2(x))
        return self.head(self.norm_f(x))                                    # (B, T, vocab)


def train_chars(model: nn.Module, ids: torch.Tensor, steps: int = 300, T: int = 32, batch: int = 32,
                lr: float = 3e-3, seed: int = 0) -> list[float]:
    """Next-character training on random windows of ``ids``; returns the loss of every step."""
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    losses = []
    model.train()
    with one_thread():
        for _ in range(steps):
            start = torch.randint(0, len(ids) - T - 1, (batch,), generator=g)  # (batch,)
            rows = start[:, None] + torch.arange(T + 1)                         # (batch, T + 1)
            window = ids[rows]
            logits = model(window[:, :-1])                                      # (batch, T, vocab)
            loss = F.cross_entropy(logits.flatten(0, 1), window[:, 1:].flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return losses


@torch.no_grad()
def window_losses(model: nn.Module, ids: torch.Tensor, T: int = 32, every: int = 7, n: int = 2000):
    """Cross-entropy over windows of ``T`` characters starting every ``every`` characters in ``ids[:n]``:
    (mean over every position, mean over the last position only). The last position is the only one a
    model reads when it generates, and the only one whose next character is not in its input."""
    model.eval()
    starts = torch.arange(0, min(n, len(ids) - T - 1), every)              # (W,)
    window = ids[starts[:, None] + torch.arange(T + 1)]                     # (W, T + 1)
    with one_thread():
        logits = model(window[:, :-1])                                      # (W, T, vocab)
    every_position = F.cross_entropy(logits.flatten(0, 1), window[:, 1:].flatten()).item()
    last_position = F.cross_entropy(logits[:, -1], window[:, -1]).item()
    return every_position, last_position


@torch.no_grad()
def generate_chars(model: nn.Module, prompt: str, chars, n_new: int = 60, T: int = 32,
                   temperature: float = 0.0, seed: int = 0) -> str:
    """Append ``n_new`` characters to ``prompt``, each read from the last position of the last ``T``
    characters: the most likely one at ``temperature`` 0, else a seeded draw from softmax(logits / temperature)."""
    index = {c: i for i, c in enumerate(chars)}
    g = torch.Generator().manual_seed(seed)
    idx = torch.tensor([[index[c] for c in prompt]])                        # (1, len(prompt))
    model.eval()
    with one_thread():
        for _ in range(n_new):
            logits = model(idx[:, -T:])[0, -1]                              # (vocab,)
            if temperature == 0:
                nxt = logits.argmax()
            else:
                nxt = torch.multinomial((logits / temperature).softmax(-1), 1, generator=g)[0]
            idx = torch.cat([idx, nxt.view(1, 1)], dim=1)
    return "".join(chars[i] for i in idx[0].tolist())
