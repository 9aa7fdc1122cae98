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
