"""Regenerate the student release (and the self-study edition) from ``source/``.

``./course generate`` runs ``nbgrader generate_assignment`` for every section
that has a source notebook, writing ``release/<section>/``.  Never edit
``release/`` or ``notebooks/`` by hand: a test fails when they drift.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attncourse.course import SECTIONS  # noqa: E402


def sections_with_source():
    return [s for s in SECTIONS if (ROOT / "source" / s / f"{s}.ipynb").is_file()]


def generate_release(section: str) -> None:
    subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", section, "--force"],
                   cwd=ROOT, check=True, capture_output=True, text=True)
    print(f"release/{section}")


def main(argv=None):
    names = (argv if argv is not None else sys.argv[1:]) or sections_with_source()
    for name in names:
        generate_release(name)


if __name__ == "__main__":
    main()
