"""Tags the setup cell, its own wrong solution and every hidden test cell ``skip-when-grading``.

Grading skips the instructor's demonstrations (cells so tagged: judge.preprocessors.SKIP_TAG).  A tag in a
submission is the student's: were it honoured on nbgrader cells, the setup cell would not run (every check
fails: others lose marks) and the checks of the wrong answer would leave no record.  The tag is taken off
every nbgrader cell: they run and are judged as ever, the other exercises keep full marks.
"""
from ._base import WRONG
BATCH, EXPECT, OTHERS = "tamper", "zero", True
SDPA = WRONG
TAG = "skip-when-grading"


def build(nb):
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader") or {}
        if meta.get("grade_id") == "setup" or meta.get("grade") or meta.get("solution"):
            cell.metadata.setdefault("tags", []).append(TAG)
    return nb


SHOWS = "Most likely cause"
REASON = "is tagged skip-when-grading"
