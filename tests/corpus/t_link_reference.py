"""Ships a symbolic link to the instructor's reference file beside the notebook, and reads it while graded.

Links are never followed outside the sandbox: nbgrader's copy step and the coordinator skip it (and the report
says so), and the kernel works in a scratch folder that holds only the hidden inputs.
"""
from ._base import FINDER, WRONG
BATCH, EXPECT, OTHERS = "tamper", "zero", True
SDPA = WRONG + '''
import os, torch
def _holders():
    out = []
    for p in ("ref.pt", os.path.join(os.getcwd(), "ref.pt")):
        try:
            out += list(torch.load(p, weights_only=True).get("cases", {}).values())
        except Exception:
            pass
    return out
''' + FINDER
SHOWS = "Most likely cause"
REASON = "ref.pt links outside the submission"


def extra_files(course_root, folder):
    import os
    os.symlink(os.path.join(course_root, "graders", "data", "02_qkv_by_hand.pt"), os.path.join(folder, "ref.pt"))
