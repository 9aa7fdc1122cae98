"""Attention heatmaps with token labels (one implementation for every section)."""
from __future__ import annotations

from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch


def _to_numpy(w) -> np.ndarray:
    if isinstance(w, torch.Tensor):
        w = w.detach().to("cpu", torch.float32).numpy()
    w = np.asarray(w, dtype=np.float64)
    if w.ndim != 2:
        raise ValueError(f"expected a (T_q, T_k) matrix, got shape {w.shape}")
    return w


def attention_heatmap(weights, keys: Sequence[str] | None = None, queries: Sequence[str] | None = None,
                      ax=None, title: str = "Attention weights", annotate: bool | None = None,
                      cmap: str = "viridis", vmin: float | None = 0.0, vmax: float | None = None,
                      colorbar: bool = True, savepath: str | None = None):
    """Draw a (T_q, T_k) weight matrix: rows are queries (attending), columns keys (attended to).

    ``annotate`` writes each weight in its cell (default: on for matrices up to 8x8).
    Returns the matplotlib Axes.
    """
    w = _to_numpy(weights)
    n_q, n_k = w.shape
    queries = list(queries) if queries is not None else (list(keys) if keys is not None and n_q == n_k else None)
    if ax is None:
        size = max(3.0, 0.45 * max(n_q, n_k) + 1.5)
        _, ax = plt.subplots(figsize=(size + 1.0, size))
    im = ax.imshow(w, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    ax.set_xticks(range(n_k))
    ax.set_yticks(range(n_q))
    if keys is not None:
        ax.set_xticklabels(keys, rotation=45, ha="right")
    if queries is not None:
        ax.set_yticklabels(queries)
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    ax.set_title(title)
    if annotate is None:
        annotate = max(n_q, n_k) <= 8
    if annotate:
        hi = np.nanmax(w) if np.isfinite(w).any() else 1.0
        for i in range(n_q):
            for j in range(n_k):
                ax.text(j, i, f"{w[i, j]:.2f}", ha="center", va="center",
                        color="black" if w[i, j] > 0.6 * hi else "white", fontsize=8)
    if colorbar:
        ax.figure.colorbar(im, ax=ax, label="attention weight", fraction=0.046, pad=0.04)
    ax.figure.tight_layout()
    if savepath:
        ax.figure.savefig(savepath, dpi=120, bbox_inches="tight")
    return ax
