"""Plain mistake: a tensor created on a fixed device (caught on the meta device)."""
from ._base import CORRECT
LOST_CASES = ["meta"]   # these hidden checks fail: their cells lose those checks' points (credit per check)
BATCH, EXPECT, OTHERS = "faults", "zero", True
SDPA = CORRECT.replace("    weights = torch.softmax(scores, dim=-1)",
                       "    scores = scores + torch.zeros(scores.shape[-1], dtype=scores.dtype)\n    weights = torch.softmax(scores, dim=-1)")
SHOWS = "fixed device"
