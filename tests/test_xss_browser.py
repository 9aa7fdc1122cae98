"""A student's markdown and outputs cannot script in the instructor's browser: formgrader, the feedback HTML, the
class report, in Debian's chromium.

One student of section 02 hands in a solved notebook with the XSS corpus of tests/xss_corpus.py in its markdown
cells (one payload a cell), a code cell whose outputs carry more (HTML, JavaScript, SVG, markdown), honest markdown
beside them, links in the submission named with HTML for the class report, and a classmate whose only notebook has
such a name.  It is graded with nbgrader's own ``autograde`` (formgrader's Autograde path), its feedback made with
``generate_feedback`` and the class report with ``./course report``.  Every page is opened in chromium, where every
frame has a ``pwned(n)`` that records n (the payloads call it), every request that leaves the page's own server is
logged and refused, and every link, button and input in the student's content is hovered and clicked.

The pairing: the same notebook rendered by nbgrader's templates with nbconvert as it comes (no course settings), and
the report's template without autoescaping, in the same browser: the payloads of ``RUNS`` run there and those of
``LOADS`` load from elsewhere; on the course's pages none runs and nothing loads.  Screenshots of the pages go to
tests/artifacts/xss/ (look at them: honest markdown must look right).
"""
from __future__ import annotations

import functools
import http.server
import subprocess
import sys
import threading
from pathlib import Path

import nbformat
import pytest

from tests.browser import ARTIFACTS, Lab, student_work
from tests.harness import CORPUS_SECTION, ROOT, Course, course_env, read_nb
from tests.xss_corpus import ELSEWHERE, HONEST, LOADS, OUTPUT_RUNS, PAYLOADS, PNG_B64, RUNS, output_cell

pytest_plugins = ["tests.browser"]
pytestmark = [pytest.mark.xdist_group("browser"), pytest.mark.slow]

SECTION = CORPUS_SECTION
STUDENT, CLASSMATE = "mallory", "eve"
SHOTS = ARTIFACTS / "xss"
# text a student shapes that reaches the class report: the names of links in the submission (the prescan names
# them) and of a classmate's only notebook
REPORT_PAYLOADS = {201: "<img src=x onerror=pwned(201)>", 202: "<svg onload=pwned(202)>",
                   203: "<img src=y onerror=pwned(203)>"}
NBGRADER_TEMPLATES = Path(__import__("nbgrader").__file__).parent / "server_extensions" / "formgrader" / "templates"
# in the student's content: what a person can hover or click
CLICKABLE = "a, button, input, summary, x, marquee, text, details, area"


def corpus_notebook(release):
    nb = student_work(release, SECTION)
    cells = [nbformat.v4.new_markdown_cell(f"**P{n}** `{name}`\n\n{md}") for n, (name, md) in PAYLOADS.items()]
    honest = [nbformat.v4.new_markdown_cell(md) for md in HONEST.values()]
    for c in honest:
        if "attachment:" in c.source:
            c.attachments = {"plot.png": {"image/png": PNG_B64}}
    nb.cells += honest + cells + [output_cell()]
    return nb


