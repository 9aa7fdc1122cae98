"""Markdown an attacker puts in a notebook for the instructor's browser: the standard XSS corpora, as markdown cells.

Each payload, when it runs, calls ``pwned(N)`` (the browser test defines that function in every frame and records N;
it returns nothing, so a ``javascript:`` URL never replaces the page) or loads ``https://elsewhere.example/load/N``
(the browser test logs every request that leaves the page's own server).  ``RUNS``: the payloads seen to run in
Debian's chromium when nbconvert renders them as nbgrader does (no sanitizer) — the browser test requires at least
these to run there, so it can fail; ``LOADS``: the payloads seen to load from elsewhere there.

``HONEST``: what students write, which must still render (headings, lists, emphasis, code, tables, math, links,
inline images).
"""
from __future__ import annotations

ELSEWHERE = "https://elsewhere.example/load/"
PNG_B64 = ("iVBORw0KGgoAAAANSUhEUgAAADAAAAAYCAIAAAAzn+mLAAAANElEQVR42mPUiDrBwsAwmBAbw6ACow4addCog0YdNOqgUQeN"
           "OmjUQaMOGnXQqINGHURbAACAEwLumYnVpQAAAABJRU5ErkJggg==")   # 48 x 24, a gradient

PAYLOADS: dict[int, tuple[str, str]] = {
    # -- script schemes in markdown links, with every escape the renderer undoes -------------------------------
    1: ("plain javascript: link", "[plain](javascript:pwned(1))"),
    2: ("backslash-escaped colon", r"[open my figure](javascript\:pwned(2))"),
    3: ("&colon;", "[colon entity](javascript&colon;pwned(3))"),
    4: ("&#58;", "[decimal colon](javascript&#58;pwned(4))"),
    5: ("&#x3A;", "[hex colon](javascript&#x3A;pwned(5))"),
    6: ("&#x6A;avascript:", "[Figure 3](&#x6A;avascript:pwned(6))"),
    7: ("&Tab; inside the scheme", "[tab entity](java&Tab;script:pwned(7))"),
    8: ("&NewLine; inside the scheme", "[newline entity](java&NewLine;script:pwned(8))"),
    9: ("&#9; inside the scheme", "[decimal tab](java&#9;script:pwned(9))"),
    10: ("mixed case", "[mixed case](JaVaScRiPt:pwned(10))"),
    11: ("destination in angle brackets", "[angle](<javascript:pwned(11)>)"),
    12: ("leading spaces", "[leading spaces](<   javascript:pwned(12)>)"),
    13: ("leading control character", "[control](&#1;javascript:pwned(13))"),
    14: ("percent-encoded body", "[percent body](javascript:%70wned(14))"),
    15: ("vbscript:", "[vbscript](vbscript:pwned(15))"),
    16: ("data: text/html link", "[data link](data:text/html;base64,PHNjcmlwdD5wd25lZCgxNik8L3NjcmlwdD4=)"),
    17: ("autolink", "<javascript:pwned(17)>"),
    18: ("reference-style link", "[reference][r18]\n\n[r18]: javascript:pwned(18)"),
    19: ("reference with entities", "[reference entity][r19]\n\n[r19]: &#x6A;avascript&colon;pwned(19)"),
    20: ("shortcut reference", "[shortcut20]\n\n[shortcut20]: java&#x09;script:pwned(20)"),
    21: ("link title with quotes", '[title](https://ok.example/ "x\\" onmouseover=\\"pwned(21)")'),
    22: ("image alt with quotes", '![x" onerror="pwned(22)](missing.png)'),
    23: ("image with a script source", "![img](javascript:pwned(23))"),
    24: ("link inside a table", "| a |\n|---|\n| [cell](javascript&#58;pwned(24)) |"),
    # -- raw HTML: script schemes the HTML parser decodes ------------------------------------------------------------
    30: ("decimal entities", '<a href="&#106;&#97;&#118;&#97;&#115;&#99;&#114;&#105;&#112;&#116;&#58;pwned(30)">decimal</a>'),
    31: ("hex tab entity", '<a href="jav&#x09;ascript:pwned(31)">hex tab</a>'),
    32: ("leading control entity", '<a href=" &#14; javascript:pwned(32)">leading control</a>'),
    33: ("&colon; in an attribute", '<a href="javascript&colon;pwned(33)">colon entity</a>'),
    34: ("padded entity, no semicolon", '<a href="&#0000106avascript:pwned(34)">padded</a>'),
    35: ("raw newline in the scheme", '<a href="java\nscript:pwned(35)">newline</a>'),
    36: ("vbscript: attribute", '<a href="vbscript:pwned(36)">vb</a>'),
    37: ("data: link", '<a href="data:text/html,&lt;script&gt;pwned(37)&lt;/script&gt;">data</a>'),
    38: ("link around an image", '<a href="JAVASCRIPT:pwned(38)"><img src="data:image/png;base64,' + PNG_B64 + '">img</a>'),
    # -- event attributes and script elements ---------------------------------------------------------------------
    40: ("img onerror", "<img src=x onerror=pwned(40)>"),
    41: ("script element", "<script>pwned(41)</script>"),
    42: ("details ontoggle", "<details open ontoggle=pwned(42)><summary>s</summary>d</details>"),
    43: ("input autofocus onfocus", "<input autofocus onfocus=pwned(43)>"),
    44: ("onmouseover", '<a onmouseover=pwned(44) href="#top">hover</a>'),
    45: ("custom element onclick", "<x onclick=pwned(45)>custom element</x>"),
    46: ("marquee onstart", "<marquee onstart=pwned(46)>m</marquee>"),
    47: ("body onload", "<body onload=pwned(47)>"),
    48: ("audio onerror", "<audio src=x onerror=pwned(48)></audio>"),
    # -- SVG and MathML -------------------------------------------------------------------------------------------
    50: ("svg onload", "<svg onload=pwned(50)></svg>"),
    51: ("svg xlink:href", '<svg width="120" height="30"><a xlink:href="javascript:pwned(51)"><text x="5" y="20">svg link</text></a></svg>'),
    52: ("svg animate onbegin", "<svg><animate onbegin=pwned(52) attributeName=x dur=1s></animate></svg>"),
    53: ("svg animate href", '<svg width="120" height="30"><a><animate attributeName="href" values="javascript:pwned(53)"></animate><text x="5" y="20">animated</text></a></svg>'),
    54: ("svg script", "<svg><script>pwned(54)</script></svg>"),
    55: ("svg foreignObject", "<svg><foreignObject><img src=x onerror=pwned(55)></foreignObject></svg>"),
    56: ("math maction", '<math><maction actiontype="statusline" xlink:href="javascript:pwned(56)">math</maction></math>'),
    57: ("math mglyph style", "<math><mtext><table><mglyph><style><img src=x onerror=pwned(57)></style></mglyph>"
                              "</table></mtext></math>"),
    58: ("math href", '<math href="javascript:pwned(58)"><mi>x</mi></math>'),
    # -- frames, objects, forms, base, meta ----------------------------------------------------------------------
    60: ("iframe srcdoc", '<iframe srcdoc="&lt;script&gt;pwned(60)&lt;/script&gt;"></iframe>'),
    61: ("iframe javascript:", '<iframe src="javascript:pwned(61)"></iframe>'),
    62: ("iframe data:", '<iframe src="data:text/html,&lt;script&gt;pwned(62)&lt;/script&gt;"></iframe>'),
    63: ("object data:", '<object data="data:text/html,&lt;script&gt;pwned(63)&lt;/script&gt;"></object>'),
    64: ("embed svg", "<embed src=\"data:image/svg+xml,&lt;svg xmlns='http://www.w3.org/2000/svg' onload='pwned(64)'/&gt;\">"),
    65: ("form action", '<form action="javascript:pwned(65)"><button>send</button></form>'),
    66: ("button formaction", '<form><button formaction="javascript:pwned(66)">formaction</button></form>'),
    67: ("base href", '<base href="javascript:pwned(67)//"><a href="relative67">after base</a>'),
    68: ("meta refresh", '<meta http-equiv="refresh" content="0;url=javascript:pwned(68)">'),
    # -- comments, CDATA, raw-text breakouts --------------------------------------------------------------------
    70: ("comment breakout", "<!-- --><img src=x onerror=pwned(70)> -->"),
    71: ("short comment", "<!--><img src=x onerror=pwned(71)>-->"),
    72: ("CDATA", "<![CDATA[><img src=x onerror=pwned(72)>]]>"),
    73: ("noscript attribute", '<noscript><p title="</noscript><img src=x onerror=pwned(73)>"></noscript>'),
    74: ("textarea", "<textarea><img src=x onerror=pwned(74)></textarea>"),
    # -- style tricks and loads from elsewhere -------------------------------------------------------------------
    80: ("style @import", f'<style>@import "{ELSEWHERE}80.css";</style>'),
    81: ("style background url", f'<div style="background-image:url({ELSEWHERE}81.png)">styled</div>'),
    82: ("link stylesheet", f'<link rel="stylesheet" href="{ELSEWHERE}82.css">'),
    83: ("remote img", f'<img src="{ELSEWHERE}83.png">'),
    84: ("remote markdown image", f"![tracker]({ELSEWHERE}84.png)"),
    85: ("table background", f'<table background="{ELSEWHERE}85.png"><tr><td>t</td></tr></table>'),
    86: ("full-page overlay link", '<a href="https://ok.example/" style="position:fixed;top:0;left:0;width:100%;'
                                   'height:100%;z-index:9999;opacity:0.01">overlay</a>'),
    87: ("svg style @import", f'<svg><style>@import "{ELSEWHERE}87.css";</style></svg>'),
}

