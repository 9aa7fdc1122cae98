"""Scripts that write the source notebooks: ``python -m tools.authoring.s01_tokens`` (and s02, s03).

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
from attncourse import attention_heatmap, best_device, compare, seed_everything
from attncourse.grading import Grader

seed_everything(0)
GRADER = Grader("{section}")   # hidden tests use it; it captures trusted code before yours runs
'''


def setup_source(section: str) -> str:
    return SETUP.format(section=section)


def hidden(*checks: str) -> str:
    """The body of a hidden test cell: one GRADER.check line per (exercise, case, answer) string."""
    return "### BEGIN HIDDEN TESTS\n" + "\n".join(checks) + "\n### END HIDDEN TESTS"
