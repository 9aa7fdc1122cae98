"""Every trick of tests/corpus/t_*.py against its honest base, graded on the serial path and on Dask.

    .venv/bin/python -m bench.tamper_scores [--workers 2] [--out bench/tamper_scores.md]

One throw-away course of section 02 holds the tamper corpus, each trick's honest base (the same code
without the trick) and a correct submission; it is graded by plain ``nbgrader autograde`` (the serial path,
``./course grade --serial``) and again by the Dask engine (``./course grade``), and a table of the scores
is printed (and written to ``--out``).  The suite proves the same pairing (tests/test_tamper.py); this
prints the numbers for a closing note.  Not a test.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path



def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    from instructor.engine import grade_class
    from tests.harness import base_student, grade_corpus

    with tempfile.TemporaryDirectory(prefix="tamper-scores-") as tmp:
        t0 = time.time()
        course, _, cases, serial = grade_corpus("tamper", Path(tmp) / "c")
        t1 = time.time()
        dask = grade_class(course.root, ["02_qkv_by_hand"], workers=args.workers, force=True,
                           extra_env={"ATTNCOURSE_KERNEL_MEM_MB": "2048", "ATTNCOURSE_CHECK_TIMEOUT": "30"},
                           log=lambda *a: None)["02_qkv_by_hand"]
        t2 = time.time()
    rows = ["| trick | base | serial: trick / base | Dask: trick / base |", "|---|---|---|---|"]
    worse = []
    for name, mod in sorted(cases.items()):
        base = base_student(mod)
        s = [serial["students"][n]["score"] for n in (name, base)]
        d = [dask["students"][n]["score"] for n in (name, base)]
        rows.append(f"| {name} | {base} | {s[0]:g} / {s[1]:g} | {d[0]:g} / {d[1]:g} |")
        if s[0] > s[1] or d[0] > d[1]:
            worse.append(name)
    text = "\n".join(rows) + (f"\n\nserial {t1 - t0:.0f} s, Dask ({args.workers} workers) {t2 - t1:.0f} s; "
                              f"{serial['sandbox']}; a trick above its base: {worse or 'none'}\n")
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 1 if worse else 0


if __name__ == "__main__":
    sys.exit(main())
