"""Plain mistake: weights returned transposed (wrong shape)."""
from ._base import CORRECT
BATCH, EXPECT, OTHERS = "faults", "zero", True
SDPA = CORRECT.replace("return weights @ V, weights", "return weights @ V, weights.transpose(-2, -1)")
SHOWS = "has shape"
