"""What an instructor may be shown of a graded notebook, in a browser, a terminal, a spreadsheet or a plot.

Formgrader, the feedback HTML and the class report render the autograded notebook, in the
instructor's logged-in Jupyter session: HTML, JavaScript, SVG, widget state, ``<script>``,
event handlers or ``javascript:`` links produced while grading would run there.  Two layers:

* :class:`judge.preprocessors.JudgeRecords` passes every output through :func:`safe_outputs` (text and
  raster images only) and every markdown cell through :func:`safe_markdown`: a cell is rendered as
  nbconvert renders it and, unless the sanitizer keeps that rendering as it is, replaced by the sanitized
  rendering (:func:`safe_html`), so the autograded notebook is safe in any renderer;
* the renderer itself (nbgrader_config.py): formgrader's and ``generate_feedback``'s nbconvert use
  :func:`markdown2html` and :func:`safe_html` for their ``markdown2html`` and ``clean_html`` filters, so
  whatever notebook they are given, what reaches the page went through the sanitizer.

The sanitizer is ammonia (the ``nh3`` binding) with an allow-list of tags, attributes, classes and URL schemes,
applied to the *rendered* HTML: the markdown renderer undoes every escape a student can write
(``javascript\\:``, ``&colon;``, ``&#x6A;avascript:``, an entity tab), so the markdown source is never judged.

Text a student shaped (an exception's message, a stderr line, a student id, a prescan note) reaches
the instructor elsewhere too, and is made inert there by the one helper of each medium:
:func:`inert` for a terminal (no escape sequences or control characters), :func:`csv_cell` for a
CSV cell (never a spreadsheet formula) and :func:`plot_label` for a matplotlib label (never mathtext);
HTML pages built here (the class report) are Jinja templates with autoescaping.
"""
from __future__ import annotations

import functools
import html
import re

import jinja2

from nbformat.notebooknode import NotebookNode

SAFE_MIME = ("text/plain", "image/png", "image/jpeg", "image/gif")
_B64 = re.compile(r"[A-Za-z0-9+/=\s]*")


def safe_outputs(outputs, scored: bool) -> list:
    """Outputs an instructor's browser can render safely; in a grade cell, none that nbgrader reads as a score.

    Rich outputs keep only plain text and base64 raster images (HTML, JavaScript, SVG, markdown, LaTeX and
    widget views are dropped, as are output metadata); a grade cell's ``execute_result`` becomes display data,
    so nbgrader's partial-credit rule (the first ``execute_result``'s number is the score) is never reached.
    """
    out = []
    for o in outputs:
        kind = o.get("output_type")
        if kind in ("stream", "error"):
            out.append(o)
            continue
        if kind not in ("display_data", "execute_result"):
            continue
        data = {}
        for mime in SAFE_MIME:
            value = (o.get("data") or {}).get(mime)
            if isinstance(value, list):
                value = "".join(v for v in value if isinstance(v, str))
            if not isinstance(value, str):
                continue
            if mime.startswith("image/") and not _B64.fullmatch(value):
                continue
            data[mime] = value
        if not data:
            continue
        if kind == "execute_result" and not scored:
            out.append(NotebookNode(output_type="execute_result", data=data, metadata={},
                                    execution_count=o.get("execution_count")))
        else:
            out.append(NotebookNode(output_type="display_data", data=data, metadata={}))
    return out


# -- HTML: what a student's markdown (or an output) may become in an instructor's browser --------------------------
# Markdown is rendered first (by nbconvert's own renderer, the one formgrader and the feedback page use, which undoes
# every escape: ``javascript\\:``, ``&colon;``, ``&#x6A;``, an entity tab), then the rendered HTML is sanitized by
# ammonia (nh3): an allow-list of tags, attributes, classes and URL schemes, parsed as a browser parses it.
# The tags nbconvert's renderer makes of markdown (headings, lists, tables, code, quotes, definition lists, task
# lists) and the few students write by hand (<details>, <sub>, <kbd>, ...); nothing that loads, frames, submits,
# styles or scripts (no svg, math, iframe, object, embed, form, base, meta, link, style, script)
_TAGS = {"a", "abbr", "b", "blockquote", "br", "caption", "code", "dd", "del", "details", "div", "dl", "dt", "em",
         "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "img", "input", "ins", "kbd", "li", "mark", "ol", "p", "pre",
         "q", "s", "samp", "small", "span", "strong", "sub", "summary", "sup", "table", "tbody", "td", "tfoot", "th",
         "thead", "tr", "u", "ul", "var"}
