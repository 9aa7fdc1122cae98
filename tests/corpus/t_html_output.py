"""Puts HTML, JavaScript and SVG into its outputs and script into a markdown cell: formgrader and the feedback
HTML render the autograded notebook in the instructor's browser.  Every output keeps only text and raster
images, and markdown keeps a few harmless tags: no script runs there."""
from ._base import WRONG
BATCH, EXPECT, OTHERS = "tamper", "zero", True
SDPA = WRONG.replace("def scaled_dot_product_attention(", "def _wrong_sdpa(") + '''
from IPython.display import HTML, Javascript, display
def _show():
    display(HTML("<script>window.PWNED = 1</script><img src=x onerror='window.PWNED = 2'>"))
    display(Javascript("window.PWNED = 3"))
    display({"image/svg+xml": "<svg xmlns='http://www.w3.org/2000/svg' onload='window.PWNED = 4'/>",
             "text/html": "<iframe srcdoc='<script>parent.PWNED = 5</script>'></iframe>"}, raw=True)
_show()
def scaled_dot_product_attention(Q, K, V, mask=None):
    _show()
    return _wrong_sdpa(Q, K, V, mask)
'''
MARKDOWN = ("My notes <script>window.PWNED = 6</script> <img src=x onerror='window.PWNED = 7'>\n\n"
            "[click me](javascript:window.PWNED=8) and [this](java\tscript:window.PWNED=9)")
SHOWS = "Most likely cause"


def build(nb):
    import nbformat
    i = [k for k, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == "sdpa"][0]
    nb.cells.insert(i + 1, nbformat.v4.new_markdown_cell(MARKDOWN))
    return nb
