"""Tampering earns nothing: tests/corpus/t_*.py graded as real submissions in one nbgrader batch.

Each submission tries to trick the hidden checks of scaled_dot_product_attention
(section 02) — replaced comparisons and builtins, lying tensor subclasses and
objects, monkeypatched torch.Tensor, a rebound or faked GRADER, deleted/edited test
and setup cells, SystemExit/os._exit, fake "✓" text and planted verdicts, expected outputs taken from the
grader's memory, stack frames or files, a patched grader instance or in-kernel judge,
forged records, a hand value copied from the grader — and must score 0 there, while a
correct submission in the same batch keeps full marks.  Each trick is also paired with
its honest base (the same code without the trick): the trick adds zero marks, cell by cell.
"""
from __future__ import annotations

import functools
import os

import pytest

from tests.harness import base_student, corpus_problems, grade_corpus, pairing_problems

pytestmark = pytest.mark.xdist_group("corpus_tamper")


@functools.lru_cache(maxsize=None)
def _batch(tmp):
    from pathlib import Path

    return grade_corpus("tamper", Path(tmp) / "tamper")


@pytest.fixture
def batch(tmp_path_factory):
    return _batch(str(tmp_path_factory.getbasetemp()))


def _judged(batch):
    """The tricks this run can prove: those that need the sandbox only when kernels ran sandboxed."""
    _, _, cases, report = batch
    return {n: m for n, m in cases.items() if report["sandboxed"] or not getattr(m, "NEEDS_SANDBOX", False)}


@pytest.mark.slow
def test_tampering_earns_nothing(batch):
    course, source, cases, report = batch
    assert len(cases) >= 18
    problems = corpus_problems(source, _judged(batch), report, course)
    assert not problems, "\n".join(problems)


@pytest.mark.slow
def test_each_trick_adds_zero_marks_to_its_honest_base(batch):
    """Paired: the same code without the trick scores at least as much, cell by cell."""
    _, _, cases, report = batch
    judged = _judged(batch)
    problems = pairing_problems(judged, report)
    assert not problems, "\n".join(problems)
    # the pairing can fail: a base that is graded and earns something somewhere
    bases = {base_student(m) for m in judged.values()}
    assert all(report["students"][b]["cells"] for b in bases), bases


@pytest.mark.slow
def test_reading_the_reference_from_disk_needs_the_sandbox(batch):
    """Kernels run sandboxed wherever bwrap works, and then the reference file is out of reach."""
    _, _, cases, report = batch
    if not report["sandboxed"]:
        pytest.skip(f"not provable here: {report['sandbox']}")
    assert "t_disk_reference" in _judged(batch)


@pytest.mark.slow
def test_no_kernel_leaves_a_file_in_the_package_or_python(batch):
    """t_remount's marker (a remount of the read-only package and site-packages, then a write) is nowhere."""
    import site

    import attncourse
    from tests.corpus.t_remount import MARKER

    _, _, _, report = batch
    if not report["sandboxed"]:
        pytest.skip(f"not provable here: {report['sandbox']}")
    found = [os.path.join(d, MARKER) for d in [os.path.dirname(attncourse.__file__)] + site.getsitepackages()
             if os.path.exists(os.path.join(d, MARKER))]
    for path in found:
        os.remove(path)   # so that one failure does not leave the checkout changed
    assert not found, found


@pytest.mark.slow
def test_report_flags_tampering(batch):
    _, _, cases, report = batch
    unflagged = [n for n in cases if not any("tampering suspected" in r for r in report["students"][n]["reasons"])
                 and n not in ("t_system_exit", "t_os_exit", "t_big_files")]
    assert not unflagged, unflagged
    assert not any("tampering" in r for r in report["students"]["correct"]["reasons"])


