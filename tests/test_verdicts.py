"""Nothing a student prints reaches the instructor as anything but data (issue 22).

Synthetic autograded notebooks, judged by the real judge (:class:`JudgeRecords`) from the records an honest
kernel publishes, make a class of five: one correct answer, four wrong ones.  Each attack is the same class
with a trick added to the wrong answers' grade cells -- printed fake "✓ <check>" lines, escape sequences that
move the cursor, ``=HYPERLINK(...)``, ``$\\rt$`` (mathtext), a verdict planted in the notebook's metadata, an
exception named ``CellTimeoutError`` -- and is paired with the honest class: the trick changes nothing in
scores, pass rates, mistakes, the CSVs' first cells, the terminal report, and the class report is written.
"""
from __future__ import annotations

import copy
import csv
import functools

import nbformat
from nbformat.notebooknode import NotebookNode

from judge.autograded import KEY, grade_cells, run_reasons
from judge.preprocessors import TIMED_OUT, JudgeRecords
from judge.sanitize import csv_cell, inert, plot_label
from tests.harness import ROOT
from tests.test_judge import CALLS, SRC, _records, _sdpa_source

SECTION = "02_qkv_by_hand"
ESC = "\x1b[2K\x1b[1A\r\x1b[32m"                     # erase the line, cursor up, carriage return, green
TRICKS = f"\n{ESC}student  24 / 24\n=HYPERLINK(\"http://x\")\n✓ $\\rt$\n✓ =HYPERLINK(\"x\")\n"
STUDENTS = ["correct", "wrong1", "wrong2", "wrong3", "wrong4"]


def _stdout(text):
    return NotebookNode(output_type="stream", name="stdout", text=text)


def _code(gid, source, outputs, points):
    meta = {"nbgrader": {"grade": True, "grade_id": gid, "points": points, "locked": True, "solution": False}}
    return nbformat.v4.new_code_cell(source, metadata=meta, outputs=outputs, execution_count=1)


@functools.lru_cache(maxsize=None)
def _kernel_records(answer: str):
    good, wrong = _sdpa_source()
    return _records(SECTION, CALLS, good if answer == "correct" else wrong)


@functools.lru_cache(maxsize=None)
def fake_lines() -> list:
    """Twenty "✓ <real check name>" lines (the names the judge gives this cell's checks)."""
    names = [c["name"] for c in autograde(submitted("correct")).cells[0].metadata[KEY]["checks"]]
    return [f"✓ {n}" for n in names] * 10


def submitted(answer: str, trick: bool = False, visible_error: str | None = None):
    """The notebook as the kernel left it: a hidden-check cell (records) and a visible-check cell."""
    hidden = copy.deepcopy(list(_kernel_records(answer)))
    visible = []
    if trick:
        printed = "\n".join(fake_lines()) + TRICKS
        hidden = [_stdout(printed)] + hidden + [_stdout(printed)]
        visible = [_stdout(printed)]
    if visible_error is not None:
        visible.append(NotebookNode(output_type="error", ename="AssertionError", evalue=visible_error,
                                    traceback=[visible_error]))
    nb = nbformat.v4.new_notebook()
    nb.cells = [_code("test_sdpa", SRC, hidden, 2.0), _code("test_visible", "check_shapes()", visible, 0.0)]
    if trick:   # a verdict planted where the student controls the file: every check passed, no failure
        planted = {"schema": 2, "points": 2.0, "score": 2.0, "checks": [
            {"name": n[2:], "case": "", "passed": True, "weight": 1.0, "points": 1.0, "message": None, "cause": None,
             "cause_key": None, "cause_title": None, "limit": None, "judged": True, "untouched": False}
            for n in fake_lines()], "tampering": [], "notes": [], "timed_out": False, "error": None, "stderr": None,
            "zeroed": None, "failure": None}
        nb.metadata[KEY] = planted
        for c in nb.cells:
            c.metadata[KEY] = copy.deepcopy(planted)
    return nb


