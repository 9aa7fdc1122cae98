"""Plain mistake: the result is always float32 (float64 and bfloat16 inputs come back in the wrong dtype)."""
from ._base import CORRECT
LOST_CASES = ["float64", "bfloat16", "very_negative"]   # these hidden checks fail: their cells lose those checks' points (credit per check)
BATCH, EXPECT, OTHERS = "faults", "zero", True
SDPA = CORRECT.replace("return weights @ V, weights", "return (weights @ V).float(), weights.float()")
SHOWS = "has dtype"
