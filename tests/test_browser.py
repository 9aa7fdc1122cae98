"""The course in a real browser: student, self-study and instructor flows in JupyterLab.

One JupyterLab (from this environment, with nbgrader's extensions) serves a temporary
folder holding a throw-away copy of the course (``course/``, the server's working
directory, so nbgrader and formgrader use its config and gradebook) and a student's
folder (``student/``); Debian's chromium, driven by Playwright, does what each person
does and the tests read only what the page shows (dialogs, printed points, formgrader's
tables) and, for the instructor, the scores nbgrader stored in the gradebook.

Skips, with the reason, where no browser can run (no chromium, no playwright). On a
failure the screenshot and the page's text are saved under ``tests/artifacts/<test>/``;
set ``ATTNCOURSE_SCREENSHOTS=1`` to also keep a screenshot of every step.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from bisect import bisect_left

import nbformat
import pytest

from tests.browser import ARTIFACTS, PANEL, Lab, NotebookPage, page_text, student_work
from tests.harness import CORPUS_CELL, CORPUS_SECTION, ROOT, Course, course_env, read_nb

pytest_plugins = ["tests.browser"]  # screenshot + page text of a failed test (browser.pytest_runtest_makereport)
pytestmark = [pytest.mark.xdist_group("browser"), pytest.mark.slow]

SECTION = CORPUS_SECTION          # 02_qkv_by_hand: the student and self-study flows
MANUAL = "07_bert_probe"          # the section with manually graded answers
ANSWERS = {  # a student's own written answers to section 07's manually graded questions
    "analysis": "The strongest it → animal head keeps pointing at *animal* when the street is wide, "
                "so it follows the subject; attention weights are evidence, not an explanation.",
    "qkv_words": "A query is what a token looks for, a key what it offers; the softmax of their scaled "
                 "dot products weights the values, which carry the content.",
}
# a student whose notebook tries to run script in the instructor's browser (formgrader renders it)
XSS_ANSWER = ("Mallory's analysis <script>window.PWNED = 1</script><img src=x onerror='window.PWNED = 2'> "
              "[more](javascript:window.PWNED=3)")
XSS_CELL = ("from IPython.display import HTML, Javascript, display\n"
            "display(HTML(\"<img src=x onerror='window.PWNED = 4'><script>window.PWNED = 5</script>\"))\n"
            "display(Javascript('window.PWNED = 6'))")


def _correct_sdpa() -> str:
    from tests.corpus._base import CORRECT

    return CORRECT.strip()


def _wrong_axis_sdpa() -> str:
    """A mistake the *visible* check catches: the softmax normalises over the queries."""
    code = _correct_sdpa()
    wrong = code.replace("dim=-1", "dim=-2")
    assert wrong != code
    return wrong


def shot(page, test: str, step: str):
    """With ATTNCOURSE_SCREENSHOTS=1, keep a screenshot of this step under tests/artifacts/<test>/."""
    if os.environ.get("ATTNCOURSE_SCREENSHOTS"):
        out = ARTIFACTS / test
        out.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(out / f"{step}.png"))


# -- fixtures: one browser, one course copy, one JupyterLab for the module ------------------------
@pytest.fixture(scope="module")
def course(tmp_path_factory):
    served = tmp_path_factory.mktemp("browser")
    return Course(served / "course", [SECTION, MANUAL])


@pytest.fixture(scope="module")
def lab(course, chromium, class_grading, tmp_path_factory):  # grading starts first: it overlaps the flows
    server = Lab(root_dir=course.root.parent, cwd=course.root, state=tmp_path_factory.mktemp("lab-state"))
    server.start()
    print(f"JupyterLab at {server.base} serving {server.root_dir} (log {server.log_path})")
    yield server
    server.stop()


@pytest.fixture
def page(chromium):
    context = chromium.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(60_000)
    pg = context.new_page()
    yield pg
    context.close()


class ClassGrading:
    """Section 07 handed out to a class of two and graded with ``./course grade``, in a background thread.

    It starts with the module (when a test will need it), so the grading overlaps the student
    and self-study flows in the browser; ``result()`` waits for it.
    """

    def __init__(self, course: Course):
        self.course, self.thread, self.report, self.error, self.log = course, None, None, None, ""

    def start(self):
        import threading

        self.thread = threading.Thread(target=self._run, name="grade-07", daemon=True)
        self.thread.start()

    def _run(self):
        try:
            course = self.course
            course.generate(MANUAL)
            release = course.release_nb(MANUAL)
            course.submit("alice", MANUAL, student_work(release, MANUAL, replace=ANSWERS))
            course.submit("bob", MANUAL, release)  # handed in untouched
            mallory = student_work(release, MANUAL, replace={**ANSWERS, "analysis": XSS_ANSWER})
            mallory.cells.insert(2, nbformat.v4.new_code_cell(XSS_CELL))
            course.submit("mallory", MANUAL, mallory)
            out = course.root / "grade-report.json"
            # what `./course grade 07_bert_probe --root DIR` runs once the environment is set up
            cmd = [sys.executable, "-m", "instructor.grade", MANUAL, "--root", str(course.root), "--json", str(out)]
            proc = subprocess.run(cmd, cwd=ROOT, env=course_env(), capture_output=True, text=True, timeout=900)
            if proc.returncode != 0 or not out.is_file():
                raise RuntimeError(f"./course grade failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
            self.log = proc.stdout
            self.report = json.loads(out.read_text())
        except BaseException as exc:  # noqa: BLE001 - handed to the test that needs it
            self.error = exc

    def result(self) -> dict:
        if self.thread is None:
            self.start()
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.report


@pytest.fixture(scope="module")
def class_grading(course, request):
    """Starts grading section 07 at once when a test of this module will use ``graded_class``."""
    job = ClassGrading(course)
    if any("graded_class" in item.fixturenames for item in request.session.items if item.module is request.module):
        job.start()
    yield job
    if job.thread is not None:
        job.thread.join()


@pytest.fixture(scope="module")
def graded_class(class_grading):
    report = class_grading.result()
    print(class_grading.log)
    return report


# -- reference values must never reach the page --------------------------------------------------
def reference_values(section: str) -> list[float]:
    """Every floating-point number stored in the section's hidden reference data (sorted)."""
    import numpy as np
    import torch

    data = torch.load(ROOT / "graders" / "data" / f"{section}.pt", weights_only=False)
    found = []

    def walk(o):
        if isinstance(o, dict):
            for v in o.values():
                walk(v)
        elif isinstance(o, (list, tuple)):
            for v in o:
                walk(v)
        elif isinstance(o, torch.Tensor):
            if o.is_floating_point() and o.device.type != "meta":
                found.extend(o.detach().double().flatten().tolist())
        elif isinstance(o, np.ndarray):
            if o.dtype.kind == "f":
                found.extend(o.astype(float).ravel().tolist())
        elif isinstance(o, float):
            found.append(o)

    walk(data)
    return sorted(v for v in found if v == v)


