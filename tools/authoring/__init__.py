"""Scripts that write the source notebooks: ``python -m tools.authoring.s01_tokens`` (and s02 … s07).

Each script is the way its ``source/NN_name/NN_name.ipynb`` is produced; edit the
script, re-run it, then regenerate the release and the reference data.
"""

SETUP = '''
# Setup — just run this cell.
import math
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
{extra}from attncourse import attention_heatmap, best_device, compare, seed_everything
from attncourse.grading import Grader

seed_everything(0)
GRADER = Grader("{section}")   # the hidden tests run your code through it
'''


def setup_source(section: str, extra_imports: str = "") -> str:
    """The locked setup cell of a section; ``extra_imports`` lines go after the torch imports."""
    extra = "".join(line + "\n" for line in extra_imports.splitlines() if line.strip())
    return SETUP.format(section=section, extra=extra)


def hidden(*checks: str) -> str:
    """The body of a hidden test cell: one GRADER.check line per (exercise, case, answer) string."""
    return "### BEGIN HIDDEN TESTS\n" + "\n".join(checks) + "\n### END HIDDEN TESTS"
