"""What section 09's language model needs besides the student's own model: the corpus, RoPE, a sampler.

* :func:`load_corpus` — the shipped public-domain text (``attncourse/data``, see its README).
* :func:`rotate` — section 05's rotary position embedding (``apply_rope(x, offset)``'s contract), written with
  complex numbers: rows at positions ``offset, offset + 1, ...``, which a KV cache needs.  Written independently
  of section 05's graded answer; section 09 hands it to the student as ``apply_rope``.
* :func:`choose` and :func:`generate` — sampling from any model with section 09's cache contract:
  ``model(idx)`` returns the logits ``(B, T, V)``; ``model(idx, cache, offset)`` with a list ``cache`` (``[]`` to
  start one) returns ``(logits, new_cache)``, ``offset`` being the position of ``idx``'s first token.  ``filter``, a
  function logits (B, V) -> logits (B, V), is applied to the temperature-scaled (and top-k cut) logits before
  the draw: section 09 passes the student's own top-p filter there (this package does not implement top-p).

The model itself (attention with RoPE and a KV cache, the block, weight tying) is section 09's graded exercise:
it is not in this package.
"""
from __future__ import annotations

import inspect
from importlib import resources

import torch

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


def small_init(model: torch.nn.Module, std: float = 0.02) -> None:
    """GPT-2's initialisation, in place: every matrix N(0, std) — the residual branches' output projections
    (names ending ``out.weight`` or ``ffn.2.weight``) N(0, std / sqrt(2 · n_layers)) — and every bias 0, so that
    an untrained model's logits are all close to 0.  LayerNorms keep their ones and zeros."""
    n_layers = max(1, len(getattr(model, "blocks", [])))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                residual = name.endswith("out.weight") or name.endswith("ffn.2.weight")
                torch.nn.init.normal_(p, 0.0, std / (2 * n_layers) ** 0.5 if residual else std)
            elif name.endswith("bias"):
                torch.nn.init.zeros_(p)


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
def generate(model, idx, n_new, temperature=1.0, top_k=None, stop=None, generator=None, filter=None, max_len=None):
    """Append up to ``n_new`` tokens to ``idx`` (B, T0), reading each new token with ``model``'s KV cache.

    ``model(ids, [])`` reads the prompt and starts the cache; each new token is then read alone,
    ``model(token, cache, offset)`` with ``offset`` = the number of positions already in the cache.
    ``temperature``, ``top_k``, ``filter``: as in :func:`choose` (``filter`` is not called at temperature 0).
    ``stop``: a token id; generation ends once every row has produced it (a finished row repeats it).
    ``max_len`` (default ``model.max_len`` if it has one): once the cache holds that many positions, the last
    half of the text is read again from position 0.  Returns (B, T0 + n) with n <= n_new.  The model is put in
    eval mode and left as it was.
    """
    max_len = max_len or getattr(model, "max_len", None) or 1 << 30
    was_training = model.training
    model.eval()
    ids = idx[:, -max_len:]
    logits, cache = model(ids, [])
    seen = ids.shape[1]                                                 # positions in the cache
    out, done = [idx], torch.zeros(idx.shape[0], dtype=torch.bool, device=idx.device)
    for _ in range(n_new):
        nxt = choose(logits[:, -1], temperature, top_k, generator, filter)   # (B,)
        if stop is not None:
            nxt = torch.where(done, torch.full_like(nxt, stop), nxt)
            done = done | (nxt == stop)
        out.append(nxt[:, None])
        if stop is not None and bool(done.all()):
            break
        if seen >= max_len:                                             # window full: re-read its last half
            ids = torch.cat(out, dim=1)[:, -(max_len // 2):]
            logits, cache = model(ids, [])
            seen = ids.shape[1]
        else:
            logits, cache = model(nxt[:, None], cache, seen)            # the new token at position `seen`
            seen += 1
    model.train(was_training)
    return torch.cat(out, dim=1)
