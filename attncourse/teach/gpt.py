"""A small GPT for the character-level language model (section 09), and the corpus it reads.

* :func:`load_corpus` — the shipped public-domain text (``attncourse/data``, see its README).
* :func:`rotate` — section 05's rotary position embedding, written with complex numbers and a position
  *offset* (the position of the first row), which a KV cache needs.
* :class:`GPT` — ``GPT(vocab_size, d_model, n_heads, n_layers, max_len, dropout)``: token embedding, Pre-LN
  blocks of causal multi-head self-attention (RoPE on queries and keys) and a GELU MLP, a final LayerNorm
  and an output head that shares the embedding's weight matrix (weight tying).
  ``forward(idx, cache=None, use_cache=False)`` returns the logits ``(B, T, vocab_size)``, and with a cache
  (given, or asked for) also the new cache: one ``(keys, values)`` pair per block, each ``(B, h, T_seen, d_head)``.
  ``generate(idx, n_new, temperature, top_k, stop, generator, filter)`` samples with the cache; ``filter``, a
  function logits (B, V) -> logits (B, V), is applied to the temperature-scaled (and top-k cut) logits before
  the draw: section 09 passes the student's own top-p filter there (this package does not implement top-p).

Written independently of the graded answers of sections 04–06 (separate Q, K, V projections, complex-number
RoPE, PyTorch's fused attention with an explicit mask when a cache is present).
"""
from __future__ import annotations

import inspect
import math
from importlib import resources

import torch
import torch.nn as nn
import torch.nn.functional as F

CORPUS = "kjv_genesis_exodus.txt"


def load_corpus(name: str = CORPUS) -> str:
    """The text of a corpus shipped in ``attncourse/data`` (read from the installed package)."""
    return resources.files("attncourse").joinpath("data", name).read_text(encoding="utf-8")


def show_source(obj) -> None:
    """Print the source code of a function or class (to read the given model in the notebook)."""
    print(inspect.getsource(obj))