# seen in Debian's chromium (156) on nbgrader's formgrade and feedback templates with nbconvert as it comes: 49 of the
# corpus (with OUTPUT_RUNS) run, 6 load from elsewhere.  The others do not run even there: mistune percent-encodes a
# tab, newline or space inside a markdown link's scheme (7-9, 12, 20) and escapes quotes in titles and alt text
# (21, 22); chromium refuses vbscript:, top-level data: navigations, javascript: in <img>, <base> and meta refresh,
# and ignores MathML href and marquee's onstart.
RUNS = {1, 2, 3, 4, 5, 6, 10, 11, 13, 14, 17, 18, 19, 24, 30, 31, 32, 33, 34, 35, 38, 40, 41, 42, 43, 44, 45, 47, 48,
        50, 51, 52, 53, 54, 55, 60, 61, 62, 63, 64, 65, 66, 70, 71, 72}
LOADS = {80, 81, 82, 83, 84, 85}   # and 87 (an @import in an SVG's style), in some runs only

# what honest students write: it must still render after the sanitizer
HONEST = {
    "heading": "## My analysis of head 3",
    "emphasis": "The weights are *soft*, **not** hard, and ~~never~~ rarely one-hot.",
    "list": "- the query looks\n- the key offers\n  1. nested\n  2. numbered",
    "code": "Call `softmax(x, dim=-1)`:\n\n```python\ndef f(x):\n    return x.softmax(-1)  # rows sum to 1\n```",
    "table": "| head | entropy |\n|:-----|--------:|\n| 3 | 0.42 |\n| 5 | 1.70 |",
    "math": r"Scaled scores $s_{ij} = q_i \cdot k_j / \sqrt{d_k}$ and $$\sum_j a_{ij} = 1$$ with $x<y$ and $a_1 * b_2$.",
    "link": "See [the paper](https://arxiv.org/abs/1706.03762 \"Attention is all you need\") and <https://example.org/x>.",
    "mailto": "Questions: [mail me](mailto:student@example.org).",
    "inline image": f"![my plot](data:image/png;base64,{PNG_B64})",
    "attachment": "![attached plot](attachment:plot.png)",
    "quote": "> attention weights are evidence, not an explanation",
    "details": "<details><summary>My derivation</summary>\n\nThe softmax is <b>shift</b>-invariant, x<sub>i</sub> and x<sup>2</sup>.\n</details>",
    "in-page link": "Back to [the heading](#My-analysis-of-head-3).",
}

