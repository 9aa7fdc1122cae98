"""The course's sections and how a section is named on a command line (the environment nbgrader runs in is the
judge's: :mod:`judge.environment`)."""
from __future__ import annotations

import os

SECTIONS = [
    "01_tokens",
    "02_qkv_by_hand",
    "03_masking",
    "04_multi_head",
    "05_positional_encoding",
    "06_transformer_block",
    "07_bert_probe",
    "08_train_and_generate",
    "09_language_model",
    "10_efficient_attention",
    "11_flash_attention_triton",
]

# What a section needs beyond every section's packages: a module that requirements.txt installs on some platforms
# only (Triton has wheels for Linux alone). Where it is missing, the section's tests skip, saying why.
NEEDS = {"11_flash_attention_triton": "triton"}

def resolve_section(name: str) -> str:
    """A section from a command line: its full name, or its number (``2``, ``02``) or a prefix of one name.

    Raises ValueError, whose message lists the sections, when ``name`` names none or several.
    """
    name = str(name).strip()
    if name in SECTIONS:
        return name
    key = name.zfill(2) if name.isdigit() else name
    match = [s for s in SECTIONS if s.startswith(key)]
    if len(match) != 1:
        raise ValueError(f"unknown section {name!r}; one of {', '.join(SECTIONS)}")
    return match[0]


# The self-study learner's own copies of notebooks/ (``./course lab`` makes them): generated files are never edited
# by hand, so ``./course build`` and the tests cannot clash with saved work. tools/course.py and .gitignore name it too.
LEARNER_FOLDER = "work"


def learner_notebook(root, section: str, cwd=None):
    """The notebook a self-check grades when none is named: the one beside the running kernel when that is a copy in
    work/ or notebooks/ (Jupyter starts a notebook's kernel in its folder), else the learner's copy in work/, else
    the generated one in notebooks/."""
    from pathlib import Path

    root, name = Path(root).resolve(), f"{section}.ipynb"
    here = Path(cwd or os.getcwd()).resolve()
    if (here / name).is_file() and here.name == section and here.parent in (root / LEARNER_FOLDER, root / "notebooks"):
        return here / name
    mine = root / LEARNER_FOLDER / section / name
    return mine if mine.is_file() else root / "notebooks" / section / name


def missing_requirement(section: str) -> str | None:
    """Why ``section`` cannot run here (a module it needs is not installed: :data:`NEEDS`), or None."""
    import importlib.util

    module = NEEDS.get(section)
    if module and importlib.util.find_spec(module) is None:
        return (f"{section} needs the package {module}, which is not installed here (requirements.txt installs it "
                "on Linux only: it has no wheels for macOS or Windows)")
    return None


def judge_home(root) -> str | None:
    """The folder holding the course's ``judge/``: ``root`` when it does, else the checkout this package lives in
    (an editable install), else None (a student's installed wheel: no judge)."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for folder in (str(root), here):
        if os.path.isfile(os.path.join(folder, "judge", "selfcheck.py")):
            return folder
    return None
