"""One student's outcome in a grading run, as the instructor's report shows it: score, failed cells, reasons.

One :func:`student_entry` serves both executors of the one engine (:mod:`instructor.engine`): the score comes from the
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


NOT_GRADED = "not graded"
# what a log says when the machine, not the notebook, ran out of something (processes or threads, memory, disk,
# descriptors) or a kernel could not be started at all
MACHINE_SIGNS = ("resource temporarily unavailable", "cannot allocate memory", "can't start new thread",
                 "no space left on device", "too many open files", "blockingioerror", "kernel did not start",
                 "kernel didn't respond", "the fork server did not start")


def not_graded(why: str) -> str:
    """The reason of a submission that was not graded (no score stands for it; the next run grades it again)."""
    return f"{NOT_GRADED}: {why}"


def machine_trouble(log: str) -> str | None:
    """The line of ``log`` saying the machine ran out of something or a kernel could not start, or None."""
    low = (log or "").lower()
    for sign in MACHINE_SIGNS:
        i = low.find(sign)
        if i >= 0:
            start = low.rfind("\n", 0, i) + 1
            end = low.find("\n", i)
            return first_line(log[start:end if end >= 0 else None].split("]", 1)[-1].strip(), 200)
    return None


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
    trouble = machine_trouble(log)
    if trouble:
        return f"the machine ran out: {trouble}"
    errors = [ln for ln in log.splitlines() if "ERROR]" in ln and "There was an error" not in ln
              and "Please see" not in ln]
    return "autograde failed: " + first_line(errors[-1].split("]", 1)[-1] if errors else log[-200:])


# what a grading run's log says when its kernel could not run at all, most telling first: the judge's own lines
# (judge/kernels.py, judge/sandbox.py), then nbclient's
KERNEL_SIGNS = ("kernel died before replying", "the grading kernel stopped", "grading refused",
                "kernel didn't respond", "the fork server did not start", "deadkernelerror", "kernel died")


def log_reason(log: str) -> str:
    """The one line of a grading run's log that says why nothing was graded: the line naming a kernel that died or
    stopped (with its exit status and last lines) or grading refused, from where that sign starts; else the
    machine's trouble; else the last error line nbgrader logged; else its last line.  Never a fragment of a line
    cut at a fixed offset."""
    lines = [ln for ln in (log or "").splitlines() if ln.strip()
             and not ln.lstrip().startswith(("raise ", "File \""))]   # (a traceback's source lines say nothing)
    for sign in KERNEL_SIGNS:
        for ln in reversed(lines):
            i = ln.lower().find(sign)
            if i >= 0:
                return first_line(ln[i:], 300)
    trouble = machine_trouble(log)
    if trouble:
        return trouble
    errors = [ln for ln in lines if "ERROR]" in ln and "There was an error" not in ln and "Please see" not in ln]
    last = errors[-1] if errors else (lines[-1] if lines else "")
    return first_line(last.split("] ", 1)[-1] if last.startswith("[") else last, 300)


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

    entry = {"score": 0.0, "max_score": None, "failures": [], "reasons": [], "not_graded": None}
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
    entry["not_graded"] = next((r for r in entry["reasons"] if r.startswith(NOT_GRADED)), None)
    if entry["not_graded"]:   # no score stands for it, not even a 0: out of the class's distribution too
        entry["score"], entry["failures"] = 0.0, []
        entry.pop("cells", None)
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
        if e.get("not_graded"):
            lines.append(f"{inert(s):<24} {NOT_GRADED} (of {e['max_score']:g})")
        else:
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
    if any("worker died" in f or f.startswith(NOT_GRADED) for f in result.get("faults", [])):
        return None
    return classify_log(result.get("log") or "")


# -- a notebook the machine, not the student, kept from being graded -----------------------------------------------
RUNAWAY = "grading took longer than"   # the watchdog's fault (instructor.task): the notebook's own doing


def retry_alone(result: dict) -> bool:
    """Whether a Dask task's result is a notebook nothing could be graded of for a reason the machine (or a
    notebook graded beside it) could cause: its worker died, the grader failed, its kernel did not start, the log
    says the machine ran out of something, its kernel died while the machine's OOM killer killed something (or
    where that is not known: ``oom_kills``, :func:`instructor.task.oom_kills`).  Such a notebook is graded again,
    alone on the cluster, once the others are done.  A notebook that was graded, or that ran past the watchdog,
    is not; nor one whose kernel died while no process anywhere was killed for memory: no neighbour can kill a
    sandboxed kernel but through the machine's memory (each kernel has its own PID namespace and limits), so it
    died by its own doing (``os.kill``, its own limits) and is scored as it is, 0 with "kernel died"."""
    if result.get("files") and result.get("success"):
        return False
    faults = result.get("faults", [])
    if any(RUNAWAY in f or f.startswith("not graded on worker") for f in faults):
        return False
    if any("worker died" in f or f.startswith("grading failed") for f in faults):
        return True
    log = result.get("log") or ""
    reason = classify_log(log)
    if machine_trouble(log) is not None or "did not start" in reason:
        return True
    return "kernel died" in reason and result.get("oom_kills") != 0


def alone_verdict(result: dict) -> str | None:
    """After a notebook was graded again alone and still nothing came of it: the "not graded" reason when the
    cause is still the machine's (a dead worker, a failing grader, a kernel that could not start, a machine out of
    something), else None: its kernel died with nothing else running, its own doing, and it scores 0 with that
    reason as any notebook whose kernel dies."""
    faults = result.get("faults", [])
    if any("worker died" in f for f in faults):
        return not_graded("the worker grading it died twice, the second time grading it alone (the machine ran out "
                          "of memory or processes, or this notebook is what kills it)")
    failed = next((f for f in faults if f.startswith("grading failed")), None)
    if failed:
        return not_graded(f"the grader failed twice ({failed})")
    log = result.get("log") or ""
    trouble = machine_trouble(log)
    if trouble:
        return not_graded(f"the machine ran out, twice: {trouble}")
    if "did not start" in classify_log(log):
        return not_graded("its kernel did not start, twice")
    return None
