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
