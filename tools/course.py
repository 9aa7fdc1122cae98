"""``./course``: the course's one command (the bash script ``course`` makes the venv on first use, then runs this).

Only the standard library is imported here: the command runs before anything is installed, and each subcommand
runs its own module (``authoring.build``, ``instructor.grade``, ...) in a fresh process, so nothing of this module
is in the student package's import graph or the judge's.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The learner's own copies of the self-study notebooks (./course lab makes them): never written by ./course build or
# the tests, so saving work there cannot make a build refuse or a test fail. The name is repeated in
# attncourse/course.py (LEARNER_FOLDER), which the self-check reads, and in .gitignore.
LEARNER = "work"
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}

# command -> (who, one line); the order is the help's
COMMANDS = {
    "lab": ("self-study", "set up (first time), copy notebooks/ to work/ (first time) and open JupyterLab on work/"),
    "check": ("self-study", "grade your saved work/NN_*/NN_*.ipynb (else notebooks/) with the hidden tests"),
    "test": ("everyone", "set up (first time) and run the test suite: all of it (CI), or --unit, or --quick"),
    "setup": ("everyone", "create .venv and install the pinned requirements and the course package"),
    "edit": ("authors", "JupyterLab on the course folder with source/NN_*/NN_*.ipynb open (nbgrader's toolbar)"),
    "build": ("authors", "after editing source/NN_*/NN_*.ipynb: reference data, release/, notebooks/ (or all)"),
    "grade": ("instructors", "autograde submitted/*/NN_*/ in parallel (Dask) and print a report; all = every section"),
    "report": ("instructors", "a class report (HTML, plots, CSV) in reports/NN_*/"),
    "hub": ("instructors", "(as root) JupyterHub on 127.0.0.1:8000 with real users, nbgrader's exchange"),
    "export": ("instructors", "grades-canvas.csv for an LMS gradebook (Canvas's import layout)"),
}
# the commands that hand their arguments to a module's own parser (its --help says more)
MODULES = {"build": "authoring.build", "check": "attncourse.selfcheck", "grade": "instructor.grade",
           "report": "instructor.report", "export": "instructor.export", "hub": "deploy.hub"}


def say(msg: str) -> None:
    print(f"./course: {msg}", flush=True)


def venv() -> Path:
    return ROOT / os.environ.get("ATTNCOURSE_VENV", ".venv")


def venv_python() -> Path:
    return venv() / "bin" / "python"


def base_env() -> dict:
    """nbgrader runs helper programs (alembic, jupyter) from PATH: the venv's bin folder first."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(venv() / "bin"), env.get("PATH", "")])
    env["VIRTUAL_ENV"] = str(venv())
    return env


# -- set-up ---------------------------------------------------------------------------------------
def inputs_hash() -> str:
    """What the venv was installed from: requirements.txt and pyproject.toml (their bytes, not their times: a
    checkout or a comment's edit that changes neither pin reinstalls nothing)."""
    import hashlib

    h = hashlib.sha256()
    for name in ("requirements.txt", "pyproject.toml"):
        h.update(name.encode() + b"\0" + (ROOT / name).read_bytes() + b"\0")
    return h.hexdigest()


def needs_install() -> bool:
    stamp = venv() / ".installed"
    return not stamp.is_file() or stamp.read_text().strip() != inputs_hash()


SHOWN = ("Collecting ", "Downloading ", "Processing ", "Installing collected", "Successfully installed", "ERROR")
QUIET_S = 30   # pip prints nothing while it installs (minutes for torch): a line every QUIET_S seconds says it works


def pip(step: str, args: list[str]) -> None:
    """Run one pip step, showing what it fetches (a download's size), unpacks from a local wheel, installs, or
    failed, not its noise, and every QUIET_S seconds pip is silent how long it has worked; on failure, its last
    lines and exit status 1."""
    import queue
    import threading
    import time

    say(step)
    cmd = [str(venv_python()), "-m", "pip", "install", "--progress-bar", "off", "--disable-pip-version-check", *args]
    tail: list[str] = []
    tty = sys.stdout.isatty()

    def show(text: str) -> None:
        text = text if len(text) < 110 else text[:107] + "..."
        print(f"\r\033[K  {text}" if tty else f"  {text}", end="" if tty else "\n", flush=True)

    with subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as p:
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: [*map(lines.put, p.stdout), lines.put(None)], daemon=True).start()
        t0 = last = time.monotonic()
        while True:
            try:
                line = lines.get(timeout=QUIET_S)
            except queue.Empty:
                show(f"... still working ({time.monotonic() - t0:.0f} s into this step; "
                     f"{time.monotonic() - last:.0f} s since pip's last line)")
                continue
            if line is None:
                break
            line, last = line.rstrip(), time.monotonic()
            tail = (tail + [line])[-40:]
            if line.startswith(SHOWN):
                show(line)
    if tty:
        print("\r\033[K", end="", flush=True)
    if p.returncode != 0:
        print("\n".join(tail), file=sys.stderr)
        raise SystemExit(f"./course setup: pip failed ({step}); its last lines are above")


