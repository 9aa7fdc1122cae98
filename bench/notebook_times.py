"""How long each source notebook takes to execute top to bottom (a benchmark, not a test).

    .venv/bin/python -m bench.notebook_times [section ...]

Runs each instructor notebook (solutions and hidden tests in place) in a fresh
kernel, from a temporary copy of its folder, and prints wall-clock seconds:
kernel start-up and imports included, as a student experiences "Run All".
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
from attncourse.course import SECTIONS


def run(section: str) -> float:
    src = ROOT / "source" / section
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / section
        shutil.copytree(src, work, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "figures"))
        nb = nbformat.read(str(work / f"{section}.ipynb"), as_version=4)
        os.environ["ATTNCOURSE_ROOT"] = str(ROOT)
        start = time.perf_counter()
        NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(work)}}).execute()
        return time.perf_counter() - start


def main(argv):
    os.environ.setdefault("MPLBACKEND", "Agg")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    names = argv or [s for s in SECTIONS if (ROOT / "source" / s / f"{s}.ipynb").is_file()]
    print(f"{'section':<26} seconds")
    for name in names:
        print(f"{name:<26} {run(name):7.1f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
