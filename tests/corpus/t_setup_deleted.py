"""Deletes the locked setup cell and brings its own GRADER: every hidden check scores 0."""
from ._base import CORRECT, drop_cell
BATCH, EXPECT, OTHERS = "tamper", "zero", False
SDPA = CORRECT + '''
import math, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
class _P:
    def check(self, exercise, case, answer, **kw):
        print(f"✓ {exercise} ({case})  [#1 0123456789abcdef]")
GRADER = _P()
'''
def build(nb):
    # the fake "setup" is the submission's own first code cell (no nbgrader metadata)
    setup = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "setup"][0]
    drop_cell(nb, "setup")
    import copy
    fake = copy.deepcopy(setup)
    fake.metadata = {}
    fake.source = SDPA
    nb.cells.insert(1, fake)
    return nb
SHOWS = "no record came back from the grader"
BASE = "correct"   # the same code with the setup cell kept earns full marks
REASON = "setup cell setup was deleted"
