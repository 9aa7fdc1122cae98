"""Find-the-bug exercises (``Exercise(handout=<mistake key>)``, judge/handout.py).

In a scratch copy of the course, section 03's ``causal_mask`` is turned into a find-the-bug exercise
handing out its ``inverted`` mistake, then built and graded as an instructor would:

* the release and the self-study notebook show the mistake's code (markers dropped) in the solution
  cell, and not the stub, while the source keeps the correct code;
* the untouched release earns nothing on that exercise and its feedback names the handed-out bug;
  the instructor's notebook keeps full marks;
* the build refuses, in one line, a handout that is not a mistake of the exercise, and one that passes
  a case (an unfixed handout would earn points).

And for every section's handout (fast, no build): the bug must be found, not told —
* the handed-out code keeps no tell: no variable assigned and never read (02's handout once kept an unused
  ``d_k``), and 09's no longer saves the model's mode it never changes;
* the feedback on the untouched handout (its mistake's message) says what is wrong, never the fix: none of the
  words that gave the fix before ("multiply Q Kᵀ by d_k ** -0.5", "call model.eval()", ...).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.harness import ROOT, Course, cell_by_id, read_nb
from tests.sections import checks_of

SECTION = "03_masking"
pytestmark = [pytest.mark.xdist_group("handout")]


def _course(root, handout_line):
    root.mkdir()
    for name in ("source", "graders", "release", "notebooks"):
        shutil.copytree(ROOT / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "nbgrader_config.py", root / "nbgrader_config.py")
    spec = root / "graders" / f"s{SECTION}.py"
    text = spec.read_text()
    anchor = 'name="causal_mask", cell="causal_mask", reference=CAUSAL_REF,'
    assert anchor in text
    spec.write_text(text.replace(anchor, anchor + "\n    " + handout_line))
    return root


def _build(root, *extra):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "authoring.build", SECTION, "--root", str(root), *extra],
                          cwd=root, env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = _course(tmp_path_factory.mktemp("handout") / "course", 'handout="inverted",')
    p = _build(root, "--force")
    assert p.returncode == 0, p.stderr
    return root


@pytest.mark.slow
def test_release_shows_the_handout_and_the_source_keeps_the_fix(built):
    src = cell_by_id(read_nb(built / "source" / SECTION / f"{SECTION}.ipynb"), "causal_mask").source
    assert "### BEGIN SOLUTION" in src and "~torch.ones" not in src
    for folder in ("release", "notebooks"):
        shown = cell_by_id(read_nb(built / folder / SECTION / f"{SECTION}.ipynb"), "causal_mask").source
        assert "~torch.ones(T, T, dtype=torch.bool, device=device).tril()" in shown, shown
        assert "BEGIN SOLUTION" not in shown and "NotImplementedError" not in shown, shown


@pytest.mark.slow
def test_untouched_handout_earns_nothing_and_is_named(built):
    course = Course.open(built)
    source = read_nb(built / "source" / SECTION / f"{SECTION}.ipynb")
    course.submit("blank", SECTION, read_nb(built / "release" / SECTION / f"{SECTION}.ipynb"))
    course.submit("instructor", SECTION, source)
    course.autograde(SECTION)
    cells = checks_of(source, "causal_mask")
    blank, full = course.scores(SECTION, "blank"), course.scores(SECTION, "instructor")
    assert sum(full[c][1] for c in cells) > 0
    assert all(blank[c][0] == 0 for c in cells), {c: blank[c] for c in cells}
    assert all(full[c][0] == full[c][1] for c in full), full
    text = "\n".join(course.messages(SECTION, "blank")[c] for c in cells)
    assert "the mask is inverted" in text, text[-800:]


@pytest.mark.slow
@pytest.mark.parametrize("line, words", [
    ('handout="no_such_mistake",', "is not one of its mistakes"),
    ('handout="sees_next",', "passes the case 'T1'"),   # a 1 x 1 mask is the same with one future token seen
])
def test_build_refuses_a_handout_that_cannot_be_one(tmp_path, line, words):
    root = _course(tmp_path / "course", line)
    p = _build(root)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert words in lines[0], lines[0]


# ------------------------------------------------------------------------------------------------------------------
# Every section's handout: no tell in the code, no fix in the feedback.

def _handouts():
    from graders import available_sections, load_section

    out = []
    for section in available_sections():
        for ex in load_section(section).exercises:
            if ex.handout:
                out.append(pytest.param(section, ex, id=f"{section}:{ex.name}"))
    return out


def unused_names(code: str) -> set[str]:
    """Names a function of ``code`` assigns and never reads (a tell: the line that read it was removed)."""
    import ast

    unused = set()
    for fn in (n for n in ast.walk(ast.parse(code)) if isinstance(n, ast.FunctionDef)):
        stored = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        loaded = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        unused |= {name for name in stored - loaded if not name.startswith("_")}
    return unused


# What each handout's feedback said before: the fix, spelled out.  None may come back.
FIX_WORDS = {
    "fixed_attention": ["** -0.5", "math.sqrt", "K.size(-1)", "multiply", "not divided"],
    "fixed_causal_attention": ["-inf", "before the softmax", "masked_fill"],
    "fixed_merge_heads": ["transpose", "permute", "reshape"],
    "rope_rotate_half": ["instead of 2j", "pair index j", "2 * torch.arange"],
    "rms_norm": ["dim=-1", "dim=-2", "last axis", "wrong axis"],
    "received_attention": ["dim=2", "dim=3", "attn[l, h, :, j]", "query axis", "wrong axis"],
    "fixed_cached_sdpa": ["attn_mask", "is_causal", "tril(", "bottom-right", "top-left"],
    "evaluate_loss": ["model.eval", "eval()", "model.train(", "was_training", "eval mode"],
    "combine_partials": ["logaddexp", "torch.maximum", "log(e^"],
    "flash_forward_exp2": ["ln 2", "0.693", "multiply", "log2 e", "base-2", "base 2", "natural log"],
}

# The handouts' messages before this rule (two of them), and 02's handout with its unused d_k: each must be caught.
OLD_02_MESSAGE = ("the scores are not divided by √d_k: multiply Q Kᵀ by d_k ** -0.5 (or divide by math.sqrt(d_k)); "
                  "without it the softmax gets sharper the bigger d_k is.")
OLD_09_MESSAGE = ("the loss is measured in training mode: dropout still drops activations, so the number is random "
                  "and too high; call model.eval() before measuring (and restore the mode after).")
OLD_02_HANDOUT = '''
def fixed_attention(Q, K, V):
    d_k = K.size(-1)
    scores = torch.einsum("...qd,...kd->...qk", Q, K)
    weights = scores.softmax(dim=-1)
    return torch.einsum("...qk,...kv->...qv", weights, V)
'''


def tells_the_fix(message: str, exercise: str) -> list[str]:
    return [w for w in FIX_WORDS[exercise] if w.lower() in message.lower()]


def test_the_checks_catch_the_old_tells():
    """The pair for the two checks below: what the handouts showed and said before is caught."""
    assert unused_names(OLD_02_HANDOUT) == {"d_k"}
    assert tells_the_fix(OLD_02_MESSAGE, "fixed_attention")
    assert tells_the_fix(OLD_09_MESSAGE, "evaluate_loss")


@pytest.mark.parametrize("section, ex", _handouts())
def test_handout_has_no_tell_and_its_feedback_no_fix(section, ex):
    from authoring.references import handout_source

    assert ex.name in FIX_WORDS, f"{ex.name}: a new handout: list the words that would give its fix away"
    mistake = [m for m in ex.mistakes if m.key == ex.handout][0]
    code = handout_source(mistake.code)
    assert not unused_names(code), f"{ex.name}: the handout assigns and never reads {unused_names(code)}"
    if ".training" in code:   # 09's handout once saved the mode, restored it, and never changed it
        assert "eval()" in code or "train(False)" in code, f"{ex.name}: the handout saves a mode it never changes"
    shown = mistake.shows or mistake.message
    assert not tells_the_fix(shown, ex.name), f"{ex.name}: its feedback gives the fix: {tells_the_fix(shown, ex.name)}"
