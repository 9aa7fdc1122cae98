"""Leaves a tree 1,200 folders deep, filled at its bottom, wherever it may write, the folder of its sockets too.

A kernel's socket folder was a host folder bound read-write: such a tree there survived the grader's cleanup
(``shutil.rmtree`` raised RecursionError) and the next ./course grade graded nobody. A kernel now writes only
tmpfs of its own (its sockets are the grader's, handed over as descriptors): the tree goes with the kernel.
"""
from ._base import WRONG
from tests.test_kernel_cleanup import DEEP_TREE
BATCH, EXPECT, OTHERS = "tamper", "zero", True
SDPA = WRONG + DEEP_TREE
SHOWS = "Most likely cause"
