"""Output caps (judge/output_caps.py): every output kind is capped per cell and per notebook as it arrives.

The unit tests feed kernel messages to IsolatedExecute's nbclient hooks; the end-to-end test grades, through
nbgrader's autograde, a section-02 submission whose solution cell floods display data and stdout, beside its
honest base (the same code without the flood).
"""
from __future__ import annotations

import base64

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from judge.output_caps import KEPT_SHORT, RESOURCES_KEY
from judge.preprocessors import IsolatedExecute, judge_cell
from attncourse.protocol.records import MIME

MB = 1_000_000
PNG = base64.b64encode(b"\x89PNG" + b"\0" * 300_000).decode()   # ~400 kB of base64


def client(**limits):
    ex = IsolatedExecute(**limits)
    ex.nb = new_notebook(cells=[new_code_cell("a"), new_code_cell("b")])
    ex.reset_execution_trackers()
    ex.clear_before_next_output = False
    ex.reset_caps()
    return ex


def feed(ex, msg_type, cell_index=0, **content):
    msg = {"msg_type": msg_type, "header": {"msg_type": msg_type}, "parent_header": {"msg_id": "p"},
           "metadata": {}, "content": content}
    cell = ex.nb.cells[cell_index]
    ex.process_message(msg, cell, cell_index)
    return cell.outputs


def image(ex, cell_index=0, png=PNG, **kw):
    return feed(ex, "display_data", cell_index, data={"image/png": png, "text/plain": "<Figure>"}, metadata={}, **kw)


def record(ex, cell_index=0, n=0, pad=0):
    rec = {"v": 1, "n": n, "exercise": "e", "case": "c", "pad": "x" * pad}
    return feed(ex, "display_data", cell_index, data={MIME: rec, "text/plain": "record"}, metadata={})


def markers(outs):
    return [o for o in outs if "output truncated by the grader" in str((o.get("data") or {}).get("text/plain", ""))]


def size(outs):
    return len(nbformat.writes(new_notebook(cells=[new_code_cell("", outputs=outs)])))


def test_images_past_the_cell_budget_are_dropped_with_one_marker():
    ex = client()
    for _ in range(2000):
        outs = image(ex)
    assert size(outs) < 5 * MB
    assert len(markers(outs)) == 1 and outs[-1] is markers(outs)[0]
    kept = len(outs) - 1
    assert kept == 4 * MB // (len(PNG) + len("<Figure>"))
    assert f"{2000 - kept} more outputs" in outs[-1].data["text/plain"]
    assert ex.caps_report()["dropped"][0][0] == 2000 - kept


def test_the_count_of_outputs_is_capped():
    ex = client(max_cell_outputs=10)
    for i in range(100):
        outs = feed(ex, "display_data", data={"text/plain": str(i)}, metadata={})
    assert len(outs) == 11 and "90 more outputs" in outs[-1].data["text/plain"]


def test_stream_chunks_merge_and_a_huge_print_is_cut():
    ex = client()
    for _ in range(1000):
        feed(ex, "stream", name="stdout", text="x" * 99 + "\n")
    outs = feed(ex, "stream", name="stdout", text="y" * 50 * MB)
    assert outs[0].output_type == "stream" and len(outs) == 2      # one merged stream + the marker
    assert len(outs[0].text) == 100_000 + ex.max_output_bytes        # the big chunk cut to one output's size
    assert len(markers(outs)) == 1
    feed(ex, "stream", name="stdout", text="more\n")                 # the cell is closed now
    assert len(outs[0].text) == 100_000 + ex.max_output_bytes


def test_an_oversized_image_is_dropped_whole():
    ex = client()
    outs = image(ex, png="A" * (3 * MB))
    assert [o.output_type for o in outs] == ["display_data"] and markers(outs)


def test_the_notebook_budget_spans_cells():
    ex = client(max_notebook_bytes=MB, max_cell_bytes=MB)
    for _ in range(2):
        image(ex, 0)
    outs = image(ex, 1)
    assert markers(outs) and len(outs) == 1


def test_clear_output_frees_the_budget():
    ex = client()
    for _ in range(500):        # an animation: clear, then draw
        feed(ex, "clear_output", wait=True)
        outs = image(ex)
    assert len(outs) == 1 and not markers(outs)
    for _ in range(100):
        feed(ex, "clear_output", wait=False)
        outs = image(ex)
    assert len(outs) == 1 and not markers(outs)


def test_display_updates_are_charged_for_every_output_they_rewrite():
    ex = client()
    for _ in range(20):
        image(ex, png="A", transient={"display_id": "d"})
    outs = feed(ex, "update_display_data", data={"image/png": "B" * 300_000}, metadata={}, transient={"display_id": "d"})
    assert all(o.data["image/png"] == "A" for o in outs[:20]) and markers(outs)   # 20 x 300 kB: refused


