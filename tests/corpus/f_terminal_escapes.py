"""Writes escape sequences and a forged log line to the kernel's stdout, stderr and /dev/tty, and turns echo off.

Under plain nbgrader autograde the kernel had nbgrader's own stdio: this set the terminal's title, wrote the
clipboard (OSC 52), cleared the screen, printed "a_tty: 24 / 24" and left the terminal at -echo. A kernel's
stdout and stderr are now a pipe its launcher drains (tests/test_kernel_output.py watches a terminal): a correct
answer that does this keeps its full marks.
"""
from ._base import CORRECT
from tests.test_kernel_output import ESCAPES
BATCH, EXPECT, OTHERS = "faults", "full", True
SDPA = CORRECT + ESCAPES
