"""Replaces the GRADER instance's methods and the in-kernel judge: the verdict is not made in the kernel."""
from ._base import WRONG
BATCH, EXPECT, OTHERS = "tamper", "zero", True
SDPA = WRONG + '''
import types
import judge.verdict as _j
_j.judge_record = lambda *a, **k: None
_j.compare = lambda *a, **k: None
for _name in ("_compare", "_values_match", "_run_and_compare", "_tolerance"):
    setattr(GRADER, _name, types.MethodType(lambda self, *a, **k: None, GRADER))
'''
SHOWS = "Most likely cause"
REASON = "reaches into the grader's modules"
