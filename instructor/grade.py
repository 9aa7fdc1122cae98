"""``./course grade``: autograde every submission of the named sections and print a per-student report.

    ./course grade 02_qkv_by_hand [04 ...|all] [--workers N] [--scheduler tls://HOST:8786] [--force]
                   [--feedback] [--timeout 60] [--json report.json] [--root DIR] [--serial] [--unsandboxed]

One engine (:mod:`instructor.engine`): one task per new or changed submission and per canary, one writer into
the gradebook (nbgrader's own record step).  By default the tasks run in parallel on Dask (:mod:`instructor.cluster`);
``--serial`` runs the same tasks one after the other in this process, no Dask.  Either way every student's
total score, each test cell that lost points with the first line of its message, and reasons such
as "cell timed out", "kernel died", "notebook is not valid JSON", "notebook missing (found
other.ipynb)", "tampering suspected: …" are printed (:mod:`instructor.outcome`).  Grading is refused
in one line where the sandbox cannot start, unless ``--unsandboxed`` asks for grading without it, and where
the canary fails (:mod:`instructor.canary`: the instructor's solution, graded first by the same path, loses
points, or the blank release earns some): then no student grade is written and the exit status is 2.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from .config import CourseError, resolve_sections
from .engine import grade_class
from .outcome import format_report
from .task import DEFAULT_TASK_TIMEOUT


def main(argv=None, prog: str = "./course grade"):
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    ap.add_argument("sections", nargs="+", metavar="SECTION", help="NN, NN_name, or all")
    ap.add_argument("--root", default=".", help="course folder (default: the current folder)")
    ap.add_argument("--timeout", type=int, default=None, help="per-cell timeout in seconds (default: config)")
    ap.add_argument("--student", action="append", help="only these students")
    ap.add_argument("--json", help="also write the report as JSON here (one section: its report; several: by section)")
    ap.add_argument("--workers", type=int, default=None, help="local Dask worker processes (default: one per core)")
    ap.add_argument("--scheduler", default=None,
                    help="use a running Dask cluster that speaks TLS, e.g. tls://HOST:8786 (default: "
                         "$ATTNCOURSE_DASK_SCHEDULER; docs/GRADING.md, \"A cluster of your own\")")
    ap.add_argument("--tls-ca-file", help="with --scheduler: the cluster's CA certificate (else Dask's TLS settings)")
    ap.add_argument("--tls-cert", help="with --scheduler: this client's certificate (PEM; may hold the key too)")
    ap.add_argument("--tls-key", help="with --scheduler: this client's private key (PEM)")
    ap.add_argument("--insecure-scheduler", action="store_true",
                    help="grade on a --scheduler tcp:// cluster without TLS (anyone who reaches it runs code as its "
                         "workers' account)")
    ap.add_argument("--force", action="store_true", help="regrade every submission, changed or not")
    ap.add_argument("--regrade", action="store_true",
                    help="regrade the named sections for everyone (same as --force; changed tests are also "
                         "detected by themselves)")
    ap.add_argument("--feedback", action="store_true", help="also write feedback/<student>/<section>/ HTML, in parallel")
    ap.add_argument("--task-timeout", type=float, default=None, help="seconds one submission may take in all (900)")
    ap.add_argument("--serial", action="store_true",
                    help="the same tasks one after the other in this process, no Dask")
    ap.add_argument("--unsandboxed", action="store_true",
                    help="grade WITHOUT the bubblewrap sandbox (student code can read the reference data and "
                         "any file of this account); the report says so in red")
    args = ap.parse_args(argv)
    root = Path(args.root).resolve()
    if args.unsandboxed:
        os.environ["ATTNCOURSE_SANDBOX"] = "0"
    security = None
    if args.tls_ca_file or args.tls_cert:
        if not (args.tls_ca_file and args.tls_cert):
            ap.error("--tls-ca-file and --tls-cert go together")
        from .cluster import tls_security

        security = tls_security(args.tls_ca_file, args.tls_cert, args.tls_key)
    try:
        sections = resolve_sections(args.sections, root)
        reports = grade_class(root, sections, workers=args.workers, scheduler=args.scheduler,
                              force=args.force or args.regrade, timeout=args.timeout,
                              task_timeout=args.task_timeout or DEFAULT_TASK_TIMEOUT, students=args.student,
                              feedback=args.feedback, security=security, insecure=args.insecure_scheduler,
                              serial=args.serial)
        for sec in sections:
            print(format_report(reports[sec], color=sys.stdout.isatty()))
            now = len(reports[sec].get("graded_now", []))
            print(f"({now} graded now, {len(reports[sec]['students']) - now} unchanged since the last run)\n")
    except CourseError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    if args.json:
        out = reports[sections[0]] if len(sections) == 1 else reports
        Path(args.json).write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
