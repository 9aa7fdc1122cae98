"""Repository hygiene: clean sources, nothing secret in release/, data in sync with the specs."""
from __future__ import annotations

import re

import pytest
import torch

from tests.harness import ROOT, read_nb
from tests.sections import params, with_grader, with_source


@pytest.mark.parametrize("section", params(with_source()))
def test_source_committed_clean_with_metadata(section):
    nb = read_nb(ROOT / "source" / section / f"{section}.ipynb")
    graded = 0
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs, f"source/{section} is committed with outputs"
            assert cell.execution_count is None
        meta = cell.metadata.get("nbgrader")
        if meta:
            assert meta.get("grade_id"), "nbgrader cell without grade_id"
            graded += bool(meta.get("grade"))
    assert graded, f"source/{section} lost its nbgrader metadata"


def _solution_lines(nb):
    lines, outside = set(), set()
    for cell in nb.cells:
        inside = False
        for line in cell.source.splitlines():
            s = line.strip()
            if "BEGIN SOLUTION" in s or "BEGIN HIDDEN TESTS" in s:
                inside = True
                continue
            if "END SOLUTION" in s or "END HIDDEN TESTS" in s:
                inside = False
                continue
            (lines if inside else outside).add(s)
    return {s for s in lines - outside if len(s) >= 12}


def _handouts(section) -> dict:
    path = ROOT / "graders" / "data" / f"{section}.pt"
    return torch.load(path, weights_only=True).get("handouts", {}) if path.is_file() else {}


@pytest.mark.parametrize("section", params(with_source()))
def test_release_hides_solutions_and_hidden_tests(section):
    src = read_nb(ROOT / "source" / section / f"{section}.ipynb")
    rel_path = ROOT / "release" / section / f"{section}.ipynb"
    text = rel_path.read_text()
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "HIDDEN TESTS", "GRADER.check("):
        assert marker not in text, f"release/{section} contains {marker!r}"
    rel = read_nb(rel_path)
    rel_lines = {line.strip() for c in rel.cells for line in c.source.splitlines()}
    # A find-the-bug cell hands out the buggy code on purpose: its lines are no secret, the fix's lines are.
    handouts = _handouts(section)
    for gid, code in handouts.items():
        shown = [c.source for c in rel.cells if c.metadata.get("nbgrader", {}).get("grade_id") == gid]
        assert shown == [code], f"release/{section}: cell {gid} does not show its find-the-bug handout"
    handed = {line.strip() for code in handouts.values() for line in code.splitlines()}
    leaked = (_solution_lines(src) - handed) & rel_lines
    assert not leaked, f"solution or hidden-test lines in release/{section}: {sorted(leaked)[:5]}"


@pytest.mark.parametrize("section", params(with_grader(), quick_one=True))
def test_reference_data_in_sync_with_spec(section):
    """The committed reference data is what the spec and the solutions give, up to float rounding (which differs
    between CPUs: authoring.references.same_data): the inputs are drawn again and compared with the committed ones,
    and the references and mistakes run again on the committed inputs (so that inputs one rounding apart, drawn on
    another CPU, do not move every output computed from them)."""
    from authoring.references import DATA_DIR, FLOAT, build_section, case_inputs, same_data
    from graders import load_section

    stored = torch.load(DATA_DIR / f"{section}.pt", weights_only=True)
    fresh = build_section(section, log=lambda *a: None, inputs=stored["cases"])
    rebuild = f"run ./course build {section}"
    assert fresh.keys() == stored.keys()
    assert fresh["messages"] == stored["messages"], f"messages changed: {rebuild}"
    assert fresh.get("handouts") == stored.get("handouts"), f"handouts changed: {rebuild}"
    assert fresh["cases"].keys() == stored["cases"].keys(), f"cases changed: {rebuild}"
    moved = [f"{ex.name}:{case.name}" for ex in load_section(section).exercises for case in ex.cases
             if case.kind != "value" and not all(
                 same_data(value, stored["cases"][f"{ex.name}:{case.name}"].get(field), FLOAT[case.dtype])
                 for field, value in case_inputs(case).items())]
    assert not moved, f"the inputs of {moved[:5]} changed beyond rounding: {rebuild}"
    differ = [key for key, case in stored["cases"].items()
              if not same_data(fresh["cases"][key], case, FLOAT[case.get("dtype", "float32")])]
    assert not differ, f"{differ[:5]} differ beyond rounding: {rebuild}"