def test_first_error_and_stderr_survive_a_flood():
    ex = client()
    for _ in range(100):
        image(ex)
    feed(ex, "stream", name="stderr", text="warning " * 10_000)
    outs = feed(ex, "error", ename="ValueError", evalue="v" * MB, traceback=["line " * 1000] * 500)
    kinds = [(o.output_type, o.get("name")) for o in outs]
    assert ("stream", "stderr") in kinds and ("error", None) in kinds
    err = outs[-1]
    assert err.ename == "ValueError" and len(err.traceback) == 11 and len(err.evalue) <= KEPT_SHORT
    assert len(outs[-2].text) <= KEPT_SHORT
    feed(ex, "error", ename="E2", evalue="", traceback=[])
    assert outs[-1] is err                                            # only the first one is kept


def test_records_are_kept_past_the_output_budget():
    ex = client()
    for _ in range(100):
        image(ex)
    for n in range(3):
        outs = record(ex, n=n, pad=100_000)
    assert sum(MIME in o.get("data", {}) for o in outs) == 3
    assert not ex.caps_report()["records"]


def test_records_over_their_cap_name_the_cell_and_score_it_zero():
    ex = client(max_cell_records=5)
    for n in range(8):
        outs = record(ex, n=n)
    assert sum(MIME in o.get("data", {}) for o in outs) == 5 and not markers(outs)
    why = ex.caps_report()["records"][0]
    assert "more than 5 grader records" in why
    cell = ex.nb.cells[0]
    judge_cell(cell, [("e", "c")], {"cases": {}}, overflow=why)
    assert not any(MIME in o.get("data", {}) for o in cell.outputs)
    assert cell.outputs[-1].output_type == "error" and "tampering suspected" in cell.outputs[-1].evalue


def test_record_bytes_are_capped():
    ex = client(max_cell_record_bytes=MB)
    for n in range(3):
        record(ex, n=n, pad=400_000)
    assert "more than 1.0 MB" in ex.caps_report()["records"][0]


def test_widget_messages_are_ignored():
    ex = client()
    feed(ex, "comm_open", comm_id="w", target_name="jupyter.widget", data={"state": {"x": "y" * MB}})
    assert not ex.widget_state and not ex.comm_objects


# -- end to end: nbgrader autograde of a flooding submission beside its honest base ---------------------------
FLOOD = '''
import base64 as _b64
from IPython.display import Image as _Image, display as _display
_png = _b64.b64decode(_b64.b64encode(b"\\x89PNG\\r\\n\\x1a\\n" + bytes(750_000)))   # ~1 MB as base64
for _ in range({n}):
    _display(_Image(data=_png, format="png"))
print("y" * {mb} * 1_000_000)
'''


# nbgrader autograde, run so that it prints its own peak resident memory as it exits
PEAK_RSS = ("import atexit, resource, runpy; atexit.register(lambda: print('NBGRADER_MAXRSS_KB', "
            "resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)); runpy.run_module('nbgrader', run_name='__main__')")


@pytest.mark.xdist_group("output_caps")
def test_a_display_flood_is_capped_in_the_autograded_notebook(tmp_path):
    import re
    import subprocess
    import sys

    from instructor.config import check_config_loaded
    from tests.corpus._base import CORRECT
    from tests.harness import CORPUS_CELL, CORPUS_SECTION, Course, course_env, slim, with_cells

    section = CORPUS_SECTION
    course = Course(tmp_path / "course", [section])
    course.generate(section)
    source = slim(course.source_nb(section))
    course.submit("honest", section, with_cells(source, {CORPUS_CELL: CORRECT}))
    course.submit("flood", section, with_cells(source, {CORPUS_CELL: CORRECT + FLOOD.format(n=400, mb=20)}))
    proc = subprocess.run([sys.executable, "-c", PEAK_RSS, "autograde", section, "--create", "--force"],
                          cwd=course.root, env=course_env(), capture_output=True, text=True, timeout=1800)
    check_config_loaded(proc)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    peak_mb = int(re.search(r"NBGRADER_MAXRSS_KB (\d+)", proc.stdout).group(1)) / 1024
    path = course.root / "autograded" / "flood" / section / f"{section}.ipynb"
    mb = path.stat().st_size / MB
    print(f"autograded flood notebook: {mb:.1f} MB; nbgrader's peak RSS: {peak_mb:.0f} MB")
    assert mb < 30
    # 420 MB through the kernel's channel; uncapped, the notebook would hold it all (205 MB measured for 200 + 5)
    assert peak_mb < 1200      # ~350 MB with torch imported, plus one 20 MB message decoded at a time
    honest, flood = course.scores(section, "honest"), course.scores(section, "flood")
    assert honest == flood, (honest, flood)
    assert sum(s for s, _ in honest.values()) == sum(m for _, m in honest.values()) > 0
    nb = course.autograded_nb(section, "flood")
    assert any("output truncated by the grader" in str(o.get("data", {}).get("text/plain", ""))
               for c in nb.cells if c.cell_type == "code" for o in c.outputs)
