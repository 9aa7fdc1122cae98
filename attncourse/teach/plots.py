"""Attention heatmaps with token labels (one implementation for every section)."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .checks import as_numpy


def _plt():
    """matplotlib.pyplot, imported when a plot is drawn: a grading kernel's setup cell imports this package and
    should not pay for matplotlib (a quarter of its import time) when it draws nothing."""
    import matplotlib.pyplot as plt

    return plt


def _to_numpy(w) -> np.ndarray:
    w = as_numpy(w)
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
        _, ax = _plt().subplots(figsize=(size + 1.0, size))
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


def block_diagram(batch: int = 2, seq: int = 5, d_model: int = 16, n_heads: int = 4, d_ff: int | None = None,
                  pre_ln: bool = True, ax=None, savepath: str | None = None):
    """Draw one Transformer block bottom-up as boxes, with the tensor shape on every arrow.

    Post-LN (``pre_ln=False``): ``x → attention → add → LayerNorm → FFN → add → LayerNorm``; Pre-LN:
    ``x → LayerNorm → attention → add → LayerNorm → FFN → add``, the residual path never normalised.
    Returns the matplotlib Axes.
    """
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    d_ff = 4 * d_model if d_ff is None else d_ff
    d_k = d_model // n_heads
    x = f"({batch}, {seq}, {d_model})"
    attn = f"multi-head attention\n{n_heads} heads × d_k={d_k}: Q, K, V ({batch}, {n_heads}, {seq}, {d_k})\n" \
           f"weights ({batch}, {n_heads}, {seq}, {seq})"
    ffn = f"FFN  Linear → GELU → Linear\ninside: ({batch}, {seq}, {d_ff})"
    if pre_ln:
        steps = [("LayerNorm ln1", x), (attn, x), ("+ residual", x), ("LayerNorm ln2", x), (ffn, x),
                 ("+ residual", x)]
        skips = [(-1, 2), (2, 5)]          # residual from the block input / the first add
    else:
        steps = [(attn, x), ("+ residual", x), ("LayerNorm ln1", x), (ffn, x), ("+ residual", x),
                 ("LayerNorm ln2", x)]
        skips = [(-1, 1), (2, 4)]
    if ax is None:
        _, ax = _plt().subplots(figsize=(6.4, 8.4))
    gap, h = 1.25, 0.8
    ys = [gap * (i + 1) for i in range(len(steps))]
    ax.text(0, 0, f"input x {x}", ha="center", va="center", fontsize=9)
    for i, ((label, shape), y) in enumerate(zip(steps, ys)):
        color = "#dbe9f6" if "attention" in label else "#fde9d0" if "FFN" in label else \
            "#e8f4e4" if "LayerNorm" in label else "#f2f2f2"
        ax.add_patch(FancyBboxPatch((-2.1, y - h / 2), 4.2, h, boxstyle="round,pad=0.02", fc=color, ec="#555"))
        ax.text(0, y, label, ha="center", va="center", fontsize=8.5)
        y0 = ys[i - 1] + h / 2 if i else 0.25
        ax.add_patch(FancyArrowPatch((0, y0), (0, y - h / 2), arrowstyle="-|>", mutation_scale=10, color="#333"))
        ax.text(-0.1, (y0 + y - h / 2) / 2, shape, fontsize=7.5, va="center", ha="right", color="#1f4e79")
    for k, (src, dst) in enumerate(skips):   # branch off the main line, run up the right side, into the add
        y0 = 0.35 if src < 0 else ys[src] + gap / 2
        xr = 2.45 + 0.25 * k
        ax.plot([0, xr, xr], [y0, y0, ys[dst]], color="#a33", lw=1.2)
        ax.add_patch(FancyArrowPatch((xr, ys[dst]), (2.1, ys[dst]), arrowstyle="-|>", mutation_scale=10,
                                     color="#a33", lw=1.2))
    top = ys[-1] + h / 2
    ax.add_patch(FancyArrowPatch((0, top), (0, top + 0.6), arrowstyle="-|>", mutation_scale=10, color="#333"))
    ax.text(0, top + 0.85, f"output {x}", ha="center", va="center", fontsize=9)
    ax.set_xlim(-2.6, 3.4)
    ax.set_ylim(-0.5, top + 1.2)
    ax.axis("off")
    ax.set_title(f"{'Pre-LN' if pre_ln else 'Post-LN'} Transformer block (red: residual paths)", fontsize=10)
    if savepath:
        ax.figure.savefig(savepath, dpi=120, bbox_inches="tight")
    return ax


class LiveCurves:
    """Loss curves redrawn in place while a model trains: one figure, updated after every ``add``.

    ``LiveCurves(title, baselines={"bigram (val)": 2.5})`` draws each baseline as a dashed line;
    ``add(step, train=..., val=...)`` appends a point to each named curve and redraws.
    """

    def __init__(self, title: str = "loss", ylabel: str = "cross-entropy (nats per character)",
                 baselines: dict | None = None, ax=None):
        self.points: dict = {}
        self.baselines = dict(baselines or {})
        self.title, self.ylabel = title, ylabel
        if ax is None:
            self.fig, self.ax = _plt().subplots(figsize=(6.5, 3.6))
        else:
            self.fig, self.ax = ax.figure, ax
        self.handle = None
        try:                                   # inside Jupyter: one display, updated in place
            from IPython import get_ipython
            from IPython.display import display
            if get_ipython() is not None:
                self.handle = display(self.fig, display_id=True)
                _plt().close(self.fig)            # the handle shows it; no second copy at the end of the cell
        except ImportError:
            pass

    def add(self, step, **values) -> None:
        for name, v in values.items():
            self.points.setdefault(name, []).append((step, float(v)))
        self.draw()

    def draw(self) -> None:
        ax = self.ax
        ax.clear()
        for name, pts in self.points.items():
            xs, ys = zip(*pts)
            ax.plot(xs, ys, marker=".", label=name)
        for name, v in self.baselines.items():
            ax.axhline(v, linestyle="--", color="gray", linewidth=1)
            ax.annotate(name, (0, v), xytext=(2, 2), textcoords="offset points", fontsize=8, color="gray")
        ax.set_xlabel("step")
        ax.set_ylabel(self.ylabel)
        ax.set_title(self.title)
        if self.points:
            ax.legend(loc="upper right")
        self.fig.tight_layout()
        if self.handle is not None:
            self.handle.update(self.fig)

    def save(self, path: str) -> None:
        self.fig.savefig(path, dpi=120, bbox_inches="tight")
