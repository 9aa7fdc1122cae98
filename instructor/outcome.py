"""One student's outcome in a grading run, as the instructor's report shows it: score, failed cells, reasons.

One :func:`student_entry` serves the serial path and the Dask engine: the score comes from the
gradebook, the verdicts from the judge's record in the autograded notebook
(:mod:`judge.autograded`), and the two are checked against each other.  What the terminal
shows of it is inert (:func:`judge.sanitize.inert`): a student's text cannot move the cursor,
recolour or rewrite a line."""
from __future__ import annotations

from pathlib import Path

from judge.autograded import first_line, grade_cells, run_reasons
from judge.sanitize import inert

from .config import release_notebook, release_points
from .gradebook import gradebook_scores
from .prescan import prescan


def classify_log(log: str) -> str:
    """A reason for an nbgrader failure, from its log."""
    low = log.lower()
    if "deadkernelerror" in low or "kernel died" in low or "kernel has died" in low:
        return "kernel died (the notebook crashed or killed its Python process: os.kill, a segfault, or the memory limit)"
    if "notjsonerror" in low or "does not appear to be json" in low:
        return "notebook is not valid JSON"
    if "no notebooks found" in low:
        return "notebook missing"
    if "timeout" in low and "kernel" in low and "start" in low:
        return "kernel did not start in time"
    errors = [ln for ln in log.splitlines() if "ERROR]" in ln and "There was an error" not in ln
              and "Please see" not in ln]
    return "autograde failed: " + first_line(errors[-1].split("]", 1)[-1] if errors else log[-200:])


def cell_failures(nb) -> tuple[list, list]:
    """(failures, reasons) from an autograded notebook: (grade_id, why) of the grade cells that lost points (the
    first failed check, or why the whole cell scored 0), and what went wrong with the run (timeouts, tampering)."""
    failures = [(c.grade_id, c.failure) for c in grade_cells(nb) if c.failure]
    return failures, run_reasons(nb)


def student_entry(root: Path, section: str, student: str, release, scores: dict, info: dict | None = None,
                  why_missing=None, faults=(), max_score=None) -> dict:
    """One student's line of the report: score, failed cells and the reasons, from the autograded notebook and
    the gradebook's ``scores`` ({student: (score, max_score, cells)}).  ``info``: the prescan, when already
    done; ``why_missing()``: why nbgrader left no autograded notebook; ``faults``: the grading run's own."""
    import nbformat

    entry = {"score": 0.0, "max_score": None, "failures": [], "reasons": []}
    try:
        info = info if info is not None else prescan(root, section, student, release)
        nb_path = root / "autograded" / student / section / f"{section}.ipynb"
        if info["fatal"]:
            entry["reasons"].append(info["fatal"])
        elif not nb_path.is_file() and why_missing is not None:
            reason = why_missing()
            entry["reasons"] += [reason] if reason else []
        entry["reasons"] += list(faults)
        if nb_path.is_file():
            nb = nbformat.read(str(nb_path), as_version=4)
            entry["failures"], reasons = cell_failures(nb)
            entry["reasons"] += reasons
            if student in scores:
                entry["score"], entry["max_score"], entry["cells"] = scores[student]
                entry["reasons"] += disagreements(nb, entry["failures"], entry["cells"])
        entry["reasons"] += [f"tampering suspected: {t}" for t in info["tamper"]]
        entry["reasons"] += info["notes"]
    except Exception as exc:  # noqa: BLE001 - a report, never a crash
        entry["reasons"].append(f"report failed for this submission: {type(exc).__name__}: {exc}")
    if entry["max_score"] is None:
        entry["max_score"] = max_score if max_score is not None else release_points(release)
    entry["reasons"] = list(dict.fromkeys(entry["reasons"]))
    return entry


def disagreements(nb, failures, cells) -> list[str]:
    """Autograded cells whose gradebook score is not the judge's (never expected: the judge writes the one score
    nbgrader reads; a line here means something else wrote a score)."""
    verdicts = {c.grade_id: c for c in grade_cells(nb)}
    out = []
    for gid, (score, full) in cells.items():
        c = verdicts.get(gid)
        if c is None or not full or c.visible:
            continue
        judged = c.score if c.score is not None else 0.0
        if abs(float(score or 0) - judged) > 1e-6:
            out.append(f"score and verdict disagree in {gid} ({float(score or 0):g} / {full:g} in the gradebook, "
                       f"{judged:g} from the judge)")
    return out


def format_report(report: dict, color: bool = False) -> str:
    """The report as the terminal shows it: a header, the sandbox line (red when not sandboxed), one block per
    student."""
    run = report.get("run") or {}
    took = (f"this run took {report['seconds']} s" if run.get("sections", 1) == 1 else
            f"this run, {run['sections']} sections together, took {report['seconds']} s")
    sandbox = report.get("sandbox", "")
    if color and not report.get("sandboxed"):
        sandbox = f"\x1b[1;31m{sandbox}\x1b[0m"   # grading without the sandbox: in red
    lines = [f"{inert(report['section'])}: {len(report['students'])} submissions; {took}", sandbox, ""]
    for s, e in report["students"].items():   # every piece a student could shape is made inert
        lines.append(f"{inert(s):<24} {e['score']:g} / {e['max_score']:g}")
        for gid, text in e["failures"]:
            lines.append(f"    ✗ {inert(gid)}: {inert(text)}")
        for r in e["reasons"]:
            lines.append(f"    ! {inert(r)}")
    return "\n".join(lines)


def section_report(root: Path, section: str, students: list, results: dict, state: dict, db_url: str,
                   course_id: str, sandboxed: bool, sandbox_line: str, pre: dict | None = None) -> dict:
    """The per-student report (:func:`student_entry`) of everything graded so far, this run or earlier ones, from
    the gradebook and ``./course grade``'s record (:mod:`instructor.state`).  ``pre``: the prescans made before
    grading ({student: prescan}); a student without one is prescanned now (the report of an earlier run)."""
    release = release_notebook(root, section)
    scores = gradebook_scores(db_url, course_id, section)
    report = {"section": section, "students": {}, "batch_returncode": 0, "sandboxed": sandboxed,
              "sandbox": sandbox_line, "engine": "dask"}
    max_score = release_points(release)
    for s in students:
        st = state.get(section, {}).get(s, {})
        report["students"][s] = student_entry(root, section, s, release, scores, info=(pre or {}).get(s),
                                              faults=st.get("faults", []),
                                              why_missing=lambda st=st: st.get("reason"), max_score=max_score)
    return report


def why_not_graded(result: dict) -> str | None:
    """Why nbgrader could not grade the notebook, from its log (None when it did)."""
    if result.get("files") and result.get("success"):
        return None
    if any("worker died" in f for f in result.get("faults", [])):
        return None
    return classify_log(result.get("log") or "")
