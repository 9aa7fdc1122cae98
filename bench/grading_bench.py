"""Class grading: serial `nbgrader autograde` vs `./course grade` on Dask (1 and 2 local workers, and a real cluster).

    .venv/bin/python -m bench.grading_bench [--sections 02 04] [--per-section 40] [--modes serial,dask1,dask2,cluster]

A synthetic class per section, built like the test suite builds its submissions:
the instructor's solution, every known mistake of graders/sNN.py injected into its
solution cell (one exercise wrong per notebook), the untouched release, and for
section 02 the fault corpus tests/corpus/f_*.py (infinite loop, memory hog, dead
kernel, invalid JSON, …), cycled until each section has ``per-section`` submissions.
Notebooks are slimmed to their nbgrader cells (setup, solutions, tests) as in the
test suite, so that the bench runs in minutes.  Each mode grades its own copy of
the course from scratch (fresh gradebook), with the same limits (cell timeout 10 s,
check timeout 5 s, 2 GB per kernel).  Mode ``cluster`` starts a `dask scheduler` and
two `dask worker --nthreads 1` processes on 127.0.0.1 and grades through
``--scheduler``.  The per-cell scores of every Dask mode are compared with the
serial run's.  Then ``--breakdown`` ordinary notebooks per section (the instructor's and
known mistakes) are graded once more, one at a time in this process, by the very task a
worker runs, to show where a notebook's seconds go (kernel start and stop, imports,
student code, visible and hidden checks, the judge, the gradebooks).  Modes may be
left out (``--modes ""`` runs only the breakdown).  Each mode's CPU seconds are counted
too (the machine's counters, :class:`CpuMeter`): what a run costs the machine beside the
wall time it takes.  Results: bench/grading_results.md
and .json.  The machine's load average is recorded before and after each mode (other
work on the machine slows the parallel modes most).
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

ENV = {"ATTNCOURSE_KERNEL_MEM_MB": "2048", "ATTNCOURSE_CHECK_TIMEOUT": "5"}
CELL_TIMEOUT = 10


def _submissions(course, section: str, n: int, whole: bool = False) -> dict:
    """``n`` submissions of ``section``, cycling through the instructor's, the blank, every fault of tests/corpus and
    the named mistakes; ``whole``: each the whole notebook a student hands in (its demos and plots too), else slimmed
    to its nbgrader cells."""
    from tests import harness
    from graders import available_sections, load_section

    cut = (lambda nb: nb) if whole else harness.slim
    source = cut(course.source_nb(section))
    release = cut(course.release_nb(section))
    subs = [("instructor", source), ("blank", release)]   # the faults next: all of them within the first 40
    if section == harness.CORPUS_SECTION:
        for name, mod in harness.corpus_cases("faults").items():
            nb = copy.deepcopy(source)
            if getattr(mod, "SDPA", None):
                nb = harness.with_cells(nb, {harness.CORPUS_CELL: mod.SDPA})
            fname = None
            if hasattr(mod, "build"):
                nb = mod.build(nb)
                if isinstance(nb, tuple):
                    fname, nb = nb
            subs.append((name, (fname, nb)))
    if section in available_sections():
        spec = load_section(section)
        for e in spec.exercises:
            for m in e.mistakes:
                subs.append((f"m_{e.name}_{m.key}", harness.with_cells(source, {e.cell: m.code})))
    out = {}
    i = 0
    while len(out) < n:
        name, nb = subs[i % len(subs)]
        out[f"s{len(out):03d}_{name}"[:60]] = nb
        i += 1
    return out


def build_class(base: Path, sections: list, per_section: int, whole: bool = False) -> Path:
    """A course folder with the generated assignments and every submission (the template of each mode's copy);
    ``whole``: whole notebooks (:func:`_submissions`)."""
    from tests import harness

    course = harness.Course(base / "template", sections)
    for s in sections:
        course.generate(s)
        for student, nb in _submissions(course, s, per_section, whole).items():
            fname = None
            if isinstance(nb, tuple):
                fname, nb = nb
            course.submit(student, s, nb, name=fname)
    return course.root


def _copy(template: Path, dest: Path) -> Path:
    shutil.copytree(template, dest)
    return dest


def _cells(root: Path, sections) -> dict:
    from nbgrader.api import Gradebook

    out = {}
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        for s in sections:
            for sub in gb.find_assignment(s).submissions:
                out[f"{s}/{sub.student.id}"] = {g.name: g.auto_score for nb in sub.notebooks for g in nb.grades}
    return out


def run_serial(root: Path, sections) -> float:
    from judge.environment import grading_env

    env = grading_env(keep=tuple(ENV), extra=ENV)
    t0 = time.time()
    for s in sections:
        subprocess.run([sys.executable, "-m", "nbgrader", "autograde", s, "--create", "--force",
                        f"--Execute.timeout={CELL_TIMEOUT}"], cwd=root, env=env, capture_output=True, text=True)
    return time.time() - t0


def run_dask(root: Path, sections, workers=None, scheduler=None, security=None) -> tuple[float, dict]:
    from instructor.engine import grade_class

    t0 = time.time()
    reports = grade_class(root, sections, workers=workers, scheduler=scheduler, force=True, timeout=CELL_TIMEOUT,
                          extra_env=ENV, log=lambda *a: None, security=security)
    return time.time() - t0, reports


def _spin(n: int) -> float:
    t = time.perf_counter()
    x = 0
    for i in range(n):
        x += i * i
    return time.perf_counter() - t


class CpuMeter:
    """CPU seconds the whole machine spends while the meter runs (``psutil.cpu_times()``: user, nice, system, irq,
    softirq; idle, iowait and steal left out), and this process's own share.  The machine's counters see every
    process a run starts (workers, fork servers, kernels, nbgrader) at no cost to the run; on a machine doing
    nothing else (the load average is recorded beside it) they measure what the run cost.  A two-core machine
    gives a run at most 2 CPU-seconds per second of wall time."""

    FIELDS = ("user", "nice", "system", "irq", "softirq")

    def _machine(self) -> float:
        import psutil

        t = psutil.cpu_times()
        return sum(getattr(t, f, 0.0) for f in self.FIELDS)

    @staticmethod
    def _own() -> float:
        t = os.times()
        return t.user + t.system

    def __enter__(self):
        self._start = (self._machine(), self._own())
        return self

    def __exit__(self, *exc):
        self.seconds = self._machine() - self._start[0]
        self.own = self._own() - self._start[1]


def machine_parallelism(n: int = 20_000_000, procs: int = 2, rounds: int = 3) -> dict:
    """How much faster ``procs`` CPU-bound processes finish side by side than one after the other, on this machine:
    the ceiling of any ``procs``-worker speed-up here (2.0 on two real cores; two vCPUs that share a physical core,
    or a throttled VM, give less).  Measured ``rounds`` times, one alone then ``procs`` together each round: the
    ceiling is the median round's (a VM's speed drifts within seconds: one round gave 1.62 and another 2.3 in the
    same minute), never above ``procs`` (a round above it says only that the machine sped up meanwhile)."""
    import multiprocessing as mp

    ratios, alone_s, together_s = [], [], []
    with mp.get_context("spawn").Pool(procs) as pool:
        pool.map(_spin, [1000] * procs)   # the pool's processes started before the clock
        for _ in range(rounds):
            alone = _spin(n)
            t = time.perf_counter()
            pool.map(_spin, [n] * procs)
            together = time.perf_counter() - t
            alone_s.append(alone)
            together_s.append(together)
            ratios.append(procs * alone / together)
    return {"one_alone_s": round(statistics.median(alone_s), 2), f"{procs}_together_s": round(statistics.median(together_s), 2),
            "rounds": [round(r, 2) for r in ratios], "ceiling": round(min(procs, statistics.median(ratios)), 2)}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_cluster(root: Path, sections) -> tuple[float, dict, float]:
    """A scheduler and two single-threaded workers on 127.0.0.1, started here as docs/GRADING.md asks of a cluster
    given by address (TLS with a certificate made for the run, private scratch folders, no dashboard); returns
    (grading s, reports, start s)."""
    from distributed import Security

    from instructor.cluster import tls_security

    port = _free_port()
    private = Path(tempfile.mkdtemp(prefix="attncourse-bench-cluster-"))   # 0700: the certificates, the scratch
    temp = Security.temporary()
    (private / "ca.pem").write_text(temp.tls_ca_file)
    (private / "key.pem").write_text(temp.tls_client_key)
    tls = ["--tls-ca-file", str(private / "ca.pem"), "--tls-cert", str(private / "ca.pem"),
           "--tls-key", str(private / "key.pem")]
    env = {**os.environ, "PYTHONPATH": str(HERE) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "DASK_TEMPORARY_DIRECTORY": str(private), "DASK_DISTRIBUTED__SCHEDULER__HTTP__ROUTES": "[]",
           "DASK_DISTRIBUTED__WORKER__HTTP__ROUTES": "[]"}
    bindir = Path(sys.executable).parent
    procs = []
    t0 = time.time()
    address = f"tls://127.0.0.1:{port}"
    security = tls_security(str(private / "ca.pem"), str(private / "ca.pem"), str(private / "key.pem"))
    try:
        procs.append(subprocess.Popen([str(bindir / "dask"), "scheduler", "--host", "127.0.0.1", "--port", str(port),
                                       "--protocol", "tls", "--no-dashboard", *tls], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=HERE))
        for _ in range(2):
            procs.append(subprocess.Popen([str(bindir / "dask"), "worker", address, "--nthreads", "1", "--nworkers",
                                           "1", "--memory-limit", "0", "--no-dashboard", "--host", "127.0.0.1",
                                           "--local-directory", str(private), *tls],
                                          env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=HERE))
        from distributed import Client

        with Client(address, timeout="60s", security=security) as c:
            c.wait_for_workers(2, timeout=120)
        started = time.time() - t0
        secs, reports = run_dask(root, sections, scheduler=address, security=security)
        return secs, reports, started
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(private, ignore_errors=True)


def seconds_per_notebook(root: Path) -> dict:
    """Where a notebook's seconds go, from the Dask tasks' own timings (.classgrade/state.json)."""
    state = json.loads((root / ".classgrade" / "state.json").read_text())
    setup, auto, total = [], [], []
    for sec in state.values():
        for e in sec.values():
            t = e.get("seconds") or {}
            if t:
                setup.append(t["setup"]), auto.append(t["autograde"]), total.append(t["total"])
    med = lambda xs: round(statistics.median(xs), 2) if xs else None  # noqa: E731
    return {"tasks": len(total), "median_total": med(total), "median_autograde": med(auto),
            "median_setup": med(setup), "max_setup (first task on a worker: imports + generate_assignment)":
            round(max(setup), 1) if setup else None}


def _cell_seconds(cell) -> float:
    """A cell's run time from nbclient's record (metadata.execution)."""
    from datetime import datetime

    ex = cell.get("metadata", {}).get("execution", {})
    a, b = ex.get("iopub.execute_input"), ex.get("shell.execute_reply")
    if not (a and b):
        return 0.0
    parse = lambda t: datetime.fromisoformat(t.replace("Z", "+00:00"))  # noqa: E731
    return max(0.0, (parse(b) - parse(a)).total_seconds())


def _cell_kind(cell) -> str:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    if meta.get("grade_id") == "setup":
        return "imports (setup cell)"
    if meta.get("solution"):
        return "student code (solution cells)"
    if meta.get("grade"):
        return ("hidden checks (kernel)" if "GRADER.check" in cell.get("source", "")
                else "visible checks (kernel)")
    return "other cells"


def _breakdown_students(root: Path, section: str, n: int) -> list:
    """The first ``n`` ordinary submissions (the instructor's and known mistakes; no faults, no blank)."""
    names = sorted(p.name for p in (root / "submitted").iterdir() if (p / section).is_dir())
    return [s for s in names if s.endswith("_instructor") or "_m_" in s][:n]


def breakdown_table(breakdown: dict) -> list:
    """Markdown: where a task's seconds go, one column per section."""
    if not breakdown:
        return []
    secs = list(breakdown)
    keys = [k for k in breakdown[secs[0]] if k != "notebooks"]
    lines = ["Where one notebook's seconds go (median over "
             + ", ".join(f"{breakdown[s]['notebooks']} notebooks of {s}" for s in secs)
             + "; one task graded in this process as a worker grades it, after a warm-up task):", "",
             "| part | " + " | ".join(secs) + " |", "|---|" + "---|" * len(secs)]
    for k in keys:
        lines.append(f"| {k} | " + " | ".join(f"{breakdown[s][k]:.2f}" for s in secs) + " |")
    return lines


def task_breakdown(template: Path, section: str, students: list) -> dict:
    """Where one Dask task's seconds go, measured on ``students``' submissions graded in this process.

    Runs :func:`instructor.task.grade_task` exactly as a worker does (after one warm-up
    task: a worker pays its imports and the generate_assignment template once), with every
    nbconvert preprocessor timed and the executed notebook's per-cell times (nbclient's
    records) read before nbgrader clears them; then records each result into a copy of
    the course's gradebook as the one writer does.  Median seconds per notebook.
    """
    from collections import defaultdict

    from nbclient import NotebookClient
    from nbconvert.preprocessors import Preprocessor
    from nbgrader.converters.autograde import Autograde

    from instructor.config import course_db, load_config
    from instructor.gradebook import duedate
    from instructor.gradebook import record_result
    from instructor.kit import make_kit, submission_files
    from instructor.task import TaskSettings, grade_task, task_environment

    course = _copy(template, template.parent / f"breakdown-{section}")
    db_url, course_id = course_db(course)
    kit = make_kit(course, section)
    due = duedate(db_url, course_id, section)
    config = load_config(course)
    _, task_env = task_environment(ENV)
    rows, row = [], None
    orig_call, orig_init = Preprocessor.__call__, Autograde.init_assignment

    def timed_call(self, nb, resources):
        t = time.perf_counter()
        nb, resources = orig_call(self, nb, resources)
        dt = time.perf_counter() - t
        if row is not None:
            row["preprocessor " + type(self).__name__] += dt
            if isinstance(self, NotebookClient):  # nbgrader's Execute: kernel start + cells + shutdown
                cells = defaultdict(float)
                for c in nb.cells:
                    if c.cell_type == "code":
                        cells[_cell_kind(c)] += _cell_seconds(c)
                row.update(cells)
                row["kernel start and stop"] += dt - sum(cells.values())
        return nb, resources

    def timed_init(self, *a, **k):
        t = time.perf_counter()
        try:
            return orig_init(self, *a, **k)
        finally:
            if row is not None:
                row["nbgrader: submission into its gradebook"] += time.perf_counter() - t

    Preprocessor.__call__, Autograde.init_assignment = timed_call, timed_init
    try:
        for i, student in enumerate([students[0]] + list(students)):
            files = submission_files(course, student, section)
            row = defaultdict(float) if i else None          # the first run is the warm-up
            t = time.perf_counter()
            result = grade_task(kit, student, files, due, TaskSettings(CELL_TIMEOUT, env=task_env))
            total = time.perf_counter() - t
            if row is None:
                continue
            t = time.perf_counter()
            record_result(course, db_url, course_id, result, config)
            row["coordinator: record into the course gradebook"] = time.perf_counter() - t
            row["task total"] = total
            rows.append(row)
    finally:
        Preprocessor.__call__, Autograde.init_assignment = orig_call, orig_init
        shutil.rmtree(course, ignore_errors=True)
    med = {k: statistics.median(r.get(k, 0.0) for r in rows) for k in {k for r in rows for k in r}}
    pre = {k.removeprefix("preprocessor "): v for k, v in med.items() if k.startswith("preprocessor ")}
    named = ("IsolatedExecute", "JudgeRecords", "SaveAutoGrades", "AssignLatePenalties")  # split out below
    parts = {
        "kernel start and stop": med.get("kernel start and stop", 0.0),
        "imports (setup cell)": med.get("imports (setup cell)", 0.0),
        "student code (solution cells)": med.get("student code (solution cells)", 0.0),
        "visible checks (kernel)": med.get("visible checks (kernel)", 0.0),
        "hidden checks (kernel)": med.get("hidden checks (kernel)", 0.0),
        "other cells": med.get("other cells", 0.0),
        "judge (JudgeRecords, nbgrader process)": pre.get("JudgeRecords", 0.0),
        "gradebook (nbgrader: submission, SaveAutoGrades, AssignLatePenalties)":
            med.get("nbgrader: submission into its gradebook", 0.0) + pre.get("SaveAutoGrades", 0.0)
            + pre.get("AssignLatePenalties", 0.0),
        "other nbgrader preprocessors": sum(v for k, v in pre.items() if k not in named),
        "coordinator: record into the course gradebook": med.get("coordinator: record into the course gradebook", 0.0),
    }
    accounted = sum(v for k, v in parts.items() if not k.startswith("coordinator"))
    parts["rest of the task (copies, files, nbgrader's own work)"] = med.get("task total", 0.0) - accounted
    parts["task total"] = med.get("task total", 0.0)
    return {"notebooks": len(rows), **{k: round(v, 3) for k, v in parts.items()}}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sections", nargs="+", default=["02", "04"])
    ap.add_argument("--per-section", type=int, default=40)
    ap.add_argument("--modes", default="serial,dask1,dask2,cluster")
    ap.add_argument("--out", default=str(HERE / "bench" / "grading_results"))
    ap.add_argument("--breakdown", type=int, default=10, help="notebooks per section timed part by part")
    ap.add_argument("--report", default=None, help="also write ./course report of the dask2 run here (a folder)")
    args = ap.parse_args(argv)
    from instructor.config import resolve_sections

    sections = resolve_sections(args.sections, HERE)
    modes = [m for m in args.modes.split(",") if m]
    base = Path(tempfile.mkdtemp(prefix="attncourse-gradebench-"))
    results = {"sections": sections, "per_section": args.per_section, "cpus": os.cpu_count(), "modes": {},
               "parallelism": machine_parallelism()}
    print("parallelism", json.dumps(results["parallelism"]), flush=True)
    try:
        t = time.time()
        template = build_class(base, sections, args.per_section)
        print(f"class built in {time.time() - t:.0f} s: {len(sections)} × {args.per_section} submissions", flush=True)
        serial_cells = None
        for mode in modes:
            root = _copy(template, base / mode)
            load0 = os.getloadavg()[0]
            extra = {}
            meter = CpuMeter()
            if mode == "serial":
                with meter:
                    secs = run_serial(root, sections)
            elif mode.startswith("dask"):
                with meter:
                    secs, _ = run_dask(root, sections, workers=int(mode[4:] or 2))
                extra["per_notebook"] = seconds_per_notebook(root)
                if args.report and mode == "dask2":
                    from instructor.report import write_report

                    for sec in sections:
                        print("report:", write_report(root, sec, Path(args.report)), flush=True)
            elif mode == "cluster":
                with meter:
                    secs, _, started = run_cluster(root, sections)
                extra["cluster_start_s"] = round(started, 1)
                extra["per_notebook"] = seconds_per_notebook(root)
            else:
                raise SystemExit(f"unknown mode {mode}")
            cells = _cells(root, sections)
            if mode == "serial":
                serial_cells = cells
            same = None
            if serial_cells is not None and mode != "serial":
                diff = sorted(k for k in set(cells) | set(serial_cells) if cells.get(k) != serial_cells.get(k))
                same = "yes" if not diff else f"no: {len(diff)} differ ({', '.join(diff[:4])})"
            extra["cpu"] = {"seconds": round(meter.seconds, 1), "this_process": round(meter.own, 1)}
            results["modes"][mode] = {"seconds": round(secs, 1), "load_before": round(load0, 2),
                                      "load_after": round(os.getloadavg()[0], 2), "submissions": len(cells),
                                      "same_scores_as_serial": same, **extra}
            print(mode, json.dumps(results["modes"][mode]), flush=True)
        results["task_breakdown"] = {s: task_breakdown(template, s, _breakdown_students(template, s, args.breakdown))
                                     for s in sections} if args.breakdown > 0 else {}
        print("breakdown", json.dumps(results["task_breakdown"]), flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    s = results["modes"].get("serial", {}).get("seconds")
    lines = [f"# Class grading bench ({', '.join(sections)}; {args.per_section} submissions per section; "
             f"{os.cpu_count()} CPUs)", "",
             "| mode | wall s | speed-up vs serial | machine's CPU s (this process's) | cores busy | "
             "load avg before → after | same per-cell scores as serial |",
             "|---|---|---|---|---|---|---|"]
    for mode, r in results["modes"].items():
        up = f"{s / r['seconds']:.2f}×" if s and r["seconds"] else ""
        cpu = r["cpu"]
        busy = f"{cpu['seconds'] / r['seconds']:.2f}" if r["seconds"] else ""
        lines.append(f"| {mode} | {r['seconds']} | {up} | {cpu['seconds']} ({cpu['this_process']}) | {busy} | "
                     f"{r['load_before']} → {r['load_after']} | {r['same_scores_as_serial'] or ''} |")
    par = results["parallelism"]
    lines += ["", f"This machine's ceiling for two workers: two CPU-bound Python processes side by side finish "
              f"{par['ceiling']:.2f}× faster than one after the other ({par['one_alone_s']} s alone, "
              f"{par['2_together_s']} s for two at once).", "", "Per notebook (Dask tasks): " + json.dumps({m: r.get("per_notebook") for m, r in
                                                              results["modes"].items() if r.get("per_notebook")}),
              ""] + breakdown_table(results.get("task_breakdown") or {})
    Path(args.out + ".md").write_text("\n".join(lines) + "\n")
    Path(args.out + ".json").write_text(json.dumps(results, indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