class Static:
    """A plain HTTP server for a folder (no CSP, no sandbox: the worst way a page can be opened)."""

    def __init__(self, folder: Path):
        handler = functools.partial(_Quiet, directory=str(folder))
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, rel: str) -> str:
        return f"{self.base}/{rel}"

    def stop(self):
        self.server.shutdown()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The course graded as above; ``pages``: where each page is served, sanitized and unsanitized."""
    from nbconvert import HTMLExporter
    from nbgrader.api import Gradebook
    from traitlets.config import Config

    import instructor.report as report
    from instructor.config import load_config

    tmp = tmp_path_factory.mktemp("xss")
    course = Course(tmp / "course", [SECTION])
    course.generate(SECTION)
    submitted = corpus_notebook(course.release_nb(SECTION))
    path = course.submit(STUDENT, SECTION, submitted)
    (path.parent / REPORT_PAYLOADS[201]).symlink_to("plot.png")
    (path.parent / REPORT_PAYLOADS[202]).symlink_to("/etc/hostname")
    course.submit(CLASSMATE, SECTION, course.release_nb(SECTION), name=f"{REPORT_PAYLOADS[203]}.ipynb")
    course.autograde(SECTION, STUDENT)
    course.nbgrader("generate_feedback", SECTION, f"--student={STUDENT}", "--force")
    out = tmp / "reports"
    proc = subprocess.run([sys.executable, "-m", "instructor.report", SECTION, "--root", str(course.root),
                           "--out", str(out)], cwd=ROOT, env=course_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]

    # the unsanitized pairs: nbgrader's templates with nbconvert as it comes, on the notebook the student handed in;
    # the report's template without autoescaping or its CSP
    plain = tmp / "plain"
    plain.mkdir()
    css = NBGRADER_TEMPLATES.parent / "static" / "node_modules" / "bootstrap" / "dist" / "css"
    resources = {"base_url": "", "index": 0, "total": 1, "student": STUDENT, "notebook_id": SECTION,
                 "assignment_id": SECTION, "submission_id": "x", "notebook_path": "",
                 "nbgrader": {"notebook": SECTION, "score": 0, "max_score": 1, "late_penalty": 0}}
    shown = nbformat.from_dict(submitted)     # the feedback template reads each grade cell's score
    for cell in shown.cells:
        if cell.metadata.get("nbgrader", {}).get("grade"):
            cell.metadata.nbgrader.update(score=0, comment="")
    for template in ("formgrade", "feedback"):
        cfg = Config({"HTMLExporter": {"template_name": template, "extra_template_basedirs": [str(NBGRADER_TEMPLATES)],
                                       "extra_template_paths": [str(css)]}})
        html = HTMLExporter(config=cfg).from_notebook_node(shown, resources=dict(resources))[0]
        (plain / f"{template}.html").write_text(html)
    # each layer alone: the judge's autograded notebook with nbconvert as it comes; the course's renderer
    # (nbgrader_config.py's HTMLExporter settings) on the notebook as handed in
    formgrade = cfg.copy()
    formgrade.HTMLExporter.template_name = "formgrade"
    judged = read_nb(course.root / "autograded" / STUDENT / SECTION / f"{SECTION}.ipynb")
    (plain / "judge-alone.html").write_text(HTMLExporter(config=formgrade).from_notebook_node(
        judged, resources=dict(resources))[0])
    ours = Config(load_config(ROOT))
    ours.merge(formgrade)
    (plain / "renderer-alone.html").write_text(HTMLExporter(config=ours).from_notebook_node(
        shown, resources=dict(resources))[0])
    _unescaped_report(report, course.root, plain / "report")

    with Gradebook(f"sqlite:///{course.root / 'gradebook.db'}") as gb:
        sub_id = gb.find_submission_notebook(SECTION, SECTION, STUDENT).id
    lab = Lab(root_dir=course.root.parent, cwd=course.root, state=tmp / "lab-state").start()
    files = Static(tmp)
    try:
        yield {"course": course, "lab": lab, "pages": {
            "formgrader": (lab.url(f"formgrader/submissions/{sub_id}/"), files.url("plain/formgrade.html")),
            "feedback": (files.url(f"course/feedback/{STUDENT}/{SECTION}/{SECTION}.html"), files.url("plain/feedback.html")),
            "report": (files.url(f"reports/{SECTION}/index.html"), files.url(f"plain/report/{SECTION}/index.html")),
        }, "layers": [files.url("plain/judge-alone.html"), files.url("plain/renderer-alone.html")]}
    finally:
        files.stop()
        lab.stop()


def _unescaped_report(report, root: Path, out: Path):
    """./course report's page as it would be without autoescaping and without its CSP (the pairing)."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(Path(report.__file__).parent / "templates"),
                             autoescape=False, undefined=jinja2.StrictUndefined)
    original = report._template
    report._template = lambda: env.get_template("class_report.html")
    try:
        index = report.write_report(root, SECTION, out)
    finally:
        report._template = original
    text = index.read_text()
    start = text.find('<meta http-equiv="Content-Security-Policy"')
    if start >= 0:
        text = text[:start] + text[text.index(">", start) + 1:]
    index.write_text(text)


# -- the attack, in the browser ---------------------------------------------------------------------------------
# what a person does to an element: the mouse passes over it, presses, releases, clicks (a link is followed, a
# button submits its form); then a moment for a javascript: navigation to run before the next click replaces it
_CLICK = """async (el) => {
  for (const type of ['mouseover', 'mouseenter', 'mousemove', 'mousedown', 'mouseup'])
    el.dispatchEvent(new MouseEvent(type, {bubbles: true, cancelable: true, view: window}));
  if (typeof el.click === 'function') el.click();
  else el.dispatchEvent(new MouseEvent('click', {bubbles: true, cancelable: true, view: window}));
  await new Promise(r => setTimeout(r, 40));
}"""
_SHOWN = """() => ({
  text: document.body.innerText,
  images: [...document.querySelectorAll('img[alt="my plot"], img[alt="attached plot"]')].map(i => i.naturalWidth),
  headings: [...document.querySelectorAll('h2')].map(h => h.innerText),
  tables: [...document.querySelectorAll('table')].map(t => t.innerText),
  links: [...document.querySelectorAll('a[href^="https://arxiv.org"]')].map(a => a.getAttribute('href')),
})"""


