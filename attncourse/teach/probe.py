"""Plots for probing a BERT-family model's attention (section 07).

* :func:`layer_head_grid` — one number per (layer, head), e.g. the weight from "it" to "animal";
* :func:`plot_shares` — per-layer share of attention to [CLS], [SEP] and punctuation;
* :func:`head_png` / :func:`save_head_png` — one head's (T, T) map with token labels as a PNG;
* :func:`head_explorer` — an offline interactive view: layer and head chosen with
  ipywidgets sliders, redrawn in place as a PNG image (no JavaScript from a CDN), with a
  button that saves the current head as a PNG file.

Layers and heads are 0-indexed everywhere, as in the tensors.  No solutions live here:
the functions take attention tensors and numbers the student computed.
"""
from __future__ import annotations

import io
from typing import Mapping, Sequence

import matplotlib

import matplotlib.pyplot as plt
import numpy as np

from .checks import as_numpy as _np
from .plots import attention_heatmap


def layer_head_grid(values, title: str = "", ax=None, savepath: str | None = None, annotate: bool = True,
                    cmap: str = "magma", mark_max: bool = True, label: str = "attention weight"):
    """Draw an (L, H) matrix: rows are layers, columns heads (0-indexed); the largest cell is boxed."""
    v = _np(values)
    if v.ndim != 2:
        raise ValueError(f"expected an (L, H) matrix, got shape {v.shape}")
    n_layers, n_heads = v.shape
    if ax is None:
        _, ax = plt.subplots(figsize=(0.62 * n_heads + 2.2, 0.5 * n_layers + 1.6))
    im = ax.imshow(v, cmap=cmap, vmin=0.0, vmax=max(float(np.nanmax(v)), 1e-9), aspect="auto")
    ax.set_xticks(range(n_heads))
    ax.set_yticks(range(n_layers))
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_title(title)
    if annotate:
        hi = float(np.nanmax(v)) or 1.0
        for i in range(n_layers):
            for j in range(n_heads):
                ax.text(j, i, f"{v[i, j]:.2f}", ha="center", va="center", fontsize=7,
                        color="black" if v[i, j] > 0.6 * hi else "white")
    if mark_max:
        i, j = np.unravel_index(int(np.nanargmax(v)), v.shape)
        ax.add_patch(matplotlib.patches.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, lw=2.5, ec="cyan"))
    ax.figure.colorbar(im, ax=ax, label=label, fraction=0.046, pad=0.04)
    ax.figure.tight_layout()
    if savepath:
        ax.figure.savefig(savepath, dpi=120, bbox_inches="tight")
    return ax


def plot_shares(shares: Mapping[str, Sequence[float]], title: str = "Share of attention by layer", ax=None,
                savepath: str | None = None, reference: Mapping[str, Sequence[float]] | None = None):
    """One line per key of ``shares`` (e.g. "[CLS]", "[SEP]", "punct"), x = layer (0-indexed)."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6.0, 3.6))
    for key, ys in shares.items():
        ys = _np(ys)
        ax.plot(range(len(ys)), ys, marker="o", label=key)
    ax.set_xlabel("layer")
    ax.set_ylabel("share of attention")
    ax.set_ylim(0, 1)
    n = max(len(v) for v in shares.values())
    ax.set_xticks(range(n))
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title(title)
    ax.figure.tight_layout()
    if savepath:
        ax.figure.savefig(savepath, dpi=120, bbox_inches="tight")
    return ax


def _head_figure(attn, tokens, layer: int, head: int, title: str | None = None):
    a = _np(attn)
    if a.ndim != 4:
        raise ValueError(f"expected attention of shape (L, H, T, T), got {a.shape}")
    t = len(tokens)
    size = max(4.0, 0.38 * t + 1.8)
    fig, ax = plt.subplots(figsize=(size + 1.0, size))
    attention_heatmap(a[layer, head], keys=list(tokens), queries=list(tokens), ax=ax, annotate=False,
                      title=title or f"layer {layer}, head {head} (0-indexed)")
    return fig


def head_png(attn, tokens, layer: int, head: int, title: str | None = None, dpi: int = 100) -> bytes:
    """One head's (T, T) attention map with token labels and a colour bar, as PNG bytes."""
    fig = _head_figure(attn, tokens, layer, head, title)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def save_head_png(attn, tokens, layer: int, head: int, path: str, title: str | None = None) -> str:
    """Save one head's map as a PNG file (the deliverable heatmap); returns the path."""
    with open(path, "wb") as f:
        f.write(head_png(attn, tokens, layer, head, title, dpi=130))
    return str(path)


def head_explorer(attn, tokens, layer: int = 0, head: int = 0, savepath: str = "attention_head.png"):
    """Offline interactive view: sliders pick (layer, head); the map is redrawn in place.

    The picture is a PNG inside an ipywidgets ``Image``: nothing is fetched from the
    internet, and the view also renders as a still picture when the notebook runs
    headless (nbconvert, nbgrader).  "Save PNG" writes the current head to ``savepath``.
    Without ipywidgets it falls back to a still picture.  Returns the widget box (or None).
    """
    from IPython.display import Image, display

    try:
        import ipywidgets as W
    except ImportError:  # pragma: no cover - ipywidgets is pinned in requirements
        display(Image(head_png(attn, tokens, layer, head)))
        return None
    n_layers, n_heads = int(attn.shape[0]), int(attn.shape[1])
    s_layer = W.IntSlider(value=layer, min=0, max=n_layers - 1, description="layer", continuous_update=False)
    s_head = W.IntSlider(value=head, min=0, max=n_heads - 1, description="head", continuous_update=False)
    picture = W.Image(value=head_png(attn, tokens, layer, head), format="png")
    button = W.Button(description="Save PNG", icon="download")
    status = W.Label(value="")

    def redraw(_change=None):
        picture.value = head_png(attn, tokens, s_layer.value, s_head.value)
        status.value = ""

    def save(_button=None):
        save_head_png(attn, tokens, s_layer.value, s_head.value, savepath)
        status.value = f"saved layer {s_layer.value}, head {s_head.value} to {savepath}"

    s_layer.observe(redraw, names="value")
    s_head.observe(redraw, names="value")
    button.on_click(save)
    box = W.VBox([W.HBox([s_layer, s_head, button]), status, picture])
    display(box)
    return box
