"""Sandboxed grading: kernels under bubblewrap see only the submission and Python: no reference data."""
from __future__ import annotations

import pytest

from harness import CORPUS_CELL, CORPUS_SECTION, Course, cell_by_id, slim, with_cells

pytestmark = pytest.mark.xdist_group("sandbox")


def _need_bwrap():
    from attncourse.sandbox import bwrap_works

    ok, why = bwrap_works()
    if not ok:
        pytest.skip(f"sandbox unavailable here: {why}")


def test_sandboxed_kernel_sees_only_its_submission(tmp_path):
    _need_bwrap()
    import json

    from tools.grade import grade

    section = CORPUS_SECTION
    course = Course(tmp_path / "c", [section])
    course.generate(section)
    src = slim(course.source_nb(section))
    spy = cell_by_id(src, CORPUS_CELL).source + f'''
import os, json, socket
_seen = {{p: os.path.exists(p) for p in {[str(course.root / "source"), str(course.root / "gradebook.db"),
                                           str(course.root / "submitted"), str(course.root / "graders" / "data")]!r}}}
try:
    socket.create_connection(("1.1.1.1", 53), timeout=2); _seen["network"] = True
except OSError:
    _seen["network"] = False
open("seen.json", "w").write(json.dumps(_seen))
'''
    course.submit("spy", section, with_cells(src, {CORPUS_CELL: spy}))
    report = grade(section, course.root, log=lambda *a: None, extra_env={"ATTNCOURSE_SANDBOX": "1"})
    e = report["students"]["spy"]
    assert e["score"] == e["max_score"] and e["max_score"], e
    seen = json.loads((course.root / "autograded" / "spy" / section / "seen.json").read_text())
    root = str(course.root)
    assert seen == {f"{root}/source": False, f"{root}/gradebook.db": False, f"{root}/submitted": False,
                    f"{root}/graders/data": False, "network": False}, seen


def test_bwrap_command_hides_the_course():
    from attncourse.sandbox import bwrap_command

    cmd = bwrap_command(["python"], ro=["/data"], rw=["/sub"])
    assert cmd[0] == "bwrap" and "--unshare-all" in cmd and cmd[-1] == "python"
    assert "/data" not in cmd  # a path that does not exist is not bound
