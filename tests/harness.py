"""Drive nbgrader the way an instructor does, in a throw-away copy of the course.

``Course(tmp_path)`` copies ``source/``, ``graders/`` and ``nbgrader_config.py``
into ``tmp_path``; its methods run the real ``nbgrader`` commands
(generate_assignment, autograde, generate_feedback) and read the gradebook.
"""
from __future__ import annotations

import copy
import functools
import subprocess
import sys
from pathlib import Path

import nbformat

from judge.environment import grading_env

ROOT = Path(__file__).resolve().parents[1]


def course_env(extra: dict | None = None) -> dict:
    """The instructor's grading environment, with none of this shell's ATTNCOURSE_* settings."""
    return grading_env(extra=extra)


def read_nb(path) -> nbformat.NotebookNode:
    return nbformat.read(str(path), as_version=4)


def total_points(section: str) -> float:
    """The points of a section, as its source notebook's grade cells give them."""
    nb = read_nb(ROOT / "source" / section / f"{section}.ipynb")
    return sum(float(c.metadata["nbgrader"].get("points", 0) or 0) for c in nb.cells
               if c.metadata.get("nbgrader", {}).get("grade"))


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

    parts, last = [], None
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            # one print() may reach the notebook as several stream outputs (the kernel flushed between
            # "text" and "\n"): consecutive chunks of one stream are one text, however it was chunked
            if last is not None and last.output_type == "stream" and last.name == out.name:
                parts[-1] += out.text
            else:
                parts.append(out.text)
        elif out.output_type == "error":
            parts.append(f"{out.ename}: {out.evalue}")
            parts.extend(out.traceback)
        elif "data" in out:
            parts.append(str(out.data.get("text/plain", "")))
        last = out
    return re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(parts))


class Course:
    """A scratch course (:mod:`judge.scratch`) of some sections of this one, graded as an instructor would."""

    def __init__(self, root: Path, sections=None):
        from judge.scratch import course_files, write_course

        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        for name in sections or [p.name for p in (ROOT / "source").iterdir() if p.is_dir()]:
            write_course(self.root, course_files(ROOT, name), name)

    @classmethod
    def open(cls, root: Path) -> "Course":
        """A course folder that exists already (written by this class, or edited in JupyterLab), as it is."""
        course = cls.__new__(cls)
        course.root = Path(root)
        return course

    def nbgrader(self, *args, timeout=1800, check=True) -> subprocess.CompletedProcess:
        proc = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=self.root, env=course_env(),
                              capture_output=True, text=True, timeout=timeout)
        from instructor.config import check_config_loaded

        check_config_loaded(proc)
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


def expected_cell_scores(section: str, source, ex, code: str) -> dict:
    """{grade_id: score} of every hidden cell that checks ``ex``, with ``code`` in its solution cell, as the judge
    scores it: the in-process grader (the same judge and reference data) on each check of the cell, the cell's
    points shared by the checks that pass (``judge.verdict.earn``)."""
    import os

    from attncourse.kernel.grader import Grader
    from attncourse.protocol.calls import check_calls
    from authoring.references import define
    from judge.verdict import cell_score, earn, judge_record

    old = os.environ.get("ATTNCOURSE_ROOT")
    os.environ["ATTNCOURSE_ROOT"] = str(ROOT)
    try:
        grader = Grader(section, judge=judge_record)
    finally:
        if old is None:
            os.environ.pop("ATTNCOURSE_ROOT", None)
        else:
            os.environ["ATTNCOURSE_ROOT"] = old
    obj = define(ex, code)
    context = ex.context() if ex.context else {}
    out = {}
    for cell in source.cells:
        meta = cell.metadata.get("nbgrader", {})
        calls = check_calls(cell.source) if cell.cell_type == "code" and meta.get("grade") else []
        if not any(e == ex.name for e, _ in calls):
            continue
        assert all(e == ex.name for e, _ in calls), f"{meta['grade_id']} checks more than one exercise"
        grader.collect = []
        for e, case in calls:
            grader.check(e, case, obj, **context)
        checks = [{"weight": float(v["points"]), "passed": v["problem"] is None} for v in grader.collect]
        earn(checks, float(meta.get("points", 0)))
        out[meta["grade_id"]] = cell_score(float(meta.get("points", 0)), checks)
    grader.collect = None
    return out


