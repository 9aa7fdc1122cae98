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
import importlib

# The re-exports, imported at first use: the instructor's tools (``./course``, the Dask coordinator) import this
# package's plain-Python parts (attncourse.course) and should not pay for torch (2 s) when they draw nothing.
_EXPORTS = {"compare": ".teach.checks", "max_diff": ".teach.checks", "best_device": ".teach.devices",
            "seed_everything": ".teach.devices", "attention_heatmap": ".teach.plots", "block_diagram": ".teach.plots",
            "needs": ".teach.progress"}

__all__ = sorted(_EXPORTS)
__version__ = "0.2.0"


def __getattr__(name):
    where = _EXPORTS.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(where, __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
