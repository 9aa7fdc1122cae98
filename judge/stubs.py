"""The student's stubs name their exercise: ``raise NotImplementedError("Exercise 3 (name) is not done yet: ...")``.

nbgrader's ``ClearSolutions`` writes one stub for every solution cell (``ClearSolutions.code_stub``), so a
demonstration cell that calls an unfinished function fails with a bare ``NotImplementedError()``.
:class:`NamedStubs` is ``ClearSolutions`` (configured as it, and in its place in ``nbgrader_config.py``) with the
raise of each code stub carrying :func:`attncourse.teach.progress.stub_message`: the exercise's number, from the
nearest heading above the cell when that heading is an ``Exercise N`` one, and its graded name — the function or
class the cell defines, else the first name the solution assigns.  ``attncourse.teach.progress.needs`` reads the
same words back in the student's kernel.
"""
from __future__ import annotations

import ast
import re

from nbgrader import utils
from nbgrader.preprocessors import ClearSolutions

from attncourse.teach.progress import stub_message

_EXERCISE = re.compile(r"\bExercise\s+(\d+)\b")
_STUB_RAISE = "raise NotImplementedError()"


def graded_name(source: str) -> str | None:
    """The function or class a solution cell defines, else the first plain name its solution assigns."""
    m = re.search(r"^(?:def|class)\s+(\w+)", source, re.M)
    if m:
        return m.group(1)
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        for t in targets:
            if isinstance(t, ast.Name):
                return t.id
    return None


class NamedStubs(ClearSolutions):
    """``ClearSolutions`` whose code stubs raise ``NotImplementedError`` with the exercise's number and name."""

    def preprocess(self, nb, resources):
        self._heading = None
        return super().preprocess(nb, resources)

    def preprocess_cell(self, cell, resources, cell_index):
        if cell.cell_type == "markdown":
            headings = [line for line in cell.source.splitlines() if line.lstrip().startswith("#")]
            if headings:
                self._heading = headings[-1]
        if cell.cell_type != "code" or not (utils.is_solution(cell) or self.begin_solution_delimeter in cell.source):
            return super().preprocess_cell(cell, resources, cell_index)
        number = _EXERCISE.search(self._heading or "")
        message = stub_message(graded_name(cell.source), number.group(1) if number else None)
        cell, resources = super().preprocess_cell(cell, resources, cell_index)
        cell.source = cell.source.replace(_STUB_RAISE, f'raise NotImplementedError("{message}")')
        return cell, resources
