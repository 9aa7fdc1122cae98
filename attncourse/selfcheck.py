"""Self-study check: grade your SAVED notebook with the hidden tests, offline.

From the notebook's last cell::

    from attncourse.selfcheck import check; check("02_qkv_by_hand")

or from a shell: ``./course check 02``.  The check itself is the judge's (:mod:`judge.selfcheck`, run as
``python -m judge.selfcheck`` in the course checkout: this package imports nothing of the judge, and a student's
wheel carries none): it copies your saved notebook into a temporary course folder (with the section's source
assignment and the hidden reference data), runs nbgrader's own ``generate_assignment`` and ``autograde`` there —
the same judge an instructor's grading uses — and prints per-exercise points and the grader's messages.  It never
prints hidden test code, reference values or solutions.  Save first (Ctrl+S): the check reads the file on disk, not
the cells in your browser.

``check_now`` runs in your kernel on what it holds; its verdicts come from the same judge in a process of its own
(:mod:`attncourse.kernel.verdicts`).
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .course import judge_home, learner_notebook, resolve_section

RUNNING_ENV = "ATTNCOURSE_SELFCHECK_RUNNING"
VISIBLE = "visible checks (not scored)"
NOTEBOOK_BROKEN, GRADER_BROKEN = "notebook", "grader"   # whose fault it is when a check could not be made


def _being_graded() -> bool:
    """True inside a kernel that nbgrader runs (autograde, validate, the saved-file check): the check cells then
    do nothing (the copy being graded never grades itself)."""
    return bool(os.environ.get(RUNNING_ENV) or os.environ.get("NBGRADER_EXECUTION"))


def course_and_section(section: str, root=None) -> tuple[Path, str]:
    """The course checkout (``root``, or the one found from here) and the section's full name; SystemExit
    with the reason when either cannot be found."""
    root = Path(root) if root else _course_root()
    if root is None:
        raise SystemExit("cannot find the course folder (graders/data): run this inside the course checkout")
    try:
        return root, resolve_section(section)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None


def tally(exercises: dict, name: str, grade_id: str, got: float, full: float, messages: list) -> None:
    """Add one graded cell's points and messages to its exercise's line."""
    ex = exercises.setdefault(name, {"exercise": name, "score": 0.0, "max_score": 0.0, "cells": []})
    ex["score"] += got
    ex["max_score"] += full
    ex["cells"].append({"cell": grade_id, "score": got, "max_score": full, "messages": messages})


def result_of(section: str, exercises: dict, t0: float) -> dict:
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
    root, section = course_and_section(section)
    grader = namespace.get("GRADER")
    if not (isinstance(grader, Grader) and grader.section == section and not grader.autograding):
        grader = Grader(section)
    score = _scorer(grader, root, section)
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
        tally(exercises, ", ".join(checked), grade_id, 0.0 if broke_off else _earned(score, points, verdicts), points,
               messages + ([broke_off] if broke_off else []))
    if exercise and not exercises:
        raise SystemExit(f"no hidden check of {exercise!r} in {section}")
    result = {**result_of(section, exercises, t0), "live": True}
    print(format_result(result))
    return result


def _scorer(grader, root: Path, section: str):
    """The judge's ``score(points, checks)``: the grader's own judge process where it has one, else one for this."""
    from .kernel.verdicts import VerdictProcess

    judge = getattr(grader, "_judge", None)
    return judge.score if isinstance(judge, VerdictProcess) else VerdictProcess(root, section).score


def _earned(score, points: float, verdicts: list) -> float:
    """A hidden cell's points from its checks' verdicts, as the judge scores them (``judge.verdict.earn``, asked
    through ``score``: the scoring is the judge's)."""
    checks = [{"weight": float(v["points"] if v["points"] is not None else 1.0), "passed": v["problem"] is None}
              for v in verdicts]
    return score(points, checks)


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
    root, section = course_and_section(section)
    return judge_check(root, section, notebook)


def judge_check(root: Path, section: str, notebook=None, timeout: int | None = None) -> dict:
    """``python -m judge.selfcheck`` in the course checkout ``root`` (its lines passed on as they come); its result.

    Where it stopped without one: the reason it gave when it refused (a notebook it cannot read, no such
    section: SystemExit, as before), else a result saying the grader is broken, with its last words."""
    import json

    # none named: the copy beside this kernel, else the learner's in work/, else notebooks/ (decided here: the
    # judge runs in the checkout, not in the notebook's folder)
    notebook = [str(Path(notebook or learner_notebook(root, section)).resolve())]
    with tempfile.TemporaryDirectory(prefix="attncourse-check-result-") as tmp, tempfile.TemporaryFile() as err:
        out = Path(tmp) / "result.json"
        cmd = [sys.executable, "-m", "judge.selfcheck", section, *notebook, "--result", str(out),
               *(["--timeout", str(timeout)] if timeout else [])]
        t0 = time.time()
        home = judge_home(root)   # the checkout's judge: in root, or where this package is installed from
        env = dict(os.environ)
        if home:
            env["PYTHONPATH"] = os.pathsep.join([home] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        with subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.PIPE, stderr=err, text=True) as proc:
            for line in proc.stdout:
                print(line, end="", flush=True)
        if out.is_file():
            return json.loads(out.read_text())
        err.seek(0)
        said = err.read().decode(errors="replace").strip()
    if proc.returncode == 1 and said and "Traceback" not in said:
        raise SystemExit(said)
    last = said.splitlines()[-1] if said else "it said nothing"
    result = {"section": section, "exercises": [], "score": 0, "max_score": None, "broken": GRADER_BROKEN,
              "seconds": round(time.time() - t0, 1),
              "error": f"the grader is broken here, not your notebook: the check stopped (exit {proc.returncode}): "
                       f"{last}"[:400]}
    print(format_result(result))
    return result


def main(argv=None):
    """``./course check NN [notebook]``: exit 0 when the notebook was checked, 1 when it could not be because the
    notebook is broken, 2 when it could not be because the grader is (or on a usage error)."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print("usage: ./course check NN [path/to/notebook.ipynb]")
        return 2
    return exit_code(check(argv[0], argv[1] if len(argv) > 1 else None))


def exit_code(result: dict | None) -> int:
    """0: the notebook was checked (or not, inside a kernel nbgrader runs); 1: it could not be, the notebook is
    broken; 2: the grader is."""
    if result and result.get("error"):
        return 1 if result.get("broken") == NOTEBOOK_BROKEN else 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