def test_reference_data_comparison_follows_the_dtype():
    """Rounding passes, a real change fails: float32 data within rtol 1e-5/atol 1e-6, float64 data tighter,
    integers, bools, strings, dtypes and containers exactly; shown on a committed case and on made-up ones."""
    import copy

    from authoring.references import DATA_DIR, data_precision, same_data

    def f32_step(t, k=0, steps=1):   # the value at flat index k moved by float32 steps, as another CPU might round it
        t = t.clone()
        x = t.view(-1)[k].to(torch.float32)
        for _ in range(steps):
            x = torch.nextafter(x, torch.tensor(float("inf")))
        t.view(-1)[k] = x.to(torch.float64)
        return t

    g = torch.Generator().manual_seed(0)
    x32 = torch.randn(4, 5, generator=g).to(torch.float64)                       # drawn in float32, stored as float64
    x64 = torch.randn(4, 5, generator=g, dtype=torch.float64)
    assert data_precision(x32) == torch.float32 and data_precision(x64) == torch.float64
    assert data_precision(x64, torch.float32) == torch.float32, "a float32 case's data carries float32 rounding"
    assert same_data(x32, f32_step(x32)) and same_data([x32, 2], [f32_step(x32, 3, 2), 2])
    assert same_data(x32, x32 * (1 + 3e-6)) and not same_data(x32, x32 * (1 + 1e-4)), "beyond rounding fails"
    assert same_data(x64, x64 * (1 + 1e-13)) and not same_data(x64, x64 * (1 + 3e-6)), "float64 is held tighter"
    assert same_data(x64, x64 * (1 + 3e-6), torch.float32)
    assert not same_data(torch.arange(5), torch.arange(5) + torch.tensor([0, 0, 1, 0, 0])), "integers exactly"
    assert not same_data(torch.tensor([True, False]), torch.tensor([True, True])), "bools exactly"
    assert not same_data(x32, x32.to(torch.float32)), "dtypes exactly"
    assert not same_data({"w": "causal"}, {"w": "Causal"}) and not same_data([x32], (x32,))

    stored = torch.load(DATA_DIR / "02_qkv_by_hand.pt", weights_only=True)["cases"]
    key, case = next((k, c) for k, c in stored.items() if isinstance(c.get("expected"), torch.Tensor)
                     and c["expected"].is_floating_point() and c.get("args"))
    near = copy.deepcopy(case)
    near["expected"] = f32_step(case["expected"])
    dtype = {"float64": torch.float64}.get(case["dtype"], torch.float32)
    assert same_data(near, case, dtype), f"{key}: one float32 step is rounding"
    far = copy.deepcopy(case)
    far["expected"] = case["expected"].clone()
    far["expected"].view(-1)[0] += 1e-3 * (1 + case["expected"].view(-1)[0].abs())
    assert not same_data(far, case, dtype), f"{key}: a value moved by 1e-3 must fail"


@pytest.mark.parametrize("section", params(with_grader()))
def test_every_hidden_case_is_called_and_every_call_has_a_case(section):
    """The source notebook's hidden cells and the grader's stored cases name the same checks, once each."""
    from attncourse.protocol.calls import check_calls

    stored = torch.load(ROOT / "graders" / "data" / f"{section}.pt", weights_only=True)["cases"]
    src = read_nb(ROOT / "source" / section / f"{section}.ipynb")
    calls = [f"{ex}:{case}" for c in src.cells if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("grade")
             for ex, case in check_calls(c.source)]
    assert not [c for c in calls if c not in stored], "GRADER.check calls without a stored case"
    assert not [k for k in stored if k not in calls], "stored cases that no hidden cell calls"
    assert len(calls) == len(set(calls)), "a case is checked twice"


def test_student_package_has_no_solutions_or_reference_data():
    pyproject = (ROOT / "pyproject.toml").read_text()
    # attncourse (students' kernels) alone is installed (the judge runs from the checkout: tests/test_boundary.py);
    # neither holds a solution or data
    assert re.search(r'include\s*=\s*\["attncourse\*"\]', pyproject), "only attncourse"
    for path in [*(ROOT / "attncourse").rglob("*"), *(ROOT / "judge").rglob("*")]:
        if path.is_file() and path.suffix in (".py", ".json", ".txt"):
            text = path.read_text()
            assert "BEGIN SOLUTION" not in text, path
        assert path.suffix not in (".pt", ".npz", ".npy", ".pkl"), f"data file in the student package: {path}"


