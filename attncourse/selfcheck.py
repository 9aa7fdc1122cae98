"""Self-study check: grade your SAVED notebook with the hidden tests, offline.

From the notebook's last cell::

    from attncourse.selfcheck import check; check("02_qkv_by_hand")

or from a shell: ``./course check 02``.  It copies your saved notebook into a
temporary course folder (with the section's source assignment and the hidden
reference data, :mod:`judge.scratch`), runs nbgrader's own
``generate_assignment`` and ``autograde`` there — the same judge an instructor's
grading uses — and prints per-exercise points and the grader's messages.  It never
prints hidden test code, reference values or solutions.  Save first (Ctrl+S): the
check reads the file on disk, not the cells in your browser.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .course import grading_env, learner_notebook, resolve_section

RUNNING_ENV = "ATTNCOURSE_SELFCHECK_RUNNING"
VISIBLE = "visible checks (not scored)"


def _being_graded() -> bool:
    """True inside a kernel that nbgrader runs (autograde, validate, the saved-file check): the check cells then
    do nothing (the copy being graded never grades itself)."""
    return bool(os.environ.get(RUNNING_ENV) or os.environ.get("NBGRADER_EXECUTION"))


def _course_and_section(section: str, root=None) -> tuple[Path, str]:
    """The course checkout (``root``, or the one found from here) and the section's full name; SystemExit
    with the reason when either cannot be found."""
    root = Path(root) if root else _course_root()
    if root is None:
        raise SystemExit("cannot find the course folder (graders/data): run this inside the course checkout")
    try:
        return root, resolve_section(section)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None


def _tally(exercises: dict, name: str, grade_id: str, got: float, full: float, messages: list) -> None:
    """Add one graded cell's points and messages to its exercise's line."""
    ex = exercises.setdefault(name, {"exercise": name, "score": 0.0, "max_score": 0.0, "cells": []})
    ex["score"] += got
    ex["max_score"] += full
    ex["cells"].append({"cell": grade_id, "score": got, "max_score": full, "messages": messages})


def _result(section: str, exercises: dict, t0: float) -> dict:
    """What a check returns: the section, each exercise's line, the totals and the seconds it took."""
    return {"section": section, "exercises": list(exercises.values()),
            "score": sum(e["score"] for e in exercises.values()),
            "max_score": sum(e["max_score"] for e in exercises.values()),
            "seconds": round(time.time() - t0, 1)}


def _course_root():
    from .kernel.grader import find_course_root

    root = find_course_root()
    if root is None:
        here = Path(__file__).resolve().parents[1]
        if (here / "graders" / "data").is_dir():
            root = here
    return root


def run_check(section: str, notebook: Path | None = None, root: Path | None = None, timeout: int | None = None) -> dict:
    """Autograde a copy of the saved notebook; return {'exercises': [...], 'score', 'max_score', 'seconds'}.

    ``timeout``: seconds one cell may run (default: the course's nbgrader_config.py).
    """
    from judge.autograded import grade_cells
    from judge.files import MAX_NOTEBOOK_BYTES, Refused, read_regular
    from judge.scratch import course_files, memory_folder, new_gradebook, write_course

    t0 = time.time()
    root, section = _course_and_section(section, root)
    notebook = Path(notebook) if notebook else learner_notebook(root, section)
    try:   # the saved file itself, never through a link
        saved = read_regular(notebook, MAX_NOTEBOOK_BYTES)
    except Refused as why:
        raise SystemExit(f"cannot check {notebook}: {why}") from None
    with tempfile.TemporaryDirectory(prefix="attncourse-check-", dir=memory_folder()) as tmp:
        tmp = Path(tmp)
        write_course(tmp, course_files(root, section), section, {"me": {f"{section}.ipynb": saved}})
        new_gradebook(tmp / "gradebook.db")   # the copied config's db_url (made here: no alembic subprocess)
        # The learner's own ATTNCOURSE_* settings (device, limits) apply; the copy's course root is tmp.
        # On their own machine the check runs sandboxed where bubblewrap works, and without it elsewhere.
        keep = tuple(k for k in os.environ if k.startswith("ATTNCOURSE_") and k != "ATTNCOURSE_ROOT")
        env = grading_env(keep=keep, extra={RUNNING_ENV: "1"})
        env.setdefault("ATTNCOURSE_SANDBOX", "self")
        py = [sys.executable, "-m", "nbgrader"]
        print("  preparing the check (nbgrader generate_assignment) ...", flush=True)
        gen = subprocess.run(py + ["generate_assignment", section, "--force"], cwd=tmp, env=env,
                             capture_output=True, text=True)
        if gen.returncode != 0:
            why = grader_broken(gen.stdout + gen.stderr, "nbgrader could not prepare the check")
            return {"section": section, "error": why, "broken": GRADER_BROKEN, "exercises": [], "score": 0,
                    "max_score": None, "seconds": round(time.time() - t0, 1)}
        limit = [f"--Execute.timeout={timeout}"] if timeout else []
        print("  grading your saved notebook in a fresh kernel (nbgrader autograde) ...", flush=True)
        ag = subprocess.run(py + ["autograde", section, "--create", "--force", *limit],
                            cwd=tmp, env=env, capture_output=True, text=True)
        graded = tmp / "autograded" / "me" / section / f"{section}.ipynb"
        if not graded.is_file():
            broken, why = why_not_graded(saved, ag.stdout + ag.stderr)
            return {"section": section, "error": why, "broken": broken, "exercises": [], "score": 0,
                    "max_score": None, "seconds": round(time.time() - t0, 1)}
        import nbformat
        from nbgrader.api import Gradebook

        nb = nbformat.read(str(graded), as_version=4)
        with Gradebook(f"sqlite:///{tmp / 'gradebook.db'}") as gb:
            s = gb.find_submission(section, "me")
            points = {g.name: (g.score or 0.0, g.max_score) for n in s.notebooks for g in n.grades
                      if g.cell_type == "code"}
    exercises: dict = {}
    for cell in grade_cells(nb):
        if cell.grade_id in points:
            _tally(exercises, ", ".join(cell.exercises) or VISIBLE, cell.grade_id, *points[cell.grade_id],
                   cell.messages)
    return _result(section, exercises, t0)


