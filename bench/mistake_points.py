"""What each known mistake and shortcut loses, before and after credit per check: ``python -m bench.mistake_points``.

For every exercise of every section, each catalogued mistake and each shortcut (graders/sNN_*.py) is judged
in-process on every hidden check of the exercise's cells (the same judge and reference data as grading), twice:
*before* — a cell earns its points only when all its checks pass, and there are no rules on how an answer is
computed (as before issue 36) — and *after* — each cell earns the points of its checks that pass, rules included.
Prints a markdown table (points lost of the exercise's points); bench/mistake_points.md holds a run.
"""
from __future__ import annotations

import os
import sys


def losses(section: str) -> list[tuple]:
    from attncourse.kernel.grader import Grader
    from attncourse.protocol.calls import check_calls
    from authoring.references import define
    from graders import load_section
    from judge.verdict import cell_score, earn, judge_record
    from tests.harness import ROOT, read_nb

    os.environ["ATTNCOURSE_ROOT"] = str(ROOT)
    spec = load_section(section)
    nb = read_nb(ROOT / "source" / section / f"{section}.ipynb")
    grader = Grader(section, judge=judge_record)
    plain = {k: {**v, "how": None} for k, v in grader._cases.items()}
    ruled = dict(grader._cases)

    def judge(ex, code, cells, rules: bool):
        grader._cases.clear()
        grader._cases.update(ruled if rules else plain)
        obj, context = define(ex, code), (ex.context() if ex.context else {})
        whole = per_check = 0.0
        for points, calls in cells:
            grader.collect = []
            for e, case in calls:
                grader.check(e, case, obj, **context)
            checks = [{"weight": float(v["points"]), "passed": v["problem"] is None} for v in grader.collect]
            whole += points if all(c["passed"] for c in checks) else 0.0
            earn(checks, points)
            per_check += cell_score(points, checks)
        grader.collect = None
        return whole, per_check

    rows = []
    for ex in spec.exercises:
        cells = [(float(c.metadata["nbgrader"]["points"]), check_calls(c.source)) for c in nb.cells
                 if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("grade")
                 and any(e == ex.name for e, _ in check_calls(c.source))]
        full = sum(p for p, _ in cells)
        for kind, items in (("mistake", ex.mistakes), ("shortcut", ex.shortcuts)):
            for item in items:
                before, _ = judge(ex, item.code, cells, rules=False)
                _, after = judge(ex, item.code, cells, rules=True)
                rows.append((section, ex.name, kind, item.key, full, full - before, full - after))
    grader._cases.clear()
    grader._cases.update(ruled)
    return rows


def main(argv=None):
    from graders import available_sections

    names = (argv if argv is not None else sys.argv[1:]) or available_sections()
    print("| section | exercise | kind | key | exercise's points | lost before | lost after |")
    print("|---|---|---|---|---|---|---|")
    for section in names:
        for r in losses(section):
            print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]:g} | {r[5]:g} | {r[6]:g} |")


if __name__ == "__main__":
    main()