def setup(quiet_when_done: bool = True) -> None:
    """Install (first time, or when requirements.txt or pyproject.toml changed since) into the venv."""
    if not needs_install():
        if not quiet_when_done:
            say(f"{venv().name} is up to date (requirements.txt and pyproject.toml as at the last install)")
        return
    if (venv() / ".installed").is_file():
        say(f"requirements.txt or pyproject.toml changed since the last install: updating {venv().name}")
    else:
        say(f"installing into {venv().name}: the first time takes minutes (torch, JupyterLab, nbgrader, Dask, ...)")
    pip("[1/3] pip itself", ["--quiet", "--upgrade", "pip"])
    pip("[2/3] the pinned requirements (requirements.txt)", ["-r", "requirements.txt"])
    pip("[3/3] the course package (editable, this folder)", ["--no-deps", "-e", "."])
    (venv() / ".installed").write_text(inputs_hash() + "\n")
    say("set-up done")


def proxy() -> bool:
    """JupyterHub's proxy, configurable-http-proxy from npm, pinned in deploy/package-lock.json, into
    deploy/node_modules (./course hub needs it, and the hub tests); again when the lock file is newer."""
    binary = ROOT / "deploy" / "node_modules" / ".bin" / "configurable-http-proxy"
    installed = ROOT / "deploy" / "node_modules" / ".package-lock.json"
    lock = ROOT / "deploy" / "package-lock.json"
    fresh = binary.exists() and installed.is_file() and installed.stat().st_mtime >= lock.stat().st_mtime
    if fresh or shutil.which("npm") is None:
        return True
    say("installing JupyterHub's proxy (npm ci --prefix deploy)")
    return subprocess.run(["npm", "ci", "--prefix", "deploy", "--no-audit", "--no-fund", "--loglevel=error"],
                          cwd=ROOT, stdout=subprocess.DEVNULL).returncode == 0


def exec_(argv: list[str], env: dict) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvpe(argv[0], argv, env)


def jupyter_lab(target: str, rest: list[str]) -> None:
    env = {**base_env(), **OFFLINE}
    extra = ["--allow-root"] if os.geteuid() == 0 else []   # jupyter refuses root without it (containers)
    exec_([str(venv() / "bin" / "jupyter"), "lab", *extra, target, *rest], env)


