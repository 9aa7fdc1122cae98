"""Rewrites each record to claim the check ran on a GPU, whose TF32 tolerance (1e-2) would accept outputs
that are 0.1 % off: the judge knows where this machine runs each case and refuses the record."""
from ._base import CORRECT
BATCH, EXPECT, OTHERS = "tamper", "zero", False
ALMOST = CORRECT.replace("return weights @ V, weights", "return weights @ V * 1.001, weights * 1.001")
SDPA = ALMOST + '''
import attncourse.kernel.grader as _g
_real_publish = _g._publish_record
def _publish(record, text):
    if record.get("device") == "cpu":
        record["device"] = "cuda:0"
    _real_publish(record, text)
_g._publish_record = _publish
'''
BASE = "almost"
BASE_SDPA = ALMOST
SHOWS = "tampering suspected"
REASON = "reaches into the grader's modules"
