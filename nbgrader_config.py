"""nbgrader configuration for the attention & Transformers course.

Run every nbgrader command from this folder (the course root).
"""
import importlib.util
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
# The judge (judge/: the verdict, the sandbox, nbgrader's glue) is this checkout's, never installed: the package a
# student installs holds attncourse alone. Where this process cannot import it yet (plain nbgrader or formgrader
# started in another folder), it is imported from here. A copy of this file in a scratch course (no judge beside
# it) adds nothing: its processes have the judge already (judge.environment.grading_env), and a scratch folder on
# the path is one another account could plant code in (instructor/config.py refuses to grade then).
if (ROOT / "judge" / "__init__.py").is_file() and importlib.util.find_spec("judge") is None:
    sys.path.insert(0, str(ROOT))

from attncourse.course import SECTIONS  # noqa: E402

# The grading kernels inherit this environment (no path to the reference data: the
# verdict is made in this process, see judge/preprocessors.py):
# - warnings are silenced so that a correct answer is never marked down for a
#   warning printed on stderr (nbgrader scores a test cell with stderr output 0);
# - matplotlib draws off-screen; the probe never reaches for a model hub.
os.environ.pop("ATTNCOURSE_ROOT", None)
os.environ["PYTHONWARNINGS"] = "ignore"
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# - torch's OpenMP threads sleep instead of spinning while they wait: kernels grading side by side share the
#   cores (bench/omp_wait.py: 3 processes on 2 cores, 180-240 s each spinning vs 5 s sleeping; no result changes).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

c = get_config()  # noqa: F821

# The assignments: one per section, in order (attncourse.course.SECTIONS).
# `nbgrader generate_assignment NN_name` (or ./course build NN) registers each in the gradebook.
ASSIGNMENTS = list(SECTIONS)
c.CourseDirectory.root = str(ROOT)
c.CourseDirectory.course_id = "attention-transformers"
c.CourseDirectory.db_url = f"sqlite:///{ROOT / 'gradebook.db'}"
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", ".DS_Store", "figures"]
# Only notebooks travel with an assignment; reference data stays in graders/.
c.CourseDirectory.include = ["*"]
c.CourseDirectory.max_file_size = 2000  # kB; a huge submission file is skipped, not copied

# One cell may take at most 180 s.  Graded calls have their own 20 s alarm (an infinite loop in a
# student's function fails only the checks that call it); this is the backstop for everything else.
# The longest cell, 09's training, takes 24 s on an idle 2-core laptop and 3-4x that on a machine
# that grades several notebooks at once, so 60 s was too tight.
c.Execute.timeout = 180
c.Execute.interrupt_on_timeout = True
# And one notebook's cells share one deadline (from its first cell), on every nbgrader path: plain `nbgrader
# autograde` and formgrader's Autograde too (./course grade's 900 s watchdog covers its own tasks only). Six cells
# sleeping 25 s took one submission from 36 s to 177 s; the slowest section's notebook takes 80 s on an idle 2-core
# machine with its training, which grading skips.
c.IsolatedExecute.notebook_timeout = 600
# After a cell's reply, how long its last outputs may take to arrive. nbgrader makes running out of it an error that
# fails the whole notebook; nbclient's 4 s did on a loaded CI machine (a flood of output still draining).
c.Execute.iopub_timeout = 60
c.Execute.kernel_name = "python3"
c.Execute.execute_retries = 0
# Stop a grading kernel at once when its notebook is done (every output has arrived by then):
# a graceful stop waits ~0.6 s per notebook for Python to tear torch down (bench/grading_results.md)
c.Execute.shutdown_kernel = "immediate"

# Stubs the student sees in solution cells.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# A deleted grade cell is put back (and scored) rather than silently skipped.
c.OverwriteCells.add_missing_cells = True

# A flood of output is capped as it arrives from the kernel (judge/output_caps.py), before
# nbgrader holds it: every kind (prints, images, display updates, tracebacks) per cell and per notebook,
# so the autograded notebook stays within ~20 MB whatever the kernel prints.  The grader's records
# have a budget of their own (a cell over it scores 0).  These are the defaults, spelled out:
c.IsolatedExecute.max_output_bytes = 2_000_000      # one output (a longer print is cut, a larger image dropped)
c.IsolatedExecute.max_cell_bytes = 4_000_000
c.IsolatedExecute.max_cell_outputs = 300
c.IsolatedExecute.max_notebook_bytes = 20_000_000
c.IsolatedExecute.max_cell_records = 50            # a cell makes at most 5
c.IsolatedExecute.max_cell_record_bytes = 32_000_000   # a correct answer's record is ~150 kB at most
c.IsolatedExecute.max_notebook_record_bytes = 128_000_000
# Then keep feedback readable: 200 lines of text and 40 of a traceback per cell (within the caps above).
c.LimitOutput.max_lines = 200
c.LimitOutput.max_traceback = 40