@pytest.mark.parametrize("section", params(with_source()))
def test_generated_files_are_what_the_last_build_wrote(section):
    """source/ is the one edited source: the reference data, release/ and notebooks/ are what ./course build wrote
    from it (graders/data/NN.build.json records the hashes), and the source is in nbformat's canonical form."""
    import hashlib
    import json

    import nbformat

    stamp_path = ROOT / "graders" / "data" / f"{section}.build.json"
    assert stamp_path.is_file(), f"{section} was never built: run ./course build {section}"
    stamp = json.loads(stamp_path.read_text())
    files = {"source": ROOT / "source" / section / f"{section}.ipynb", "data": ROOT / "graders" / "data" / f"{section}.pt",
             "release": ROOT / "release" / section / f"{section}.ipynb",
             "notebooks": ROOT / "notebooks" / section / f"{section}.ipynb"}
    stale = [k for k, p in files.items() if hashlib.sha256(p.read_bytes()).hexdigest() != stamp.get(k)]
    assert not stale, f"{stale} of {section} changed since the last build: run ./course build {section}"
    src = files["source"]
    assert src.read_text(encoding="utf-8") == nbformat.writes(nbformat.read(str(src), as_version=4)) + "\n"


def test_reference_inputs_cover_the_notebook_and_the_spec(tmp_path):
    """The build rebuilds the reference data exactly when a solution, given cell, hidden test or spec changed."""
    import shutil

    import nbformat

    from authoring.build import Paths, reference_inputs

    section = "03_masking"
    for name in ("source", "graders"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("data", "__pycache__"))
    paths = Paths(tmp_path, section)
    nb = nbformat.read(str(paths.source), as_version=4)
    base = reference_inputs(paths, nb)
    prose = [c for c in nb.cells if c.cell_type == "markdown" and not c.metadata.get("nbgrader")][0]
    prose.source += " More prose."
    assert reference_inputs(paths, nb) == base, "a prose edit must not rebuild the reference data"
    sol = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")][0]
    sol.source += "\n# an edit"
    assert reference_inputs(paths, nb) != base, "a solution edit must rebuild it"
    sol.source = sol.source.replace("\n# an edit", "")
    spec = tmp_path / "graders" / f"s{section}.py"
    spec.write_text(spec.read_text() + "\n# an edit\n")
    assert reference_inputs(paths, nb) != base, "a spec edit must rebuild it"


@pytest.mark.slow
def test_build_refuses_what_it_cannot_resolve(tmp_path):
    """./course build refuses, in one line, a generated file edited by hand (and keeps the edit), and a hidden
    test that names a case the spec lacks; --force overwrites the hand edit."""
    import os
    import shutil
    import subprocess
    import sys

    import nbformat

    section = "03_masking"
    root = tmp_path / "course"
    root.mkdir()
    for name in ("source", "graders", "release", "notebooks"):
        shutil.copytree(ROOT / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "nbgrader_config.py", root / "nbgrader_config.py")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def build(*extra):
        return subprocess.run([sys.executable, "-m", "authoring.build", section, "--root", str(root), *extra],
                              cwd=root, env=env, capture_output=True, text=True, timeout=600)

    release = root / "release" / section / f"{section}.ipynb"
    edited = release.read_text().replace("Masking: what a token may not see", "Masking (edited by hand)")
    release.write_text(edited)
    p = build()
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1 and "edited by hand" in lines[0], p.stderr
    assert release.read_text() == edited                        # the edit is not lost
    assert build("--force").returncode == 0 and "edited by hand" not in release.read_text()

    src = root / "source" / section / f"{section}.ipynb"
    nb = nbformat.read(str(src), as_version=4)
    cell = [c for c in nb.cells if 'GRADER.check("causal_mask", "T5"' in c.source][0]
    cell.source = cell.source.replace('GRADER.check("causal_mask", "T5", causal_mask)',
                                      'GRADER.check("causal_mask", "T5", causal_mask)\nGRADER.check("causal_mask", "T9", causal_mask)')
    nbformat.write(nb, str(src))
    p = build()
    assert p.returncode == 2 and "causal_mask:T9" in p.stderr and "does not define" in p.stderr, p.stderr