# -- the learner's folder -------------------------------------------------------------------------
def learner_copy(root: Path = ROOT) -> list[str]:
    """Copy each section of notebooks/ that work/ does not have yet into work/ (never over a file there);
    return the sections copied."""
    src, dst = root / "notebooks", root / LEARNER
    copied = []
    for folder in sorted(p for p in src.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if not (dst / folder.name).exists():
            shutil.copytree(folder, dst / folder.name, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
            copied.append(folder.name)
    if copied and not (dst / "README.md").exists():
        (dst / "README.md").write_text(LEARNER_README)
    return copied


LEARNER_README = """# Your work

Your own copy of the self-study notebooks, made by `./course lab` from `notebooks/` (which `./course build`
regenerates). Save your work here: building and testing the course never read or write this folder. The last cell of
each notebook, or `./course check NN` from a shell, grades your saved copy here. To start a section over, delete its
folder: the next `./course lab` copies it again.
"""


def edited_in_notebooks(root: Path, sections: list[str]) -> list[str]:
    """The sections whose notebooks/ copy is not what the last build wrote (graders/data/NN.build.json): work a
    learner saved there, as README once said to."""
    import hashlib
    import json

    edited = []
    for s in sections:
        stamp, nb = root / "graders" / "data" / f"{s}.build.json", root / "notebooks" / s / f"{s}.ipynb"
        if stamp.is_file() and nb.is_file():
            if hashlib.sha256(nb.read_bytes()).hexdigest() != json.loads(stamp.read_text()).get("notebooks"):
                edited.append(s)
    return edited


def cmd_lab(rest: list[str]) -> int:
    setup()
    copied = learner_copy()
    if copied:
        say(f"copied {len(copied)} section(s) from notebooks/ to {LEARNER}/ (your work goes there; "
            f"./course build and the tests never touch it): {', '.join(copied)}")
        edited = edited_in_notebooks(ROOT, copied)
        if edited:
            say(f"your saved work in notebooks/ ({', '.join(edited)}) is in {LEARNER}/ now; `git checkout notebooks/` "
                "puts back the generated files (./course build refuses to overwrite an edited one)")
    jupyter_lab(LEARNER + "/", rest)
    return 0


def section(command: str, name: str) -> str | None:
    """The section a command line names (``02``, ``2``, ``02_qkv_by_hand``), or None after saying why (stderr)."""
    code = "import sys; from attncourse.course import resolve_section as r; print(r(sys.argv[1]))"
    p = subprocess.run([str(venv_python()), "-c", code, name], capture_output=True, text=True, cwd=ROOT)
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["?"])[-1]
        print(f"./course {command}: {last.split(': ', 1)[-1]}", file=sys.stderr)
        return None
    return p.stdout.strip()


def cmd_edit(rest: list[str]) -> int:
    setup()
    target = "source"
    if rest and not rest[0].startswith("-"):
        sec = section("edit", rest[0])
        if sec is None:
            return 2
        target, rest = f"source/{sec}/{sec}.ipynb", rest[1:]
    jupyter_lab(target, rest)
    return 0


# -- tests ----------------------------------------------------------------------------------------
TIERS = {  # flag -> pytest -m expression (pyproject.toml's markers; tests/conftest.py marks each test)
    "--unit": "unit",
    "--quick": "not slow",
}


def cmd_test(rest: list[str]) -> int:
    marks = [TIERS[a] for a in rest if a in TIERS]
    rest = [a for a in rest if a not in TIERS]
    setup()
    if not marks and not proxy():
        print("./course test: npm ci --prefix deploy failed; the hub tests will skip, saying why", file=sys.stderr)
    env = {**base_env(), **OFFLINE, "MPLBACKEND": "Agg"}
    # torch's OpenMP threads sleep instead of spinning while they wait (bench/omp_wait.py)
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    # 3 workers on a 2-core machine: much of the suite waits (kernels starting, browsers, the hub, Dask), and a
    # third worker fills those waits (measured on 2 cores: 19 m 33 s with 2 workers, 15 m 32 s with 3).
    # --durations: the slowest tests, in every run's log. The unit tier runs in this one process (no workers).
    unit_only = marks == ["unit"]
    workers = [] if unit_only else ["-n", os.environ.get("ATTNCOURSE_TEST_WORKERS", "3"), "--dist", "loadgroup"]
    mark = ["-m", " and ".join(f"({m})" for m in marks)] if marks else []
    exec_([str(venv_python()), "-m", "pytest", *workers, "--durations=30", *mark, *rest], env)
    return 0


# -- the modules' commands ------------------------------------------------------------------------
def cmd_module(name: str, rest: list[str]) -> int:
    setup()
    if name == "check" and rest and not rest[0].startswith("-") and section("check", rest[0]) is None:
        return 2   # a usage error, as the check's own exit codes say (1: the notebook, 2: the grader or usage)
    env = base_env()
    if name == "grade":
        env.update(OFFLINE, MPLBACKEND="Agg")
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    elif name == "report":
        env["MPLBACKEND"] = "Agg"
    elif name in ("build", "check"):
        env["PYTHONUNBUFFERED"] = "1"   # their progress lines as they happen, on a pipe too (CI logs)
    elif name == "hub" and not proxy():
        print("./course hub: npm ci --prefix deploy failed", file=sys.stderr)
        return 2
    exec_([str(venv_python()), "-m", MODULES[name], *rest], env)
    return 0


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="./course", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="The course's one command; it works in the course folder from anywhere.",
        epilog="Each command's own options: ./course COMMAND --help. The tiers of ./course test: --unit (no "
               "subprocess, seconds), --quick (every test not marked slow), none (everything, what CI runs).")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")
    for name, (who, line) in COMMANDS.items():
        sub.add_parser(name, help=f"{who}: {line}", add_help=False)
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    ap = parser()
    if not argv or argv[0] in ("help", "-h", "--help"):
        ap.print_help()
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"./course: unknown command {command!r}; one of: {', '.join(COMMANDS)} (./course help)",
              file=sys.stderr)
        return 2
    if command == "setup":
        if rest:
            print(f"./course setup: takes no arguments (got {' '.join(rest)})", file=sys.stderr)
            return 2
        setup(quiet_when_done=False)
        return 0
    if command == "lab":
        return cmd_lab(rest)
    if command == "edit":
        return cmd_edit(rest)
    if command == "test":
        return cmd_test(rest)
    return cmd_module(command, rest)


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(main())
