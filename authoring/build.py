"""From a section's source notebook to everything generated from it: ``./course build NN [NN ...] | all``.

``source/NN_name/NN_name.ipynb`` is the one edited source of a section: open it in JupyterLab,
edit prose, solutions and tests with nbgrader's Create Assignment toolbar, save.  Then, per
section:

1. the source is checked (nbgrader's metadata rules, the course's grade-cell rules) and cleaned
   in place: outputs and execution counts removed (JupyterLab saves them);
2. the reference data ``graders/data/NN_name.pt`` is rebuilt when its inputs changed — a
   solution or given cell of the notebook, a hidden-test call, or the spec in ``graders/`` —
   and not otherwise; every ``GRADER.check`` call must name a stored case and every case a call;
3. ``release/NN_name/`` (``nbgrader generate_assignment``) and the self-study copy
   ``notebooks/NN_name/`` are written.

``graders/data/NN_name.build.json`` records what the last build read and wrote.  The build
refuses, in one line, what it cannot resolve: a generated file edited by hand since (its edit
would be lost), a source that is not a valid nbgrader notebook, a check with no stored case.
``--force`` overwrites hand edits.  ``--root DIR`` builds the course in DIR (default: here).
The test suite fails when anything generated is out of date (tests/test_repo.py).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

from attncourse.course import SECTIONS, resolve_section


class BuildError(RuntimeError):
    """What the build cannot resolve (the message is the one line shown)."""


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _file_sha(path: Path) -> str | None:
    return sha(path.read_bytes()) if path.is_file() else None


class Paths:
    def __init__(self, root: Path, section: str):
        self.root, self.section = Path(root), section
        self.source = self.root / "source" / section / f"{section}.ipynb"
        self.data = self.root / "graders" / "data" / f"{section}.pt"
        self.stamp = self.root / "graders" / "data" / f"{section}.build.json"
        self.release = self.root / "release" / section / f"{section}.ipynb"
        self.notebooks = self.root / "notebooks" / section / f"{section}.ipynb"

    def rel(self, path: Path) -> str:
        return str(path.relative_to(self.root))


def clean_source(paths: Paths, log=print):
    """Read, check and clean the source notebook (outputs and execution counts removed, in place)."""
    import nbformat

    try:
        nb = nbformat.read(str(paths.source), as_version=4)
    except Exception as exc:  # noqa: BLE001 - a file JupyterLab cannot save is a file nbgrader cannot read
        raise BuildError(f"{paths.rel(paths.source)} is not a valid notebook ({type(exc).__name__}: {exc})") from None
    check_metadata(paths, nb)
    dirty = False
    for cell in nb.cells:
        if cell.cell_type == "code" and (cell.outputs or cell.execution_count is not None):
            cell.outputs, cell.execution_count, dirty = [], None, True
        if cell.metadata.pop("execution", None) is not None:
            dirty = True
    if dirty:
        nbformat.write(nb, str(paths.source))
        log(f"  cleaned {paths.rel(paths.source)} (outputs removed: sources are committed without them)")
    elif paths.source.read_text(encoding="utf-8") != nbformat.writes(nb) + "\n":
        nbformat.write(nb, str(paths.source))   # the canonical form nbformat writes (stable diffs)
    return nb


def check_metadata(paths: Paths, nb) -> None:
    """nbgrader's own metadata rules, and the course's: one literal GRADER.check per line in hidden cells."""
    from nbgrader.nbgraderformat import MetadataValidator, ValidationError

    from attncourse.protocol.calls import check_calls

    try:
        MetadataValidator().validate_nb(nb)
    except ValidationError as exc:
        raise BuildError(f"{paths.rel(paths.source)}: {exc}") from None
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade") and cell.cell_type == "code":
            bad = [c for c in check_calls(cell.source) if "?" in c]
            if bad:
                raise BuildError(f"{paths.rel(paths.source)}: cell {meta['grade_id']} calls GRADER.check without "
                                 "string literals for the exercise and the case")


def reference_inputs(paths: Paths, nb) -> str:
    """A hash of everything the reference data is built from: the notebook's nbgrader cells and the spec."""
    h = hashlib.sha256()
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade_id"):
            h.update(f"{meta['grade_id']}\0{cell.source}\0".encode())
    for p in sorted((paths.root / "graders").glob("*.py")):   # a section's spec may use another's helpers
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    here = Path(__file__).resolve().parent
    h.update((here / "references.py").read_bytes())
    return h.hexdigest()


