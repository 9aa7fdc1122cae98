"""What recording how an answer is computed costs, per hidden check: ``python -m bench.watch_cost [section ...]``.

For every case with rules on how its answer is computed (``StoredCase.how``), the kernel's runner
(:func:`attncourse.kernel.grader.run`) runs the instructor's solution on the case's inputs with the record
(:class:`attncourse.kernel.watch.Watch`) and without it (the same case, ``how`` removed); the median of ``--repeat``
runs each (CPU seconds of this process: the machine's load does not count), after one warm-up run (which imports torch's compiler stack at the first dispatch mode, as a notebook's
first operation on the ``meta`` device does; grading kernels have it preloaded).  Prints one line per case and the
total per section.

Measured (OMP_NUM_THREADS=1, 9 runs, a loaded 2-core machine; CPU seconds): about 20 µs per operation;
02 +3.2 ms for its 13 checks (0.25 ms each), 04 +8.2 ms (0.82), 06 +2.0 ms (0.25), 09 +5.2 ms (0.74),
10 +118.6 ms for 44 checks (2.69 ms each; flash_backward:long_causal, 1218 operations, +16.3 ms; before issue 38's
GQA and backward checks: +40.9 ms for 23).
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import time


def measure(section: str, repeat: int = 7) -> list[tuple]:
    from attncourse.kernel.grader import run
    from attncourse.protocol.cases import StoredCase
    from authoring.references import define
    from graders import load_section
    from judge.preprocessors import reference_data
    from tests.harness import ROOT

    shared = reference_data(str(ROOT), section)[1]["cases"]
    spec = load_section(section)
    rows = []
    for ex in spec.exercises:
        obj = None
        context = ex.context() if ex.context else {}
        for case in ex.cases:
            stored = StoredCase.from_dict(shared[f"{ex.name}:{case.name}"])
            if not stored.how:
                continue
            obj = obj or define(ex, ex.reference)
            plain = dataclasses.replace(stored, how=None)
            times = {}
            for label, s in (("with", stored), ("without", plain)):
                run(s, obj, context)                      # warm-up
                ts = []
                for _ in range(repeat):
                    t0 = time.process_time()
                    run(s, obj, context)
                    ts.append(time.process_time() - t0)
                times[label] = statistics.median(ts)
            facts = run(stored, obj, context).get("how") or {}
            rows.append((f"{ex.name}:{case.name}", times["without"], times["with"], facts.get("count", 0)))
    return rows


def main(argv=None):
    from graders import available_sections

    ap = argparse.ArgumentParser(prog="python -m bench.watch_cost", description=__doc__.split("\n")[0])
    ap.add_argument("sections", nargs="*")
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args(argv)
    for section in args.sections or available_sections():
        rows = measure(section, args.repeat)
        if not rows:
            continue
        print(f"{section}: {len(rows)} checks with rules on how")
        for key, without, with_, ops in rows:
            print(f"  {key:<45} {1e3 * without:7.2f} ms -> {1e3 * with_:7.2f} ms  (+{1e3 * (with_ - without):6.2f} ms, "
                  f"{ops} ops)")
        extra = sum(w - o for _, o, w, _ in rows)
        print(f"  total +{1e3 * extra:.1f} ms for the section ({1e3 * extra / len(rows):.2f} ms per check)")


if __name__ == "__main__":
    main()
