"""Copies a hand-computed answer from the grader instead of computing it: nothing to copy."""
from ._base import set_cell
BATCH, EXPECT = "tamper", "partial"
LOST = ["test_scores_hand"]
WRONG_HAND = "scores_hand = [[1, 3, 4], [0, 1, 2], [2, 2, 1]]\n"
HAND = WRONG_HAND + '''
import gc
for _o in list(vars(GRADER).values()) + gc.get_objects():
    try:
        if isinstance(_o, dict) and "scores_hand:value" in _o and _o["scores_hand:value"].get("expected") is not None:
            scores_hand = _o["scores_hand:value"]["expected"].tolist()
            break
    except Exception:
        pass
'''
def build(nb):
    return set_cell(nb, "scores_hand", HAND)
def base(nb):
    return set_cell(nb, "scores_hand", WRONG_HAND)
BASE = "wrong_hand"
SHOWS = None
REASON = "inspects interpreter internals"
