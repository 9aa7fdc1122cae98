"""Allocates without bound on float64 inputs: the kernel's memory limit stops it (MemoryError)."""
from ._base import CORRECT
LOST_CASES = ["float64", "very_negative"]   # these hidden checks fail: their cells lose those checks' points (credit per check)
BATCH, EXPECT, OTHERS = "faults", "zero", True
SDPA = CORRECT.replace("    d_k = Q.shape[-1]", """    if Q.dtype == torch.float64:
        hog = []
        for _ in range(40):          # at most 4 GB even if no limit were set
            hog.append(torch.ones(25_000_000))
    d_k = Q.shape[-1]""")
SHOWS = "memory"
