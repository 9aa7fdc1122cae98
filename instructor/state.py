"""``./course grade``'s record of what it graded (``.classgrade/state.json``): hashes, faults, reasons, times."""
from __future__ import annotations

import json
from pathlib import Path


STATE_DIR = ".classgrade"


def state_path(root: Path) -> Path:
    return Path(root) / STATE_DIR / "state.json"


def load_state(root: Path) -> dict:
    try:
        return json.loads(state_path(root).read_text())
    except (OSError, ValueError):
        return {}


def save_state(root: Path, state: dict):
    p = state_path(root)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1, sort_keys=True))
    tmp.replace(p)


def sandbox_path(root: Path) -> Path:
    return Path(root) / STATE_DIR / "sandbox.json"


def record_sandbox(root: Path, section: str, students, sandboxed: bool, line: str):
    """Remember, per submission graded, whether its kernel ran in the sandbox (both engines write it)."""
    p = sandbox_path(root)
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError):
        data = {}
    if not isinstance(data, dict):
        data = {}
    for s in students:
        data.setdefault(section, {})[s] = {"sandboxed": bool(sandboxed), "line": line}
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    tmp.replace(p)


def graded_sandbox(root: Path, section: str, students) -> tuple[bool | None, str]:
    """How the section's submissions were graded, from the record (not how this machine would grade now):
    (True, line) all sandboxed; (False, line) some not; (None, line) nothing recorded."""
    try:
        data = json.loads(sandbox_path(root).read_text()).get(section) or {}
    except (OSError, ValueError, AttributeError):
        data = {}
    seen = {s: data[s] for s in students if isinstance(data.get(s), dict)}
    if not seen:
        return None, "sandbox: not recorded for these submissions (graded by plain nbgrader, or before the course kept it)"
    without = sorted(s for s, r in seen.items() if not r.get("sandboxed"))
    if without:
        line = next(str(seen[s].get("line", "")) for s in without)
        return False, f"{len(without)} of {len(seen)} graded submissions NOT sandboxed ({line})"
    return True, str(next(iter(seen.values())).get("line", "kernels sandboxed"))