def leaked_numbers(text: str, refs: list[float], min_places: int = 4) -> list[str]:
    """Numbers printed with at least ``min_places`` decimals that equal a reference value to that precision.

    A printed number can match one of the thousands of stored values by chance (about 1 in 13 at
    4 decimals for section 02, 1 in 100 at 5), so this looks only where few such numbers are printed.
    """
    hits = []
    for m in re.finditer(r"(?<![\w.])-?\d+\.\d+(?:e[-+]?\d+)?(?![\w.])", text.replace("−", "-")):
        token = m.group(0)
        places = len(token.split(".")[1].split("e")[0])
        if places < min_places:
            continue
        value, tol = float(token), 0.5 * 10 ** -places + 1e-12
        i = bisect_left(refs, value - tol)
        if i < len(refs) and refs[i] <= value + tol:
            hits.append(token)
    return hits


# -- student --------------------------------------------------------------------------------------
def test_student_validates_a_released_notebook(lab, page):
    """Released notebook: solve it, Run All, save, Validate → success; a mistake → the failing check is named."""
    from playwright.sync_api import expect

    test = "student"
    folder = lab.root_dir / "student"
    folder.mkdir(exist_ok=True)
    released = read_nb(ROOT / "release" / SECTION / f"{SECTION}.ipynb")
    # every exercise already solved but scaled_dot_product_attention, which the student types in the browser
    nbformat.write(student_work(released, SECTION, skip={CORPUS_CELL}), str(folder / f"{SECTION}.ipynb"))

    nb = NotebookPage(page, lab, f"student/{SECTION}.ipynb").open()
    stub = nb.cell("def scaled_dot_product_attention", "YOUR CODE HERE")
    expect(stub).to_have_count(1)  # the release shows one scaled_dot_product_attention stub
    nb.type_into(stub, _correct_sdpa())
    sdpa = nb.cell("def scaled_dot_product_attention(Q, K, V, mask=None)", "math.sqrt(d_k)")
    nb.run_all()
    errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
    assert errors.count() == 0, errors.all_inner_texts()[:2]
    nb.save()
    assert "math.sqrt(d_k)" in "".join(c.source for c in read_nb(folder / f"{SECTION}.ipynb").cells
                                       if "def scaled_dot_product_attention" in c.source), "not saved to disk"
    shot(page, test, "1-solved")
    dialog = nb.validate()
    shot(page, test, "2-validate-success")
    assert "Success! Your notebook passes all the tests." in dialog, dialog
    nb.close_dialog()

    # the same notebook with the softmax over the wrong axis: a visible check fails, Validate names it
    nb.type_into(sdpa, _wrong_axis_sdpa())
    nb.run_all()
    nb.save()
    dialog = nb.validate()
    shot(page, test, "3-validate-failure")
    assert "Success" not in dialog, dialog
    assert "The following cell failed" in dialog, dialog
    assert "each row of weights should sum to 1" in dialog, dialog   # the failing visible check's message
    assert "Visible checks: shapes, rows sum to 1" in dialog, dialog  # and the check cell itself
    nb.close_dialog()


