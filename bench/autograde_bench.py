"""Autograde seconds per notebook: this checkout against another (e.g. the commit before a grading change).

    .venv/bin/python -m bench.autograde_bench [--other /path/to/older/checkout] [--copies 6] [--rounds 2]

For each section, a throw-away course holds ``copies`` instructor notebooks and one
blank release; ``nbgrader autograde`` grades the batch with the course config of the
checkout under test (its ``attncourse`` first on PYTHONPATH, for the nbgrader process
and the kernels).  Rounds alternate between the checkouts (A B A B …) so that a busy
machine slows both alike.  Prints seconds per notebook per section and in total.
Not a test: run it on an idle machine.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
SECTIONS = ["02_qkv_by_hand", "04_multi_head", "05_positional_encoding", "07_bert_probe"]


def _course(tree: Path, section: str, root: Path, copies: int):
    shutil.copy(tree / "nbgrader_config.py", root / "nbgrader_config.py")
    shutil.copytree(tree / "graders", root / "graders", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(tree / "source" / section, root / "source" / section)
    for i in range(copies):
        d = root / "submitted" / f"s{i:02d}" / section
        d.mkdir(parents=True)
        shutil.copy(tree / "source" / section / f"{section}.ipynb", d / f"{section}.ipynb")
    d = root / "submitted" / "blank" / section
    d.mkdir(parents=True)
    shutil.copy(tree / "release" / section / f"{section}.ipynb", d / f"{section}.ipynb")


def run(tree: Path, section: str, copies: int, extra_env=None) -> float:
    """Seconds per notebook for one batch graded with ``tree``'s code and config."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JPY_", "JUPYTER_", "ATTNCOURSE_"))}
    env.update({"PYTHONPATH": str(tree), "PYTHONWARNINGS": "ignore", "MPLBACKEND": "Agg",
                "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                "PATH": os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")})
    env.update(extra_env or {})
    py = [sys.executable, "-m", "nbgrader"]
    with tempfile.TemporaryDirectory(prefix="ag-bench-") as tmp:
        root = Path(tmp)
        _course(tree, section, root, copies)
        subprocess.run(py + ["generate_assignment", section, "--force"], cwd=root, env=env, check=True,
                       capture_output=True)
        t0 = time.perf_counter()
        p = subprocess.run(py + ["autograde", section, "--create", "--force"], cwd=root, env=env,
                           capture_output=True, text=True)
        dt = time.perf_counter() - t0
        graded = list((root / "autograded").glob(f"*/{section}/{section}.ipynb"))
        if p.returncode or len(graded) != copies + 1:
            raise SystemExit(f"{tree} {section}: autograde failed ({p.returncode}):\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    return dt / (copies + 1)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--other", help="another checkout to compare with (e.g. a git worktree of the previous commit)")
    ap.add_argument("--copies", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--sections", nargs="*", default=SECTIONS)
    ap.add_argument("--no-sandbox-too", action="store_true", help="also time this checkout with ATTNCOURSE_SANDBOX=0")
    args = ap.parse_args(argv)
    trees = {"this": (HERE, None)}
    if args.other:
        trees = {"other": (Path(args.other).resolve(), None), **trees}
    if args.no_sandbox_too:
        trees["this, no sandbox"] = (HERE, {"ATTNCOURSE_SANDBOX": "0"})
    times = {name: {s: [] for s in args.sections} for name in trees}
    for r in range(args.rounds):
        for section in args.sections:
            for name, (tree, extra) in trees.items():
                times[name][section].append(run(tree, section, args.copies, extra))
                print(f"round {r + 1} {section:24s} {name:18s} {times[name][section][-1]:.2f} s/notebook", flush=True)
    print(f"\nseconds per notebook (median of {args.rounds} rounds, {args.copies + 1} notebooks a batch)")
    print(f"{'section':24s}" + "".join(f"{n:>20s}" for n in trees))
    total = {n: 0.0 for n in trees}
    for section in args.sections:
        row = ""
        for name in trees:
            v = sorted(times[name][section])[len(times[name][section]) // 2]
            total[name] += v
            row += f"{v:20.2f}"
        print(f"{section:24s}{row}")
    print(f"{'mean':24s}" + "".join(f"{total[n] / len(args.sections):20.2f}" for n in trees))


if __name__ == "__main__":
    main()