@pytest.mark.slow
def test_no_trick_touches_other_students_or_the_gradebook(batch):
    """Links planted in a submission or by a kernel: every submission and the gradebook are as they were."""
    from tests.harness import tree_hashes

    course, _, _, report = batch
    assert tree_hashes(course.root / "submitted") == course.submitted_before
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course.root / 'gradebook.db'}") as gb:
        graded = {s.student.id for s in gb.find_assignment("02_qkv_by_hand").submissions}
    assert graded >= set(report["students"]) - {"t_renamed"}, set(report["students"]) - graded
    assert os.access(course.root / "gradebook.db", os.W_OK)
    victim = course.autograded_nb("02_qkv_by_hand", "correct")          # still the victim's own notebook
    assert report["students"]["correct"]["score"] == report["students"]["correct"]["max_score"]
    assert any("GRADER.check" in c.source for c in victim.cells)


@pytest.mark.slow
def test_nothing_a_kernel_writes_comes_back(batch):
    """Only the notebook (and what the student submitted, regular files only) is in autograded/."""
    course, _, cases, report = batch
    for name in cases:
        folder = course.root / "autograded" / name / "02_qkv_by_hand"
        if not folder.is_dir():
            continue
        names = sorted(p.name for p in folder.iterdir())
        assert set(names) <= {"02_qkv_by_hand.ipynb", "timestamp.txt"}, (name, names)
        assert not any(p.is_symlink() for p in folder.rglob("*")), name
        assert sum(p.stat().st_size for p in folder.rglob("*")) < 5_000_000, name


SAFE = {"text/plain", "image/png", "image/jpeg", "image/gif"}


@pytest.mark.slow
def test_outputs_shown_to_instructors_are_safe(batch):
    """No HTML, JavaScript or SVG from grading in the autograded notebook; no script in the feedback page."""
    import re
    from html.parser import HTMLParser

    course, _, _, _ = batch
    section = "02_qkv_by_hand"
    from judge.autograded import KEY

    nb = course.autograded_nb(section, "t_html_output")
    for cell in nb.cells:
        for i, o in enumerate(cell.get("outputs", [])):
            assert set(o.get("data", {})) <= SAFE, o.get("data", {}).keys()
            if cell.metadata.get("nbgrader", {}).get("grade") and o["output_type"] == "execute_result":
                # the one execute_result of a grade cell is the judge's score, its last output
                assert i == len(cell.outputs) - 1 and float(o["data"]["text/plain"]) == cell.metadata[KEY]["score"]
    course.nbgrader("generate_feedback", section, "--student=t_html_output", "--force")
    page = (course.root / "feedback" / "t_html_output" / section / f"{section}.html").read_text()

    class Scripts(HTMLParser):
        bad: list = []
        in_script = False

        def handle_starttag(self, tag, attrs):
            self.in_script = tag == "script"
            for k, v in attrs:
                url = re.sub(r"[\t\n\r]", "", v or "")          # what a browser drops from a URL
                scheme = re.match(r"\s*([a-zA-Z][a-zA-Z0-9+.-]*):", url)
                if k.startswith("on") or k == "srcdoc" or (
                        k in ("href", "src") and scheme and scheme.group(1).lower() not in ("http", "https", "data")):
                    self.bad.append((tag, k, v))

        def handle_data(self, data):
            if self.in_script and "PWNED" in data:
                self.bad.append(("script", data[:80]))

    parser = Scripts()
    parser.feed(page)
    assert not parser.bad, parser.bad
    assert "My notes" in page      # the student's markdown is shown, as text


def test_honest_code_raises_no_flag():
    """The source scan never flags a reference solution, a known mistake, a correct variant or a shortcut (a library
    call in plain sight) of any section."""
    import re

    from graders import available_sections, load_section
    from instructor.prescan import TAMPER_PATTERNS, ast_flags

    flagged = []
    for section in available_sections():
        for ex in load_section(section).exercises:
            for code in ([ex.reference or ""] + [m.code for m in ex.mistakes] + [v.code for v in ex.variants]
                         + [c.code for c in ex.shortcuts]):
                hits = ast_flags(code) + [why for pat, why in TAMPER_PATTERNS if re.search(pat, code)]
                if hits:
                    flagged.append((section, ex.name, hits))
    assert not flagged, flagged