def attack(browser, url: str, within: str, shot: str | None = None) -> dict:
    """Open ``url``, hover and click everything clickable inside ``within``: ``ran``, the payloads that ran
    (pwned(n) in any frame); ``loads``, the requests the page made to elsewhere; ``shown``, what the page shows."""
    from urllib.parse import urlsplit

    ran, loads = set(), []
    origin = urlsplit(url)[:2]
    context = browser.new_context(viewport={"width": 1300, "height": 900})
    context.set_default_timeout(15_000)
    context.expose_binding("__pwHit", lambda source, n: ran.add(int(n)))
    context.add_init_script("window.pwned = function (n) { window.__pwHit(n); };")   # returns nothing
    page = context.new_page()

    def route(r):
        # anything leaving the page's server (a load, or a link followed) is answered "204 No Content": the page
        # stays where it is (an aborted navigation would replace it with an error page)
        req = r.request
        target = req.url.split("#")[0]
        if req.is_navigation_request() and req.frame == page.main_frame and target != url.split("#")[0]:
            return r.fulfill(status=204)
        if urlsplit(target)[:2] != origin:
            loads.append(target)
            return r.fulfill(status=204)
        return r.continue_()

    context.route("**/*", route)
    page.on("dialog", lambda d: d.dismiss())
    try:
        page.goto(url, wait_until="load")
        page.wait_for_timeout(800)
        if shot:
            SHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SHOTS / f"{shot}.png"), full_page=True)
        items = page.locator(", ".join(f"{w} :is({CLICKABLE})" for w in within.split(", ")))
        count = items.count()
        for i in range(count):
            try:
                items.nth(i).evaluate(_CLICK, timeout=5000)
            except Exception:  # noqa: BLE001 - the page went away (a payload replaced it): open it again, go on
                page.goto(url, wait_until="load")
        page.wait_for_timeout(1000)
        return {"ran": ran, "loads": loads, "clicked": count, "shown": page.evaluate(_SHOWN)}
    finally:
        context.close()


def _student_loads(loads) -> set:
    return {u.rsplit("/", 1)[-1] for u in loads if u.startswith(ELSEWHERE)}


WITHIN = {"formgrader": "#notebook-container .text_cell_render, #notebook-container .output_subarea",
          "feedback": "#notebook-container .text_cell_render, #notebook-container .output_subarea",
          "report": "body"}


def _honest_renders(shown):
    assert any("My analysis of head 3" in h for h in shown["headings"]), shown["headings"]
    assert any("entropy" in t and "0.42" in t for t in shown["tables"]), shown["tables"]
    assert shown["links"] == ["https://arxiv.org/abs/1706.03762"], shown["links"]
    assert shown["images"] == [48, 48], shown["images"]      # the inline image and the attachment, shown
    for text in (r"$s_{ij} = q_i \cdot k_j / \sqrt{d_k}$", "$x<y$", "softmax(x, dim=-1)", "My derivation",
                 "not hard", "P2 backslash-escaped colon", "P6 &#x6A;avascript:"):
        assert text in shown["text"], text


@pytest.mark.parametrize("where", ["formgrader", "feedback"])
def test_no_payload_runs_where_the_instructor_reads_a_submission(chromium, graded, where):
    course_page, plain_page = graded["pages"][where]
    bare = attack(chromium, plain_page, WITHIN[where], shot=f"{where}-unsanitized")
    ours = attack(chromium, course_page, WITHIN[where], shot=where)
    print(f"{where}: as nbgrader renders it, {len(bare['ran'])} payloads ran and {len(_student_loads(bare['loads']))} "
          f"loaded from elsewhere; the course's page: {sorted(ours['ran'])} ran, {sorted(_student_loads(ours['loads']))} "
          f"loaded ({bare['clicked']} and {ours['clicked']} elements clicked)")
    # the pairing: rendered by nbgrader's template without the course's settings, the known payloads run and load
    assert RUNS | OUTPUT_RUNS <= bare["ran"], sorted(RUNS | OUTPUT_RUNS - bare["ran"])
    assert {n for n in LOADS} <= {int(u.split(".")[0]) for u in _student_loads(bare["loads"])}, bare["loads"]
    # the course's page: nothing ran, nothing loaded from elsewhere, though every payload's element was clicked
    assert ours["ran"] == set() and not _student_loads(ours["loads"]), (ours["ran"], ours["loads"])
    assert ours["clicked"] > 60
    _honest_renders(ours["shown"])


def test_each_layer_alone_holds_in_the_browser(chromium, graded):
    """The judge's rewritten cells in nbgrader's template with nbconvert as it comes, and the course's renderer on the
    notebook as the student handed it in: in neither does a payload run or load."""
    for page in graded["layers"]:
        alone = attack(chromium, page, WITHIN["formgrader"])
        print(f"{page}: {sorted(alone['ran'])} ran, {sorted(_student_loads(alone['loads']))} loaded")
        assert alone["ran"] == set() and not _student_loads(alone["loads"]), (page, alone["ran"], alone["loads"])
        _honest_renders(alone["shown"])


def test_no_payload_runs_in_the_class_report(chromium, graded):
    course_page, plain_page = graded["pages"]["report"]
    bare = attack(chromium, plain_page, WITHIN["report"])
    ours = attack(chromium, course_page, WITHIN["report"], shot="report")
    print(f"report: without autoescaping {sorted(bare['ran'])} ran; the course's report {sorted(ours['ran'])}")
    assert set(REPORT_PAYLOADS) <= bare["ran"], bare["ran"]
    assert ours["ran"] == set(), ours["ran"]
    for payload in REPORT_PAYLOADS.values():   # shown as text
        assert payload in ours["shown"]["text"], payload
