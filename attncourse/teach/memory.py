"""Memory of a computation, counted rather than sampled (section 10): the same numbers on every machine.

:func:`largest_intermediate` runs a function under a :class:`~torch.utils._python_dispatch.TorchDispatchMode`
that sees every operator PyTorch executes and notes the size of the storage behind each tensor an operator
returns. The largest one is the biggest buffer the computation ever asked for: for plain attention, the
``(T, T)`` score matrix; for attention in tiles, one ``(T, block)`` tile. A view (a slice, a transpose) shares
its input's storage, so it counts as that storage, never more. Allocator caches, threads and timing play no
part, unlike a profiler's peak, which differs from one run and one CPU to the next.
"""
from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


class _Largest(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.bytes = max(self.bytes, t.untyped_storage().nbytes())
        return out


def largest_intermediate(fn, *args, **kwargs) -> tuple:
    """``(fn(*args, **kwargs), bytes)``: the result, and the bytes of the largest storage any operator inside
    ``fn`` returned (run without autograd, so no saved tensors count)."""
    counter = _Largest()
    with torch.no_grad(), counter:
        result = fn(*args, **kwargs)
    return result, counter.bytes


def mib(n_bytes: float) -> float:
    """Bytes in MiB (2^20 bytes)."""
    return n_bytes / 2 ** 20
