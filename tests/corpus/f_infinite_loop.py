"""An infinite loop on bfloat16 inputs only: that cell times out, everything else is graded."""
from ._base import CORRECT
LOST = ZEROED = ["test_sdpa"]   # nbgrader's cell time limit stops the cell: it scores 0 whatever its checks
BATCH, EXPECT, OTHERS = "faults", "partial", True
SDPA = CORRECT.replace("    d_k = Q.shape[-1]", "    while Q.dtype == torch.bfloat16:\n        pass\n    d_k = Q.shape[-1]")
REASON = "cell timed out"
