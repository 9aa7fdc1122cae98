"""Build course notebooks cell by cell with correct nbgrader metadata.

Authoring helper for instructors::

    from tools.nbauthor import Notebook
    nb = Notebook()
    nb.md("# 02 · Q, K, V by hand")
    nb.setup("setup", "from attncourse.grading import Grader\\nGRADER = Grader('02_qkv_by_hand')")
    nb.code("print(1 + 1)")
    nb.solution("softmax", "def softmax(x, axis=-1):\\n    ### BEGIN SOLUTION\\n    ...\\n    ### END SOLUTION")
    nb.tests("test_softmax", points=2, source="...")
    nb.manual("qkv_words", points=2, source="YOUR ANSWER HERE")
    nb.save("source/02_qkv_by_hand/02_qkv_by_hand.ipynb")

The saved .ipynb in ``source/`` is the master; edit it in JupyterLab (the
nbgrader "Create Assignment" toolbar shows the same metadata) or with this module.
"""
from __future__ import annotations

import textwrap
from pathlib import Path

import nbformat

SCHEMA = 3


def _meta(grade_id, *, grade, solution, locked, points=None, task=False):
    m = {"grade": grade, "grade_id": grade_id, "locked": locked, "schema_version": SCHEMA, "solution": solution}
    if task:
        m["task"] = True
    if points is not None:
        m["points"] = points
    return {"nbgrader": m}


def _src(text: str) -> str:
    return textwrap.dedent(text).strip("\n")


class Notebook:
    def __init__(self):
        self.nb = nbformat.v4.new_notebook()
        self.nb.metadata = {
            "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        }
        self._ids: set[str] = set()

    def _add(self, cell, grade_id=None):
        if grade_id is not None:
            if grade_id in self._ids:
                raise ValueError(f"duplicate grade_id {grade_id}")
            self._ids.add(grade_id)
            cell.id = grade_id.replace("_", "-")[:64]
        else:
            # Stable ids: re-running an authoring script reproduces the notebook byte for byte.
            cell.id = f"cell-{len(self.nb.cells):03d}"
        self.nb.cells.append(cell)
        return cell

    def md(self, text: str):
        """A teaching markdown cell (not graded, editable)."""
        return self._add(nbformat.v4.new_markdown_cell(_src(text)))

    def code(self, source: str):
        """A teaching code cell that runs and prints (not graded)."""
        return self._add(nbformat.v4.new_code_cell(_src(source)))

    def setup(self, grade_id: str, source: str):
        """A locked, read-only code cell (the setup cell, given code)."""
        c = nbformat.v4.new_code_cell(_src(source))
        c.metadata.update(_meta(grade_id, grade=False, solution=False, locked=True))
        return self._add(c, grade_id)

    def readonly_md(self, grade_id: str, text: str):
        c = nbformat.v4.new_markdown_cell(_src(text))
        c.metadata.update(_meta(grade_id, grade=False, solution=False, locked=True))
        return self._add(c, grade_id)

    def solution(self, grade_id: str, source: str):
        """An autograded-answer cell: the student's code (solution between BEGIN/END SOLUTION)."""
        c = nbformat.v4.new_code_cell(_src(source))
        c.metadata.update(_meta(grade_id, grade=False, solution=True, locked=False))
        return self._add(c, grade_id)

    def tests(self, grade_id: str, points: float, source: str):
        """An autograder-tests cell (hidden tests between BEGIN/END HIDDEN TESTS)."""
        c = nbformat.v4.new_code_cell(_src(source))
        c.metadata.update(_meta(grade_id, grade=True, solution=False, locked=True, points=points))
        return self._add(c, grade_id)

    def manual(self, grade_id: str, points: float, source: str = "YOUR ANSWER HERE"):
        """A manually graded markdown answer."""
        c = nbformat.v4.new_markdown_cell(_src(source))
        c.metadata.update(_meta(grade_id, grade=True, solution=True, locked=False, points=points))
        return self._add(c, grade_id)

    def save(self, path: str | Path):
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.validate(self.nb)
        nbformat.write(self.nb, str(path))
        return path
