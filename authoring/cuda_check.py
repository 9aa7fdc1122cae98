"""Run the instructor solutions through every hidden case of every section, on CUDA when present.

    .venv/bin/python -m authoring.cuda_check [section ...]      (default: every section with a spec)

In-process, no nbgrader: each exercise's reference code is executed with
``authoring.references.define`` and graded with ``Grader.check`` on every hidden case
(cases marked ``best`` run on ``attncourse.best_device()``, i.e. CUDA when
available).  Prints what ran on which device and exits non-zero on a failure.
On a CPU-only machine it still runs everything and says so.
"""
from __future__ import annotations

import contextlib
import io
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    import torch

    from attncourse import best_device
    from attncourse.kernel import Grader, GradingError
    from authoring.references import define
    from graders import available_sections, load_section
    from judge.verdict import judge_record

    os.environ.setdefault("ATTNCOURSE_ROOT", str(ROOT))   # the in-process Grader judges against graders/data

    best = best_device()
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    print(f"torch {torch.__version__}; CUDA available: {torch.cuda.is_available()} (GPU: {gpu}); "
          f"'best' device = {best}; TF32 matmul allowed: {torch.backends.cuda.matmul.allow_tf32}")
    failures = 0
    best_cases = 0
    for section in (argv if argv else available_sections()):
        spec = load_section(section)
        grader = Grader(section, judge=judge_record)
        for ex in spec.exercises:
            obj = define(ex, ex.reference)
            context = ex.context() if ex.context else {}
            for case in ex.cases:
                dev = {"best": str(best)}.get(case.device, case.device) if case.kind != "value" else "-"
                best_cases += case.device == "best" and case.kind != "value"
                sink = io.StringIO()
                try:
                    with contextlib.redirect_stdout(sink):
                        grader.check(ex.name, case.name, obj, **context)
                    verdict = "ok"
                except GradingError as err:
                    failures += 1
                    verdict = f"FAIL: {err}"
                except Exception as exc:  # a crash inside the grader itself
                    failures += 1
                    verdict = f"ERROR in the grader: {type(exc).__name__}: {exc}"
                print(f"{section:24s} {ex.name:22s} {case.name:16s} {case.kind:8s} {dev:6s} {case.dtype:9s} {verdict}")
    print(f"{'all passed' if not failures else f'{failures} failed'}; {best_cases} best-device cases ran on: {best}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
