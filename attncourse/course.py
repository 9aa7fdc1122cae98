"""The course's sections, in order: one nbgrader assignment each."""

SECTIONS = [
    "01_tokens",
    "02_qkv_by_hand",
    "03_masking",
    "04_multi_head",
    "05_positional_encoding",
    "06_transformer_block",
    "07_bert_probe",
    "08_train_and_generate",
]


# The course settings a grading run passes on to nbgrader and its kernels' launcher.
GRADING_KEEP = ("ATTNCOURSE_KERNEL_MEM_MB", "ATTNCOURSE_KERNEL_TMP_MB", "ATTNCOURSE_SANDBOX", "ATTNCOURSE_BWRAP",
                "ATTNCOURSE_CHECK_TIMEOUT")


def grading_env(keep=(), extra=None) -> dict:
    """The environment for an nbgrader subprocess (generate, autograde) and the kernels it starts.

    Drops the parent Jupyter server's ``JPY_*``/``JUPYTER_*`` variables and the
    course's ``ATTNCOURSE_*`` settings except the names in ``keep``; puts this
    Python's bin folder first on PATH (nbgrader runs ``alembic`` from PATH);
    silences warnings (a warning on stderr would score a test cell 0); draws
    off-screen; keeps transformers offline.  ``extra`` is applied last.
    """
    import os
    import sys

    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("JPY_", "JUPYTER_")) and (not k.startswith("ATTNCOURSE_") or k in keep)}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.update({"PYTHONWARNINGS": "ignore", "MPLBACKEND": "Agg", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    env.update(extra or {})
    return env
