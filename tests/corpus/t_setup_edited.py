"""Edits the locked setup cell to define a fake GRADER (nbgrader restores the cell)."""
from ._base import WRONG
BATCH, EXPECT, OTHERS = "tamper", "zero", True
SDPA = WRONG
def build(nb):
    for c in nb.cells:
        if c.metadata.get("nbgrader", {}).get("grade_id") == "setup":
            c.source += "\nclass _P:\n    def check(self, *a, **k): pass\nGRADER = _P()\n"
    return nb
SHOWS = "Most likely cause"
REASON = "setup cell setup was edited"
