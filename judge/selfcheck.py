"""The self-check on the judge's side: a learner's SAVED notebook graded by nbgrader with the course's judge, and the
verdicts an in-process Grader asks for.

Run from the course checkout (``python -m`` finds this package there: a student's wheel carries no judge), by the
thin entries of the student package, which import nothing of this one (:mod:`attncourse.selfcheck`,
:mod:`attncourse.kernel.verdicts`):

``python -m judge.selfcheck NN [NOTEBOOK] [--timeout S] [--result FILE]``
    copies the saved notebook into a temporary course folder (with the section's source assignment and the hidden
    reference data, :mod:`judge.scratch`), runs nbgrader's own ``generate_assignment`` and ``autograde`` there —
    the same judge an instructor's grading uses — prints per-exercise points and the grader's messages (never
    hidden test code, reference values or solutions), writes the result as JSON to ``FILE``, and exits 0 when the
    notebook was checked, 1 when it could not be because the notebook is broken, 2 when it could not be because
    the grader is (or on a usage error).
``python -m judge.selfcheck --verdicts NN``
    answers JSON lines on stdin, one line on stdout each: ``{"judge": "exercise:case", "record": {...}}`` →
    ``{"problem": null | "why"}`` (:func:`judge.verdict.judge_record` against ``graders/data/NN.pt``), and
    ``{"score": points, "checks": [{"weight", "passed"}]}`` → ``{"score": s}`` (:func:`judge.verdict.cell_score`).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from attncourse.course import learner_notebook
from attncourse.selfcheck import (GRADER_BROKEN, NOTEBOOK_BROKEN, RUNNING_ENV, VISIBLE, course_and_section,
                                  exit_code, format_result, result_of, tally)

from .environment import grading_env


def run_check(section: str, notebook: Path | None = None, root: Path | None = None, timeout: int | None = None) -> dict:
    """Autograde a copy of the saved notebook; return {'exercises': [...], 'score', 'max_score', 'seconds'}.

    ``timeout``: seconds one cell may run (default: the course's nbgrader_config.py).
    """
    from .autograded import grade_cells
    from .files import MAX_NOTEBOOK_BYTES, Refused, read_regular
    from .scratch import course_files, memory_folder, new_gradebook, write_course

    t0 = time.time()
    root, section = course_and_section(section, root)
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
            tally(exercises, ", ".join(cell.exercises) or VISIBLE, cell.grade_id, *points[cell.grade_id],
                  cell.messages)
    return result_of(section, exercises, t0)


# what the grading kernel's launcher or nbgrader says when no kernel could run the notebook (judge.sandbox, judge.kernels)
_GRADER_LINES = ("the grading kernel stopped", "grading refused", "the grading kernel's launcher failed",
                 "Kernel died before replying", "Kernel didn't respond")


def why_not_graded(saved: bytes, log: str) -> tuple[str, str]:
    """(whose fault, one line) when nbgrader left no graded copy of the saved notebook: the notebook's when it
    cannot be read as a notebook (nbformat's own reader, on the very bytes that were checked); otherwise the
    grader's, with the line of the log that says why (a kernel that could not start: its exit status and last
    lines), never read as the notebook's fault because some line of the log mentions JSON."""
    import nbformat

    from .sanitize import inert

    try:
        nbformat.reads(saved.decode("utf-8"), as_version=4)
    except Exception as exc:  # noqa: BLE001 - whatever the reader refuses
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return NOTEBOOK_BROKEN, inert(f"your notebook is broken: it cannot be read as a notebook "
                                      f"({type(exc).__name__}: {first})")[:300]
    return GRADER_BROKEN, grader_broken(log)


def grader_broken(log: str, what: str = "") -> str:
    """The one line for a check the grader could not make: the line of nbgrader's ``log`` that says why."""
    from .sanitize import inert

    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    said = [ln for ln in lines if any(k in ln for k in _GRADER_LINES)]
    errors = [ln for ln in lines if ln.split(":", 1)[0].endswith(("Error", "Exception"))]
    detail = (said or errors or lines or ["nbgrader said nothing"])[-1]
    return inert(f"the grader is broken here, not your notebook{f' ({what})' if what else ''}: {detail}")[:400]


# -- verdicts for an in-process Grader (attncourse.kernel.verdicts) -------------------------------------------------
def serve_verdicts(section: str, root: Path, lines, out) -> None:
    """Answer each JSON line of ``lines`` on ``out`` (the protocol in this module's docstring) until they end."""
    import torch

    from attncourse.protocol.cases import StoredCase

    from .verdict import cell_score, earn, judge_record

    data = torch.load(str(Path(root) / "graders" / "data" / f"{section}.pt"), weights_only=True)
    cases, messages = data["cases"], data.get("messages", {})
    for line in lines:
        if not line.strip():
            continue
        req = json.loads(line)
        if "judge" in req:
            spec = StoredCase.from_dict(cases[req["judge"]]) if req["judge"] in cases else None
            problem = judge_record(spec, req["record"], messages)
            answer = {"problem": None if problem is None else str(problem)}
        else:
            checks = [dict(c) for c in req["checks"]]
            earn(checks, float(req["score"]))
            answer = {"score": cell_score(float(req["score"]), checks)}
        out.write(json.dumps(answer) + "\n")
        out.flush()


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--verdicts"] and len(argv) == 2:
        out, sys.stdout = sys.stdout, sys.stderr   # stdout carries the answers alone
        root, section = course_and_section(argv[1], Path.cwd())
        serve_verdicts(section, root, sys.stdin, out)
        return 0
    opts, args = {"--timeout": None, "--result": None}, []
    while argv:
        a = argv.pop(0)
        if a in opts and argv:
            opts[a] = argv.pop(0)
        elif a.startswith("-"):
            args = []
            break
        else:
            args.append(a)
    if not 1 <= len(args) <= 2:
        print("usage: python -m judge.selfcheck NN [path/to/notebook.ipynb] [--timeout S] [--result FILE]")
        return 2
    result = run_check(args[0], Path(args[1]) if len(args) > 1 else None,
                       timeout=int(opts["--timeout"]) if opts["--timeout"] else None)
    print(format_result(result), flush=True)
    if opts["--result"]:
        Path(opts["--result"]).write_text(json.dumps(result))
    return exit_code(result)


if __name__ == "__main__":
    sys.exit(main())
