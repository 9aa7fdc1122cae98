"""Autograde every submission of a section and print a per-student report.

    ./course grade 02_qkv_by_hand [04 ...|all] [--workers N] [--scheduler tcp://HOST:8786] [--force]
                   [--feedback] [--timeout 60] [--json report.json] [--root DIR] [--serial]

The command grades in parallel on Dask (tools/classgrade.py: one task per new or
changed submission, one writer into the gradebook).  :func:`grade` below is the
serial path (``--serial``, and the test suite's corpus batches): it runs
``nbgrader autograde <section> --create --force`` once for the whole batch
(submissions live in ``submitted/<student>/<section>/``), re-runs alone any
submission that nbgrader could not grade to learn why, then prints for every
student: the total score, each test cell that lost points with the first line of
its message, and reasons such as "cell timed out", "kernel died", "notebook is
not valid JSON", "notebook missing (found other.ipynb)", "tampering suspected: …".
One bad submission never stops the others: every step is per student and guarded.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attncourse.course import GRADING_KEEP as KEEP_ENV, grading_env  # noqa: E402

# Student code (any cell that is not locked) that tries to trick the checks.
TAMPER_PATTERNS = [
    (r"\bGRADER\b", "a student cell uses GRADER"),
    (r"\battncourse\s*\.\s*(grading|trusted|diagnose|records|judge|cases|preprocessors|sandbox)\b"
     r"|from\s+attncourse\.(grading|trusted|diagnose|records|judge|cases|preprocessors)",
     "a student cell reaches into the grader's modules"),
    (r"\b(np|numpy)\s*\.\s*(allclose|isclose|array_equal|testing(\s*\.\s*\w+)?)\s*=(?!=)",
     "rebinds a NumPy comparison"),
    (r"\btorch\s*\.\s*(allclose|equal|isclose|testing(\s*\.\s*\w+)?)\s*=(?!=)", "rebinds a torch comparison"),
    (r"\btorch\s*\.\s*(Tensor|_C\s*\.\s*TensorBase)\s*\.\s*\w+\s*=(?!=)", "monkeypatches torch.Tensor"),
    (r"setattr\(\s*(torch|np|numpy|builtins|__builtins__)\b", "setattr on a library module"),
    (r"\bbuiltins\b|__builtins__", "touches builtins"),
    (r"\bos\s*\.\s*(_exit|abort|kill)\b|\bsys\s*\.\s*exit\b|\bSystemExit\b", "tries to exit the interpreter"),
    (r"get_ipython\s*\(", "uses IPython internals"),
    (r"\bgc\s*\.\s*get_objects|sys\s*\.\s*_getframe|__closure__|__globals__|\bsys\s*\.\s*modules\b",
     "inspects interpreter internals"),
    (r"class\s+\w+\s*\(\s*(torch\s*\.\s*)?Tensor\s*\)|class\s+\w+\s*\(\s*(np\s*\.\s*|numpy\s*\.\s*)?ndarray\s*\)",
     "defines a tensor/array subclass"),
    (r"def\s+__(eq|ne|sub|rsub|array|array_ufunc|array_function|torch_function|float|bool)__\s*\(",
     "defines comparison/conversion dunders"),
    (r"print\s*\(.*(✓|\bpass(ed)?\b|\bcorrect\b|\bOK\b)", "prints fake pass text"),
    (r"vnd\.attncourse|publish_display_data|\.attncourse-inputs|graders[/\\.]data",
     "forges grader records or looks for the reference data"),
]

# What Python's parser sees in a student cell, whatever the spacing, comments or aliases (import os as o).
SUSPECT_ATTRIBUTES = {
    "displayhook": "writes a result the autograder could read as a score (sys.displayhook)",
    "display_pub": "writes a result the autograder could read as a score (display_pub)",
    "events": "registers IPython hooks around later cells",
    "input_transformers_cleanup": "rewrites later cells (IPython input transformers)",
    "input_transformers_post": "rewrites later cells (IPython input transformers)",
    "ast_transformers": "rewrites later cells (IPython AST transformers)",
    "clear_output": "clears cell outputs",
    "symlink": "creates links or changes files' permissions", "link": "creates links or changes files' permissions",
    "chmod": "creates links or changes files' permissions", "chown": "creates links or changes files' permissions",
    "system": "starts processes", "popen": "starts processes", "fork": "starts processes", "execv": "starts processes",
    "_getframe": "inspects interpreter internals", "get_objects": "inspects interpreter internals",
    "__globals__": "inspects interpreter internals", "__closure__": "inspects interpreter internals",
    "__code__": "inspects interpreter internals", "f_back": "inspects interpreter internals",
}
SUSPECT_NAMES = {
    "exec": "runs code built at run time (exec/eval/compile/__import__)",
    "eval": "runs code built at run time (exec/eval/compile/__import__)",
    "compile": "runs code built at run time (exec/eval/compile/__import__)",
    "__import__": "runs code built at run time (exec/eval/compile/__import__)",
    "get_ipython": "uses IPython internals", "clear_output": "clears cell outputs",
    "GRADER": "a student cell uses GRADER",
}
SUSPECT_MODULES = {"ctypes", "subprocess", "socket", "importlib", "inspect", "gc", "ptrace", "signal", "IPython",
                   "attncourse.grading", "attncourse.trusted", "attncourse.records", "attncourse.judge",
                   "attncourse.preprocessors", "attncourse.sandbox", "attncourse.cases"}


def ast_flags(source: str) -> list[str]:
    """What a student cell does that honest answers never need, read by Python's parser (no regex to dodge).

    Flags only: the grade never depends on them (the judge decides), they point the instructor at a cell.
    """
    import ast

    lines = [ln if not ln.lstrip().startswith(("%", "!")) else "" for ln in (source or "").splitlines()]
    try:
        tree = ast.parse("\n".join(lines))
    except SyntaxError:
        return []
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in SUSPECT_ATTRIBUTES:
            found.append(SUSPECT_ATTRIBUTES[node.attr])
        elif isinstance(node, ast.Name) and node.id in SUSPECT_NAMES:
            found.append(SUSPECT_NAMES[node.id])
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for mod in mods:
                if mod in SUSPECT_MODULES or mod.split(".")[0] in SUSPECT_MODULES:
                    found.append(f"imports {mod}")
            if isinstance(node, ast.ImportFrom):
                found += [SUSPECT_NAMES[a.name] for a in node.names if a.name in SUSPECT_NAMES]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "setattr", "delattr") and len(node.args) >= 2
              and not isinstance(node.args[1], ast.Constant)):
            found.append("reaches attributes by computed names (getattr/setattr)")
    return found


TIMEOUT_NAMES = {"KeyboardInterrupt", "CellTimeoutError"}



def _first_line(text: str, limit: int = 240) -> str:
    text = re.sub(r"\x1b\[[0-9;]*m", "", text or "").strip()
    line = text.split("\n")[0]
    return line if len(line) <= limit else line[: limit - 1] + "…"


CONFIG_FAILED = "Exception while loading config file"


class ConfigError(RuntimeError):
    """nbgrader_config.py raised: nbgrader would carry on with defaults (no judge, no limits)."""


def check_config_loaded(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    """Refuse a run in which nbgrader could not load nbgrader_config.py."""
    if CONFIG_FAILED in (proc.stdout or "") + (proc.stderr or ""):
        log = (proc.stdout or "") + (proc.stderr or "")
        start = log.find(CONFIG_FAILED)
        raise ConfigError("nbgrader could not load nbgrader_config.py; grading without it would drop the "
                          "judge of the hidden checks, the sandbox, time and memory limits:\n" + log[start:start + 2000])
    return proc


def _nbgrader(root: Path, args, timeout=None, env=None):
    cmd = [sys.executable, "-m", "nbgrader", *args]
    try:
        proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as exc:
        return subprocess.CompletedProcess(cmd, 124, exc.stdout or "", (exc.stderr or "") + "\nTIMEOUT")
    return check_config_loaded(proc)


def release_notebook(root: Path, section: str):
    import nbformat

    for base in ("release", "source"):
        p = root / base / section / f"{section}.ipynb"
        if p.is_file():
            return nbformat.read(str(p), as_version=4)
    return None


def submission_folder(root: Path, student: str, section: str) -> Path | None:
    """``submitted/<student>/<section>`` when both are real folders (not links), else None."""
    from attncourse.safefiles import plain_below

    return plain_below(Path(root) / "submitted", student, section)


def _link_target(path: Path) -> str | None:
    try:
        return os.readlink(path)
    except OSError:
        return None


def prescan(root: Path, section: str, student: str, release) -> dict:
    """What can be told before grading: missing/renamed/invalid notebooks, links, edited cells, suspicious code."""
    from attncourse.safefiles import read_tree

    out = {"fatal": None, "notes": [], "tamper": []}
    folder = submission_folder(root, student, section)
    if folder is None:
        out["fatal"] = f"submitted/{student}/{section} is a link or not a folder: not graded"
        return out
    tree = read_tree(folder)
    for rel, why in tree.refused:
        target = _link_target(folder / rel)
        if target is not None and (os.path.isabs(target) or ".." in Path(target).parts):
            out["tamper"].append(f"{rel} links outside the submission ({target}): skipped")
        else:
            out["notes"].append(f"{rel} in the submission was skipped: {why}")
    name = f"{section}.ipynb"
    if name not in tree.files:
        others = sorted(n for n in tree.files if n.endswith(".ipynb") and "/" not in n)
        refused = [why for rel, why in tree.refused if rel == name]
        out["fatal"] = (f"notebook not read ({refused[0]})" if refused else
                        f"notebook missing (found {', '.join(others)})" if others
                        else f"notebook missing (no .ipynb in submitted/{student}/{section})")
        return out
    try:
        data = json.loads(tree.files[name].decode("utf-8", errors="replace"))
        if not isinstance(data, dict) or "cells" not in data:
            raise ValueError("no cells")
    except (ValueError, OSError) as exc:
        out["fatal"] = f"notebook is not valid JSON ({_first_line(str(exc), 80)})"
        return out
    cells = [c for c in data.get("cells", []) if isinstance(c, dict)]
    sub_ids = {}
    for c in cells:
        gid = (c.get("metadata", {}).get("nbgrader") or {}).get("grade_id")
        if gid:
            sub_ids[gid] = c
    if release is not None:
        for rc in release.cells:
            meta = rc.metadata.get("nbgrader", {})
            gid = meta.get("grade_id")
            if not gid or not meta.get("locked"):
                continue
            kind = "setup cell" if gid == "setup" else ("test cell" if meta.get("grade") else "locked cell")
            sc = sub_ids.get(gid)
            if sc is None:
                restored = "restored and scored" if meta.get("grade") else "not restored: the grader did not run"
                out["tamper"].append(f"{kind} {gid} was deleted ({restored})")
            else:
                src = sc.get("source", "")
                src = "".join(src) if isinstance(src, list) else src
                if src.strip() != rc.source.strip() and "HIDDEN TESTS" not in src:
                    out["tamper"].append(f"{kind} {gid} was edited (restored from the gradebook)")
    found = []
    for c in cells:
        meta = c.get("metadata", {}).get("nbgrader") or {}
        if c.get("cell_type") != "code" or meta.get("locked"):
            continue
        src = c.get("source", "")
        src = "".join(src) if isinstance(src, list) else src
        where = meta.get("grade_id") or "an extra cell"
        for pat, why in TAMPER_PATTERNS:
            if re.search(pat, src):
                found.append(f"{why} ({where})")
        found += [f"{why} ({where})" for why in ast_flags(src)]
    out["tamper"] += list(dict.fromkeys(found))
    return out


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
    return "autograde failed: " + _first_line(errors[-1].split("]", 1)[-1] if errors else log[-200:])


def cell_failures(nb) -> tuple[list, list]:
    """(failures, reasons) from an autograded notebook: test cells that errored, and timeouts."""
    failures, reasons = [], []
    for idx, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        meta = cell.metadata.get("nbgrader", {})
        gid = meta.get("grade_id") or f"cell {idx + 1}"
        errs = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        stderr = [o for o in cell.get("outputs", []) if o.get("output_type") == "stream" and o.get("name") == "stderr"]
        for e in errs:
            if e.get("ename") in TIMEOUT_NAMES:
                reasons.append(f"cell timed out ({gid})")
                break
            if e.get("ename") == "TamperingSuspected":
                reasons.append(f"tampering suspected: {gid}: {_first_line(e.get('evalue', ''), 160)}")
        for o in cell.get("outputs", []):
            text = o.get("text", "") if o.get("output_type") == "stream" else o.get("evalue", "")
            m = re.search(r"\(tampering suspected: ([^)]*)\)", text or "")
            if m:
                reasons.append(f"tampering suspected: {m.group(1)}")
        if meta.get("grade") and (errs or stderr):
            if errs:
                e = errs[-1] if errs[-1].get("ename") == "TamperingSuspected" else errs[0]
                name = e.get("ename", "Error")
                msg = _first_line(e.get("evalue", ""))
                text = msg if name == "GradingError" else f"{name}: {msg}" if msg else name
            else:
                text = "printed on stderr: " + _first_line("".join(o.get("text", "") for o in stderr))
            failures.append((gid, text))
    return failures, list(dict.fromkeys(reasons))


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
    """Autograded cells whose gradebook score says otherwise than their ✓/✗ verdict (never expected: the judge sets
    what nbgrader scores; a line here means something else wrote a score)."""
    failed = {gid for gid, _ in failures}
    out = []
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        gid = meta.get("grade_id")
        if cell.cell_type != "code" or not meta.get("grade") or gid not in cells:
            continue
        score, full = cells[gid]
        if not full:
            continue
        if (gid in failed and score) or (gid not in failed and score != full):
            out.append(f"score and verdict disagree in {gid} ({score:g} / {full:g} in the gradebook, "
                       f"{'✗' if gid in failed else '✓'} in the notebook)")
    return out


def release_points(release) -> float:
    """The points of a section's graded cells (the maximum of a submission nbgrader could not score)."""
    try:
        return float(sum(float(c.metadata["nbgrader"].get("points", 0)) for c in (release.cells if release else [])
                         if c.metadata.get("nbgrader", {}).get("grade")))
    except Exception:  # noqa: BLE001
        return 0.0


