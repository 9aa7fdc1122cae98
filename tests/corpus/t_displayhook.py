"""The graded function calls sys.displayhook: an execute_result in every test cell that calls it.

nbgrader reads the first execute_result of a test cell as its score ("partial credit", any text that is not
a number = full marks); the judge turns every execute_result of a grade cell into plain display data.
"""
from ._base import WRONG
BATCH, EXPECT, OTHERS = "tamper", "zero", True
SDPA = WRONG.replace("def scaled_dot_product_attention(", "def _wrong_sdpa(") + '''
import sys
def scaled_dot_product_attention(Q, K, V, mask=None):
    sys.displayhook("full marks")  # nbgrader: text that is not a number = full marks for the cell
    return _wrong_sdpa(Q, K, V, mask)
'''
SHOWS = "Most likely cause"
REASON = "sys.displayhook"