# a code cell whose outputs carry the payloads (run by the grading kernel; the submitted copy holds them too, as a
# student's saved notebook would): HTML, JavaScript, SVG, markdown and an "isolated" HTML output
OUTPUT_CELL = """from IPython.display import HTML, SVG, Javascript, Markdown, display
display(HTML("<img src=x onerror=pwned(90)><b>html output</b>"))
display(Javascript("pwned(91)"))
display(SVG('<svg xmlns="http://www.w3.org/2000/svg" onload="pwned(92)"><script>pwned(92)</script></svg>'))
display(Markdown("[markdown output](javascript&#58;pwned(93))"))
display(HTML("<script>pwned(94)</script>"), metadata={"isolated": True})
display({"image/png": "AAAA"}, raw=True, metadata={"image/png": {"width": "1 onerror=pwned(95)"}})
"""
# 91 needs the page's jQuery; 92 is shown as an <img> of the SVG; 95: the classic template writes an image's width
# unquoted, so the output's metadata adds an attribute to the <img>
OUTPUT_RUNS = {90, 93, 94, 95}


def output_cell():
    """OUTPUT_CELL with the outputs it makes (what the student's saved notebook holds)."""
    import nbformat

    cell = nbformat.v4.new_code_cell(OUTPUT_CELL)
    out = nbformat.v4.new_output
    cell.outputs = [
        out("display_data", data={"text/html": "<img src=x onerror=pwned(90)><b>html output</b>", "text/plain": "h"}),
        out("display_data", data={"application/javascript": "pwned(91)", "text/plain": "j"}),
        out("display_data", data={"image/svg+xml": '<svg xmlns="http://www.w3.org/2000/svg" onload="pwned(92)">'
                                                   '<script>pwned(92)</script></svg>', "text/plain": "s"}),
        out("display_data", data={"text/markdown": "[markdown output](javascript&#58;pwned(93))", "text/plain": "m"}),
        out("display_data", data={"text/html": "<script>pwned(94)</script>", "text/plain": "i"},
            metadata={"text/html": {"isolated": True}}),
        out("display_data", data={"image/png": "AAAA"}, metadata={"image/png": {"width": "1 onerror=pwned(95)"}}),
    ]
    cell.execution_count = 1
    return cell
