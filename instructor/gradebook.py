"""The course gradebook: the one module that opens it (nbgrader's ``Gradebook``). Written by one writer (the
coordinator merges each task's result); read for the sections it holds, due dates and scores."""
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


# -- the coordinator: one writer -----------------------------------------------------------
def merge_result(root: Path, db_url: str, course_id: str, result: dict, late_plugin=None):
    """Write one task's result into the course: autograded/ files, feedback/, and the gradebook."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SQLAlchemy's autoflush notes from inside nbgrader's Gradebook
        _merge_into(root, db_url, course_id, result, late_plugin)


def _merge_into(root, db_url, course_id, result, late_plugin):
    from nbgrader.api import Gradebook, MissingEntry

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
    from datetime import datetime

    with Gradebook(db_url, course_id) as gb:
        gb.update_or_create_student(student)
        ts = datetime.fromisoformat(entry["timestamp"]) if entry.get("timestamp") else None
        sub = (gb.update_or_create_submission(section, student, timestamp=ts) if ts
               else gb.update_or_create_submission(section, student))
        for nb_name, nb in entry["notebooks"].items():
            try:
                snb = gb.find_submission_notebook(nb_name, section, student)
            except MissingEntry:
                continue
            grades = {g.name: g for g in snb.grades}        # one query, not one per cell
            comments = {c.name: c for c in snb.comments}
            for name, g in nb["grades"].items():
                grade = grades.get(name) or gb.find_grade(name, nb_name, section, student)
                grade.auto_score = g["auto_score"]
                # SaveAutoGrades' rule, against THIS gradebook: a manual score already given is kept
                grade.needs_manual_grade = grade.manual_score is not None or grade.auto_score is None
            for name, text in nb["comments"].items():
                (comments.get(name) or gb.find_comment(name, nb_name, section, student)).auto_comment = text
            gb.db.commit()
            # AssignLatePenalties' rule, against this gradebook's due date and scores
            snb.late_submission_penalty = None
            if sub.total_seconds_late > 0 and late_plugin is not None:
                penalty = late_plugin.late_submission_penalty(student, snb.score, sub.total_seconds_late)
                if penalty is not None:
                    snb.late_submission_penalty = max(0.0, min(penalty, snb.score))
            gb.db.commit()
