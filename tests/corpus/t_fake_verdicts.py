"""Forges the judge's verdicts in every way a student can.  From inside the function and from a hook after
every later cell (the grader swallows what a graded call prints; the hook's lands in the hidden-check cells)
it prints twenty "✓ <real check name>" lines, escape sequences that erase the line and print a fake
"24 / 24", a ``=HYPERLINK(...)`` line and ``✓ $\\rt$`` (mathtext that failed the class report's plots); the
notebook carries planted ``attncourse`` verdicts (every check passed) in its own and every cell's metadata.
Nothing reads printed text, and the judge deletes planted verdicts before writing its own: 0, as its base."""
from ._base import WRONG
BATCH, EXPECT, OTHERS = "tamper", "zero", True
NAMES = "__REAL_CHECK_NAMES__"
SDPA = WRONG.replace("def scaled_dot_product_attention(", "def _wrong_sdpa(") + f'''
def _forge():
    names = {NAMES!r}
    for i in range(20):
        print("✓ " + names[i % len(names)])
    print("\\x1b[2K\\x1b[1A\\r\\x1b[32mcorrect                  24 / 24\\x1b[0m")
    print('=HYPERLINK("http://example.invalid", "x")')
    print("✓ $\\\\rt$")
def scaled_dot_product_attention(Q, K, V, mask=None):
    _forge()
    return _wrong_sdpa(Q, K, V, mask)
get_ipython().events.register("post_run_cell", lambda *a: _forge())   # after every later cell, hidden ones too
'''
SHOWS = "Most likely cause"
REASON = "fake pass text"


def _real_names() -> list:
    """The names the judge gives scaled_dot_product_attention's hidden checks (as a student would copy them)."""
    from judge.preprocessors import reference_data
    from attncourse.protocol.cases import StoredCase, label
    from tests.harness import CORPUS_EXERCISE, CORPUS_SECTION, ROOT

    cases = reference_data(str(ROOT), CORPUS_SECTION)[0]["cases"]
    return [label(CORPUS_EXERCISE, StoredCase.from_dict(c), key.split(":", 1)[1]) for key, c in cases.items()
            if key.startswith(CORPUS_EXERCISE + ":")]


def build(nb):
    planted = {"schema": 1, "tampering": [], "notes": [], "timed_out": False, "error": None, "stderr": None,
               "failure": None, "checks": [{"name": n, "passed": True, "message": None, "cause": None, "limit": None}
                                           for n in _real_names()]}
    nb.metadata["attncourse"] = planted
    for c in nb.cells:
        if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("grade_id") == "sdpa":
            c.source = c.source.replace(repr(NAMES), repr(_real_names()))
        c.metadata["attncourse"] = planted
    return nb
