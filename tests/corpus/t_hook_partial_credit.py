"""A blank release plus one IPython hook that puts an execute_result at the top of every later cell.

Before the judge set what nbgrader scores, this scored 21/21 (nbgrader's partial credit: the first
execute_result of a test cell is its score, and text that is not a number is full marks).
"""
BATCH, EXPECT = "tamper", "nothing"
FROM = "release"     # the student release: every other solution cell is a stub
HOOK = '''
_ip = get_ipython()
def _claim(*args, **kwargs):
    _ip.displayhook("full marks")      # an execute_result at the top of the cell about to run
_ip.events.register("pre_run_cell", _claim)
'''


def build(nb):
    from ._base import set_cell
    stub = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "sdpa"][0].source
    return set_cell(nb, "sdpa", HOOK + stub)


def base(nb):
    return nb        # the blank release itself


BASE = "blank"
REASON = "uses IPython internals"
