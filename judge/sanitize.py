"""What an instructor may be shown of a graded notebook, in a browser, a terminal, a spreadsheet or a plot.

Formgrader, the feedback HTML and the class report render the autograded notebook, in the
instructor's logged-in Jupyter session: HTML, JavaScript, SVG, widget state, ``<script>``,
event handlers or ``javascript:`` links produced while grading would run there.
:class:`judge.preprocessors.JudgeRecords` passes every output through
:func:`safe_outputs` and every markdown cell through :func:`safe_markdown`.

Text a student shaped (an exception's message, a stderr line, a student id, a prescan note) reaches
the instructor elsewhere too, and is made inert there by the one helper of each medium:
:func:`inert` for a terminal (no escape sequences or control characters), :func:`csv_cell` for a
CSV cell (never a spreadsheet formula) and :func:`plot_label` for a matplotlib label (never mathtext).
"""
from __future__ import annotations

import html
import re

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


def _spaced(word: str) -> str:
    return r"\s*".join(re.escape(ch) for ch in word)


# a script scheme, with the whitespace (tabs, newlines) that browsers drop from a URL
_HARMFUL_LINK = re.compile("(?i)(" + "|".join(_spaced(w) for w in ("javascript", "vbscript", "livescript")) + r")\s*:")
_ENTITY = re.compile(r"&(?=[#A-Za-z])")
_TAG_START = re.compile(r"<(?=[A-Za-z/!?])")
_TAG = re.compile(r"<(/?)([A-Za-z][A-Za-z0-9]*)((?:\s+[^<>]*)?)\s*(/?)>")
_ATTR = re.compile(r"""([A-Za-z_:][-A-Za-z0-9_:.]*)\s*(?:=\s*("[^"]*"|'[^']*'|[^\s"'=<>`]+))?""")
_MARKDOWN_TAGS = {"b", "br", "code", "del", "details", "em", "i", "img", "kbd", "li", "ol", "p", "pre", "s", "strong",
                  "sub", "summary", "sup", "table", "tbody", "td", "th", "thead", "tr", "u", "ul", "a", "hr",
                  "h1", "h2", "h3", "h4", "h5", "h6", "span", "div", "blockquote"}
_MARKDOWN_ATTRS = {"a": {"href", "title"}, "img": {"src", "alt", "title", "width", "height"}}
_SAFE_URL = re.compile(r"(?i)^(https?://|mailto:|#|data:image/(png|jpeg|gif);base64,)[^\s\"'<>`]*$")


# an image the page may show: inline data or the cell's own attachment (nothing fetched from anywhere)
_INLINE_IMAGE = re.compile(r"(?i)^(data:image/(png|jpeg|gif);base64,|attachment:)")
# a markdown image (``![alt](url)``, ``![alt][ref]``, ``![alt]``) whose target is not inline: it becomes a link
_REMOTE_MD_IMAGE = re.compile(r"!\[(?=[^\]\n]*\](?!\(\s*<?\s*(?:data:image/(?:png|jpeg|gif);base64,|attachment:)))")


def _safe_tag(m) -> str:
    close, name, attrs, selfclose = m.group(1), m.group(2).lower(), m.group(3) or "", m.group(4)
    if name not in _MARKDOWN_TAGS:
        return "&lt;" + m.group(0)[1:]
    kept = []
    for key, value in _ATTR.findall(attrs) if not close else []:
        key = key.lower()
        value = value[1:-1] if value[:1] in "\"'" and len(value) >= 2 else value
        if key not in _MARKDOWN_ATTRS.get(name, ()):
            continue
        if key in ("href", "src") and not _SAFE_URL.match(value):
            continue
        if name == "img" and key == "src" and not _INLINE_IMAGE.match(value):
            continue   # an image from elsewhere would load the moment the page opens
        if key in ("width", "height") and not value.isdigit():
            continue
        kept.append(f' {key}="{html.escape(value, quote=True)}"')
    return f"<{close}{name}{''.join(kept)}{' /' if selfclose else ''}>"


def safe_markdown(source) -> str:
    """Markdown whose raw HTML keeps a few harmless tags (rebuilt, no event handlers, no style), no script links,
    and no image that is not inline (data or attachment): other images become links.

    Every ``<`` that could open a tag, a comment or a declaration is escaped unless it opens an allowed tag,
    which is rebuilt from its allowed attributes; entities cannot spell a scheme (``&`` before a name or ``#``
    is escaped), and ``javascript:``-like schemes lose their colon (``%3A``).  Text without those characters is unchanged.
    """
    text = source if isinstance(source, str) else "".join(source)
    text = _ENTITY.sub("&amp;", text)
    out, pos = [], 0
    for start in _TAG_START.finditer(text):
        i = start.start()
        if i < pos:
            continue
        out.append(text[pos:i])
        m = _TAG.match(text, i)
        if m:
            out.append(_safe_tag(m))
            pos = m.end()
        else:
            out.append("&lt;")
            pos = i + 1
    out.append(text[pos:])
    text = _HARMFUL_LINK.sub(lambda m: m.group(1) + "%3A", "".join(out))   # no longer a scheme: a relative URL
    # no image loads from anywhere when the instructor opens the page (a tracker, a request to their own server):
    # a markdown image that is not inline becomes a link to it, an <img> keeps no such src
    return _REMOTE_MD_IMAGE.sub("[", text)


def safe_attachments(attachments) -> dict:
    """A markdown cell's attachments, raster images only."""
    out = {}
    for name, bundle in (attachments or {}).items():
        kept = {k: v for k, v in (bundle or {}).items()
                if k in SAFE_MIME[1:] and isinstance(v, str) and _B64.fullmatch(v)}
        if kept:
            out[str(name)] = kept
    return out


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