# removed with everything in them (not only the tag): their text is never meant to be read as text
_DROP_WITH_CONTENT = {"script", "style", "svg", "math", "template", "iframe", "object", "embed", "applet", "noscript",
                      "noembed", "noframes", "xmp", "textarea", "title", "select", "frameset"}
_CELL_ATTRS = {"colspan", "rowspan", "align", "style"}
_ATTRIBUTES = {"a": {"href", "title"}, "img": {"src", "alt", "title", "width", "height"}, "abbr": {"title"},
               "ol": {"start"}, "details": {"open"}, "input": {"checked"}, "th": _CELL_ATTRS, "td": _CELL_ATTRS,
               **{f"h{n}": {"id"} for n in range(1, 7)}}
# a heading's id (its anchor) gets this prefix, and so does an in-page link to it: a student's id can never be one
# the page's own scripts look for (formgrader finds its score inputs by the grade cell's id)
ID_PREFIX = "md-"
_INLINE_IMAGE_URL = re.compile(r"(?i)^data:image/(png|jpeg|gif);base64,[A-Za-z0-9+/=\s]*$")
_ATTR_VALUE = {
    "style": re.compile(r"(?i)^\s*text-align\s*:\s*(left|right|center|justify)\s*;?\s*$"),   # table columns
    "align": re.compile(r"(?i)^(left|right|center|justify)$"),
    "width": re.compile(r"^\d{1,5}%?$"), "height": re.compile(r"^\d{1,5}%?$"),
    "colspan": re.compile(r"^\d{1,3}$"), "rowspan": re.compile(r"^\d{1,3}$"), "start": re.compile(r"^-?\d{1,9}$"),
}


def _attribute(tag: str, attr: str, value: str):
    """What ammonia keeps of an allowed attribute (None: drop it).  Its scheme check has run: href and src are
    http(s), mailto, data or relative here."""
    if attr == "src":   # only inline raster images: nothing loads from anywhere when the page opens
        return value if _INLINE_IMAGE_URL.match(value.strip()) else None
    if attr == "href":
        link = value.strip()
        if link[:5].lower() == "data:":
            return None
        if link.startswith("#") and not link.startswith("#" + ID_PREFIX):
            return "#" + ID_PREFIX + link[1:]
        return value
    rule = _ATTR_VALUE.get(attr)
    if rule is not None and not rule.match(value):
        return None
    return value


@functools.cache
def _cleaner():
    import nh3
    from pygments.token import STANDARD_TYPES   # the classes of nbconvert's highlighted code blocks

    return nh3.Cleaner(
        tags=_TAGS, clean_content_tags=_DROP_WITH_CONTENT, attributes=_ATTRIBUTES, attribute_filter=_attribute,
        url_schemes={"http", "https", "mailto", "data"}, strip_comments=True, id_prefix=ID_PREFIX,
        filter_style_properties={"text-align"},
        tag_attribute_values={"input": {"type": {"checkbox"}}},
        set_tag_attribute_values={"input": {"disabled": "disabled"}},   # a task list's box, never a form field
        allowed_classes={"a": {"anchor-link"}, "div": {"highlight"}, "li": {"task-list-item"},
                         "input": {"task-list-item-checkbox"}, "span": {c for c in STANDARD_TYPES.values() if c}},
    )


def safe_html(markup) -> str:
    """HTML an instructor's browser can render inside its own pages: ammonia (nh3) keeps the allowed tags,
    attributes, classes and URLs (http, https, mailto, relative; ``data:`` only as a base64 PNG/JPEG/GIF
    ``<img>``; images from anywhere else lose their source) and drops the rest; every link gets
    ``rel="noopener noreferrer"``.  Idempotent.  Also nbconvert's ``clean_html`` filter (nbgrader_config.py)."""
    markup = markup.decode("utf-8", "replace") if isinstance(markup, bytes) else str(markup)
    return _cleaner().clean(markup)


