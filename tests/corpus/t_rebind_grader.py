"""Rebinds GRADER to a fake that passes everything (the guard restores the real one)."""
from ._base import WRONG
BATCH, EXPECT, OTHERS = "tamper", "zero", True
SDPA = WRONG + '''
class _Pass:
    def check(self, *args, **kwargs):
        print("✓ passed")
GRADER = _Pass()
'''
SHOWS = "GRADER was rebound"
REASON = "GRADER was rebound"
