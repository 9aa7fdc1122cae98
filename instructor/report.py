"""A class report for an instructor: what the class got right, what it got wrong, and what broke.

    ./course report 02 [04 ...|all] [--root DIR] [--out reports]

Reads the course gradebook (``CourseDirectory.db_url``), the autograded notebooks
and ``./course grade``'s record of faults, and writes ``reports/<section>/``
(git-ignored): ``index.html`` with PNG plots (matplotlib, Agg) and CSV files:

* the score distribution (``scores.png``, ``students.csv``);
* the pass rate per exercise and per hidden check (``exercises.png``, ``checks.png``,
  ``exercises.csv``, ``checks.csv``);
* the named mistakes (the causes the judge named, :mod:`judge.autograded`) ranked by
  how many students made them, with their ids (``mistakes.png``, ``mistakes.csv``);
* faults: time-outs, memory, dead kernels, invalid or missing notebooks, failed
  grading (``faults.csv``); tampering flags (``tampering.csv``);
* every student's score in every graded cell (``cells.csv``).

Everything comes from the judge's records, never from text in the outputs; text a student shaped is
inert where it lands (:mod:`judge.sanitize`: escaped HTML, CSV cells that are never
formulas, plot labels that are never mathtext).  A submission that cannot be read is that student's
fault in the report; the others are reported as usual.
"""
from __future__ import annotations

import argparse
import csv
import sys
from collections import defaultdict
from pathlib import Path

from judge.autograded import first_line, grade_cells
from judge.sanitize import csv_cell, plot_label

from .config import CourseError, course_db, ready, resolve_sections, submitted_students
from .outcome import section_report
from .state import graded_sandbox, load_state


def check_faults(nb) -> list[str]:
    """Hidden checks of an autograded notebook that hit the time or memory limit: 'check timed out (cell)'."""
    return list(dict.fromkeys(f"{what} ({c.grade_id})" for c in grade_cells(nb) for what in c.limits))


def _cells_of(root: Path, section: str) -> list[dict]:
    """The scored cells of the section, in order: grade_id, points, exercises (hidden checks) or 'manual'."""
    import nbformat

    from attncourse.protocol.calls import exercises_checked

    nb = nbformat.read(str(root / "source" / section / f"{section}.ipynb"), as_version=4)
    out = []
    for c in nb.cells:
        meta = c.metadata.get("nbgrader", {})
        if not meta.get("grade") or not float(meta.get("points", 0)):
            continue   # visible checks carry no points: nothing to report
        exs = exercises_checked(c.source) if c.cell_type == "code" else []
        kind = "hidden" if exs else ("manual" if c.cell_type != "code" else "visible")
        out.append({"cell": meta["grade_id"], "points": float(meta.get("points", 0)), "kind": kind,
                    "exercise": ", ".join(exs) if exs else ("written answer" if kind == "manual"
                                                             else f"visible checks ({meta['grade_id']})")})
    return out


def _checks_of(root: Path, section: str, cells: list) -> list[dict]:
    """Every hidden check of the section, in order: its key (``exercise:case``), its name as the student reads
    it, its points and its cell (from the source notebook's locked cells and the section's reference data)."""
    import nbformat

    from attncourse.protocol.calls import check_calls
    from attncourse.protocol.cases import StoredCase, label
    from judge.preprocessors import reference_data

    data = reference_data(str(root), section)
    stored = (data[0] if data else {}).get("cases") or {}
    nb = nbformat.read(str(root / "source" / section / f"{section}.ipynb"), as_version=4)
    points = {c["cell"]: c["points"] for c in cells}
    out = []
    for c in nb.cells:
        gid = c.metadata.get("nbgrader", {}).get("grade_id")
        if c.cell_type != "code" or gid not in points:
            continue
        calls = check_calls(c.source)
        weights = [float((stored.get(f"{ex}:{case}") or {}).get("points") or 1.0) for ex, case in calls]
        total = sum(weights) or 1.0
        for (ex, case), w in zip(calls, weights):
            spec = stored.get(f"{ex}:{case}")
            out.append({"key": f"{ex}:{case}", "name": label(ex, StoredCase.from_dict(spec) if spec else None, case),
                        "points": round(points[gid] * w / total, 6), "cell": gid})
    return out


