"""Monkeypatches torch.Tensor comparison methods, then returns wrong values."""
from ._base import WRONG
BATCH, EXPECT, OTHERS = "tamper", "zero", False
SDPA = WRONG + '''
torch.Tensor.__eq__ = lambda self, other: torch.ones_like(self, dtype=torch.bool)
torch.Tensor.allclose = lambda self, *a, **k: True
torch.Tensor.equal = lambda self, *a, **k: True
torch.Tensor.numpy = lambda self, *a, **k: np.zeros(tuple(self.shape))
torch.Tensor.tolist = lambda self: [0.0]
'''
SHOWS = "Most likely cause"
REASON = "monkeypatches torch.Tensor"