# -- self-study -----------------------------------------------------------------------------------
def test_selfstudy_check_cell_shows_points_and_the_mistake(lab, course, page):
    """notebooks/ edition with saved work (one mistake): the last cell shows points per exercise and the mistake."""
    from tests.corpus._base import WRONG  # the scores are not divided by sqrt(d_k)

    from playwright.sync_api import expect

    test = "selfstudy"
    folder = course.root / "notebooks" / SECTION
    folder.mkdir(parents=True, exist_ok=True)
    edition = read_nb(ROOT / "notebooks" / SECTION / f"{SECTION}.ipynb")
    nbformat.write(student_work(edition, SECTION, replace={CORPUS_CELL: WRONG}), str(folder / f"{SECTION}.ipynb"))

    nb = NotebookPage(page, lab, f"course/notebooks/{SECTION}/{SECTION}.ipynb").open()
    check = nb.cell(f'check("{SECTION}")')
    expect(check).to_have_count(1)
    nb.run_cell(check, timeout=240)
    out = check.locator(".jp-OutputArea").inner_text()
    check.locator(".jp-OutputArea").scroll_into_view_if_needed()
    page.get_by_text("Checking the last SAVED version").scroll_into_view_if_needed()
    shot(page, test, "1-checked")
    assert re.search(rf"{SECTION}: [\d.]+ / [\d.]+ points", out), out
    per_exercise = {m.group(2): (m.group(1), float(m.group(3)), float(m.group(4)))
                    for m in re.finditer(r"([✓✗]) ([\w, ]+): ([\d.]+) / ([\d.]+)", out)}
    mark, got, full = per_exercise["scaled_dot_product_attention"]
    assert mark == "✗" and got < full, out
    for name in ("softmax", "SelfAttention"):
        mark, got, full = per_exercise[name]
        assert mark == "✓" and got == full > 0, out
    assert "Most likely cause" in out and "√d_k" in out, out  # the named mistake: no division by √d_k
    # nothing of the hidden tests on the page: no test code, no reference value
    text = page.evaluate("() => document.body.innerText")
    for secret in ("BEGIN HIDDEN", "GRADER.check(", "BEGIN SOLUTION"):
        assert secret not in text, secret
    refs = reference_values(SECTION)
    assert refs, "no reference values found to look for"
    assert not leaked_numbers(out, refs), leaked_numbers(out, refs)
    assert not leaked_numbers(text, refs, min_places=5), leaked_numbers(text, refs, min_places=5)


# -- instructor -----------------------------------------------------------------------------------
def _formgrader(page):
    """The formgrader panel's frame (JupyterLab ▸ Nbgrader ▸ Formgrader)."""
    return page.frame_locator("iframe").first