@functools.cache
def _renderer_class():
    from nbconvert.filters.markdown_mistune import IPythonRenderer

    class CourseRenderer(IPythonRenderer):
        """nbconvert's renderer (the one formgrader and the feedback page use); an image that is not inline (a data
        URL or the cell's attachment) becomes a link to it: nothing loads when the instructor opens the page.
        ``deviated``: whether this rendering differs from nbconvert's own."""

        deviated = False

        def _embed_image_or_attachment(self, src):
            try:
                return super()._embed_image_or_attachment(src)
            except Exception:  # noqa: BLE001 - a missing attachment (nbconvert raises): an image that is not inline
                self.deviated = True
                return src

        def image(self, text, url, title=None):
            if _INLINE_IMAGE_URL.match(self._embed_image_or_attachment(url)):
                return super().image(text, url, title)
            self.deviated = True
            return self.link(text, url, title)

    return CourseRenderer


def _render(text: str, attachments, path: str, course: bool = True):
    from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath

    renderer = (_renderer_class() if course else IPythonRenderer)(
        escape=False, attachments=safe_attachments(attachments), path=path)
    return MarkdownWithMath(renderer=renderer).render(text), getattr(renderer, "deviated", False)


def render_markdown(source, attachments=None, path: str = "", course: bool = True) -> str:
    """A markdown cell as nbconvert renders it (math left as text for MathJax, attachments inlined), without
    sanitizing; ``course``: with :func:`safe_html`'s image rule applied to markdown images (they become links)."""
    return _render(source if isinstance(source, str) else "".join(source), attachments, path, course)[0]


# ammonia's parse (html5ever's tree builder) takes time quadratic in nesting depth: 10,000 nested tags 0.5 s, 40,000
# 10 s (the largest markdown cell of the course renders to 120 tags). A rendering with more tags is shown as text.
MAX_TAGS = 10_000


def _as_text(text: str, why: str) -> str:
    return safe_html(f"<p><em>(shown as text: {why})</em></p><pre>{html.escape(text, quote=False)}</pre>")


def _sanitized(text: str, attachments, path: str = "") -> str:
    """:func:`safe_html` of the course's rendering; markdown the renderer fails on (formgrader would show an error
    page, grading would stop) or that renders to more than MAX_TAGS tags is shown as text."""
    try:
        rendered = render_markdown(text, attachments, path)
    except Exception:  # noqa: BLE001 - whatever the renderer raises, the page (and the grading run) goes on
        return _as_text(text, "the markdown renderer failed on it")
    if rendered.count("<") > MAX_TAGS:
        return _as_text(text, f"more than {MAX_TAGS} HTML tags")
    return safe_html(rendered)


@jinja2.pass_context
def markdown2html(context, source) -> str:
    """nbconvert's ``markdown2html`` filter, sanitized (nbgrader_config.py: formgrader and the feedback HTML)."""
    cell = context.get("cell") or {}
    path = ((context.get("resources") or {}).get("metadata") or {}).get("path", "")
    text = source if isinstance(source, str) else "".join(source)
    return _sanitized(text, cell.get("attachments"), path)


def safe_markdown(source, attachments=None) -> str:
    """A markdown cell's source that renders to sanitized HTML with any markdown renderer.

    Unchanged when nbconvert renders it to HTML that :func:`safe_html` keeps as it is (plain text, emphasis, math,
    lists...: the source of an untouched answer keeps nbgrader's checksum); otherwise the sanitized rendering itself,
    as one raw-HTML line (:func:`html_block`), which renderers pass through as it is.
    """
    text = source if isinstance(source, str) else "".join(source)
    try:
        rendered, deviated = _render(text, attachments, "")
    except Exception:  # noqa: BLE001 - the renderer fails on it: shown as text (_sanitized)
        return html_block(_sanitized(text, attachments))
    if rendered.count("<") > MAX_TAGS:
        return html_block(_as_text(text, f"more than {MAX_TAGS} HTML tags"))
    clean = safe_html(rendered)
    # nbconvert's own rendering is this one unless an image became a link or an attachment is missing
    return text if clean == rendered and not deviated else html_block(clean)