def collect(root: Path, section: str) -> dict:
    """Everything the report shows, from the gradebook, the autograded notebooks and the grading record.

    Every pass rate counts every graded student (the gradebook has their scores): a hidden check with no verdict
    in a student's notebook (the cell stopped before it, the notebook could not be read) did not pass.  A named
    mistake is counted where the judge named it, by its cause (one row per cause, whichever exercise made it),
    and never for an exercise the student left as it was handed out."""
    import nbformat

    root = Path(root)
    db_url, course_id = course_db(root)
    students = submitted_students(root, section)
    state = load_state(root)
    rep = section_report(root, section, students, {}, state, db_url, course_id,
                         *graded_sandbox(root, section, students))   # as graded, not as this machine is now
    cells = _cells_of(root, section)
    hidden = _checks_of(root, section, cells)
    graded = [s for s, e in rep["students"].items() if e.get("cells")]
    passed = {s: set() for s in graded}                  # student -> keys of the hidden checks that passed
    mistakes: dict = {}                                  # cause key -> {"title", "students"}
    limits = {}                                          # student -> checks that hit a limit
    for s in students:
        p = root / "autograded" / s / section / f"{section}.ipynb"
        if not p.is_file():
            continue
        try:   # one unreadable notebook is that student's fault, never the end of the report
            nb = nbformat.read(str(p), as_version=4)
            limits[s] = check_faults(nb)
            cells_of_s = grade_cells(nb)
        except Exception as exc:  # noqa: BLE001 - a report, never a crash
            limits[s] = [f"report failed for this submission: {type(exc).__name__}: {first_line(str(exc))}"]
            continue
        for c in cells_of_s:
            for chk in c.checks:
                if chk.passed and s in passed:
                    passed[s].add(chk.key)
                if chk.cause and not chk.untouched:
                    row = mistakes.setdefault(chk.cause, {"title": chk.title or chk.cause, "students": set()})
                    row["students"].add(s)
    checks = {h["key"]: {"name": h["name"], "points": h["points"],
                         "passed": sum(1 for s in graded if h["key"] in passed[s]), "graded": len(graded)}
              for h in hidden}
    faults, tamper = [], []
    for s, e in rep["students"].items():
        for r in list(e["reasons"]) + [r for r in limits.get(s, []) if r not in e["reasons"]]:
            (tamper if r.startswith("tampering suspected") else faults).append((s, r))
    return {"section": section, "report": rep, "cells": cells, "checks": checks,
            "mistakes": {k: {"title": v["title"], "students": sorted(v["students"])} for k, v in mistakes.items()},
            "faults": faults, "tamper": tamper}


def _write_csv(path: Path, header, rows):
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows([csv_cell(v) for v in r] for r in rows)


def _short(text: str, n: int = 95) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _pyplot():
    """pyplot on the Agg backend, labels as plain text (no LaTeX)."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["text.usetex"] = False
    import matplotlib.pyplot as plt

    return plt


def _barh(path: Path, labels, values, title, xlabel, xlim=None, annotate=None, color="#4C72B0"):
    plt = _pyplot()
    n = max(len(labels), 1)
    fig, ax = plt.subplots(figsize=(12, 1.2 + 0.38 * n), dpi=100)
    y = range(len(labels))
    ax.barh(list(y), values, color=color)
    ax.set_yticks(list(y))
    ax.set_yticklabels([plot_label(_short(lb)) for lb in labels], fontsize=9)   # plain text, whatever they hold
    ax.invert_yaxis()
    ax.set_title(plot_label(title), fontsize=12, loc="left")
    ax.set_xlabel(xlabel)
    if xlim:
        ax.set_xlim(*xlim)
    for i, v in enumerate(values):
        ax.text(v, i, " " + plot_label(annotate[i] if annotate else f"{v:g}"), va="center", fontsize=8)
    ax.spines[["top", "right"]].set_visible(False)
    if not xlim:
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _hist(path: Path, scores, max_score, title):
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 3.6), dpi=110)
    top = max_score or max(scores or [1])
    bins = min(20, max(int(top), 1))
    ax.hist(scores, bins=bins, range=(0, top), color="#55A868", edgecolor="white")
    ax.set_xlim(0, top)
    ax.set_xlabel(f"score (out of {top:g})")
    ax.set_ylabel("students")
    from matplotlib.ticker import MaxNLocator

    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(plot_label(title), fontsize=12, loc="left")
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _template():
    """instructor/templates/class_report.html, autoescaped (student text in it is data, never markup)."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined)
    return env.get_template("class_report.html")


