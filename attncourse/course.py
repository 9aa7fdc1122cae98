"""The course's sections, how a section is named on a command line, and the environment nbgrader runs in."""
from __future__ import annotations

import os
import sys

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

# The course settings a grading run passes on to nbgrader and its kernels' launcher.
GRADING_KEEP = ("ATTNCOURSE_KERNEL_MEM_MB", "ATTNCOURSE_KERNEL_TMP_MB", "ATTNCOURSE_KERNEL_TASKS", "ATTNCOURSE_SANDBOX",
                "ATTNCOURSE_BWRAP", "ATTNCOURSE_CHECK_TIMEOUT")


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


def with_python_bin(path: str | None = None) -> str:
    """``path`` (default: $PATH) with this Python's bin folder first: nbgrader runs ``alembic`` and ``jupyter``
    from PATH, and a venv that is not activated would otherwise not be found."""
    path = os.environ.get("PATH", "") if path is None else path
    bindir = os.path.dirname(sys.executable)
    parts = [p for p in path.split(os.pathsep) if p]
    return os.pathsep.join([bindir] + [p for p in parts if p != bindir])


def grading_env(keep=(), extra=None) -> dict:
    """The environment for an nbgrader subprocess (generate, autograde) and the kernels' launcher.

    Drops the parent Jupyter server's ``JPY_*``/``JUPYTER_*`` variables and the
    course's ``ATTNCOURSE_*`` settings except the names in ``keep``; puts this
    Python's bin folder first on PATH; silences warnings (a warning on stderr would
    score a test cell 0); draws off-screen; keeps transformers offline.  ``extra``
    is applied last.  (The kernels themselves get an allow-listed part of it:
    :func:`judge.sandbox.kernel_env`.)
    """
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("JPY_", "JUPYTER_")) and (not k.startswith("ATTNCOURSE_") or k in keep)}
    env["PATH"] = with_python_bin(env.get("PATH", ""))
    env.update({"PYTHONWARNINGS": "ignore", "MPLBACKEND": "Agg", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    # Kernels that grade side by side (Dask workers, a busy machine) share the cores: torch's OpenMP threads
    # must sleep, not spin, while they wait (bench/omp_wait.py: 3 processes on 2 cores, 230 s each spinning
    # vs 5 s sleeping). The wait policy changes no result (the same threads split the same work).
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    env.update(extra or {})
    return env