def autograde(nb, timed_out=()):
    """What JudgeRecords makes of it (``timed_out``: cells IsolatedExecute saw time out)."""
    judge = JudgeRecords(course_root=str(ROOT))
    nb, _ = judge.preprocess(copy.deepcopy(nb), {"nbgrader": {"assignment": SECTION}, TIMED_OUT: list(timed_out)})
    return nb


def scores(nb):
    """(score, max_score, {grade_id: (score, max)}) as nbgrader computes them from the outputs."""
    from nbgrader.utils import determine_grade

    cells = {c.metadata.nbgrader.grade_id: determine_grade(c) for c in nb.cells}
    cells = {g: (float(s or 0), float(m)) for g, (s, m) in cells.items()}
    return sum(s for s, _ in cells.values()), sum(m for _, m in cells.values()), cells


# -- the judge writes verdicts as data, and never reads one planted by the student -----------------------
def test_verdicts_are_data_and_printed_text_changes_nothing():
    for answer in ("correct", "wrong"):
        honest, tricked = autograde(submitted(answer)), autograde(submitted(answer, trick=True))
        assert scores(honest) == scores(tricked), answer
        assert grade_cells(honest) == grade_cells(tricked), answer
        assert run_reasons(honest) == run_reasons(tricked) == [], answer
        assert KEY not in tricked.metadata          # the planted notebook-level verdict is gone
        for h, t in zip(honest.cells, tricked.cells):
            assert h.metadata[KEY] == t.metadata[KEY]
    right, wrong = grade_cells(autograde(submitted("correct")))[0], grade_cells(autograde(submitted("wrong")))[0]
    assert [c.passed for c in right.checks] == [True, True] and right.failure is None and right.score == 2.0
    assert [c.passed for c in wrong.checks] == [False, False] and wrong.failure and wrong.causes
    assert wrong.score == 0 and wrong.zeroed is None     # its checks failed: nothing else zeroed it
    assert all(c.name.startswith("scaled_dot_product_attention") for c in wrong.checks)


def test_the_schema_holds_what_the_judge_decided():
    v = autograde(submitted("wrong")).cells[0].metadata[KEY]
    assert v["schema"] == 2 and v["timed_out"] is False and v["error"] is None and v["tampering"] == []
    assert v["points"] == 2.0 and v["score"] == 0.0 and v["zeroed"] is None
    assert [set(c) for c in v["checks"]] == [{"name", "case", "passed", "weight", "points", "message", "cause",
                                              "cause_key", "cause_title", "limit", "judged", "untouched"}] * 2
    c = v["checks"][0]
    assert c["passed"] is False and f"Most likely cause: {c['cause']}" in c["message"] and c["limit"] is None
    assert c["cause_key"] == "no_scale" and c["points"] == 0.0 and c["weight"] > 0 and c["judged"]
    assert v["failure"] == f"{c['name']}: {c['message']}".split("\n")[0]


def test_a_grade_cell_the_judge_did_not_see_has_no_verdict():
    """The reader finds no ✓ in printed text: a notebook the judge never saw fails every grade cell."""
    nb = submitted("correct", trick=True)
    for c in nb.cells:
        c.metadata.pop(KEY)
    cells = grade_cells(nb)
    assert [c.checks for c in cells] == [[], []] and all(c.failure.startswith("no verdict") for c in cells)


def test_only_the_judge_says_a_cell_timed_out():
    """An exception the student names CellTimeoutError (or KeyboardInterrupt) is their error, not a time-out;
    the cell IsolatedExecute saw time out is one."""
    raised = submitted("correct")
    raised.cells[0].outputs.append(NotebookNode(output_type="error", ename="CellTimeoutError", evalue="",
                                                traceback=[]))
    own = autograde(raised)
    assert not any(c.timed_out for c in grade_cells(own)) and "cell timed out" not in " ".join(run_reasons(own))
    timed = autograde(raised, timed_out=[0])
    assert grade_cells(timed)[0].timed_out and "cell timed out (test_sdpa)" in run_reasons(timed)


