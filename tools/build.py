"""One command per section, from the edited source to everything generated: ``./course build NN [NN ...]``.

For each section (``02`` or ``02_qkv_by_hand``; ``all`` for every section):

1. ``tools/authoring/sNN_name.py`` writes ``source/NN_name/NN_name.ipynb`` (the authoring script is
   the one edited source of the notebook's prose and cells; the notebook is generated from it);
2. ``graders/build.py`` rebuilds ``graders/data/NN_name.pt`` from ``graders/sNN_name.py``
   (hidden inputs, references, known mistakes' outputs);
3. ``nbgrader generate_assignment`` writes ``release/NN_name/`` and ``tools/generate.py`` the
   self-study copy in ``notebooks/``.

The test suite fails when any of the three is out of date (tests/test_repo.py, tests/test_gates.py,
tests/test_selfcheck.py).
"""
from __future__ import annotations

import runpy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attncourse.course import SECTIONS  # noqa: E402


def resolve(name: str) -> list[str]:
    if name == "all":
        return list(SECTIONS)
    if name in SECTIONS:
        return [name]
    match = [s for s in SECTIONS if s.startswith(name.zfill(2))]
    if len(match) != 1:
        raise SystemExit(f"unknown section {name!r}; one of: all, {', '.join(SECTIONS)}")
    return match


def build(section: str) -> None:
    import os

    from graders.build import write_section
    from tools.generate import generate_release, generate_selfstudy

    os.chdir(ROOT)  # the authoring scripts write source/ relative to the course root
    runpy.run_module(f"tools.authoring.s{section}", run_name="__main__")
    print(f"  wrote {write_section(section, log=lambda *a: None)}")
    generate_release(section)
    generate_selfstudy(section)


def main(argv=None) -> int:
    names = argv if argv is not None else sys.argv[1:]
    if not names:
        print(__doc__.split("\n\n")[0])
        return 2
    for name in names:
        for section in resolve(name):
            print(f"building {section}")
            build(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
