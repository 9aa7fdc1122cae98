"""A grading task that says where it ran (tests/test_classgrade.py): the engine's own task, then one JSON line —
the student, the worker's pid, the fork servers the worker started itself, whether it was handed the run's — in the
file named by the run's setting ``ATTNCOURSE_TEST_PROBE_LOG``.  Importable by a Dask worker (the repository root is
on its path, as on the coordinator's)."""
from __future__ import annotations

import json
import os

from instructor.task import TaskSettings, grade_task

LOG_ENV = "ATTNCOURSE_TEST_PROBE_LOG"


def probed_task(kit, student, files, duedate=None, settings: TaskSettings = TaskSettings()):
    from judge import zygote

    out = grade_task(kit, student, files, duedate, settings)
    path = (settings.env or {}).get(LOG_ENV)
    if path:
        line = {"student": student, "pid": os.getpid(), "own_servers": len(zygote._ZYGOTES),
                "handed": bool(os.environ.get(zygote.SHARED_ENV))}
        with open(path, "a") as f:
            f.write(json.dumps(line) + "\n")
    return out


def read_log(path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
