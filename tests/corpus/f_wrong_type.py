"""Plain mistake: returns NumPy arrays instead of tensors."""
from ._base import CORRECT
BATCH, EXPECT, OTHERS = "faults", "zero", True
SDPA = CORRECT.replace("return weights @ V, weights", "return (weights @ V).numpy(), weights.numpy()")
SHOWS = "should be a torch.Tensor"
