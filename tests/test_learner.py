"""The self-study learner works in work/, a copy of notebooks/ that ./course lab makes: building the course and
testing it never touch it, and ./course check grades it."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from attncourse.course import LEARNER_FOLDER, learner_notebook
from tests.harness import ROOT
from tools.course import LEARNER, edited_in_notebooks, learner_copy

SECTION = "02_qkv_by_hand"


def _notebooks(root, *sections):
    for s in sections:
        (root / "notebooks" / s).mkdir(parents=True)
        (root / "notebooks" / s / f"{s}.ipynb").write_text(f'{{"generated": "{s}"}}')
    (root / "notebooks" / "README.md").write_text("generated")


def test_the_learner_folder_is_named_once_for_the_command_and_the_check():
    assert LEARNER == LEARNER_FOLDER == "work"
    assert f"/{LEARNER}/" in (ROOT / ".gitignore").read_text().splitlines()


def test_lab_copies_each_section_once_and_never_over_the_learners_work(tmp_path):
    _notebooks(tmp_path, "01_tokens", SECTION)
    assert learner_copy(tmp_path) == ["01_tokens", SECTION]
    mine = tmp_path / LEARNER / SECTION / f"{SECTION}.ipynb"
    assert mine.read_text() == f'{{"generated": "{SECTION}"}}'
    mine.write_text('{"my": "answer"}')
    (tmp_path / LEARNER / "01_tokens").rename(tmp_path / LEARNER / "01_tokens.old")   # the learner starts 01 over
    _notebooks(tmp_path, "03_masking")                                                   # a new section appears
    assert learner_copy(tmp_path) == ["01_tokens", "03_masking"]
    assert mine.read_text() == '{"my": "answer"}'
    assert learner_copy(tmp_path) == []
    assert "./course lab" in (tmp_path / LEARNER / "README.md").read_text()


def test_lab_names_work_saved_in_the_generated_folder(tmp_path):
    """A learner who followed the old README saved their work in notebooks/: ./course lab copies it to work/ and
    names the sections whose notebooks/ copy is not what the build wrote (the build would refuse them)."""
    import hashlib

    _notebooks(tmp_path, "01_tokens", SECTION)
    (tmp_path / "graders" / "data").mkdir(parents=True)
    for s in ("01_tokens", SECTION):
        built = hashlib.sha256(f'{{"generated": "{s}"}}'.encode()).hexdigest()
        (tmp_path / "graders" / "data" / f"{s}.build.json").write_text(json.dumps({"notebooks": built}))
    assert edited_in_notebooks(tmp_path, ["01_tokens", SECTION]) == []
    (tmp_path / "notebooks" / SECTION / f"{SECTION}.ipynb").write_text('{"my": "answer"}')
    assert edited_in_notebooks(tmp_path, ["01_tokens", SECTION]) == [SECTION]
    learner_copy(tmp_path)
    assert (tmp_path / LEARNER / SECTION / f"{SECTION}.ipynb").read_text() == '{"my": "answer"}'


def test_check_grades_the_learners_copy(tmp_path):
    """With no notebook named, the self-check grades: the copy beside the kernel (a notebook checks itself, in work/
    or in notebooks/), else the learner's copy in work/, else the generated one; never another folder's file."""
    _notebooks(tmp_path, SECTION)
    generated = tmp_path / "notebooks" / SECTION / f"{SECTION}.ipynb"
    assert learner_notebook(tmp_path, SECTION, cwd=tmp_path) == generated
    learner_copy(tmp_path)
    mine = tmp_path / LEARNER / SECTION / f"{SECTION}.ipynb"
    assert learner_notebook(tmp_path, SECTION, cwd=tmp_path) == mine                    # ./course check NN
    assert learner_notebook(tmp_path, SECTION, cwd=mine.parent) == mine                 # check() in work/
    assert learner_notebook(tmp_path, SECTION, cwd=generated.parent) == generated       # check() in notebooks/
    other = tmp_path / "elsewhere" / SECTION
    other.mkdir(parents=True)
    (other / f"{SECTION}.ipynb").write_text("{}")
    assert learner_notebook(tmp_path, SECTION, cwd=other) == mine


@pytest.mark.e2e
@pytest.mark.slow   # two builds of a section: 30 s
def test_the_learners_work_survives_a_build_and_the_drift_test(tmp_path):
    """Work saved in work/ (an answer, outputs): ./course build succeeds and leaves it as saved, and the generated
    files still match their stamp (what tests/test_repo.py checks). The pairing: the same save in notebooks/, where
    README used to send learners, makes the build refuse."""
    import nbformat

    root = tmp_path / "course"
    root.mkdir()
    for name in ("source", "graders", "release", "notebooks"):
        shutil.copytree(ROOT / name, root / name, ignore=shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints"))
    shutil.copy(ROOT / "nbgrader_config.py", root / "nbgrader_config.py")
    learner_copy(root)
    mine = root / LEARNER / SECTION / f"{SECTION}.ipynb"
    nb = nbformat.read(str(mine), as_version=4)
    answer = next(c for c in nb.cells if c.cell_type == "code" and "YOUR CODE HERE" in c.source)
    answer.source = re.sub(r"raise NotImplementedError\(.*?\)", "pass  # my answer", answer.source, flags=re.S)
    assert "my answer" in answer.source
    nbformat.write(nb, str(mine))
    saved = mine.read_bytes()

    def build():
        return subprocess.run([sys.executable, "-m", "authoring.build", SECTION, "--root", str(root)], cwd=root,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                              text=True, timeout=600)

    p = build()
    assert p.returncode == 0, p.stdout + p.stderr
    assert mine.read_bytes() == saved
    stamp = json.loads((root / "graders" / "data" / f"{SECTION}.build.json").read_text())
    generated = root / "notebooks" / SECTION / f"{SECTION}.ipynb"
    assert hashlib.sha256(generated.read_bytes()).hexdigest() == stamp["notebooks"]
    # the pairing: the learner's save in the generated folder
    shutil.copy(mine, generated)
    p = build()
    assert p.returncode == 2 and "edited by hand" in p.stderr, p.stdout + p.stderr
    assert generated.read_bytes() == saved   # (and the build keeps it)
