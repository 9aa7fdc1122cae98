"""Device selection and seeding: one place, so notebooks never hard-code a device."""
from __future__ import annotations

import os
import random

import numpy as np
import torch


def best_device() -> torch.device:
    """CUDA when present, then Apple's MPS, else the CPU.

    Set ``ATTNCOURSE_DEVICE`` (e.g. ``cpu``) to force one.
    """
    forced = os.environ.get("ATTNCOURSE_DEVICE")
    if forced:
        return torch.device(forced)
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def seed_everything(seed: int = 0) -> None:
    """Seed Python, NumPy and PyTorch (all devices) so every run prints the same numbers."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
