"""A correct answer that emits warnings (in the cell and in every call): full marks."""
from ._base import CORRECT
BATCH, EXPECT, OTHERS = "faults", "full", True
SDPA = "import warnings\nwarnings.warn('defining attention', UserWarning)\n" + CORRECT.replace(
    "    d_k = Q.shape[-1]",
    "    warnings.warn('slow path', UserWarning)\n    warnings.warn('old API', DeprecationWarning)\n    d_k = Q.shape[-1]")