def test_instructor_formgrader_lists_scores_and_records_a_manual_grade(lab, course, page, graded_class):
    """Formgrader (JupyterLab ▸ Nbgrader) on the graded class: the autograded scores, then a written answer graded."""
    from nbgrader.api import Gradebook

    test = "instructor"
    page.goto(lab.url("lab"))
    page.get_by_role("menuitem", name="Nbgrader", exact=True).click()
    page.get_by_role("menuitem", name="Formgrader", exact=True).click()
    fg = _formgrader(page)
    row = fg.locator("tr").filter(has_text=MANUAL)
    row.wait_for()
    shot(page, test, "1-assignments")
    # the course's gradebook: the three submissions of section 07
    row.get_by_role("link", name="3", exact=True).click()
    students = graded_class["students"]
    assert set(students) == {"alice", "bob", "mallory"}, students
    for student, entry in students.items():
        srow = fg.locator("tr").filter(has_text=student)
        srow.locator("td.score").filter(has_text="/").wait_for()
        shown = srow.locator("td.score").inner_text().strip()
        # autograded points (the manual answers are not graded yet), as ./course grade reported them
        assert shown == f"{entry['score']:g} / {entry['max_score']:g}", (student, shown, entry)
    assert students["alice"]["score"] > students["bob"]["score"] == 0
    shot(page, test, "2-submissions")

    # grade alice's written analysis by hand
    fg.locator("tr").filter(has_text="alice").get_by_role("link").first.click()
    fg.locator("tr").filter(has_text=MANUAL).get_by_role("link", name=MANUAL).click()
    # formgrader marks the answer as waiting for a grade once it has loaded the grades (then input is saved)
    score = fg.locator("input#analysis.needs_manual_grade")
    score.wait_for()
    assert "strongest it → animal head" in fg.locator("body").inner_text()  # her answer is on the page
    with page.expect_response(lambda r: "/formgrader/api/grade/" in r.url and r.request.method == "PUT") as resp:
        score.fill("2")
        score.press("Tab")
    assert resp.value.ok, resp.value.status
    shot(page, test, "3-manual-grade")

    with Gradebook(f"sqlite:///{course.root / 'gradebook.db'}") as gb:
        grade = gb.find_grade("analysis", MANUAL, MANUAL, "alice")
        assert grade.manual_score == 2 and grade.score == 2, (grade.manual_score, grade.score)
        assert gb.find_submission(MANUAL, "alice").score == students["alice"]["score"] + 2

    # mallory's notebook, as formgrader shows it: her words are there, none of her script ran
    page.goto(lab.url("lab"))
    page.get_by_role("menuitem", name="Nbgrader", exact=True).click()
    page.get_by_role("menuitem", name="Formgrader", exact=True).click()
    fg = _formgrader(page)
    fg.locator("tr").filter(has_text=MANUAL).get_by_role("link", name="3", exact=True).click()
    fg.locator("tr").filter(has_text="mallory").get_by_role("link").first.click()
    fg.locator("tr").filter(has_text=MANUAL).get_by_role("link", name=MANUAL).click()
    fg.locator("input#analysis").wait_for()
    assert "Mallory's analysis" in fg.locator("body").inner_text()
    page.wait_for_timeout(1000)
    shot(page, test, "4-mallory")
    ran = [f.evaluate("() => window.PWNED === undefined ? null : window.PWNED") for f in page.frames]
    assert ran == [None] * len(page.frames), ran


# -- the class report -----------------------------------------------------------------------------
def _report_command():
    if (ROOT / "tools" / "report.py").is_file():
        return [sys.executable, "-m", "instructor.report"]
    if (ROOT / "instructor" / "report.py").is_file():
        return [str(ROOT / "course"), "report"]
    return None


def test_class_report_page(request, lab, page):
    """``./course report 07 --root DIR --out DIR`` after the class was graded: its page lists every student's score."""
    from nbgrader.api import Gradebook

    cmd = _report_command()
    if cmd is None:
        pytest.skip("./course report does not exist yet (no instructor/report.py, no report subcommand in ./course)")
    course = request.getfixturevalue("course")
    students = request.getfixturevalue("graded_class")["students"]
    out = course.root / "reports"
    proc = subprocess.run([*cmd, MANUAL, "--root", str(course.root), "--out", str(out)], cwd=ROOT, env=course_env(),
                          capture_output=True, text=True, timeout=600)
    index = out / MANUAL / "index.html"
    assert proc.returncode == 0 and index.is_file(), proc.stdout[-2000:] + proc.stderr[-2000:]
    page.goto(index.as_uri())
    shot(page, "report", "1-report")
    # the plots load
    images = page.locator("img")
    assert images.count() > 0
    assert page.evaluate("() => [...document.images].every(i => i.complete && i.naturalWidth > 0)")
    # every student, with the score the gradebook holds now (the instructor test may have added a manual grade)
    rows = page.evaluate("() => [...document.querySelectorAll('tr')].map(r => [...r.cells].map(c => c.innerText.trim()))")
    with Gradebook(f"sqlite:///{course.root / 'gradebook.db'}") as gb:
        for student in students:
            score = gb.find_submission(MANUAL, student).score
            assert [student, f"{score:g}"] in [r[:2] for r in rows], (student, score, rows)
    text = page_text(page)
    for secret in ("BEGIN HIDDEN", "GRADER.check(", "BEGIN SOLUTION"):
        assert secret not in text, secret
    assert not leaked_numbers(text, reference_values(MANUAL), min_places=5)


