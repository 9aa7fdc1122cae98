"""Drive nbgrader the way an instructor does, in a throw-away copy of the course.

``Course(tmp_path)`` copies ``source/``, ``graders/`` and ``nbgrader_config.py``
into ``tmp_path``; its methods run the real ``nbgrader`` commands
(generate_assignment, autograde, generate_feedback) and read the gradebook.
"""
from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]


def course_env(extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ATTNCOURSE_", "JPY_", "JUPYTER_"))}
    env["PYTHONWARNINGS"] = "ignore"
    env["MPLBACKEND"] = "Agg"
    env["HF_HUB_OFFLINE"] = "1"
    env["TRANSFORMERS_OFFLINE"] = "1"
    env.update(extra or {})
    return env


def read_nb(path) -> nbformat.NotebookNode:
    return nbformat.read(str(path), as_version=4)


def cell_by_id(nb, grade_id):
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == grade_id:
            return cell
    raise KeyError(grade_id)


def with_cells(nb, replacements: dict):
    """A copy of ``nb`` whose solution cells (by grade_id) have new source."""
    nb = copy.deepcopy(nb)
    for grade_id, source in replacements.items():
        cell_by_id(nb, grade_id).source = source
    return nb


def cell_text(cell) -> str:
    """Everything a cell printed: streams, results and tracebacks (ANSI stripped)."""
    import re

    parts = []
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            parts.append(out.text)
        elif out.output_type == "error":
            parts.append(f"{out.ename}: {out.evalue}")
            parts.extend(out.traceback)
        elif "data" in out:
            parts.append(str(out.data.get("text/plain", "")))
    return re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(parts))


class Course:
    def __init__(self, root: Path, sections=None):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / "nbgrader_config.py", self.root / "nbgrader_config.py")
        shutil.copytree(ROOT / "graders", self.root / "graders", ignore=shutil.ignore_patterns("__pycache__"))
        for name in sections or [p.name for p in (ROOT / "source").iterdir() if p.is_dir()]:
            shutil.copytree(ROOT / "source" / name, self.root / "source" / name,
                            ignore=shutil.ignore_patterns(".ipynb_checkpoints"))

    def nbgrader(self, *args, timeout=1800, check=True) -> subprocess.CompletedProcess:
        proc = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=self.root, env=course_env(),
                              capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise RuntimeError(f"nbgrader {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc

    def generate(self, section: str):
        self.nbgrader("generate_assignment", section, "--force")
        return self.root / "release" / section / f"{section}.ipynb"

    def source_nb(self, section):
        return read_nb(self.root / "source" / section / f"{section}.ipynb")

    def release_nb(self, section):
        return read_nb(self.root / "release" / section / f"{section}.ipynb")

    def submit(self, student: str, section: str, nb, name: str | None = None):
        dest = self.root / "submitted" / student / section
        dest.mkdir(parents=True, exist_ok=True)
        path = dest / (name or f"{section}.ipynb")
        if isinstance(nb, (str, bytes)):
            path.write_text(nb if isinstance(nb, str) else nb.decode("utf-8", "replace"))
        else:
            nbformat.write(nb, str(path))
        (dest / "timestamp.txt").write_text("2026-11-30 12:00:00.000000 UTC")
        return path

    def autograde(self, section: str, student: str | None = None, check=True, timeout=1800):
        args = ["autograde", section, "--create", "--force"]
        if student:
            args.append(f"--student={student}")
        return self.nbgrader(*args, check=check, timeout=timeout)

    def scores(self, section: str, student: str) -> dict:
        """grade_id -> (score, max_score) for the autograded code cells of one submission."""
        from nbgrader.api import Gradebook

        with Gradebook(f"sqlite:///{self.root / 'gradebook.db'}") as gb:
            sub = gb.find_submission(section, student)
            out = {}
            for nb in sub.notebooks:
                for grade in nb.grades:
                    if grade.cell_type == "code":
                        out[grade.name] = (grade.score, grade.max_score)
            return out

    def autograded_nb(self, section: str, student: str):
        return read_nb(self.root / "autograded" / student / section / f"{section}.ipynb")

    def messages(self, section: str, student: str) -> dict:
        """grade_id -> everything the test cell printed in the autograded notebook."""
        nb = self.autograded_nb(section, student)
        return {c.metadata["nbgrader"]["grade_id"]: cell_text(c) for c in nb.cells
                if c.metadata.get("nbgrader", {}).get("grade")}
