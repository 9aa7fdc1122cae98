"""Run a section's source notebook top to bottom, every cell — what a student's "Run All" does.

Grading skips the cells tagged ``skip-when-grading`` (:data:`judge.preprocessors.SKIP_TAG`: demonstrations
no graded cell needs, such as 09's training run); this runs them too, so that their outputs (the numbers the
prose quotes) can be read and timed.  Used by ``bench/notebook_times.py`` and the prose-numbers gate.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]


def run_all(section: str, root: Path = ROOT, timeout: int = 600):
    """Execute ``root/source/<section>`` in a fresh kernel from a temporary copy of its folder.

    Returns ``(notebook with outputs, seconds)``; kernel start-up and imports count, as for a student.
    """
    src = Path(root) / "source" / section
    env = {"ATTNCOURSE_ROOT": str(root), "MPLBACKEND": os.environ.get("MPLBACKEND", "Agg"),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp) / section
            shutil.copytree(src, work, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "figures"))
            nb = nbformat.read(str(work / f"{section}.ipynb"), as_version=4)
            start = time.perf_counter()
            NotebookClient(nb, timeout=timeout, kernel_name="python3", skip_cells_with_tag="",
                           resources={"metadata": {"path": str(work)}}).execute()
            return nb, time.perf_counter() - start
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