def rotate(x: torch.Tensor, offset: int = 0, base: float = 10000.0) -> torch.Tensor:
    """Section 05's RoPE for rows at positions ``offset, offset + 1, ...``: feature pair (2i, 2i+1) of the row at
    position m, read as the complex number x[2i] + i·x[2i+1], is multiplied by e^{i·m·θ_i}, θ_i = base^(-2i/d)."""
    T, d = x.shape[-2], x.shape[-1]
    pos = torch.arange(offset, offset + T, device=x.device, dtype=torch.float32)          # (T,)
    theta = base ** (-torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d)    # (d/2,)
    turn = torch.polar(torch.ones_like(pos[:, None] * theta), pos[:, None] * theta)       # (T, d/2) complex
    pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], d // 2, 2).contiguous())  # (..., T, d/2)
    return torch.view_as_real(pairs * turn).flatten(-2).to(x.dtype)                        # (..., T, d)


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with RoPE and an optional KV cache."""

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0):
        super().__init__()
        assert d_model % n_heads == 0, "d_model must be a multiple of n_heads"
        self.n_heads, self.d_head, self.p = n_heads, d_model // n_heads, dropout
        self.query = nn.Linear(d_model, d_model, bias=False)
        self.key = nn.Linear(d_model, d_model, bias=False)
        self.value = nn.Linear(d_model, d_model, bias=False)
        self.out = nn.Linear(d_model, d_model)
        self.out_drop = nn.Dropout(dropout)

    def heads(self, t: torch.Tensor) -> torch.Tensor:                      # (B, T, d_model) -> (B, h, T, d_head)
        B, T, _ = t.shape
        return t.view(B, T, self.n_heads, self.d_head).permute(0, 2, 1, 3)

    def forward(self, x, past=None):                                        # x: (B, T, d_model)
        offset = 0 if past is None else past[0].shape[-2]                   # positions already in the cache
        q = rotate(self.heads(self.query(x)), offset)                       # (B, h, T, d_head) at offset ...
        k = rotate(self.heads(self.key(x)), offset)                         # (B, h, T, d_head)
        v = self.heads(self.value(x))                                       # (B, h, T, d_head)
        if past is not None:
            k = torch.cat((past[0], k), dim=-2)                             # (B, h, offset + T, d_head)
            v = torch.cat((past[1], v), dim=-2)
        p = self.p if self.training else 0.0
        if offset == 0:   # T_q == T_k: is_causal's top-left aligned mask is the right one
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=p)
        else:             # new row i sits at position offset + i: it may see keys 0 .. offset + i
            rows = torch.arange(q.shape[-2], device=x.device)[:, None] + offset
            seen = torch.arange(k.shape[-2], device=x.device)[None, :] <= rows  # (T, offset + T)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=seen, dropout_p=p)
        y = y.permute(0, 2, 1, 3).flatten(2)                                # (B, T, d_model)
        return self.out_drop(self.out(y)), (k, v)


class Block(nn.Module):
    """Pre-LN: x + attention(LayerNorm(x)), then x + MLP(LayerNorm(x))."""

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads, dropout)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model),
                                 nn.Dropout(dropout))

    def forward(self, x, past=None):
        a, kv = self.attn(self.norm1(x), past)
        x = x + a
        return x + self.mlp(self.norm2(x)), kv


class GPT(nn.Module):
    """A decoder-only language model: GPT(vocab_size, d_model, n_heads, n_layers, max_len, dropout)."""

    def __init__(self, vocab_size: int, d_model: int = 64, n_heads: int = 4, n_layers: int = 2,
                 max_len: int = 128, dropout: float = 0.0):
        super().__init__()
        self.vocab_size, self.max_len = vocab_size, max_len
        self.embed = nn.Embedding(vocab_size, d_model)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(d_model, n_heads, dropout) for _ in range(n_layers))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.head.weight = self.embed.weight            # weight tying: one (vocab_size, d_model) matrix
        for name, p in self.named_parameters():
            if p.dim() == 2:                             # small random matrices: the untrained model is ~uniform
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * n_layers) if name.endswith("out.weight") else 0.02)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, cache=None, use_cache=False):                   # idx: (B, T) token ids
        seen = 0 if cache is None else cache[0][0].shape[-2]
        if seen + idx.shape[1] > self.max_len:
            raise ValueError(f"{seen + idx.shape[1]} positions: this model reads at most max_len={self.max_len}")
        h = self.drop(self.embed(idx))                                      # (B, T, d_model)
        new = []
        for i, block in enumerate(self.blocks):
            h, kv = block(h, None if cache is None else cache[i])           # (B, T, d_model)
            new.append(kv)
        logits = self.head(self.norm(h))                                    # (B, T, vocab_size)
        return (logits, new) if (use_cache or cache is not None) else logits

    @staticmethod
    def choose(logits, temperature=1.0, top_k=None, generator=None, filter=None):
        """One token id per row of ``logits`` (B, V): greedy at temperature 0, else a draw from the softmax of
        ``logits / temperature`` restricted to the ``top_k`` largest, after ``filter`` (a function (B, V) -> (B, V))."""
        if temperature == 0:
            return logits.argmax(dim=-1)
        z = logits.float() / temperature                                    # (B, V)
        if top_k is not None:   # keep the top_k largest of each row: the others are masked by their indices
            best = z.topk(min(top_k, z.shape[-1]), dim=-1).indices          # (B, k)
            keep = torch.zeros_like(z, dtype=torch.bool).scatter(-1, best, True)
            z = torch.where(keep, z, float("-inf"))
        if filter is not None:
            z = filter(z)                                                   # (B, V), e.g. a top-p filter
        return torch.multinomial(z.softmax(dim=-1), 1, generator=generator).squeeze(-1)

    @torch.no_grad()
    def generate(self, idx, n_new, temperature=1.0, top_k=None, stop=None, generator=None, filter=None):
        """Append up to ``n_new`` tokens to ``idx`` (B, T0), reading each new token with the KV cache.

        ``temperature``, ``top_k``, ``filter``: as in :meth:`choose` (``filter`` maps the scaled logits (B, V) to
        logits (B, V) before the draw; it is not called at temperature 0).
        ``stop``: a token id; generation ends once every row has produced it (a finished row repeats it).
        Returns (B, T0 + n) with n <= n_new.  The model is put in eval mode and left as it was.
        """
        was_training = self.training
        self.eval()
        ids = idx[:, -self.max_len:]
        logits, cache = self(ids, use_cache=True)
        out, done = [idx], torch.zeros(idx.shape[0], dtype=torch.bool, device=idx.device)
        for _ in range(n_new):
            nxt = self.choose(logits[:, -1], temperature, top_k, generator, filter)   # (B,)
            if stop is not None:
                nxt = torch.where(done, torch.full_like(nxt, stop), nxt)
                done = done | (nxt == stop)
            out.append(nxt[:, None])
            if stop is not None and bool(done.all()):
                break
            if cache[0][0].shape[-2] >= self.max_len:                       # window full: re-read its last half
                ids = torch.cat(out, dim=1)[:, -(self.max_len // 2):]
                logits, cache = self(ids, use_cache=True)
            else:
                logits, cache = self(nxt[:, None], cache)
        self.train(was_training)
        return torch.cat(out, dim=1)
