"""Self-checks for worked examples: see at once whether a hand computation matches.

``compare(name, got, expected)`` prints one line -- exact, close (with the
largest difference) or WRONG -- in the spirit of nn-zero-to-hero's ``cmp``.
These are for the teaching cells; graded cells use :mod:`attncourse.kernel.grader`.
"""
from __future__ import annotations

import numpy as np
import torch


def as_numpy(x) -> np.ndarray:
    """A float64 NumPy copy of a tensor (any device or dtype, bool included) or an array-like: the one
    tensor-to-array conversion of the teaching helpers and the judge (the kernel's runner has its own,
    built from captured primitives: :func:`attncourse.kernel.trusted.tensor_to_numpy`)."""
    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu", torch.float64).numpy().copy()
    return np.asarray(x, dtype=np.float64)


def max_diff(got, expected) -> float:
    """Largest absolute difference between two array-likes of the same shape."""
    a, b = as_numpy(got), as_numpy(expected)
    if a.shape != b.shape:
        raise ValueError(f"shapes differ: {a.shape} vs {b.shape}")
    return float(np.max(np.abs(a - b))) if a.size else 0.0


def compare(name: str, got, expected, atol: float = 1e-3) -> bool:
    """Print whether ``got`` matches ``expected``: exact, close (max diff) or WRONG; return the verdict."""
    a, b = as_numpy(got), as_numpy(expected)
    if a.shape != b.shape:
        print(f"{name:>24}: WRONG shape {a.shape}, expected {b.shape}")
        return False
    exact = bool(np.array_equal(a, b))
    diff = max_diff(a, b)
    ok = exact or diff <= atol
    verdict = "exact" if exact else ("close" if ok else "WRONG")
    print(f"{name:>24}: {verdict:5}  max diff {diff:.2e}")
    return ok
