"""Plain mistake: the output contains NaN."""
from ._base import CORRECT
BATCH, EXPECT, OTHERS = "faults", "zero", True
SDPA = CORRECT.replace("return weights @ V, weights", "out = weights @ V\n    out[..., 0] = float('nan')\n    return out, weights")
SHOWS = "contains NaN"
