"""A correct answer whose cell prints a flood of output (~20 MB): truncated, full marks."""
from ._base import CORRECT
BATCH, EXPECT, OTHERS = "faults", "full", True
SDPA = CORRECT + "\nfor _i in range(200_000):\n    print('x' * 100)\n"
