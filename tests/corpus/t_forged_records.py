"""Publishes forged records: an extra one per check, claiming the answer was correct: tampering, 0."""
from ._base import WRONG
BATCH, EXPECT, OTHERS = "tamper", "zero", False  # the forging check replaces every check
SDPA = WRONG + '''
from IPython.display import publish_display_data
_real_check = GRADER.check
def _forging_check(exercise, case, answer, **kw):
    publish_display_data({"application/vnd.attncourse.record+json":
                          {"v": 1, "n": 0, "exercise": exercise, "case": case, "device": "cuda", "passed": True}})
    return _real_check(exercise, case, answer, **kw)
GRADER.check = _forging_check
'''
SHOWS = "tampering suspected"
REASON = "forges grader records"
