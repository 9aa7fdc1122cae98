"""Repository hygiene: clean sources, nothing secret in release/, data in sync with the specs."""
from __future__ import annotations

import re

import pytest
import torch

from harness import ROOT, read_nb
from sections import params, with_grader, with_source


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


@pytest.mark.parametrize("section", params(with_source()))
def test_release_hides_solutions_and_hidden_tests(section):
    src = read_nb(ROOT / "source" / section / f"{section}.ipynb")
    rel_path = ROOT / "release" / section / f"{section}.ipynb"
    text = rel_path.read_text()
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "HIDDEN TESTS", "GRADER.check("):
        assert marker not in text, f"release/{section} contains {marker!r}"
    rel = read_nb(rel_path)
    rel_lines = {line.strip() for c in rel.cells for line in c.source.splitlines()}
    leaked = _solution_lines(src) & rel_lines
    assert not leaked, f"solution or hidden-test lines in release/{section}: {sorted(leaked)[:5]}"


@pytest.mark.parametrize("section", params(with_grader()))
def test_reference_data_in_sync_with_spec(section):
    from graders.build import DATA_DIR, build_section, same

    fresh = build_section(section, log=lambda *a: None)
    stored = torch.load(DATA_DIR / f"{section}.pt", weights_only=True)
    assert fresh.keys() == stored.keys()
    assert fresh["messages"] == stored["messages"], "messages changed: run python -m graders.build"
    assert fresh["cases"].keys() == stored["cases"].keys(), "cases changed: run python -m graders.build"
    for key in fresh["cases"]:
        assert same(fresh["cases"][key], stored["cases"][key], atol=1e-10, rtol=1e-8, strict=True), (
            f"{key} differs: run python -m graders.build")


@pytest.mark.parametrize("section", params(with_grader()))
def test_every_hidden_case_is_called_and_every_call_has_a_case(section):
    """The source notebook's hidden cells and the grader's stored cases name the same checks, once each."""
    from attncourse.calls import check_calls

    stored = torch.load(ROOT / "graders" / "data" / f"{section}.pt", weights_only=True)["cases"]
    src = read_nb(ROOT / "source" / section / f"{section}.ipynb")
    calls = [f"{ex}:{case}" for c in src.cells if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("grade")
             for ex, case in check_calls(c.source)]
    assert not [c for c in calls if c not in stored], "GRADER.check calls without a stored case"
    assert not [k for k in stored if k not in calls], "stored cases that no hidden cell calls"
    assert len(calls) == len(set(calls)), "a case is checked twice"


def test_student_package_has_no_solutions_or_reference_data():
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'packages\s*=\s*\["attncourse"\]', pyproject), "only attncourse may be installed"
    for path in (ROOT / "attncourse").rglob("*"):
        if path.is_file() and path.suffix in (".py", ".json", ".txt"):
            text = path.read_text()
            assert "BEGIN SOLUTION" not in text, path
        assert path.suffix not in (".pt", ".npz", ".npy", ".pkl"), f"data file in the student package: {path}"


AUTHORING = {p.stem[1:]: p.stem for p in (ROOT / "tools" / "authoring").glob("s[0-9][0-9]_*.py")}


@pytest.mark.parametrize("section", params([s for s in with_source() if s in AUTHORING]))
def test_authoring_script_reproduces_source(section, tmp_path):
    """The authoring script is how source/NN/NN.ipynb is made: running it gives the committed file."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    subprocess.run([sys.executable, "-m", f"tools.authoring.{AUTHORING[section]}"], cwd=tmp_path, env=env,
                   check=True, capture_output=True, text=True)
    fresh = tmp_path / "source" / section / f"{section}.ipynb"
    committed = ROOT / "source" / section / f"{section}.ipynb"
    assert fresh.read_text() == committed.read_text(), (
        f"source/{section} differs from what tools/authoring/{AUTHORING[section]}.py writes: "
        "edit the script, re-run it, then ./course generate")
