"""Hooks that hide failures: clear every cell's output after it ran, and blank every later cell with an assert.

clear_output() after a cell removes its error (nbgrader scores a test cell with no error as full marks); an
input transformer empties the visible checks.  Visible checks carry no points, and a hidden cell whose records
were cleared scores 0 ("tampering suspected"): the trick only loses marks.
"""
from ._base import WRONG
BATCH, EXPECT, OTHERS = "tamper", "zero", False   # it clears the other exercises' records too
SDPA = WRONG + '''
from IPython.display import clear_output as _clear
_ip = get_ipython()
_ip.events.register("post_run_cell", lambda *a, **k: _clear())
_ip.input_transformers_cleanup.append(lambda lines: [] if any("assert" in l for l in lines) else lines)
'''
SHOWS = "tampering suspected"
REASON = "uses IPython internals"
