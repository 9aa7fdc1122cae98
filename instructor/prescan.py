"""What can be told about a submission before grading it: a missing, renamed or invalid notebook, links,
edited locked cells, and student code that honest answers never need (flags for a human; no score depends
on them)."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

from judge.autograded import first_line
from judge.files import plain_below, read_tree


# Student code (any cell that is not locked) that tries to trick the checks.
TAMPER_PATTERNS = [
    (r"\bGRADER\b", "a student cell uses GRADER"),
    (r"\battncourse\s*\.\s*(kernel|protocol|judge|selfcheck)\b"
     r"|from\s+attncourse\.(kernel|protocol|judge)|from\s+attncourse\s+import\s+(kernel|protocol|judge)\b"
     r"|\b(from|import)\s+judge\b",
     "a student cell reaches into the grader's modules"),
    (r"\b(np|numpy)\s*\.\s*(allclose|isclose|array_equal|testing(\s*\.\s*\w+)?)\s*=(?!=)",
     "rebinds a NumPy comparison"),
    (r"\btorch\s*\.\s*(allclose|equal|isclose|testing(\s*\.\s*\w+)?)\s*=(?!=)", "rebinds a torch comparison"),
    (r"\btorch\s*\.\s*(Tensor|_C\s*\.\s*TensorBase)\s*\.\s*\w+\s*=(?!=)", "monkeypatches torch.Tensor"),
    (r"setattr\(\s*(torch|np|numpy|builtins|__builtins__)\b", "setattr on a library module"),
    (r"\bbuiltins\b|__builtins__", "touches builtins"),
    (r"\bos\s*\.\s*(_exit|abort|kill)\b|\bsys\s*\.\s*exit\b|\bSystemExit\b", "tries to exit the interpreter"),
    (r"get_ipython\s*\(", "uses IPython internals"),
    (r"\bgc\s*\.\s*get_objects|sys\s*\.\s*_getframe|__closure__|__globals__|\bsys\s*\.\s*modules\b",
     "inspects interpreter internals"),
    (r"class\s+\w+\s*\(\s*(torch\s*\.\s*)?Tensor\s*\)|class\s+\w+\s*\(\s*(np\s*\.\s*|numpy\s*\.\s*)?ndarray\s*\)",
     "defines a tensor/array subclass"),
    (r"def\s+__(eq|ne|sub|rsub|array|array_ufunc|array_function|torch_function|float|bool)__\s*\(",
     "defines comparison/conversion dunders"),
    (r"print\s*\(.*(✓|\bpass(ed)?\b|\bcorrect\b|\bOK\b)", "prints fake pass text"),
    (r"\bctypes\b|\bcffi\b|\bCDLL\b|\blibc\b", "calls the C library directly (ctypes)"),
    (r"vnd\.attncourse|publish_display_data|\.attncourse-inputs|graders[/\\.]data",
     "forges grader records or looks for the reference data"),
]


# What Python's parser sees in a student cell, whatever the spacing, comments or aliases (import os as o).
SUSPECT_ATTRIBUTES = {
    "displayhook": "writes a result the autograder could read as a score (sys.displayhook)",
    "display_pub": "writes a result the autograder could read as a score (display_pub)",
    "events": "registers IPython hooks around later cells",
    "input_transformers_cleanup": "rewrites later cells (IPython input transformers)",
    "input_transformers_post": "rewrites later cells (IPython input transformers)",
    "ast_transformers": "rewrites later cells (IPython AST transformers)",
    "clear_output": "clears cell outputs",
    "symlink": "creates links or changes files' permissions", "link": "creates links or changes files' permissions",
    "chmod": "creates links or changes files' permissions", "chown": "creates links or changes files' permissions",
    "system": "starts processes", "popen": "starts processes", "fork": "starts processes", "execv": "starts processes",
    "_getframe": "inspects interpreter internals", "get_objects": "inspects interpreter internals",
    "__globals__": "inspects interpreter internals", "__closure__": "inspects interpreter internals",
    "__code__": "inspects interpreter internals", "f_back": "inspects interpreter internals",
}


# What hides a computation from the kernel's record of how an answer was computed (attncourse/kernel/watch.py):
# PyTorch's mode stacks popped or disabled, the profile function replaced.
HIDES = "hides its computation from the grader's record (PyTorch's modes, the profiler)"
HIDING = {name: HIDES for name in (
    "_disable_current_modes", "DisableTorchFunction", "DisableTorchFunctionSubclass", "_DisableTorchDispatch",
    "_pop_mode", "_pop_mode_temporarily", "_pop_torch_function_stack", "_pop_torch_dispatch_stack",
    "_set_torch_function_mode", "_len_torch_function_stack", "_get_current_dispatch_mode_stack",
    "TorchDispatchMode", "TorchFunctionMode", "setprofile", "settrace", "getprofile", "gettrace")}
SUSPECT_ATTRIBUTES.update(HIDING)


SUSPECT_NAMES = {
    "exec": "runs code built at run time (exec/eval/compile/__import__)",
    "eval": "runs code built at run time (exec/eval/compile/__import__)",
    "compile": "runs code built at run time (exec/eval/compile/__import__)",
    "__import__": "runs code built at run time (exec/eval/compile/__import__)",
    "get_ipython": "uses IPython internals", "clear_output": "clears cell outputs",
    "GRADER": "a student cell uses GRADER",
    **HIDING,
}


SUSPECT_MODULES = {"ctypes", "subprocess", "socket", "importlib", "inspect", "gc", "ptrace", "signal", "IPython",
                   "torch.utils._python_dispatch", "torch.overrides"}
GRADER_MODULES = ("attncourse.kernel", "attncourse.protocol", "attncourse.judge", "attncourse.selfcheck", "judge.")


def ast_flags(source: str) -> list[str]:
    """What a student cell does that honest answers never need, read by Python's parser (no regex to dodge).

    Flags only: the grade never depends on them (the judge decides), they point the instructor at a cell.
    """
    import ast

    lines = [ln if not ln.lstrip().startswith(("%", "!")) else "" for ln in (source or "").splitlines()]
    try:
        tree = ast.parse("\n".join(lines))
    except SyntaxError:
        return []
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in SUSPECT_ATTRIBUTES:
            found.append(SUSPECT_ATTRIBUTES[node.attr])
        elif isinstance(node, ast.Name) and node.id in SUSPECT_NAMES:
            found.append(SUSPECT_NAMES[node.id])
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for mod in mods:
                if mod == "judge" or mod.startswith(GRADER_MODULES):
                    found.append("a student cell reaches into the grader's modules")
                elif mod in SUSPECT_MODULES or mod.split(".")[0] in SUSPECT_MODULES:
                    found.append(f"imports {mod}")
            if isinstance(node, ast.ImportFrom):
                found += [SUSPECT_NAMES[a.name] for a in node.names if a.name in SUSPECT_NAMES]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "setattr", "delattr") and len(node.args) >= 2
              and not isinstance(node.args[1], ast.Constant)):
            found.append("reaches attributes by computed names (getattr/setattr)")
    return found


def submission_folder(root: Path, student: str, section: str) -> Path | None:
    """``submitted/<student>/<section>`` when both are real folders (not links), else None."""
    return plain_below(Path(root) / "submitted", student, section)


def link_target(path: Path) -> str | None:
    try:
        return os.readlink(path)
    except OSError:
        return None


def prescan(root: Path, section: str, student: str, release) -> dict:
    """What can be told before grading: missing/renamed/invalid notebooks, links, edited cells, suspicious code."""
    out = {"fatal": None, "notes": [], "tamper": []}
    folder = submission_folder(root, student, section)
    if folder is None:
        out["fatal"] = f"submitted/{student}/{section} is a link or not a folder: not graded"
        return out
    tree = read_tree(folder)
    for rel, why in tree.refused:
        target = link_target(folder / rel)
        if target is not None and (os.path.isabs(target) or ".." in Path(target).parts):
            out["tamper"].append(f"{rel} links outside the submission ({target}): skipped")
        else:
            out["notes"].append(f"{rel} in the submission was skipped: {why}")
    name = f"{section}.ipynb"
    if name not in tree.files:
        others = sorted(n for n in tree.files if n.endswith(".ipynb") and "/" not in n)
        refused = [why for rel, why in tree.refused if rel == name]
        out["fatal"] = (f"notebook not read ({refused[0]})" if refused else
                        f"notebook missing (found {', '.join(others)})" if others
                        else f"notebook missing (no .ipynb in submitted/{student}/{section})")
        return out
    try:
        data = json.loads(tree.files[name].decode("utf-8", errors="replace"))
        if not isinstance(data, dict) or "cells" not in data:
            raise ValueError("no cells")
    except (ValueError, OSError) as exc:
        out["fatal"] = f"notebook is not valid JSON ({first_line(str(exc), 80)})"
        return out
    cells = [c for c in data.get("cells", []) if isinstance(c, dict)]
    sub_ids = {}
    for c in cells:
        gid = (c.get("metadata", {}).get("nbgrader") or {}).get("grade_id")
        if gid:
            sub_ids[gid] = c
    if release is not None:
        for rc in release.cells:
            meta = rc.metadata.get("nbgrader", {})
            gid = meta.get("grade_id")
            if not gid or not meta.get("locked"):
                continue
            kind = "setup cell" if gid == "setup" else ("test cell" if meta.get("grade") else "locked cell")
            sc = sub_ids.get(gid)
            if sc is None:
                restored = "restored and scored" if meta.get("grade") else "not restored: the grader did not run"
                out["tamper"].append(f"{kind} {gid} was deleted ({restored})")
            else:
                src = sc.get("source", "")
                src = "".join(src) if isinstance(src, list) else src
                if src.strip() != rc.source.strip() and "HIDDEN TESTS" not in src:
                    out["tamper"].append(f"{kind} {gid} was edited (restored from the gradebook)")
    from judge.preprocessors import SKIP_TAG   # (here: nbgrader's import, 1.2 s, after the run's fork server starts)

    found = []
    for c in cells:
        meta = c.get("metadata", {}).get("nbgrader") or {}
        tags = c.get("metadata", {}).get("tags") or []
        if isinstance(tags, list) and SKIP_TAG in tags and any(meta.get(k) for k in ("grade", "solution", "locked")):
            found.append(f"{meta.get('grade_id') or 'a graded cell'} is tagged {SKIP_TAG} (ignored: it ran)")
        if c.get("cell_type") != "code" or meta.get("locked"):
            continue
        src = c.get("source", "")
        src = "".join(src) if isinstance(src, list) else src
        where = meta.get("grade_id") or "an extra cell"
        for pat, why in TAMPER_PATTERNS:
            if re.search(pat, src):
                found.append(f"{why} ({where})")
        found += [f"{why} ({where})" for why in ast_flags(src)]
    out["tamper"] += list(dict.fromkeys(found))
    return out


def prescan_class(root: Path, section: str, students, release) -> dict:
    """{student: prescan} for the students about to be graded (before any kernel runs, on every grading path);
    a prescan that fails is a note in the report, never a crash."""
    out = {}
    for s in students:
        try:
            out[s] = prescan(root, section, s, release)
        except Exception as exc:  # noqa: BLE001 - a report, never a crash
            out[s] = {"fatal": None, "notes": [f"could not prescan: {exc}"], "tamper": []}
    return out
