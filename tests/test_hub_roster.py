"""./course hub --roster: nbgrader's roster CSV becomes the student accounts and the gradebook's names (formgrader
listed students as "None, None" when nobody had given names); no hub, no root needed."""
from __future__ import annotations

import getpass
import shutil

import pytest

from deploy.hub import HubError, read_roster, register_students
from tests.harness import ROOT


def test_a_roster_names_the_students_in_the_gradebook(tmp_path):
    from nbgrader.api import Gradebook

    from instructor.config import course_db
    from instructor.export import CanvasExportPlugin

    roster = tmp_path / "roster.csv"
    roster.write_text("id,first_name,last_name,email,lms_user_id\n"
                      "alovelace,Ada,Lovelace,ada@example.org,A-17\n"
                      "student2,,,,\n", encoding="utf-8")
    students = read_roster(roster)
    assert list(students) == ["alovelace", "student2"]
    course = tmp_path / "course"
    course.mkdir()
    shutil.copy(ROOT / "nbgrader_config.py", course)
    register_students(course, getpass.getuser(), students)
    register_students(course, getpass.getuser(), students)           # again (./course hub run twice): no error
    db_url, cid = course_db(course)
    assert db_url == f"sqlite:///{course / 'gradebook.db'}"
    with Gradebook(db_url, cid) as gb:
        got = {s.id: (s.first_name, s.last_name, s.email, s.lms_user_id) for s in gb.students}
        rows = CanvasExportPlugin().rows(gb)
    assert got == {"alovelace": ("Ada", "Lovelace", "ada@example.org", "A-17"),
                   "student2": (None, "student2", "", None)}    # formgrader's grading pages show "student2"
    assert [r[:4] for r in rows[2:]] == [["Lovelace, Ada", "", "A-17", "alovelace"], ["student2", "", "", "student2"]]


@pytest.mark.parametrize("text, why", [("login,first_name\nbob,Bob\n", "'id' column"),
                                       ("id,first_name\nBob Smith,Bob\n", "not a Unix user name"),
                                       ("", "'id' column")])
def test_a_roster_that_cannot_make_accounts_is_refused_in_one_line(tmp_path, text, why):
    roster = tmp_path / "roster.csv"
    roster.write_text(text, encoding="utf-8")
    with pytest.raises(HubError, match=why):
        read_roster(roster)


def test_a_course_python_under_tmp_is_refused_for_the_hub_in_one_line():
    """A student's server has a /tmp and /var/tmp of its own (on their disk): a course cloned under /tmp had every
    student's server fail ("No module named 'jupyterhub'": the course's venv hidden). ./course hub says so before
    it starts; the same venv path elsewhere is accepted."""
    from pathlib import Path

    from deploy.hub import _why_not_venv

    for under in ("/tmp/fresh/.venv", "/var/tmp/course/.venv"):
        why = _why_not_venv(Path(under))
        assert why and "of its own" in why and "\n" not in why, why
    assert _why_not_venv(Path("/srv/course/.venv")) is None and _why_not_venv(Path("/opt/tmpcourse/.venv")) is None
