"""Find-the-bug exercises: the student's notebook shows buggy code in a solution cell.

An exercise of ``graders/sNN_*.py`` with ``handout="<mistake key>"`` keeps its correct code in the
source notebook (as any solution cell); nbgrader's ``ClearSolutions`` would replace it with a stub.
:class:`HandOut` runs right after ``ClearSolutions`` in ``nbgrader generate_assignment`` (configured in
``nbgrader_config.py``) and puts the named mistake's code there instead, as the reference build stored
it (``graders/data/NN_*.pt``, key ``handouts``: grade_id -> code).  The build proved that this code fails
every hidden case of its exercise, so an untouched handout earns nothing and its feedback names the bug.
"""
from __future__ import annotations

from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Unicode

from .preprocessors import _CourseRoot, _section


class HandOut(_CourseRoot, NbGraderPreprocessor):
    """Replace each find-the-bug solution cell (by grade_id) with the code the reference data hands out."""

    course_root = Unicode("", help="The course folder (holding graders/data)").tag(config=True)

    def preprocess(self, nb, resources):
        loaded = self._data(resources)
        handouts = (loaded[0].get("handouts") or {}) if loaded else {}
        missing = set(handouts)
        for cell in nb.cells:
            gid = (cell.metadata.get("nbgrader") or {}).get("grade_id")
            if gid in handouts and cell.cell_type == "code":
                cell.source = handouts[gid]
                missing.discard(gid)
        if missing:
            raise RuntimeError(f"{_section(resources)}: no solution cell named {sorted(missing)[0]} for its "
                               "find-the-bug handout: run ./course build")
        return nb, resources