NOTEBOOK_BROKEN, GRADER_BROKEN = "notebook", "grader"   # whose fault it is when a check could not be made
# what the grading kernel's launcher or nbgrader says when no kernel could run the notebook (judge.sandbox, judge.kernels)
_GRADER_LINES = ("the grading kernel stopped", "grading refused", "the grading kernel's launcher failed",
                 "Kernel died before replying", "Kernel didn't respond")


def why_not_graded(saved: bytes, log: str) -> tuple[str, str]:
    """(whose fault, one line) when nbgrader left no graded copy of the saved notebook: the notebook's when it
    cannot be read as a notebook (nbformat's own reader, on the very bytes that were checked); otherwise the
    grader's, with the line of the log that says why (a kernel that could not start: its exit status and last
    lines), never read as the notebook's fault because some line of the log mentions JSON."""
    import nbformat

    from judge.sanitize import inert

    try:
        nbformat.reads(saved.decode("utf-8"), as_version=4)
    except Exception as exc:  # noqa: BLE001 - whatever the reader refuses
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return NOTEBOOK_BROKEN, inert(f"your notebook is broken: it cannot be read as a notebook "
                                      f"({type(exc).__name__}: {first})")[:300]
    return GRADER_BROKEN, grader_broken(log)


def grader_broken(log: str, what: str = "") -> str:
    """The one line for a check the grader could not make: the line of nbgrader's ``log`` that says why."""
    from judge.sanitize import inert

    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    said = [ln for ln in lines if any(k in ln for k in _GRADER_LINES)]
    errors = [ln for ln in lines if ln.split(":", 1)[0].endswith(("Error", "Exception"))]
    detail = (said or errors or lines or ["nbgrader said nothing"])[-1]
    return inert(f"the grader is broken here, not your notebook{f' ({what})' if what else ''}: {detail}")[:400]


def _hidden_cells(root: Path, section: str):
    """The section's graded test cells that judge hidden cases, from the course checkout's source notebook."""
    import nbformat

    from .protocol.calls import exercises_checked

    path = root / "source" / section / f"{section}.ipynb"
    if not path.is_file():
        raise SystemExit(f"check_now needs the course checkout's source/{section} and graders/data (the "
                         "self-study edition): use check() or ./course check instead")
    for cell in nbformat.read(str(path), as_version=4).cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade") and meta.get("points") and exercises_checked(cell.source):
            yield meta["grade_id"], float(meta["points"]), exercises_checked(cell.source), cell.source


