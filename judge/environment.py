"""The environment nbgrader and its kernels' launcher run in, on the judge's side: what a grading run passes on
(:data:`GRADING_KEEP`), this Python's bin folder on PATH, and the judge's checkout on PYTHONPATH (the judge is never
installed: a student's wheel holds attncourse alone)."""
from __future__ import annotations

import os
import sys

# The course checkout this judge is part of: every process :func:`grading_env` starts imports the judge from there,
# whatever its folder (a scratch course holds a copy of nbgrader_config.py, not the judge). Kernels never see
# PYTHONPATH (judge.sandbox.KERNEL_ENV_ALLOW).
JUDGE_HOME = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The course settings a grading run passes on to nbgrader and its kernels' launcher.
GRADING_KEEP = ("ATTNCOURSE_KERNEL_MEM_MB", "ATTNCOURSE_KERNEL_TMP_MB", "ATTNCOURSE_KERNEL_TASKS", "ATTNCOURSE_SANDBOX",
                "ATTNCOURSE_BWRAP", "ATTNCOURSE_CHECK_TIMEOUT")


def with_python_bin(path: str | None = None) -> str:
    """``path`` (default: $PATH) with this Python's bin folder first: nbgrader runs ``alembic`` and ``jupyter``
    from PATH, and a venv that is not activated would otherwise not be found."""
    path = os.environ.get("PATH", "") if path is None else path
    bindir = os.path.dirname(sys.executable)
    parts = [p for p in path.split(os.pathsep) if p]
    return os.pathsep.join([bindir] + [p for p in parts if p != bindir])


def grading_env(keep=(), extra=None) -> dict:
    """The environment for an nbgrader subprocess (generate, autograde) and the kernels' launcher.

    Drops the parent Jupyter server's ``JPY_*``/``JUPYTER_*`` variables and the course's ``ATTNCOURSE_*`` settings
    except the names in ``keep``; puts this Python's bin folder first on PATH and the judge's checkout
    (:data:`JUDGE_HOME`) first on PYTHONPATH; silences warnings (a warning on stderr would score a test cell 0);
    draws off-screen; keeps transformers offline (what the course's nbgrader_config.py sets, so that the kernels'
    environment is the same before the grader has read it and after).  ``extra`` is applied last.  (The kernels themselves get an
    allow-listed part of it: :func:`judge.sandbox.kernel_env`.)
    """
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("JPY_", "JUPYTER_")) and (not k.startswith("ATTNCOURSE_") or k in keep)}
    env["PATH"] = with_python_bin(env.get("PATH", ""))
    env["PYTHONPATH"] = os.pathsep.join([JUDGE_HOME] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                                        if p and p != JUDGE_HOME])
    env.update({"PYTHONWARNINGS": "ignore", "MPLBACKEND": "Agg", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                "TOKENIZERS_PARALLELISM": "false"})
    # Kernels that grade side by side (Dask workers, a busy machine) share the cores: torch's OpenMP threads
    # must sleep, not spin, while they wait (bench/omp_wait.py: 3 processes on 2 cores, 230 s each spinning
    # vs 5 s sleeping). The wait policy changes no result (the same threads split the same work).
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    env.update(extra or {})
    return env