def grade(section: str, root: Path = ROOT, timeout: int | None = None, students=None, log=print,
          extra_env: dict | None = None) -> dict:
    root = Path(root)
    t0 = time.time()
    subdir = root / "submitted"
    all_students = sorted(p.name for p in subdir.iterdir() if (p / section).is_dir()) if subdir.is_dir() else []
    from attncourse.sandbox import sandbox_status

    env = grading_env(keep=KEEP_ENV, extra=extra_env)
    sandboxed, sandbox_line = sandbox_status(env)
    if sandboxed is None:
        from tools.classgrade import CourseError

        raise CourseError(sandbox_line)
    students = [s for s in all_students if not students or s in students]
    release = release_notebook(root, section)
    pre = {}
    for s in students:
        try:
            pre[s] = prescan(root, section, s, release)
        except Exception as exc:  # noqa: BLE001 - a report, never a crash
            pre[s] = {"fatal": None, "notes": [f"could not prescan: {exc}"], "tamper": []}
    extra = [f"--IsolatedExecute.timeout={timeout}"] if timeout else []
    if len(students) == len(all_students):
        batch = _nbgrader(root, ["autograde", section, "--create", "--force", *extra], env=env)
    else:
        for s in students:
            batch = _nbgrader(root, ["autograde", section, "--create", "--force", f"--student={s}", *extra], env=env)
    if not students:
        batch = subprocess.CompletedProcess([], 0, "", "")
    report = {"section": section, "students": {}, "batch_returncode": batch.returncode,
              "sandboxed": sandboxed, "sandbox": sandbox_line}
    from tools.classgrade import course_db, gradebook_scores

    scores = gradebook_scores(*course_db(root), section) if students else {}
    for s in students:
        def why_missing(s=s):  # nbgrader could not grade it: grade it alone to learn why
            single = _nbgrader(root, ["autograde", section, "--create", "--force", f"--student={s}", *extra], env=env)
            return classify_log(single.stdout + single.stderr)

        entry = student_entry(root, section, s, release, scores, info=pre[s], why_missing=why_missing)
        report["students"][s] = entry
    report["seconds"] = round(time.time() - t0, 1)
    log(format_report(report, color=log is print and sys.stdout.isatty()))
    return report


