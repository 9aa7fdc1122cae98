"""The course gradebook: the one module that opens it (nbgrader's ``Gradebook``). Written by one writer (the
coordinator records each task's result with nbgrader's own record step); read for the sections it holds, due dates and scores."""
from __future__ import annotations

from pathlib import Path

from judge.files import remove, write_tree


def has_section(db_url, course_id, section) -> bool:
    """Whether the gradebook knows ``section`` (``nbgrader generate_assignment`` put it there)."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(db_url, course_id) as gb:
        try:
            gb.find_assignment(section)
            return True
        except MissingEntry:
            return False


def duedate(db_url, course_id, section):
    """The section's due date in the gradebook (ISO text), or None."""
    from nbgrader.api import Gradebook

    with Gradebook(db_url, course_id) as gb:
        d = gb.find_assignment(section).duedate
        return d.isoformat() if d else None


def gradebook_scores(db_url, course_id, section) -> dict:
    """{student: (score, max_score, {cell: (score, max_score)})} of ``section`` in the gradebook."""
    from nbgrader.api import Gradebook, MissingEntry

    out = {}
    with Gradebook(db_url, course_id) as gb:
        try:
            assignment = gb.find_assignment(section)
        except MissingEntry:
            return out
        for sub in assignment.submissions:
            cells = {g.name: (g.score, g.max_score) for nb in sub.notebooks for g in nb.grades}
            out[sub.student.id] = (sub.score, sub.max_score, cells)
    return out


def graded_students(db_url, course_id, section) -> set:
    """The students the gradebook holds a submission of ``section`` for."""
    from nbgrader.api import Gradebook

    with Gradebook(db_url, course_id) as gb:
        return {s.student.id for s in gb.find_assignment(section).submissions}


def gradebook_entry(db_url: str, section: str, student: str) -> dict | None:
    """What nbgrader stored for one submission: timestamp, grades, comments, late penalties."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(db_url) as gb:
        try:
            sub = gb.find_submission(section, student)
        except MissingEntry:
            return None
        out = {"timestamp": sub.timestamp.isoformat() if sub.timestamp else None, "notebooks": {}}
        for nb in sub.notebooks:
            out["notebooks"][nb.name] = {
                "late_submission_penalty": nb.late_submission_penalty,
                "grades": {g.name: {"auto_score": g.auto_score, "max_score": g.max_score,
                                    "needs_manual_grade": g.needs_manual_grade, "cell_type": g.cell_type}
                           for g in nb.grades},
                "comments": {c.name: c.auto_comment for c in nb.comments},
            }
        return out


def clear_autogrades(db_url: str, course_id: str, section: str, student: str):
    """A submission that could not be graded keeps no score of an earlier grading: its cells' auto scores,
    comments and late penalty are cleared, as nbgrader leaves them for a notebook it could not grade (the cell
    then needs a manual grade; a manual score already given is kept).  Nothing to do for a new student."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _clear(db_url, course_id, section, student)


def _clear(db_url, course_id, section, student):
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(db_url, course_id) as gb:
        try:
            sub = gb.find_submission(section, student)
        except MissingEntry:
            return
        for nb in sub.notebooks:
            for grade in nb.grades:
                grade.auto_score = None
                grade.needs_manual_grade = True
            for comment in nb.comments:
                comment.auto_comment = None
            nb.late_submission_penalty = None
        gb.db.commit()


# -- the one writer ---------------------------------------------------------------------------------------------------
def record_result(root: Path, db_url: str, course_id: str, result: dict, config=None):
    """Record one task's result into the course: ``autograded/`` and ``feedback/`` files, and the gradebook by
    nbgrader's own record step (:func:`record_notebook`).  ``config``: the course's nbgrader_config.py (the late
    penalty's plugin)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SQLAlchemy's autoflush notes from inside nbgrader's Gradebook
        _record(root, db_url, course_id, result, config)


def _record(root, db_url, course_id, result, config):
    from datetime import datetime

    from nbgrader.api import Gradebook

    section, student = result["section"], result["student"]
    entry = result.get("gradebook")
    # what an earlier grading left is gone whatever this one gives: its autograded notebook and feedback would show
    # the earlier verdicts beside this grading's scores (or beside none)
    dest = Path(root) / "autograded" / student / section
    remove(dest)
    remove(Path(root) / "feedback" / student / section)
    if entry is None and not result.get("files"):
        # nothing came back (a dead worker, a task that failed): no score of an earlier grading survives it
        _clear(db_url, course_id, section, student)
        return
    if result.get("files"):
        write_tree(dest, result["files"])
    if result.get("feedback"):
        write_tree(Path(root) / "feedback" / student / section, result["feedback"])
    if entry is None:
        return
    ts = datetime.fromisoformat(entry["timestamp"]) if entry.get("timestamp") else None
    with Gradebook(db_url, course_id) as gb:   # nbgrader's Autograde.init_assignment: the student, the submission
        gb.update_or_create_student(student)
        if ts:
            gb.update_or_create_submission(section, student, timestamp=ts)
        else:
            gb.update_or_create_submission(section, student)
        names = [nb.name for nb in gb.find_assignment(section).notebooks]
    for name in names:
        path = dest / f"{name}.ipynb"
        if path.is_file():
            record_notebook(path, db_url, section, student, config)
        else:   # not graded (not submitted, or nbgrader failed on it): as nbgrader left it in the task's gradebook
            _as_left(db_url, course_id, section, student, name, entry["notebooks"].get(name))


def record_notebook(path: Path, db_url: str, section: str, student: str, config=None):
    """nbgrader's record step on one autograded notebook, as its ``Autograde`` converter applies it after the
    notebook ran: ``SaveAutoGrades`` (each grade cell's score from its outputs, where the judge wrote it; a manual
    score already given is kept and flagged for review; the "No response." comments) and ``AssignLatePenalties``
    (the course's late-submission plugin against this gradebook's due date), with the course's configuration."""
    import nbformat
    from nbgrader.preprocessors import AssignLatePenalties, SaveAutoGrades

    nb = nbformat.read(str(path), as_version=nbformat.NO_CONVERT)
    resources = {"nbgrader": {"notebook": path.stem, "assignment": section, "student": student, "db_url": db_url}}
    for step in (SaveAutoGrades, AssignLatePenalties):
        nb, resources = step(config=config).preprocess(nb, resources)


def _as_left(db_url, course_id, section, student, name, left: dict | None):
    """A notebook nbgrader did not grade, recorded as nbgrader's ``Autograde`` left it in the task's scratch
    gradebook (``left``): 0 for a notebook not submitted beside one that was (``init_assignment``), else no score
    (flagged for a manual grade) — never the score of an earlier grading."""
    from nbgrader.api import Gradebook

    grades = (left or {}).get("grades", {})
    with Gradebook(db_url, course_id) as gb:
        snb = gb.find_submission_notebook(name, section, student)
        for grade in snb.grades:
            g = grades.get(grade.name) or {}
            grade.auto_score = g.get("auto_score")
            grade.needs_manual_grade = grade.manual_score is not None or grade.auto_score is None   # (a manual score kept)
        for comment in snb.comments:
            comment.auto_comment = (left or {}).get("comments", {}).get(comment.name)
        snb.late_submission_penalty = None
        gb.db.commit()
