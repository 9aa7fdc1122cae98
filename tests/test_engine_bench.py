"""The engine bench's plan (bench/engine_bench.py): how it splits a class for ``halves``, the order the modes run in,
and what it sets the parallel mode against. No grading runs here (the bench itself: python -m bench.engine_bench)."""
from __future__ import annotations


def test_the_halves_split_the_class_between_two_courses_each_submission_once(tmp_path):
    from bench.engine_bench import halves

    root = tmp_path / "run"
    for student in ("s000", "s001", "s002", "s003", "s004"):
        (root / "submitted" / student / "02").mkdir(parents=True)
    (root / "gradebook.db").write_text("")
    a, b = halves(root)
    got = [sorted(p.name for p in (h / "submitted").iterdir()) for h in (a, b)]
    assert got == [["s000", "s002", "s004"], ["s001", "s003"]]
    assert (a / "gradebook.db").is_file() and (b / "gradebook.db").is_file()
    assert len(list((root / "submitted").iterdir())) == 5   # the class itself untouched


def test_the_parallel_mode_is_set_against_the_halves_round_by_round():
    from bench.engine_bench import halves_summary

    runs = [{"serial": {"wall_s": 100.0}, "halves": {"wall_s": 50.0}, "dask": {"wall_s": 60.0}},
            {"serial": {"wall_s": 90.0}, "halves": {"wall_s": 60.0}, "dask": {"wall_s": 50.0}}]
    speeds = [100 / 60, 90 / 50]
    got = halves_summary(runs, [0, 1], speeds)
    assert got["halves_speed_up_each_round"] == [2.0, 1.5]
    assert got["against_halves"] == round((100 / 60 / 2 + 90 / 50 / 1.5) / 2, 2)
    assert halves_summary(runs, [0], speeds)["against_halves"] == round(100 / 60 / 2, 2)   # calm rounds only
    assert halves_summary([{"serial": {}, "dask": {}}], [0], [1.0]) == {}


def test_every_other_round_runs_the_modes_in_the_opposite_order():
    from bench.engine_bench import round_order

    assert [round_order(["serial", "dask"], n) for n in range(4)] == [
        ["serial", "dask"], ["dask", "serial"], ["serial", "dask"], ["dask", "serial"]]