def build(section: str, root: Path, force: bool = False, log=print) -> dict:
    """Build one section; return the new stamp."""
    from authoring.generate import generate_release, generate_selfstudy

    paths = Paths(root, section)
    if not paths.source.is_file():
        raise BuildError(f"no {paths.rel(paths.source)}")
    stamp = json.loads(paths.stamp.read_text()) if paths.stamp.is_file() else {}
    generated = {"data": paths.data, "release": paths.release, "notebooks": paths.notebooks}
    before = {k: p.read_bytes() if p.is_file() else None for k, p in generated.items()}
    nb = clean_source(paths, log)
    inputs = reference_inputs(paths, nb)
    edited_data = before["data"] is not None and sha(before["data"]) != stamp.get("data")
    if inputs != stamp.get("reference_inputs") or before["data"] is None or edited_data or force:
        log(f"  rebuilding {paths.rel(paths.data)} (the instructor's solutions run on every hidden case) ...")
        write_references(section, paths, log)
    else:
        log(f"  {paths.rel(paths.data)}: up to date (no solution, given cell, hidden test or spec changed)")
    check_cases(paths, nb)
    log(f"  writing {paths.rel(paths.release.parent)}/ (nbgrader generate_assignment: the longest step) ...")
    generate_release(section, paths.root)
    generate_selfstudy(section, paths.root)
    if not force:
        refuse_lost_edits(paths, stamp, generated, before)
    new = {"source": _file_sha(paths.source), "reference_inputs": inputs, "data": _file_sha(paths.data),
           "release": _file_sha(paths.release), "notebooks": _file_sha(paths.notebooks)}
    paths.stamp.write_text(json.dumps(new, indent=1, sort_keys=True) + "\n")
    return new


def refuse_lost_edits(paths: Paths, stamp: dict, generated: dict, before: dict) -> None:
    """A generated file that was neither what the last build wrote nor what this build writes was edited by hand:
    put it back as it was and refuse (its edit would be lost).  Regenerating by other means (``nbgrader
    generate_assignment``, the reference builder) writes what the build writes: not an edit."""
    for key, path in generated.items():
        old = before[key]
        if old is None or not stamp.get(key) or sha(old) == stamp[key] or not path.is_file():
            continue
        if path.read_bytes() != old:
            path.write_bytes(old)
            raise BuildError(f"{paths.rel(path)} was edited by hand since the last build (the edit would be lost): "
                             f"move the change into {paths.rel(paths.source)}, or run ./course build "
                             f"{paths.section} --force to overwrite it")


def write_references(section: str, paths: Paths, log=print) -> None:
    """Rebuild the reference data in a fresh process (the spec modules import the notebook as it is now)."""
    code = ("import sys; from authoring.references import write_section; "
            f"print(write_section({section!r}, log=lambda *a: None))")
    here = str(Path(__file__).resolve().parents[1])
    env = _env(here)
    p = subprocess.run([sys.executable, "-c", code], cwd=paths.root, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise BuildError(f"the reference data of {section} could not be built: {last}")
    log(f"  wrote {paths.rel(paths.data)}")


def _env(code_root: str) -> dict:
    """The environment for a build subprocess: this checkout's code importable after the course's own folder."""
    import os

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([code_root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def check_cases(paths: Paths, nb) -> None:
    """Every GRADER.check call of the notebook names a stored case, and every stored case is called."""
    import torch

    from attncourse.protocol.calls import check_calls

    stored = torch.load(paths.data, weights_only=True)["cases"]
    calls = [f"{ex}:{case}" for c in nb.cells if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("grade")
             for ex, case in check_calls(c.source)]
    missing = [c for c in calls if c not in stored]
    if missing:
        raise BuildError(f"{paths.rel(paths.source)} calls GRADER.check on {missing[0]}, which graders/s{paths.section}"
                         ".py does not define: add the case there (or fix the call)")
    unused = [k for k in stored if k not in calls]
    if unused:
        raise BuildError(f"graders/s{paths.section}.py defines the case {unused[0]}, which no hidden cell of "
                         f"{paths.rel(paths.source)} calls: call it, or remove it")
    check_points(paths, nb, stored)


def check_points(paths: Paths, nb, stored: dict) -> None:
    """Every case declares its points, and a hidden cell's nbgrader points are the sum of its checks' (the judge
    scores a cell by the checks that pass: a mismatch would give points no check stands for)."""
    from attncourse.protocol.calls import check_calls

    spec = f"graders/s{paths.section}.py"
    for key, case in stored.items():
        if case.get("points") is None:
            raise BuildError(f"{spec}: the case {key} declares no points (Case(..., points=...))")
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        calls = check_calls(cell.source) if cell.cell_type == "code" and meta.get("grade") else []
        if not calls:
            continue
        total = sum(float(stored[f"{ex}:{case}"]["points"]) for ex, case in calls)
        points = float(meta.get("points", 0) or 0)
        if abs(total - points) > 1e-9:
            raise BuildError(f"{paths.rel(paths.source)}: cell {meta['grade_id']} is worth {points:g} points but its "
                             f"checks' points in {spec} add up to {total:g}: make them equal")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="./course build", description=__doc__.split("\n")[0])
    ap.add_argument("sections", nargs="+", metavar="SECTION", help="NN, NN_name, or all")
    ap.add_argument("--root", default=".", help="the course folder (default: the current folder)")
    ap.add_argument("--force", action="store_true", help="overwrite generated files that were edited by hand")
    args = ap.parse_args(argv)
    root = Path(args.root).resolve()
    try:
        names = [s for n in args.sections for s in (SECTIONS if n == "all" else [resolve_section(n)])]
        todo = list(dict.fromkeys(names))
        for i, section in enumerate(todo, 1):
            t0 = time.monotonic()
            print(f"building {section}" + (f" ({i} of {len(todo)})" if len(todo) > 1 else ""), flush=True)
            build(section, root, force=args.force)
            print(f"built {section} in {time.monotonic() - t0:.1f} s", flush=True)
    except (BuildError, ValueError) as exc:
        print(f"./course build: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
