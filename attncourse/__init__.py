"""The attention & Transformers course's package, laid out by who runs what.

* :mod:`attncourse.teach` — what the notebooks use to teach: plots, ``compare``, seeding,
  devices, offline model loading, the probe's views (re-exported here).
* :mod:`attncourse.kernel` — the grader's side inside the student's kernel: it runs the
  student's code on hidden *inputs* and records what came back; it makes no verdict.
* :mod:`attncourse.protocol` — what crosses between them: stored cases, records, the
  parser of ``GRADER.check`` calls.
* :mod:`attncourse.selfcheck` — the self-study learner's "check my work".

Not here: the judge (the verdict, the sandbox the kernels start in, nbgrader's preprocessors and
file guards) is the course checkout's top-level package ``judge``, which runs in the nbgrader
process; a grading kernel's sandbox binds this package only. No solutions or reference outputs live
in this package: students install it.
"""
from .teach.checks import compare, max_diff
from .teach.devices import best_device, seed_everything
from .teach.plots import attention_heatmap, block_diagram

__all__ = ["attention_heatmap", "block_diagram", "best_device", "compare", "max_diff", "seed_everything"]
__version__ = "0.2.0"
