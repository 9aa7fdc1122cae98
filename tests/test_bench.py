"""The grading bench's CPU meter counts the processes a run starts, which this process's own clock does not."""
from __future__ import annotations

import os
import subprocess
import sys

from bench.grading_bench import CpuMeter

SPIN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5: pass\n"


def test_the_cpu_meter_counts_a_child_process_and_this_process_apart():
    with CpuMeter() as idle:
        subprocess.run([sys.executable, "-c", "pass"], check=True)
    with CpuMeter() as spun:
        subprocess.run([sys.executable, "-c", SPIN], check=True)
    # the child's half second of CPU is the machine's, not this process's (which only waited for it)
    assert spun.seconds >= 0.45 > spun.own
    assert spun.seconds > idle.seconds
    with CpuMeter() as own:
        t = os.times()
        while os.times().user + os.times().system - t.user - t.system < 0.3:
            pass
    assert own.own >= 0.3 and own.seconds >= 0.25
