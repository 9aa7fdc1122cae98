"""What torch's OpenMP wait policy costs when processes share the cores (as grading kernels and test workers do).

Runs N processes at once (default 3, the test suite's workers), each doing the small tensor work a notebook does
(256×256 matmuls, a softmax, a cumsum; 3,000 rounds), once with OpenMP's default wait policy (threads spin
between parallel regions) and once with ``OMP_WAIT_POLICY=PASSIVE`` (they sleep), and prints each process's
seconds and the wall time. The policy changes no result: the same threads split the same work.

    .venv/bin/python -m bench.omp_wait [N]

Measured on the course's 2-core machine (2026-12-02, two other jobs running), two runs: 3 processes, default
183–238 s each (wall 204 s, 256 s), PASSIVE 3.6–6.2 s (wall 17.7 s, 18.2 s); one process alone: 1.8 s default,
2.0 s PASSIVE (spinning helps a little only when nothing else wants the cores).
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

WORK = """
import time, torch
t = time.time()
a, b = torch.randn(256, 256), torch.randn(64, 64)
for _ in range(3000):
    (a @ a).sum(); (b @ b).softmax(-1); torch.randn(1000).cumsum(0)
print(round(time.time() - t, 2))
"""


def run(n: int, policy: str | None) -> tuple[list[float], float]:
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    if policy:
        env["OMP_WAIT_POLICY"] = policy
    t0 = time.time()
    procs = [subprocess.Popen([sys.executable, "-c", WORK], env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(n)]
    each = [float(p.communicate()[0]) for p in procs]
    return each, time.time() - t0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    n = int(argv[0]) if argv else 3
    for policy in (None, "PASSIVE"):
        each, wall = run(n, policy)
        print(f"{n} processes, OMP_WAIT_POLICY={policy or '(default)'}: each {', '.join(f'{s:.1f}' for s in each)} s;"
              f" wall {wall:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