# -- an instructor edits a section in JupyterLab -------------------------------------------------
EDITED = "03_masking"
NEW_SENTENCE = "Edited in the browser: the diagonal is always allowed."
NEW_COMMENT = "# checked in the browser"


@pytest.fixture
def editable_course(tmp_path):
    """A copy of the whole course (sources, specs, data, generated files) an instructor can edit and build."""
    import shutil

    root = tmp_path / "course"
    root.mkdir()
    keep = shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints")
    for name in ("source", "graders", "release", "notebooks"):
        shutil.copytree(ROOT / name, root / name, ignore=keep)
    shutil.copy(ROOT / "nbgrader_config.py", root / "nbgrader_config.py")
    return root


def test_instructor_edits_a_section_in_jupyterlab_and_builds_it(chromium, page, editable_course, tmp_path):
    """Open source/03 in JupyterLab, edit a markdown cell and a solution cell through the UI, save, run
    ./course build: the sentence is in release/ and notebooks/, the spec reads the new solution, the reference
    data was rebuilt from it, and the instructor's notebook still earns full marks."""
    import hashlib

    import nbformat

    from tests.harness import Course, read_nb

    root = editable_course
    src = root / "source" / EDITED / f"{EDITED}.ipynb"
    data = root / "graders" / "data" / f"{EDITED}.pt"
    stamp_before = json.loads((root / "graders" / "data" / f"{EDITED}.build.json").read_text())
    lab = Lab(root_dir=root, cwd=root, state=tmp_path / "lab-state").start()
    try:
        nbp = NotebookPage(page, lab, f"source/{EDITED}/{EDITED}.ipynb").open()
        # a markdown cell: double-click to edit, replace its text, render it
        md = page.locator(f"{PANEL} .jp-MarkdownCell").filter(has_text="Every row sums to 1")
        md.dblclick()
        md.locator(".cm-content").click()
        page.keyboard.press("ControlOrMeta+a")
        page.keyboard.insert_text(NEW_SENTENCE)
        page.keyboard.press("Shift+Enter")
        # a solution cell: a line after the signature (shown to students too)
        sol = nbp.cell("def causal_mask(T, device=None):")
        sol.locator(".cm-line").first.click()
        page.keyboard.press("End")
        page.keyboard.press("Enter")
        page.keyboard.insert_text(NEW_COMMENT)
        page.keyboard.press("Escape")
        shot(page, "authoring", "1-edited")
        nbp.save()
    finally:
        lab.stop()
    saved = src.read_text()
    assert NEW_SENTENCE in saved and NEW_COMMENT in saved

    build = subprocess.run([sys.executable, "-m", "authoring.build", EDITED, "--root", str(root)], cwd=root,
                           env={**course_env(), "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stdout + build.stderr
    assert f"wrote graders/data/{EDITED}.pt" in build.stdout, build.stdout   # a solution changed: rebuilt
    for gen in ("release", "notebooks"):
        text = (root / gen / EDITED / f"{EDITED}.ipynb").read_text()
        assert NEW_SENTENCE in text and NEW_COMMENT in text, gen
        assert "BEGIN SOLUTION" not in text, gen
    stamp = json.loads((root / "graders" / "data" / f"{EDITED}.build.json").read_text())
    assert stamp["reference_inputs"] != stamp_before["reference_inputs"]
    assert stamp["data"] == hashlib.sha256(data.read_bytes()).hexdigest()
    # the spec (the copy's graders/) reads the new solution from the notebook
    probe = subprocess.run([sys.executable, "-c", f"from graders.s{EDITED} import CAUSAL_REF; print(CAUSAL_REF)"],
                           cwd=root, env={**course_env(), "PYTHONPATH": str(ROOT)}, capture_output=True, text=True)
    assert NEW_COMMENT in probe.stdout, probe.stdout + probe.stderr
    assert (nbformat.read(str(src), as_version=4).cells[0].source ==
            read_nb(ROOT / "source" / EDITED / f"{EDITED}.ipynb").cells[0].source)   # the rest untouched
    # the edited instructor notebook, submitted and graded in that course: full marks
    course = Course.open(root)
    course.generate(EDITED)
    course.submit("instructor", EDITED, read_nb(src))
    course.autograde(EDITED, "instructor")
    scores = course.scores(EDITED, "instructor")
    assert scores and all(got == full for got, full in scores.values()), scores
