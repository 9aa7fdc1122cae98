"""Deletes hidden test cells (restored from the gradebook and scored) and edits another."""
from ._base import WRONG, drop_cell, set_cell
BATCH, EXPECT, OTHERS = "tamper", "zero", True
SDPA = WRONG
def build(nb):
    drop_cell(nb, "test_sdpa")          # wrong answer: restored and scored 0
    drop_cell(nb, "test_softmax")       # right answer: restored and scored full
    set_cell(nb, "test_sdpa_masked", "pass  # nothing to see here")
    return nb
SHOWS = "Most likely cause"
REASON = "was deleted"
