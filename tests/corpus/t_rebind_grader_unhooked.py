"""Removes the grader's IPython guard, rebinds GRADER and patches the Grader class: no records, nothing earned."""
from ._base import WRONG
BATCH, EXPECT, OTHERS = "tamper", "zero", False
SDPA = WRONG + '''
for _hooks in get_ipython().events.callbacks.values():
    _hooks.clear()
from attncourse.kernel.grader import Grader
Grader.check = lambda self, *a, **k: print("✓ " + a[0] + "  [#1 0123456789abcdef]")
class _Pass:
    def check(self, exercise, case, answer, **kw):
        print(f"✓ {exercise} ({case})  [#7 0123456789abcdef]")
GRADER = _Pass()
'''
SHOWS = "no record came back from the grader"
REASON = "tampering suspected"
