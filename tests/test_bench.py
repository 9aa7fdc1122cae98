"""The grading bench's CPU meter counts the processes a run starts, which this process's own clock does not.

Every comparison is between CPU counters, never against wall time or a machine's speed, with a tolerance counted
in the kernel's clock ticks (the machine's counters and a process's are kept in ticks, by different paths)."""
from __future__ import annotations

import os
import resource
import subprocess
import sys

from bench.grading_bench import CpuMeter

SPIN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5: pass\n"
TICKS = 5 / os.sysconf("SC_CLK_TCK")   # a few clock ticks


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def test_the_cpu_meter_counts_a_child_process_and_this_process_apart():
    before = _children_cpu()
    with CpuMeter() as spun:
        subprocess.run([sys.executable, "-c", SPIN], check=True)
    child = _children_cpu() - before
    # the child's half second of CPU is the machine's (whatever else runs beside it), not this process's, which
    # only waited for it
    assert child >= 0.5
    assert spun.seconds >= child - TICKS, (spun.seconds, child)
    assert spun.own < child, (spun.own, child)


def test_the_cpu_meter_counts_this_process():
    with CpuMeter() as own:
        start = own._start[1]
        spent = 0.0
        while spent < 0.3:
            spent = CpuMeter._own() - start   # as the meter computes it: its reading at the end is no smaller
    assert own.own >= spent >= 0.3, (own.own, spent)
    assert own.seconds >= own.own - TICKS, (own.seconds, own.own)


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