def setup_output(course, section: str, student: str) -> str:
    """What the autograded notebook's setup cell printed (an error or a timeout shows here), for a failure message."""
    try:
        nb = course.autograded_nb(section, student)
    except Exception as e:  # noqa: BLE001
        return f"(no autograded notebook: {e})"
    for c in nb.cells:
        if c.metadata.get("nbgrader", {}).get("grade_id") == "setup":
            return cell_text(c)[-1500:] or "(nothing)"
    return "(no setup cell)"


# -- the corpus of adversarial and broken submissions (tests/corpus/) ---------------------------
CORPUS_SECTION = "02_qkv_by_hand"
CORPUS_CELL = "sdpa"                      # solution cell of scaled_dot_product_attention
CORPUS_EXERCISE = "scaled_dot_product_attention"


def corpus_cases(batch: str) -> dict:
    import importlib
    import pkgutil

    from tests import corpus

    out = {}
    for info in pkgutil.iter_modules(corpus.__path__):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"tests.corpus.{info.name}")
        if getattr(mod, "BATCH", None) == batch:
            out[info.name] = mod
    return out


def slim(nb):
    """The notebook with only its nbgrader cells (setup, solutions, tests): fast to autograde."""
    nb = copy.deepcopy(nb)
    nb.cells = [c for c in nb.cells if c.metadata.get("nbgrader")]
    return nb


def grade_corpus(batch: str, root: Path, timeout: int | None = None, check_timeout: int = 30,
                 extra_env: dict | None = None):
    """Grade every corpus submission of ``batch`` plus a correct one, one after the other by the serial executor (instructor/engine.py).

    ``timeout`` is nbgrader's per-cell limit: the course's own (nbgrader_config.py) by default.  The setup cell
    takes ~2 s on an idle 2-core machine but went past a 10 s limit on a loaded CI machine (three submissions lost
    every cell to "GRADER is not defined"), so a batch that does not test timeouts keeps the course's limit.
    """
    from instructor.engine import grade_section as grade
    from tests.corpus._base import WRONG

    section = CORPUS_SECTION
    course = Course(root, [section])
    course.generate(section)
    source = slim(course.source_nb(section))
    cell_by_id(source, CORPUS_CELL)  # the section keeps this grade_id
    release = slim(course.release_nb(section))
    cases = corpus_cases(batch)
    course.submit("correct", section, source)
    course.submit("wrong", section, with_cells(source, {CORPUS_CELL: WRONG}))   # what a plain mistake earns
    for name, mod in cases.items():
        nb = copy.deepcopy(release if getattr(mod, "FROM", "source") == "release" else source)
        if getattr(mod, "SDPA", None):
            nb = with_cells(nb, {CORPUS_CELL: mod.SDPA})
        fname = None
        if hasattr(mod, "build"):
            nb = mod.build(nb)
            if isinstance(nb, tuple):
                fname, nb = nb
        path = course.submit(name, section, nb, name=fname)
        if hasattr(mod, "extra_files"):   # files beside the notebook (links, big files) as a student can ship them
            mod.extra_files(course.root, path.parent)
    if batch == "tamper":  # each trick's honest base: the same code without the trick
        for key, make in corpus_bases(cases, source, release).items():
            course.submit(key, section, make())
    env = {"ATTNCOURSE_KERNEL_MEM_MB": "2048", "ATTNCOURSE_CHECK_TIMEOUT": str(check_timeout)}
    env.update(extra_env or {})
    course.submitted_before = tree_hashes(course.root / "submitted")
    report = grade(section, course.root, timeout=timeout, log=lambda *a: None, extra_env=env)
    return course, source, cases, report


