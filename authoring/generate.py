"""Regenerate the student release (and the self-study edition) from ``source/``.

``./course build`` (:mod:`authoring.build`) calls these for each section it builds:
``nbgrader generate_assignment`` writes ``release/<section>/`` and the self-study copy
``notebooks/<section>/``.  Never edit ``release/`` or ``notebooks/`` by hand: a test fails when they drift.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from attncourse.course import SECTIONS
from judge.environment import grading_env

ROOT = Path(__file__).resolve().parents[1]


def sections_with_source(root: Path = ROOT):
    return [s for s in SECTIONS if (Path(root) / "source" / s / f"{s}.ipynb").is_file()]


def generate_release(section: str, root: Path = ROOT) -> None:
    p = subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", section, "--force"],
                       cwd=root, capture_output=True, text=True, env=grading_env())
    if p.returncode != 0:
        raise RuntimeError(f"nbgrader generate_assignment {section} failed:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    print(f"  wrote release/{section}")


CHECK_MD = ("## Check my work\n\n"
            "**While you work**, the first cell below checks what this kernel holds *now* — the functions and "
            "classes of the cells you ran — against the hidden tests, in about a second; nothing is re-run or "
            "saved. For one exercise: `check_now(\"{section}\", \"name\")`.\n\n"
            "**For the grade**, the second cell grades the **saved** file (Ctrl+S / ⌘S first) as an instructor "
            "would: a fresh kernel runs the notebook top to bottom in a temporary copy (training cells skipped), "
            "offline, and prints the points per exercise and what to fix. From a shell: `./course check {num}`.")
CHECK_NOW_CODE = ('from attncourse.selfcheck import check, check_now\n'
                  'check_now("{section}");   # the ; keeps the returned details from printing twice')
CHECK_CODE = ('from attncourse.selfcheck import check\n'
              'check("{section}");   # the saved file, graded in a fresh kernel')


def selfstudy_notebook(release_nb, section: str):
    """The self-study edition of a section: the release notebook plus a final "check my work" cell."""
    import copy

    import nbformat

    nb = copy.deepcopy(release_nb)
    md = nbformat.v4.new_markdown_cell(CHECK_MD.format(num=section[:2], section=section))
    md.id = "check-my-work-intro"
    now = nbformat.v4.new_code_cell(CHECK_NOW_CODE.format(section=section))
    now.id = "check-my-work-now"
    code = nbformat.v4.new_code_cell(CHECK_CODE.format(section=section))
    code.id = "check-my-work"
    nb.cells += [md, now, code]
    return nb


def generate_selfstudy(section: str, root: Path = ROOT) -> None:
    import nbformat

    release = nbformat.read(str(Path(root) / "release" / section / f"{section}.ipynb"), as_version=4)
    out = Path(root) / "notebooks" / section / f"{section}.ipynb"
    out.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(selfstudy_notebook(release, section), str(out))
    print(f"  wrote notebooks/{section}")


def main(argv=None):
    names = (argv if argv is not None else sys.argv[1:]) or sections_with_source()
    for name in names:
        generate_release(name)
        generate_selfstudy(name)


if __name__ == "__main__":
    main()
