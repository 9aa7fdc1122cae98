"""judge/sanitize.py's markdown: what formgrader and the feedback HTML render of a student's markdown cell.

Each case is paired with the same markdown rendered without the sanitizer (nbconvert, as formgrader does): the
trick works there."""
from __future__ import annotations

import nbformat
import pytest

from judge.sanitize import safe_markdown

PNG = "data:image/png;base64,iVBORw0KGgo="


def render(markdown: str) -> str:
    from nbconvert import HTMLExporter

    cell = nbformat.v4.new_markdown_cell(markdown)
    cell.attachments = {"plot.png": {"image/png": PNG.split(",", 1)[1]}}
    nb = nbformat.v4.new_notebook(cells=[cell])
    return HTMLExporter(template_name="basic").from_notebook_node(nb)[0]


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
    assert "<img" in render(markdown) and url in render(markdown)      # the pairing: unsanitized, it loads
    safe = render(safe_markdown(markdown))
    assert not any(url in tag for tag in safe.split("<img")[1:]), safe


@pytest.mark.parametrize("markdown", [f"![plot]({PNG})", "![plot](attachment:plot.png)", f"<img src='{PNG}'>"])
def test_inline_images_stay(markdown):
    assert "<img" in render(safe_markdown(markdown))


def test_a_remote_image_becomes_a_link_to_it():
    safe = safe_markdown("see ![my figure](https://example.org/fig.png)")
    assert safe == "see [my figure](https://example.org/fig.png)"