c.GenerateFeedback.force = True

# Kernels start sandboxed (judge/kernels.py, judge/sandbox.py, judge/zygote.py), each with its own budget of what
# the machine shares: memory (ATTNCOURSE_KERNEL_MEM_MB, default 4096; what no limit counts cannot be made: shared
# anonymous memory, memfd, System V IPC), tasks (ATTNCOURSE_KERNEL_TASKS, default 512: its PID namespace's pid_max),
# 1024 open files, size-limited /tmp, /dev/shm and working folder (ATTNCOURSE_KERNEL_TMP_MB, 256), and the OOM killer
# takes a kernel first; in a bubblewrap sandbox (no privilege whoever grades, no course files, no network, no new
# processes, an allow-listed environment, a libseccomp syscall filter, no folder of the host writable); its
# stdout and stderr reach no terminal (its launcher keeps their last lines, to say why it stopped).
# The three budgets are settings of the kernel manager (judge.kernels.SandboxedKernelManager: mem_mb, tmp_mb,
# tasks), read here when set, e.g.  c.SandboxedKernelManager.mem_mb = 2048  ; unset, each is the environment's
# ATTNCOURSE_KERNEL_* (./course grade passes the instructor's on), else the default above.
# The sandbox is required: where bwrap cannot run, no kernel
# starts, unless the instructor turns it off by name (./course grade --unsandboxed, ATTNCOURSE_SANDBOX=0).
# IsolatedExecute runs each kernel in a private scratch folder holding only the hidden inputs (never the
# references); JudgeRecords then judges every record here, outside the kernel, sets what nbgrader scores in
# every grade cell and makes every output safe to render for an instructor (docs/GRADING.md).
from nbconvert.preprocessors import ClearMetadataPreprocessor
from nbgrader.preprocessors import (
    AssignLatePenalties, ClearOutput, DeduplicateIds, IgnorePattern, LimitOutput, OverwriteCells,
    OverwriteKernelspec, SaveAutoGrades,
)

from judge.nbgrader_hooks import install as install_link_guards
from judge.preprocessors import CheckCellMetadataOnce, IsolatedExecute, JudgeRecords

install_link_guards()   # nbgrader never follows a link a student put in a submission
c.IsolatedExecute.course_root = str(ROOT)
c.JudgeRecords.course_root = str(ROOT)
# nbgrader's own lists, with CheckCellMetadataOnce for its CheckCellMetadata (the same checks, the metadata schema
# compiled once per process instead of once per cell: 0.1 s of a notebook, twice per autograde)
c.Autograde.sanitize_preprocessors = [
    ClearOutput, DeduplicateIds, OverwriteKernelspec, OverwriteCells, CheckCellMetadataOnce,
]
c.Autograde.autograde_preprocessors = [
    IsolatedExecute, JudgeRecords, IgnorePattern, ClearMetadataPreprocessor, LimitOutput,
    SaveAutoGrades, AssignLatePenalties, CheckCellMetadataOnce,
]
# Find-the-bug exercises (graders/sNN_*.py, Exercise(handout=...)): right after ClearSolutions (NamedStubs), the
# student's copy of such a solution cell gets the buggy code the reference build stored, not the stub.
from nbgrader.preprocessors import (
    ClearHiddenTests, ClearMarkScheme,
    ComputeChecksums, IncludeHeaderFooter, InstantiateTests, LockCells, SaveCells,
)

from judge.handout import HandOut
from judge.stubs import NamedStubs   # ClearSolutions whose stubs name the exercise ("Exercise 3 (...) is not done yet")

c.HandOut.course_root = str(ROOT)
c.GenerateAssignment.preprocessors = [
    IncludeHeaderFooter, InstantiateTests, LockCells, NamedStubs, HandOut, ClearOutput, CheckCellMetadataOnce,
    ComputeChecksums, SaveCells, ClearHiddenTests, ClearMarkScheme, ComputeChecksums, CheckCellMetadataOnce,
]
# Formgrader and the feedback HTML render notebooks in the instructor's browser.  JudgeRecords already made every
# markdown cell render to sanitized HTML and kept only text and raster images in outputs; the renderer is made safe
# too, for any notebook it is given: nbconvert's markdown2html and clean_html filters are replaced by the course's
# (judge/sanitize.py: the rendered HTML through ammonia's allow-list), SafeToShow keeps only text and raster images
# of every output (as JudgeRecords does), and sanitize_html turns off the templates' script and widget paths.
c.HTMLExporter.sanitize_html = True
c.HTMLExporter.filters = {"markdown2html": "judge.sanitize.markdown2html", "clean_html": "judge.sanitize.safe_html"}
c.HTMLExporter.preprocessors = ["judge.preprocessors.SafeToShow"]   # outputs: text and raster images only
