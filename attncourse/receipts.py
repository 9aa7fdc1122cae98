"""nbgrader preprocessors that make a replaced GRADER earn nothing (autograde side).

``IssueReceiptKey`` (before ``Execute``) writes a fresh random key into the
notebook's folder; the setup cell's :class:`attncourse.grading.Grader` reads and
deletes it before any student code runs, and prints a receipt (an HMAC of the
check's number and label) after every check it passes.

``VerifyReceipts`` (after ``Execute``, before ``SaveAutoGrades``) deletes the key
file and, for every grade cell that calls ``GRADER.check``, requires one valid,
unused receipt per call in the cell's output.  A cell without them (a fake
``GRADER`` that prints "✓", a setup cell that was deleted or moved below student
code) gets an error output, so nbgrader scores it 0, and the reason reads
"tampering suspected: …" in the feedback and the instructor's report.
"""
from __future__ import annotations

import os
import re
import secrets

from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import NbGraderPreprocessor

from .grading import RECEIPT_FILE, receipt

_CALL = re.compile(r"GRADER\s*\.\s*check\s*\(")
_LINE = re.compile(r"^✓ (.+?)  \[#(\d+) ([0-9a-f]{16})\]", re.M)


def _nb_dir(resources):
    return resources.get("metadata", {}).get("path") or os.getcwd()


class IssueReceiptKey(NbGraderPreprocessor):
    def preprocess(self, nb, resources):
        key = secrets.token_hex(32).encode()
        path = os.path.join(_nb_dir(resources), RECEIPT_FILE)
        with open(path, "wb") as fh:
            fh.write(key)
        resources["attncourse_receipt_key"] = key
        return nb, resources


def _stdout(cell):
    return "".join(o.get("text", "") for o in cell.get("outputs", [])
                   if o.get("output_type") == "stream" and o.get("name") == "stdout")


def _fail(cell, why):
    cell.outputs.append(NotebookNode(output_type="error", ename="TamperingSuspected",
                                     evalue=why, traceback=[f"TamperingSuspected: {why}"]))


class VerifyReceipts(NbGraderPreprocessor):
    def preprocess(self, nb, resources):
        key = resources.pop("attncourse_receipt_key", None)
        try:
            os.unlink(os.path.join(_nb_dir(resources), RECEIPT_FILE))
            setup_ran = False  # the key was never read: the setup cell did not run first
        except FileNotFoundError:
            setup_ran = True
        if key is None:
            return nb, resources
        code = [c for c in nb.cells if c.cell_type == "code"]
        first = code[0].metadata.get("nbgrader", {}).get("grade_id") if code else None
        used = set()
        for cell in code:
            meta = cell.metadata.get("nbgrader", {})
            if not meta.get("grade"):
                continue
            calls = sum(len(_CALL.findall(line)) for line in cell.source.splitlines()
                        if not line.lstrip().startswith("#"))
            if not calls:
                continue
            if any(o.get("output_type") == "error" for o in cell.outputs):
                continue  # already scored 0, with its own message
            if not setup_ran or first != "setup":
                _fail(cell, "the locked setup cell was deleted or is not the first code cell, "
                            "so the grader did not run before your code")
                continue
            valid = 0
            for label, n, token in _LINE.findall(_stdout(cell)):
                if n not in used and receipt(key, int(n), label) == token:
                    used.add(n)
                    valid += 1
            if valid < calls:
                _fail(cell, f"{calls - valid} of the {calls} checks in this cell printed no valid grader "
                            "receipt (was GRADER replaced or its output faked?)")
        return nb, resources