def tree_hashes(folder: Path) -> dict:
    """relative path -> sha256 of every file (links as 'link -> target') under ``folder``, links not followed."""
    import hashlib
    import os

    out = {}
    for dirpath, _, files in os.walk(folder):
        for name in files:
            p = Path(dirpath) / name
            rel = str(p.relative_to(folder))
            out[rel] = f"link -> {os.readlink(p)}" if p.is_symlink() else hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def base_student(mod) -> str:
    """The submission a trick is paired with: ``correct``, or ``base_<key>`` (default: the wrong sdpa alone)."""
    key = getattr(mod, "BASE", "wrong")
    return "correct" if key == "correct" else f"base_{key}"


def corpus_bases(cases: dict, source, release=None) -> dict:
    """student id -> a function building that honest base submission (one per distinct base)."""
    from tests.corpus._base import WRONG

    out = {}
    for mod in cases.values():
        student = base_student(mod)
        if student == "correct" or student in out:
            continue
        if hasattr(mod, "base"):
            start = release if getattr(mod, "FROM", "source") == "release" else source
            out[student] = functools.partial(mod.base, copy.deepcopy(start))
        else:
            out[student] = functools.partial(with_cells, source, {CORPUS_CELL: getattr(mod, "BASE_SDPA", WRONG)})
    return out


def pairing_problems(cases: dict, report: dict) -> list[str]:
    """Every cell in which a trick earned more than its honest base (the trick must add zero marks)."""
    students = report["students"]
    problems = []
    for name, mod in cases.items():
        base = students.get(base_student(mod), {})
        trick = students.get(name, {})
        if not base.get("cells"):
            problems.append(f"{name}: its base {base_student(mod)} was not graded: {base.get('reasons')}")
            continue
        if trick.get("score", 0) > base["score"]:
            problems.append(f"{name}: {trick['score']} with the trick > {base['score']} without it")
        for gid, (got, _) in (trick.get("cells") or {}).items():
            if got > base["cells"].get(gid, (0, 0))[0]:
                problems.append(f"{name}: {gid} earned {got} with the trick, {base['cells'][gid][0]} without")
    return problems


def _lost_cases_problems(name, source, lost_cases, cells, hidden) -> list[str]:
    """A submission that fails exactly the checks of ``lost_cases`` (a tensor made on a fixed device fails the
    ``meta`` case): each hidden cell scores its points less those checks' (their weights, from the reference data)."""
    from attncourse.protocol.calls import check_calls
    from judge.preprocessors import reference_data

    stored = reference_data(str(ROOT), CORPUS_SECTION)[0]["cases"]
    out = []
    for c in source.cells:
        gid = c.metadata.get("nbgrader", {}).get("grade_id")
        if gid not in hidden or gid not in cells:
            continue
        calls = check_calls(c.source)
        weights = {case: float(stored[f"{ex}:{case}"]["points"]) for ex, case in calls}
        got, full = cells[gid]
        want = full - full * sum(w for k, w in weights.items() if k in lost_cases) / sum(weights.values())
        if abs(got - want) > 1e-6:
            out.append(f"{name}: {gid} earned {got:g} / {full:g}, expected {want:g} (only {lost_cases} fail)")
    return out