def test_tampering_is_recorded_by_the_judge_not_read_from_printed_text():
    nb = submitted("correct")
    nb.cells[1].outputs.append(_stdout("(tampering suspected: framed by a print)\n"))
    assert run_reasons(autograde(nb)) == []
    missing = submitted("correct")
    missing.cells[0].outputs = missing.cells[0].outputs[:1]
    judged = autograde(missing)
    assert scores(judged)[0] == 0
    assert [r for r in run_reasons(judged) if r.startswith("tampering suspected: test_sdpa:")]
    assert grade_cells(judged)[0].failure.startswith("TamperingSuspected: tampering suspected")


# -- the instructor's views: terminal, CSV, plots, HTML -------------------------------------------------
def test_sanitisers():
    assert inert(f"a{ESC}b\tc\n\x07d\u202e") == "a b c d"
    assert inert("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\") == "link"
    assert [csv_cell(v) for v in ["=1+1", "+1", "-1", "@x", "\tx", "\rx", "ok", 3, -1.5]] == \
           ["'=1+1", "'+1", "'-1", "'@x", "'\tx", "'\rx", "ok", 3, -1.5]
    assert plot_label("✓ $\\rt$") == "✓ \\$\\rt\\$"


def test_a_plot_label_is_never_mathtext(tmp_path):
    """``$\\rt$`` as a label made matplotlib's mathtext raise and ./course report exit 1 for the whole class."""
    from instructor.report import _barh

    _barh(tmp_path / "x.png", ["✓ $\\rt$", f"{ESC}$x^$"], [1, 2], "a $\\rt$ title", "students")
    assert (tmp_path / "x.png").stat().st_size > 0


def _class(tmp_path, monkeypatch, trick: bool, visible_error: str | None = None):
    """A course folder with the five students' autograded notebooks; the gradebook, prescan and release are the
    judged notebooks' own nbgrader scores (monkeypatched: no nbgrader run)."""
    import instructor.outcome as outcome
    import instructor.report as report

    root = tmp_path / ("tricked" if trick else "honest")
    graded = {}
    for s in STUDENTS:
        nb = autograde(submitted("correct" if s == "correct" else "wrong", trick=trick and s != "correct",
                                 visible_error=visible_error if s == "wrong1" else None))
        (root / "submitted" / s / SECTION).mkdir(parents=True)
        folder = root / "autograded" / s / SECTION
        folder.mkdir(parents=True)
        nbformat.write(nb, str(folder / f"{SECTION}.ipynb"))
        graded[s] = scores(nb)
    monkeypatch.setattr(outcome, "gradebook_scores", lambda *a: graded)
    monkeypatch.setattr(outcome, "prescan", lambda *a: {"fatal": None, "notes": [], "tamper": []})
    monkeypatch.setattr(outcome, "release_notebook", lambda *a: None)
    monkeypatch.setattr(outcome, "release_points", lambda *a: 2.0)
    monkeypatch.setattr(report, "course_db", lambda root: ("sqlite://", "course"))
    from instructor.state import record_sandbox

    record_sandbox(root, SECTION, STUDENTS, True, "sandboxed")   # what ./course grade records
    monkeypatch.setattr(report, "_cells_of", lambda root, section: [
        {"cell": "test_sdpa", "points": 2.0, "kind": "hidden", "exercise": "scaled_dot_product_attention"}])
    checks = grade_cells(autograde(submitted("correct")))[0].checks
    monkeypatch.setattr(report, "_checks_of", lambda root, section, cells: [
        {"key": c.key, "name": c.name, "points": c.weight, "cell": "test_sdpa"} for c in checks])
    return root


def _csvs(folder):
    return {p.name: list(csv.reader(p.open())) for p in sorted(folder.glob("*.csv"))}


def test_class_report_is_the_same_with_the_tricks(tmp_path, monkeypatch):
    """Twenty printed '✓ check' lines, escape sequences, =HYPERLINK and $\\rt$ from four wrong answers: the pass
    rate of every hidden check stays 1 of 5, the mistakes and every CSV are those of the honest class, and the
    report (plots included) is written for everyone."""
    from instructor.report import collect, write_report

    out = {}
    for trick in (False, True):
        root = _class(tmp_path, monkeypatch, trick)
        data = collect(root, SECTION)
        assert [(v["passed"], v["graded"]) for v in data["checks"].values()] == [(1, 5)] * 2, data["checks"]
        assert data["mistakes"] and all(v["students"] == STUDENTS[1:] for v in data["mistakes"].values())
        assert not data["tamper"] and not data["faults"]
        index = write_report(root, SECTION, tmp_path / f"reports-{trick}")
        assert (index.parent / "checks.png").is_file() and (index.parent / "mistakes.png").is_file()
        out[trick] = (data["checks"], data["mistakes"], _csvs(index.parent))
    assert out[True] == out[False]


def test_student_text_reaches_terminal_csv_and_html_inert(tmp_path, monkeypatch):
    """A visible check's error message with escape sequences, a fake '24 / 24', =HYPERLINK and $\\rt$: the
    terminal report has no control character and is the one of the same message without the escapes; no CSV
    cell is a formula; the report is written."""
    from instructor.outcome import format_report
    from instructor.report import collect, write_report

    evil = f"{ESC}wrong1 24 / 24 $\\rt$\r=HYPERLINK(\"x\")"
    plain = "wrong1 24 / 24 $\\rt$ =HYPERLINK(\"x\")"
    texts = {}
    for name, message in (("evil", evil), ("plain", plain)):
        root = _class(tmp_path / name, monkeypatch, trick=name == "evil", visible_error=message)
        data = collect(root, SECTION)
        text = format_report({**data["report"], "seconds": 1})
        assert not any(ord(ch) < 32 and ch != "\n" or 0x7f <= ord(ch) < 0xa0 for ch in text), repr(text)
        assert [ln for ln in text.splitlines() if " / " in ln and not ln.startswith(" ")] == \
               [f"{s:<24} {0 if s != 'correct' else 2:g} / 2" for s in STUDENTS]
        index = write_report(root, SECTION, tmp_path / name / "reports")
        for rows in _csvs(index.parent).values():
            assert not any(str(v).startswith(("=", "+", "-", "@", "\t", "\r")) for row in rows for v in row), rows
        page = index.read_text()
        assert "\x1b" not in page and "<script" not in page
        texts[name] = text
    assert texts["evil"] == texts["plain"]


def test_an_unreadable_notebook_is_that_students_fault_only(tmp_path, monkeypatch):
    from instructor.report import collect, write_report

    root = _class(tmp_path, monkeypatch, trick=False)
    (root / "autograded" / "wrong2" / SECTION / f"{SECTION}.ipynb").write_text("{not json")
    data = collect(root, SECTION)
    assert [s for s, _ in data["faults"]] == ["wrong2"], data["faults"]
    # the check pass rates count the students the per-exercise chart counts (wrong2's notebook is its fault)
    assert [(v["passed"], v["graded"]) for v in data["checks"].values()] == [(1, 4)] * 2
    assert write_report(root, SECTION, tmp_path / "reports").is_file()


def test_isolated_execute_names_the_cell_that_timed_out():
    """A real kernel (unsandboxed, a few seconds): the looping cell is the timed-out one; a cell that raises
    KeyboardInterrupt itself is its own error."""
    from judge.preprocessors import IsolatedExecute

    def cell(gid, src):
        return nbformat.v4.new_code_cell(src, metadata={"nbgrader": {"grade": True, "grade_id": gid, "points": 1}})

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1"), cell("loop", "while True: pass"),
                                         cell("own", "raise KeyboardInterrupt")])
    run = IsolatedExecute(timeout=3, interrupt_on_timeout=True, course_root=str(ROOT), kernel_name="python3")
    nb, resources = run.preprocess(nb, {"nbgrader": {"assignment": SECTION}})
    assert resources[TIMED_OUT] == [1]
    nb, _ = JudgeRecords(course_root=str(ROOT)).preprocess(nb, resources)
    assert run_reasons(nb) == ["cell timed out (loop)"]
    assert [(c.grade_id, c.timed_out) for c in grade_cells(nb)] == [("loop", True), ("own", False)]
