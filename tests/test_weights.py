"""What a hidden check is worth (issue 36): the grade measures understanding, not plumbing.

Every hidden check declares its points (``graders/sNN_*.py``, ``POINTS``); a hidden cell scores the points of its
checks that pass.  Plumbing — a check of the device or dtype contract (``graders.spec.Case.plumbing``: the ``meta``
device, the best device, a ``device`` argument, float64/bfloat16 in and out) — is worth at most 10 % of every
section's points, and so is one slip: a tensor made on a fixed device (or in a fixed dtype) in one exercise costs
the points of that exercise's device (dtype) checks.  Each catalogued device or dtype mistake is judged too: what
it loses stays under 10 % of its section.

``python -m tests.test_weights`` prints the table: the course's cells graded all-or-nothing with this spec's cases
(as before issue 36) against credit per check.
"""
from __future__ import annotations

import json

import pytest

from tests.harness import ROOT
from tests.sections import params, with_grader

LIMIT = 0.10


def _cells(section: str) -> list:
    """(grade_id, points, calls) of every graded cell with hidden checks, and the section's total points."""
    from attncourse.protocol.calls import check_calls

    nb = json.loads((ROOT / "source" / section / f"{section}.ipynb").read_text())
    total, out = 0.0, []
    for cell in nb["cells"]:
        meta = cell["metadata"].get("nbgrader") or {}
        if not meta.get("grade"):
            continue
        total += float(meta.get("points", 0) or 0)
        src = "".join(cell["source"])
        calls = check_calls(src) if cell["cell_type"] == "code" else []
        if calls:
            out.append((meta["grade_id"], float(meta["points"]), calls))
    return out, total


def table(section: str) -> dict:
    """Plumbing share and the cost of one slip, with credit per check (``after``) and all-or-nothing cells with
    each check worth its cell's points over its checks (``before``); fractions of the section's points."""
    from graders import load_section

    spec = load_section(section)
    case = {(ex.name, c.name): c for ex in spec.exercises for c in ex.cases}
    cells, total = _cells(section)
    after = {"plumbing": 0.0, "device": {}, "dtype": {}}
    before = {"plumbing": 0.0, "device": {}, "dtype": {}, "device_everywhere": set()}
    for gid, points, calls in cells:
        for ex, name in calls:
            c = case[(ex, name)]
            kind = c.plumbing
            if not kind:
                continue
            after["plumbing"] += c.points
            after[kind][ex] = after[kind].get(ex, 0.0) + c.points
            before["plumbing"] += points / len(calls)
            before[kind].setdefault(ex, set()).add((gid, points))   # the cell it zeroed
            if kind == "device":
                before["device_everywhere"].add((gid, points))
    worst = {k: max(after[k].values(), default=0.0) for k in ("device", "dtype")}
    worst_before = {k: max((sum(p for _, p in v) for v in before[k].values()), default=0.0) for k in ("device", "dtype")}
    return {"total": total,
            "after": {"plumbing": after["plumbing"] / total, "device": worst["device"] / total,
                      "dtype": worst["dtype"] / total, "device_everywhere": sum(after["device"].values()) / total},
            "before": {"plumbing": before["plumbing"] / total, "device": worst_before["device"] / total,
                       "dtype": worst_before["dtype"] / total,
                       "device_everywhere": sum(p for _, p in before["device_everywhere"]) / total}}


@pytest.mark.parametrize("section", params(with_grader()))
def test_every_check_has_points_and_cells_add_up(section):
    """The reference data holds every case's points, and a hidden cell's points are its checks' sum (what the
    build refuses otherwise)."""
    from judge.preprocessors import reference_data

    stored = reference_data(str(ROOT), section)[0]["cases"]
    cells, _ = _cells(section)
    for gid, points, calls in cells:
        weights = [stored[f"{ex}:{case}"].get("points") for ex, case in calls]
        assert None not in weights, f"{gid}: a check without points"
        assert abs(sum(weights) - points) < 1e-9, f"{gid}: {points} points, its checks {sum(weights)}"


@pytest.mark.parametrize("section", params(with_grader()))
def test_plumbing_and_one_slip_stay_under_a_tenth(section):
    t = table(section)["after"]
    assert t["plumbing"] <= LIMIT, f"plumbing is {100 * t['plumbing']:.1f} % of {section}'s points"
    assert t["device"] <= LIMIT, f"one device slip costs {100 * t['device']:.1f} % of {section}"
    assert t["dtype"] <= LIMIT, f"one dtype slip costs {100 * t['dtype']:.1f} % of {section}"


def _slips():
    from graders import available_sections, load_section

    out = []
    for section in available_sections():
        for ex in load_section(section).exercises:
            for m in ex.mistakes:
                if any(w in m.key for w in ("device", "dtype")):
                    out.append(pytest.param(section, ex.name, m.key, id=f"{section}-{ex.name}-{m.key}"))
    return out


@pytest.mark.parametrize("section,exercise,key", _slips())
def test_a_catalogued_slip_loses_its_checks_only(section, exercise, key):
    """Each catalogued device or dtype mistake (a tensor made on the CPU, in float32), judged in-process: it loses
    less than a tenth of its section (on a machine with a GPU its best-device checks fail too; counted here)."""
    from graders import load_section
    from tests.harness import expected_cell_scores, read_nb

    spec = load_section(section)
    ex = spec.exercise(exercise)
    mistake = next(m for m in ex.mistakes if m.key == key)
    source = read_nb(ROOT / "source" / section / f"{section}.ipynb")
    cells, total = _cells(section)
    full = {gid: points for gid, points, _ in cells}
    got = expected_cell_scores(section, source, ex, mistake.code)
    best = sum(c.points for c in ex.cases if c.device == "best")   # what a GPU grader would take as well
    lost = sum(full[g] - s for g, s in got.items()) + best
    assert 0 < lost <= LIMIT * total, f"{exercise}.{key} loses {lost:g} of {total:g}"


def main():
    from graders import available_sections

    rows = [("section", "points", "plumbing before", "after", "one device slip before", "after",
             "one dtype slip before", "after", "device slip in every exercise before", "after")]
    for section in available_sections():
        t = table(section)
        b, a = t["before"], t["after"]
        rows.append((section, f"{t['total']:g}", *(f"{100 * x:.1f} %" for pair in (
            (b["plumbing"], a["plumbing"]), (b["device"], a["device"]), (b["dtype"], a["dtype"]),
            (b["device_everywhere"], a["device_everywhere"])) for x in pair)))
    print("| " + " | ".join(rows[0]) + " |")
    print("|" + "---|" * len(rows[0]))
    for r in rows[1:]:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()
