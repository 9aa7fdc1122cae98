"""Shared helpers for the attention & Transformers course.

Plotting, self-check helpers, seeding, device selection, offline model
loading and the grader machinery.  No solutions or reference outputs live in
this package: students install it.
"""
from .checks import compare, max_diff
from .devices import best_device, seed_everything
from .plots import attention_heatmap, block_diagram

__all__ = ["attention_heatmap", "block_diagram", "best_device", "compare", "max_diff", "seed_everything"]
__version__ = "0.1.0"
