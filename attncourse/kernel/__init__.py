"""The grader's side in the student's kernel: the setup cell's ``GRADER = Grader("NN_name")``.

It runs the student's code on a case's hidden inputs and publishes a record of what came back
(:mod:`attncourse.kernel.encode`); the verdict is made outside the kernel (:mod:`judge`).
Nothing here holds a reference output.
"""
from .grader import Grader, GradingError

__all__ = ["Grader", "GradingError"]
