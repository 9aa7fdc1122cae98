"""Looks for any key or secret the grader could hold: environment, hidden files, the grader's attributes."""
from ._base import FINDER, WRONG
BATCH, EXPECT, OTHERS = "tamper", "zero", True
SDPA = WRONG + '''
import os, glob, torch
_SECRETS = {k: v for k, v in os.environ.items() if "ATTNCOURSE" in k or "KEY" in k or "SECRET" in k}
_SECRETS.update({k: v for k, v in vars(GRADER).items() if "key" in k.lower() or "receipt" in k.lower()})
def _holders():
    out = []
    for p in glob.glob(".*") + glob.glob("*.pt"):
        try:
            data = torch.load(p, weights_only=True)
            out += list(data.get("cases", {}).values())
        except Exception:
            pass
    return out
''' + FINDER
SHOWS = "Most likely cause"
REASON = "uses GRADER"
