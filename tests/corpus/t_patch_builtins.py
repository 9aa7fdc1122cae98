"""Replaces builtins (abs, isinstance, print, len, round) with liars, then returns wrong values."""
from ._base import WRONG
BATCH, EXPECT, OTHERS = "tamper", "zero", False
SDPA = WRONG + '''
import builtins
_real_isinstance, _real_len = builtins.isinstance, builtins.len
builtins.abs = lambda x: 0
builtins.round = lambda x, *a: x
builtins.print = lambda *a, **k: None
builtins.isinstance = lambda o, t: True if t is float else _real_isinstance(o, t)
builtins.len = lambda x: _real_len(x)
'''
REASON = "builtins"
