"""Reads the instructor's reference file from disk: the sandboxed kernel cannot see it."""
from ._base import FINDER, WRONG
BATCH, EXPECT, OTHERS = "tamper", "zero", True
NEEDS_SANDBOX = True   # without bubblewrap a kernel can read any file its account can (stated in the report)
SDPA = WRONG + '''
import os, glob, torch
def _holders():
    roots = [os.environ.get("ATTNCOURSE_ROOT", ""), os.getcwd()]
    here = os.getcwd()
    while here != os.path.dirname(here):
        roots.append(here)
        here = os.path.dirname(here)
    try:
        import attncourse.kernel.grader as g
        roots.append(str(g.find_course_root() or ""))
    except Exception:
        pass
    out = []
    for r in roots:
        for p in glob.glob(os.path.join(r, "graders", "data", "*.pt")) + glob.glob(os.path.join(r, ".attncourse*")):
            try:
                data = torch.load(p, weights_only=True)
                out += list(data.get("cases", {}).values())
            except Exception:
                pass
    return out
''' + FINDER
SHOWS = "Most likely cause"
REASON = "reaches into the grader's modules"