def format_report(report: dict, color: bool = False) -> str:
    run = report.get("run") or {}
    took = (f"this run took {report['seconds']} s" if run.get("sections", 1) == 1 else
            f"this run, {run['sections']} sections together, took {report['seconds']} s")
    sandbox = report.get("sandbox", "")
    if color and not report.get("sandboxed"):
        sandbox = f"\x1b[1;31m{sandbox}\x1b[0m"   # grading without the sandbox: in red
    lines = [f"{report['section']}: {len(report['students'])} submissions; {took}", sandbox, ""]
    for s, e in report["students"].items():
        lines.append(f"{s:<24} {e['score']:g} / {e['max_score']:g}")
        for gid, text in e["failures"]:
            lines.append(f"    ✗ {gid}: {text}")
        for r in e["reasons"]:
            lines.append(f"    ! {r}")
    return "\n".join(lines)


def resolve_sections(names, root: Path = ROOT, prog: str = "./course grade") -> list:
    """Section names from the command line: full names, NN prefixes, or ``all`` (every section with submissions)."""
    from attncourse.course import SECTIONS

    out = []
    for name in names:
        if name == "all":
            sub = Path(root) / "submitted"
            have = {p.name for st in sub.iterdir() if st.is_dir() for p in st.iterdir()} if sub.is_dir() else set()
            out += [s for s in SECTIONS if s in have]
            continue
        if name in SECTIONS:
            out.append(name)
            continue
        match = [s for s in SECTIONS if s.startswith(name.zfill(2) if name.isdigit() else name)]
        if len(match) != 1:
            raise SystemExit(f"{prog}: unknown section {name!r}; one of {', '.join(SECTIONS)} or all")
        out.append(match[0])
    return list(dict.fromkeys(out))


