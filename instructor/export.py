"""Grades for an LMS gradebook: Canvas's grades-import CSV, through nbgrader's export plugin mechanism.

    ./course export [--to grades-canvas.csv] [--section "Fall 2026"] [--assignment 02_qkv_by_hand ...]
    nbgrader export --exporter instructor.export.CanvasExportPlugin --to grades-canvas.csv   (python -m nbgrader,
        from the course folder, so that ``instructor`` is importable)

The file has Canvas's gradebook layout: ``Student, ID, SIS User ID, SIS Login ID, Section``, then one column per
course section (nbgrader assignment) in order, and the "Points Possible" row Canvas writes under the header.
``Student`` is "Last, First" (the login when the gradebook has no name), ``SIS Login ID`` is the nbgrader student id
(the JupyterHub login), ``SIS User ID`` the student's ``lms_user_id`` when the gradebook has one, ``ID`` (Canvas's
own number) is left empty: Canvas matches a row by any of the three. A score is nbgrader's total less the late
penalty; a section a student did not submit scores 0 (``--CanvasExportPlugin.missing=""`` leaves it blank, which
Canvas reads as "no change"); a submission no cell of which holds a score (nbgrader could not grade it: ``./course
grade`` reported it "not graded", or why; and no one graded it by hand in formgrader) is left blank, never sent as a
0. Import it in Canvas: Grades ▸ Import.

Every cell is written as a spreadsheet shows it as text (:func:`judge.sanitize.csv_cell`): a name, id or section a
student or a roster gave (``=HYPERLINK(…)``, ``+…``, ``-…``, ``@…``, a leading tab or carriage return) is never a
formula.  :class:`SafeCsvExportPlugin` is nbgrader's own CSV layout the same way (nbgrader's writes names unquoted and
unchecked): ``nbgrader export --exporter instructor.export.SafeCsvExportPlugin`` (``python -m nbgrader``, from the
course folder).
"""
from __future__ import annotations

import csv
import subprocess
import sys

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.plugins import ExportPlugin
from traitlets import Unicode

from judge.sanitize import csv_cell

HEADER = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]


def _num(x: float) -> str:
    x = round(float(x), 2)
    return f"{x:g}"


class CanvasExportPlugin(ExportPlugin):
    """Canvas's gradebook CSV: one row per student, one column per assignment, a Points Possible row."""

    section = Unicode("", help="the Canvas course section every student is in (the Section column)").tag(config=True)
    missing = Unicode("0", help="what a missing submission scores in the file ('' leaves it blank)").tag(config=True)

    def rows(self, gradebook: Gradebook) -> list[list[str]]:
        assignments = [a for a in sorted(gradebook.assignments, key=lambda a: a.name)
                       if not self.assignment or a.name in [str(x) for x in self.assignment]]
        students = [s for s in sorted(gradebook.students, key=lambda s: s.id)
                    if not self.student or s.id in [str(x) for x in self.student]]
        out = [HEADER + [a.name for a in assignments],
               ["    Points Possible", "", "", "", ""] + [_num(a.max_score) for a in assignments]]
        for s in students:
            name = ", ".join(p for p in (s.last_name, s.first_name) if p) or s.id
            row = [name, "", s.lms_user_id or "", s.id, self.section]
            for a in assignments:
                try:
                    sub = gradebook.find_submission(a.name, s.id)
                except MissingEntry:
                    row.append(self.missing)
                    continue
                if not_graded(sub):   # no score to send: Canvas keeps what it has ("no change")
                    row.append("")
                    continue
                row.append(_num(max(0.0, sub.score - (sub.late_submission_penalty or 0.0))))
            out.append(row)
        return out

    def export(self, gradebook: Gradebook) -> None:
        dest = self.to or "grades-canvas.csv"
        rows = self.rows(gradebook)
        write_csv(dest, rows)
        self.log.info("Wrote %d students x %d sections in Canvas's gradebook layout to %s",
                      len(rows) - 2, len(rows[0]) - len(HEADER), dest)


def not_graded(sub) -> bool:
    """A submission no cell of which holds a score, automatic or manual: nbgrader could not grade it (``./course
    grade`` said "not graded" or why) and no one has graded it by hand.  nbgrader counts it 0; it is no 0."""
    grades = [g for nb in sub.notebooks for g in nb.grades]
    return bool(grades) and all(g.auto_score is None and g.manual_score is None for g in grades)


def write_csv(dest: str, rows) -> None:
    """``rows`` as a CSV file in which no cell is a spreadsheet formula."""
    with open(dest, "w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows([csv_cell(v) for v in row] for row in rows)


class SafeCsvExportPlugin(ExportPlugin):
    """nbgrader's CSV export (``CsvExportPlugin``: one row per assignment and student, the same columns and values),
    written by :func:`write_csv`: quoted, and no cell a formula."""

    KEYS = ["assignment", "duedate", "timestamp", "student_id", "last_name", "first_name", "email", "raw_score",
            "late_submission_penalty", "score", "max_score"]

    def rows(self, gradebook: Gradebook) -> list[list[str]]:
        only_a, only_s = [str(x) for x in self.assignment], [str(x) for x in self.student]
        out = [list(self.KEYS)]
        for a in gradebook.assignments:
            if only_a and a.name not in only_a:
                continue
            for s in gradebook.students:
                if only_s and s.id not in only_s:
                    continue
                row = {"assignment": a.name, "duedate": a.duedate, "student_id": s.id, "last_name": s.last_name,
                       "first_name": s.first_name, "email": s.email, "max_score": a.max_score}
                try:
                    sub = gradebook.find_submission(a.name, s.id)
                except MissingEntry:
                    row.update(timestamp="", raw_score=0.0, late_submission_penalty=0.0, score=0.0)
                else:
                    penalty = sub.late_submission_penalty
                    row.update(timestamp=sub.timestamp, raw_score=sub.score, late_submission_penalty=penalty,
                               score=max(0.0, sub.score - penalty))
                out.append(["" if row[k] is None else str(row[k]) for k in self.KEYS])
        return out

    def export(self, gradebook: Gradebook) -> None:
        dest = self.to or "grades.csv"
        write_csv(dest, self.rows(gradebook))
        self.log.info("Wrote nbgrader's CSV layout to %s", dest)


def main(argv=None) -> int:
    """``./course export [--to FILE] [--section NAME] [nbgrader export options]``, run in the course folder."""
    import argparse

    ap = argparse.ArgumentParser(prog="./course export", description=__doc__.split("\n")[0])
    ap.add_argument("--to", default="grades-canvas.csv", help="the CSV file (default grades-canvas.csv)")
    ap.add_argument("--section", default="", help="the Canvas course section (the Section column)")
    args, rest = ap.parse_known_args(argv)
    cmd = [sys.executable, "-m", "nbgrader", "export", "--exporter", "instructor.export.CanvasExportPlugin",
           f"--to={args.to}", f"--CanvasExportPlugin.section={args.section}", *rest]
    return subprocess.call(cmd)


if __name__ == "__main__":
    sys.exit(main())