def check_now(section: str, exercise: str | None = None, namespace: dict | None = None) -> dict:
    """Check what is defined in this kernel NOW against the hidden tests, in about a second.

    For a self-study learner working in the course checkout: the hidden test cells of the section run here,
    on the functions and classes this kernel holds (run your cells first; nothing is re-run, no training, no
    save needed), judged by the same judge and reference data as grading. ``exercise``: only the cells that
    check it. Points are per graded cell, as nbgrader gives them. For the grade of the saved file — a fresh
    kernel, the notebook top to bottom, nbgrader — use :func:`check` or ``./course check NN``.
    """
    import contextlib
    import io

    from .kernel.grader import Grader, GradingError

    t0 = time.time()
    if _being_graded():
        return None  # this notebook is being graded (or checked from its saved file): the hidden cells run anyway
    if namespace is None:
        try:
            from IPython import get_ipython
            shell = get_ipython()
        except ImportError:
            shell = None
        if shell is None:
            raise SystemExit("check_now runs inside a notebook's kernel; from a shell use ./course check NN")
        namespace = shell.user_ns
    root, section = _course_and_section(section)
    grader = namespace.get("GRADER")
    if not (isinstance(grader, Grader) and grader.section == section and not grader.autograding):
        grader = Grader(section)
    scope = dict(namespace)            # the hidden cells' own names never land in the learner's namespace
    scope["GRADER"] = grader
    exercises: dict = {}
    for grade_id, points, checked, source in _hidden_cells(root, section):
        if exercise and exercise not in checked:
            continue
        out = io.StringIO()
        grader.collect = []            # every check's verdict, as grading scores them (credit per check)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                exec(compile(source, f"<hidden checks {grade_id}>", "exec"), scope)   # noqa: S102
            broke_off = None
        except GradingError as exc:
            broke_off = str(exc)
        except Exception as exc:  # noqa: BLE001 - the learner's state: say what is missing
            hint = " (run the cell that defines it first)" if isinstance(exc, NameError) else ""
            broke_off = f"{type(exc).__name__}: {exc}{hint}"
        verdicts, grader.collect = grader.collect, None
        messages = [f"{v['name']}: {v['problem']}" for v in verdicts if v["problem"] is not None]
        _tally(exercises, ", ".join(checked), grade_id, 0.0 if broke_off else _earned(points, verdicts), points,
               messages + ([broke_off] if broke_off else []))
    if exercise and not exercises:
        raise SystemExit(f"no hidden check of {exercise!r} in {section}")
    result = {**_result(section, exercises, t0), "live": True}
    print(format_result(result))
    return result


def _earned(points: float, verdicts: list) -> float:
    """A hidden cell's points from its checks' verdicts, as the judge scores them (``judge.verdict.earn``)."""
    from judge.verdict import cell_score, earn

    checks = [{"weight": float(v["points"] if v["points"] is not None else 1.0), "passed": v["problem"] is None}
              for v in verdicts]
    earn(checks, points)
    return cell_score(points, checks)


def format_result(result: dict) -> str:
    if result.get("error"):
        return f"{result['section']}: could not be checked: {result['error']}"
    how = "what this kernel holds now, " if result.get("live") else ""
    lines = [f"{result['section']}: {result['score']:g} / {result['max_score']:g} points "
             f"({how}checked in {result['seconds']:g} s)"]
    for ex in result["exercises"]:
        if ex["exercise"] == VISIBLE:   # no points: say how many of the cells passed
            bad = sum(1 for c in ex["cells"] if c["messages"])
            mark = "✓" if not bad else "✗"
            lines.append(f"  {mark} {VISIBLE}: {len(ex['cells']) - bad} of {len(ex['cells'])} cells passed")
        else:
            mark = "✓" if ex["score"] == ex["max_score"] else "✗"
            lines.append(f"  {mark} {ex['exercise']}: {ex['score']:g} / {ex['max_score']:g}")
        for c in ex["cells"]:
            for m in c["messages"]:
                lines.append(f"      {c['cell']}: {m}")
    return "\n".join(lines)


def check(section: str, notebook: str | None = None) -> dict | None:
    """Check your saved notebook against the hidden tests and print what each exercise earned."""
    if _being_graded():
        return None  # this is the copy being graded: do not recurse
    print("Checking the last SAVED version of your notebook — save first (Ctrl+S / ⌘S) if you changed anything.")
    result = run_check(section, Path(notebook) if notebook else None)
    print(format_result(result))
    return result


def main(argv=None):
    """``./course check NN [notebook]``: exit 0 when the notebook was checked, 1 when it could not be because the
    notebook is broken, 2 when it could not be because the grader is (or on a usage error)."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print("usage: ./course check NN [path/to/notebook.ipynb]")
        return 2
    result = check(argv[0], argv[1] if len(argv) > 1 else None)
    if result and result.get("error"):
        return 1 if result.get("broken") == NOTEBOOK_BROKEN else 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