# characters kept as they are in html_block's line; every other one is written as a character reference, so no
# markdown parser finds syntax in it (``$$`` or ``\[`` that mistune's math rule looks for anywhere, ``*``, ``[``,
# a line break that would end the block) while the browser reads the same text (MathJax still finds ``$x$``)
_PLAIN = re.compile(r"[^\w .,;:?!'/()@+=%#-]|_")


def _refs(text: str) -> str:
    return _PLAIN.sub(lambda m: f"&#{ord(m.group())};", text)


def html_block(clean: str) -> str:
    """Sanitized HTML (from :func:`safe_html`) as markdown that renders to it: one ``<div>`` line (a CommonMark
    HTML block, passed through to its end: there is no blank line in it), text and attribute values written with
    character references for anything a markdown parser would read as syntax."""
    from html.parser import HTMLParser

    out = []

    class Writer(HTMLParser):
        def handle_starttag(self, tag, attrs):
            out.append(f"<{tag}" + "".join(f' {k}="{_refs(v or "")}"' for k, v in attrs) + ">")

        def handle_startendtag(self, tag, attrs):
            self.handle_starttag(tag, attrs)

        def handle_endtag(self, tag):
            out.append(f"</{tag}>")

        def handle_data(self, data):
            out.append(_refs(data))

    w = Writer(convert_charrefs=True)
    w.feed(clean)
    w.close()
    return "<div>" + "".join(out) + "</div>"


def safe_attachments(attachments) -> dict:
    """A markdown cell's attachments, raster images only."""
    out = {}
    for name, bundle in (attachments or {}).items():
        kept = {k: v for k, v in (bundle or {}).items()
                if k in SAFE_MIME[1:] and isinstance(v, str) and _B64.fullmatch(v)}
        if kept:
            out[str(name)] = kept
    return out


def safe_notebook(nb, markdown: bool = True):
    """Make a notebook safe to show an instructor, in place: every code cell's outputs (:func:`safe_outputs`,
    ``scored`` for grade cells), markdown cells' attachments (raster images) and, with ``markdown``, their
    source (:func:`safe_markdown`), raw cells' format (never raw HTML), and no widget state (formgrader would
    run its JavaScript).  JudgeRecords' last step; the renderer's own (judge.preprocessors.SafeToShow) without
    ``markdown``, which its markdown2html filter sanitizes after rendering."""
    for cell in nb.cells:
        if cell.cell_type == "code":
            scored = bool((cell.get("metadata", {}).get("nbgrader") or {}).get("grade"))
            cell.outputs = safe_outputs(cell.get("outputs", []), scored=scored)
        elif cell.cell_type == "markdown":
            if "attachments" in cell:
                cell.attachments = safe_attachments(cell.attachments)
            if markdown:
                cell.source = safe_markdown(cell.source, cell.get("attachments"))
        elif cell.cell_type == "raw":
            cell.metadata.pop("format", None)
            cell.metadata.pop("raw_mimetype", None)
    nb.metadata.pop("widgets", None)
    return nb


# -- text for a terminal, a spreadsheet, a plot -----------------------------------------------------------
# ANSI/VT escape sequences: CSI (colours, cursor moves, erase), OSC (titles, links) and DCS/PM/APC strings,
# two-character escapes, and the 8-bit CSI
_ESCAPE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[\]PX^_][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[ -~]?|\x9b[0-?]*[ -/]*[@-~]")
# C0 and C1 controls, DEL, and the invisible marks that reorder or hide text (bidi overrides, zero width)
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def inert(text) -> str:
    """Text that prints as itself on a terminal: escape sequences removed, every control character (``\\r``,
    ``\\b``, bidi overrides...) removed, tabs and line breaks made spaces."""
    text = _ESCAPE.sub("", str(text))
    return _CONTROL.sub(lambda m: " " if m.group() in "\t\n\r\u2028\u2029" else "", text)


def csv_cell(value):
    """A CSV cell a spreadsheet shows as text: one starting ``=``, ``+``, ``-``, ``@``, a tab or a carriage
    return gets a leading ``'`` (numbers are left as they are)."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def plot_label(text) -> str:
    """A matplotlib label drawn as plain text (with ``text.usetex`` off): inert, every ``$`` escaped, so no
    pair of dollars opens mathtext (matplotlib draws ``\\$`` as ``$``; a lone backslash is drawn as is)."""
    return inert(text).replace("$", r"\$")
