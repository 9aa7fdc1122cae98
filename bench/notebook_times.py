"""How long each source notebook takes to execute top to bottom (a benchmark, not a test).

    .venv/bin/python -m bench.notebook_times [section ...]

Runs each instructor notebook (solutions and hidden tests in place) in a fresh
kernel, from a temporary copy of its folder, and prints wall-clock seconds:
kernel start-up and imports included, as a student experiences "Run All"
(every cell, the ones grading skips too: authoring/run_all.py).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
from attncourse.course import SECTIONS
from authoring.run_all import run_all


def run(section: str) -> float:
    return run_all(section, ROOT, timeout=300)[1]


def main(argv):
    os.environ.setdefault("MPLBACKEND", "Agg")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    names = argv or [s for s in SECTIONS if (ROOT / "source" / s / f"{s}.ipynb").is_file()]
    print(f"{'section':<26} seconds")
    for name in names:
        print(f"{name:<26} {run(name):7.1f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