def write_report(root: Path, section: str, out: Path | None = None) -> Path:
    """Write reports/<section>/ (index.html, PNGs, CSVs); return the index.html path."""
    root = Path(root)
    data = collect(root, section)
    out = Path(out or root / "reports") / section
    out.mkdir(parents=True, exist_ok=True)
    rep, cells = data["report"], data["cells"]
    students = rep["students"]
    graded = {s: e for s, e in students.items() if e.get("cells")}
    max_score = next((e["max_score"] for e in students.values() if e.get("max_score")), 0.0)

    # per cell / per exercise
    cell_rows, by_ex = [], defaultdict(lambda: defaultdict(lambda: True))
    for s, e in graded.items():
        for c in cells:
            got, full = e["cells"].get(c["cell"], (None, c["points"]))
            cell_rows.append([s, c["cell"], c["exercise"], c["kind"], "" if got is None else got, full])
            if c["kind"] != "manual":
                by_ex[c["exercise"]][s] &= got is not None and got >= full
    ex_rows = sorted(((ex, sum(v.values()), len(v)) for ex, v in by_ex.items()), key=lambda r: r[1] / max(r[2], 1))
    check_rows = sorted(((c["name"], c["points"], c["passed"], c["graded"]) for c in data["checks"].values()),
                        key=lambda r: (r[2] / max(r[3], 1), r[0]))
    mistake_rows = sorted(((m["title"], m["students"]) for m in data["mistakes"].values()),
                          key=lambda kv: (-len(kv[1]), kv[0]))

    _write_csv(out / "cells.csv", ["student", "cell", "exercise", "kind", "score", "max_score"], cell_rows)
    _write_csv(out / "students.csv", ["student", "score", "max_score", "reasons"],
               [[s, e["score"], e["max_score"], " | ".join(e["reasons"])] for s, e in students.items()])
    _write_csv(out / "exercises.csv", ["exercise", "passed", "students", "pass_rate"],
               [[ex, p, t, round(p / t, 3) if t else ""] for ex, p, t in ex_rows])
    _write_csv(out / "checks.csv", ["check", "points", "passed", "graded", "pass_rate"],
               [[k, f"{w:g}", p, t, round(p / t, 3) if t else ""] for k, w, p, t in check_rows])
    _write_csv(out / "mistakes.csv", ["most_likely_cause", "students", "student_ids"],
               [[m, len(ss), " ".join(ss)] for m, ss in mistake_rows])
    _write_csv(out / "faults.csv", ["student", "fault"], data["faults"])
    _write_csv(out / "tampering.csv", ["student", "flag"], data["tamper"])

    scores = [e["score"] for e in graded.values()]
    _hist(out / "scores.png", scores, max_score, f"{section}: score distribution ({len(scores)} graded)")
    if ex_rows:
        _barh(out / "exercises.png", [r[0] for r in ex_rows], [100 * r[1] / max(r[2], 1) for r in ex_rows],
              "Pass rate per exercise (all of its cells full marks)", "% of graded students", (0, 112),
              [f"{100 * r[1] / max(r[2], 1):.0f}% ({r[1]}/{r[2]})" for r in ex_rows])
    if check_rows:
        _barh(out / "checks.png", [f"{r[0]} · {r[1]:g} pt" for r in check_rows],
              [100 * r[2] / max(r[3], 1) for r in check_rows],
              "Pass rate per hidden check (every graded student; its points)", "% of graded students", (0, 112),
              [f"{100 * r[2] / max(r[3], 1):.0f}% ({r[2]}/{r[3]})" for r in check_rows], color="#8172B2")
    if mistake_rows:
        _barh(out / "mistakes.png", [m for m, _ in mistake_rows[:25]], [len(ss) for _, ss in mistake_rows[:25]],
              "Named mistakes, by how many students made them", "students", None, None, color="#C44E52")

    mean = sum(scores) / len(scores) if scores else 0
    page = _template().render(
        section=section, sandbox=rep.get("sandbox", ""),
        plots={p.name for p in out.glob("*.png")},
        stats={"submissions": len(students), "graded": len(graded), "mean": mean, "max_score": f"{max_score:g}",
               "full": sum(1 for v in scores if max_score and v >= max_score),
               "faults": len({s for s, _ in data["faults"]}), "tamper": len({s for s, _ in data["tamper"]})},
        mistakes=[[m, len(ss), " ".join(ss)] for m, ss in mistake_rows],
        checks=[[k, f"{w:g}", f"{p} / {t}", f"{100 * p / t:.0f}%" if t else ""] for k, w, p, t in check_rows],
        faults=data["faults"], tamper=data["tamper"],
        students=[[s, f"{e['score']:g}", f"{e['max_score']:g}", "; ".join(e["reasons"])] for s, e in students.items()])
    (out / "index.html").write_text(page, encoding="utf-8")
    return out / "index.html"


def main(argv=None):
    ap = argparse.ArgumentParser(prog="./course report", description=__doc__.split("\n")[0])
    ap.add_argument("sections", nargs="+", metavar="SECTION", help="NN, NN_name, or all")
    ap.add_argument("--root", default=".", help="course folder (default: the current folder)")
    ap.add_argument("--out", default=None, help="where to write (default: ROOT/reports)")
    args = ap.parse_args(argv)
    root = Path(args.root).resolve()
    try:
        sections = resolve_sections(args.sections, root)
        ready(root, sections)
        for sec in sections:
            print(write_report(root, sec, Path(args.out) if args.out else None))
    except CourseError as exc:
        print(f"./course report: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