def main(argv=None):
    ap = argparse.ArgumentParser(prog="./course grade", description=__doc__.split("\n")[0])
    ap.add_argument("sections", nargs="+", metavar="SECTION", help="NN, NN_name, or all")
    ap.add_argument("--root", default=str(ROOT), help="course folder (default: this one)")
    ap.add_argument("--timeout", type=int, default=None, help="per-cell timeout in seconds (default: config)")
    ap.add_argument("--student", action="append", help="only these students")
    ap.add_argument("--json", help="also write the report as JSON here (one section: its report; several: by section)")
    ap.add_argument("--workers", type=int, default=None, help="local Dask worker processes (default: one per core)")
    ap.add_argument("--scheduler", default=None,
                    help="use a running Dask cluster, e.g. tcp://HOST:8786 (default: $ATTNCOURSE_DASK_SCHEDULER)")
    ap.add_argument("--force", action="store_true", help="regrade every submission, changed or not")
    ap.add_argument("--regrade", action="store_true",
                    help="regrade the named sections for everyone (same as --force; changed tests are also "
                         "detected by themselves)")
    ap.add_argument("--feedback", action="store_true", help="also write feedback/<student>/<section>/ HTML, in parallel")
    ap.add_argument("--task-timeout", type=float, default=None, help="seconds one submission may take in all (900)")
    ap.add_argument("--serial", action="store_true",
                    help="the old path: one plain `nbgrader autograde` batch per section, no Dask")
    ap.add_argument("--unsandboxed", action="store_true",
                    help="grade WITHOUT the bubblewrap sandbox (student code can read the reference data and "
                         "any file of this account); the report says so in red")
    args = ap.parse_args(argv)
    root = Path(args.root)
    if args.unsandboxed:
        import os

        os.environ["ATTNCOURSE_SANDBOX"] = "0"
    sections = resolve_sections(args.sections, root)
    if not sections:
        print("./course grade: no submissions under submitted/ for " + " ".join(args.sections), file=sys.stderr)
        return 2
    from tools.classgrade import DEFAULT_TASK_TIMEOUT, CourseError, grade_class, ready

    try:
        if args.serial:
            ready(root, sections)   # grade_class checks the same itself
            reports = {sec: grade(sec, root, args.timeout, args.student) for sec in sections}
        else:
            reports = grade_class(root, sections, workers=args.workers, scheduler=args.scheduler,
                                  force=args.force or args.regrade, timeout=args.timeout,
                                  task_timeout=args.task_timeout or DEFAULT_TASK_TIMEOUT, students=args.student,
                                  feedback=args.feedback)
            for sec in sections:
                print(format_report(reports[sec], color=sys.stdout.isatty()))
                now = len(reports[sec].get("graded_now", []))
                print(f"({now} graded now, {len(reports[sec]['students']) - now} unchanged since the last run)\n")
    except CourseError as exc:
        print(f"./course grade: {exc}", file=sys.stderr)
        return 2
    if args.json:
        out = reports[sections[0]] if len(sections) == 1 else reports
        Path(args.json).write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
