"""Peak memory of a computation, measured (sections 04 and 10): live bytes, not the largest buffer.

:func:`peak_bytes` runs a function and returns the most bytes that the tensors it created held *at the same
time* — what an allocator must find, above what was allocated before the call.

* On a CUDA device it reads PyTorch's own allocator: ``torch.cuda.max_memory_allocated`` after
  ``torch.cuda.reset_peak_memory_stats``, minus what was allocated when the call began.
* Elsewhere (the CPU, which has no such counter) :class:`LiveBytes`, a
  :class:`~torch.utils._python_dispatch.TorchDispatchMode`, watches every operator PyTorch runs: each storage an
  operator returns that it has not seen yet is an allocation (its ``nbytes``); a storage whose last tensor is
  gone (a weak reference to it has expired) is a free. Live bytes are the sum of the storages still alive; the
  peak is their largest sum, checked after every operator. A view (a slice, a transpose, a reshape that needs no
  copy) shares its input's storage and adds nothing; an in-place operation writes into a storage already
  counted. The count is the same on every machine (no allocator cache, no thread, no timing in it).

What the CPU meter cannot see: scratch memory an operator allocates and frees inside itself (a matrix product's
packing buffers) — it counts what operators hand back. Both meters run without autograd unless asked, so the
tensors saved for a backward pass count only when ``grad=True``.
"""
from __future__ import annotations

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


class LiveBytes(TorchDispatchMode):
    """Bytes of the storages the operators run inside it returned and that are still alive: ``live`` now,
    ``peak`` the most at once, ``allocated`` the total ever returned (every allocation, freed or not)."""

    def __init__(self):
        super().__init__()
        self._alive: dict = {}          # storage (its C pointer) -> (weak reference, bytes)
        self.live = self.peak = self.allocated = 0

    def _sweep(self) -> None:
        for key in [k for k, (ref, _) in self._alive.items() if ref.expired()]:
            self.live -= self._alive.pop(key)[1]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self._sweep()                   # what the operator's inputs released before its outputs count
        inputs = {StorageWeakRef(t.untyped_storage()).cdata
                  for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                storage = t.untyped_storage()
                ref = StorageWeakRef(storage)
                # a view or an in-place result shares an input's storage: counted when it was made, or made
                # before the meter started (the arguments): not an allocation here
                if ref.cdata not in self._alive and ref.cdata not in inputs:
                    n = storage.nbytes()
                    self._alive[ref.cdata] = (ref, n)
                    self.live += n
                    self.allocated += n
        self.peak = max(self.peak, self.live)
        return out

    def __exit__(self, *exc):
        result = super().__exit__(*exc)
        self._sweep()
        return result


def peak_bytes(fn, *args, device=None, grad: bool = False, **kwargs) -> tuple:
    """``(fn(*args, **kwargs), peak)``: the result, and the most bytes the tensors created during the call held at
    once, above what was allocated before it. ``device``: where the tensors live (default: the first tensor
    argument's); CUDA is measured by its allocator, anything else by :class:`LiveBytes`. ``grad=False`` runs
    without autograd (no saved tensors)."""
    if device is None:
        device = next((a.device for a in tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)),
                      torch.device("cpu"))
    device = torch.device(device)
    with torch.set_grad_enabled(grad):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            base = torch.cuda.memory_allocated(device)
            torch.cuda.reset_peak_memory_stats(device)
            result = fn(*args, **kwargs)
            torch.cuda.synchronize(device)
            return result, torch.cuda.max_memory_allocated(device) - base
        meter = LiveBytes()
        with meter:
            result = fn(*args, **kwargs)
    return result, meter.peak


def mib(n_bytes: float) -> float:
    """Bytes in MiB (2^20 bytes)."""
    return n_bytes / 2 ** 20
