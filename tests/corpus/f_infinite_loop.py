"""An infinite loop on bfloat16 inputs only: that cell times out, everything else is graded."""
from ._base import CORRECT
LOST_CASES = ["bfloat16"]   # these hidden checks fail: their cells lose those checks' points (credit per check)
BATCH, EXPECT, OTHERS = "faults", "partial", True
SDPA = CORRECT.replace("    d_k = Q.shape[-1]", "    while Q.dtype == torch.bfloat16:\n        pass\n    d_k = Q.shape[-1]")
REASON = "cell timed out"