def corpus_problems(source, cases: dict, report: dict, course) -> list[str]:
    """Every way the batch's outcome differs from what each corpus module expects."""
    from attncourse.protocol.calls import calls_exercise

    section = CORPUS_SECTION

    hidden = [c.metadata["nbgrader"]["grade_id"] for c in source.cells
              if c.metadata.get("nbgrader", {}).get("grade") and calls_exercise(c.source, CORPUS_EXERCISE)]
    graded = [c.metadata["nbgrader"]["grade_id"] for c in source.cells if c.metadata.get("nbgrader", {}).get("grade")]
    sdpa_related = set(hidden) | {g for g in graded if "sdpa" in g}
    students = report["students"]
    problems = []
    good = students.get("correct")
    if not good or good["score"] != good["max_score"] or not good["max_score"]:
        problems.append(f"the correct submission lost marks in the same batch: {good}")
    # Credit per check: a plain mistake (tests/corpus/_base.py WRONG) still earns the checks it passes (the shapes
    # on the meta device).  A cell a submission must lose earns no more than that, and less than full marks.
    plain = (students.get("wrong") or {}).get("cells") or {}
    if not plain:
        problems.append(f"the plain mistake was not graded in the same batch: {students.get('wrong')}")
    for name, mod in cases.items():
        e = students.get(name)
        if e is None:
            problems.append(f"{name}: missing from the report")
            continue
        cells = e.get("cells", {})
        expect = mod.EXPECT
        if expect == "nothing":
            if e["score"]:
                problems.append(f"{name}: expected no score, got {e['score']}")
        elif expect == "no_more_than_wrong":   # its kernel may die (nothing) or survive (the plain mistake's score)
            most = (students.get("wrong") or {}).get("score") or 0
            if (e["score"] or 0) > most + 1e-9:
                problems.append(f"{name}: earned {e['score']}, more than the plain mistake it carries ({most})")
        elif expect == "full":
            if e["score"] != e["max_score"]:
                problems.append(f"{name}: expected full marks, got {e['score']}/{e['max_score']}: {e['failures']}")
        else:
            if not cells:
                problems.append(f"{name}: not graded: {e['reasons']}")
                continue
            lost = getattr(mod, "LOST", None)
            if lost is None and getattr(mod, "LOST_CASES", None):   # credit per check: exactly those checks' points
                problems += _lost_cases_problems(name, source, mod.LOST_CASES, cells, hidden)
                lost = [c.metadata["nbgrader"]["grade_id"] for c in source.cells
                        if c.metadata.get("nbgrader", {}).get("grade_id") in hidden
                        and any(calls_exercise(c.source, CORPUS_EXERCISE, k) for k in mod.LOST_CASES)]
                if not lost:
                    problems.append(f"{name}: no hidden cell runs the cases {mod.LOST_CASES}")
            lost = hidden if lost is None else lost
            for gid in ([] if getattr(mod, "LOST_CASES", None) else lost):
                got, full = cells.get(gid, (1, 1))
                most = plain.get(gid, (0, 0))[0] if expect == "zero" and gid in hidden else 0
                if (expect == "zero" and got > most + 1e-9) or got >= full:
                    problems.append(f"{name}: {gid} earned {cells.get(gid)} (expected at most {most:g}, what a "
                                    "plain mistake earns there)" if expect == "zero" else
                                    f"{name}: {gid} kept full marks {cells.get(gid)}")
            for gid in getattr(mod, "ZEROED", []):   # what still zeroes a whole cell (a time-out, an error)
                if cells.get(gid, (1, 1))[0] != 0:
                    problems.append(f"{name}: {gid} earned {cells.get(gid)} (a cell it stopped scores 0)")
            if expect == "partial":
                for gid in set(hidden) - set(lost):
                    if cells[gid][0] != cells[gid][1]:
                        problems.append(f"{name}: {gid} lost marks {cells[gid]} (only {lost} should)")
            if getattr(mod, "OTHERS", False):
                others = [gid for gid in set(graded) - sdpa_related if cells[gid][0] != cells[gid][1]]
                problems += [f"{name}: other exercise's cell {gid} lost marks {cells[gid]}" for gid in others]
                if others:
                    problems.append(f"{name}: its setup cell printed: {setup_output(course, section, name)}")
        shows = getattr(mod, "SHOWS", None)
        if shows:
            text = "\n".join(t for g, t in e["failures"] if g in sdpa_related)
            if shows not in text:
                try:
                    msgs = course.messages(section, name)
                    text += "\n".join(msgs.get(g, "") for g in hidden)
                except Exception:  # noqa: BLE001
                    pass
            if shows not in text:
                problems.append(f"{name}: feedback lacks {shows!r}: {text[-500:]}")
        reason = getattr(mod, "REASON", None)
        if reason and not any(reason in r for r in e["reasons"]):
            problems.append(f"{name}: report reasons lack {reason!r}: {e['reasons']}")
    return problems
