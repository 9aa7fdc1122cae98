"""nbgrader preprocessors around the kernel: it runs in a scratch folder, and the verdict is made here.

``IsolatedExecute`` (replaces nbgrader's ``Execute``) runs the notebook in a kernel
whose working folder is a private scratch folder, never the folder nbgrader later
writes the autograded notebook to.  Into that folder it writes the section's hidden
*inputs* — the stored cases without reference outputs, mistakes' outputs, hints or
messages (:data:`attncourse.protocol.cases.INPUTS_FILE`); the setup cell's
:class:`attncourse.kernel.grader.Grader` reads them and, for every ``GRADER.check`` call,
publishes a record of what the student's code gave back.  When the kernel has
stopped the scratch folder is deleted (``shutil.rmtree`` never follows links):
nothing the kernel wrote comes back, only the notebook's outputs.  Sandboxed, the
kernel does not even see that folder: it works in a size-limited tmpfs holding the
inputs file read-only, at the same path (a fresh sandbox, :mod:`judge.sandbox`) or at
``/run/attncourse/work`` (a kernel forked by the fork server, :mod:`judge.zygote`).

``JudgeRecords`` (after it, before ``SaveAutoGrades``) sets what nbgrader scores.
It first deletes every ``attncourse`` key from the notebook's and the cells' metadata: the student
controls the submitted notebook, and a verdict planted there must never be read.
For every grade cell that calls ``GRADER.check`` it takes the list of checks from
the cell's *locked* source (restored from the gradebook by nbgrader), requires
exactly one record per check, in order, and judges each record against the
instructor's reference (:func:`judge.verdict.judge_record`).  The verdict is
written as data into the cell's metadata (``cell.metadata["attncourse"]``, the format is in
:mod:`judge.autograded`, its one reader); the records in the outputs are replaced by
what the student may see: ``✓ check  [points]`` / ``✗ check  [0 / points]`` lines with the judge's
message under a failed one, and the cell's points (nothing reads those words back).  Then, for every
grade cell, it removes whatever nbgrader would read as a score that the judge did not put there (an
``execute_result`` becomes plain display data) and writes the one it did: the cell's score as its last
output, an ``execute_result`` (nbgrader's partial credit, :func:`score_output`): the points of the checks
that pass (credit per check), or 0 where the cell is zeroed (a time-out, an error outside the checks,
stderr, tampering).  Missing, extra, repeated or reordered records make the cell score 0 with "tampering
suspected".  Visible-check cells are worth 0 points (their verdict is made in the
kernel, which the student controls): every point comes from the judge.  Whether a cell
hit nbgrader's cell timeout is what ``IsolatedExecute`` saw, never an error's name (student
code can raise a ``CellTimeoutError`` of its own).

Finally every output and every markdown cell is made safe to show an instructor
(:mod:`judge.sanitize`): formgrader, the feedback HTML and the class report
render the autograded notebook.  A markdown cell whose rendering the sanitizer would change is replaced by
that sanitized rendering (raw HTML that any markdown renderer passes through as it is).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
import traceback

from nbformat.notebooknode import NotebookNode
from nbconvert.preprocessors import Preprocessor
from nbgrader.preprocessors import CheckCellMetadata, Execute, NbGraderPreprocessor
from traitlets import Enum, Integer, Unicode

from attncourse.protocol.calls import check_calls
from attncourse.protocol.cases import INPUTS_FILE, StoredCase, inputs_only, label
from .autograded import KEY, SCHEMA, first_line
from .kernels import SandboxedKernelManager
from .output_caps import RESOURCES_KEY, OutputCaps
from .verdict import cell_score, earn, judge_record
from attncourse.protocol.records import MIME
from .sanitize import safe_notebook

TAMPERING = "TamperingSuspected"
SCRATCH_PREFIX = "attncourse-run-"
TIMED_OUT = "attncourse_timed_out"   # resources key: indexes of the cells whose execution nbgrader timed out
SKIP_TAG = "skip-when-grading"   # a demonstration no graded cell needs (a training run, its plots): not run when grading
NOT_RUN = "(not run when grading: a demonstration that no graded cell needs; run it in JupyterLab)\n"
_CACHE: dict = {}      # sha256 of a section's data file -> [data, inputs, inputs as bytes]
_CACHE_MAX = 12


def reference_data(root: str, section: str):
    """The instructor's stored data of a section, or None: (data, the inputs a kernel gets).

    Cached per process by the file's content (a worker grades every submission in a fresh scratch course: the
    same bytes under a new path each time), a few sections at most."""
    hit = _reference(root, section)
    return None if hit is None else hit[:2]


def reference_inputs_bytes(root: str, section: str) -> bytes | None:
    """The inputs of :func:`reference_data` as the file a kernel reads (``torch.save``), made once per content."""
    hit = _reference(root, section)
    if hit is None:
        return None
    if hit[2] is None:
        import io

        import torch

        buf = io.BytesIO()
        torch.save(hit[1], buf)
        hit[2] = buf.getvalue()
    return hit[2]


def _reference(root: str, section: str):
    path = os.path.join(root, "graders", "data", f"{section}.pt")
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError:
        return None
    key = hashlib.sha256(raw).hexdigest()
    hit = _CACHE.pop(key, None)
    if hit is None:
        import io

        import torch

        data = torch.load(io.BytesIO(raw), weights_only=True)
        hit = [data, inputs_only(data), None]
    _CACHE[key] = hit                       # most recent last
    while len(_CACHE) > _CACHE_MAX:
        _CACHE.pop(next(iter(_CACHE)))
    return hit


def _section(resources):
    return (resources.get("nbgrader") or {}).get("assignment")


class _CourseRoot:
    def _data(self, resources):
        root = self.course_root or os.getcwd()
        section = _section(resources)
        return reference_data(root, section) if section else None

    def _inputs(self, resources):
        root = self.course_root or os.getcwd()
        section = _section(resources)
        return reference_inputs_bytes(root, section) if section else None


class IsolatedExecute(_CourseRoot, OutputCaps, Execute):
    """nbgrader's Execute, with the kernel working in a private scratch folder that holds only the inputs.

    Every output is capped as it arrives from the kernel (:class:`~judge.output_caps.OutputCaps`);
    cells whose grader records went over their cap are named in ``resources["attncourse_caps"]``.
    """

    course_root = Unicode("", help="the course folder holding graders/data (set by nbgrader_config.py)").tag(config=True)
    shutdown_kernel = Enum(["graceful", "immediate"], default_value="immediate",
                           help="nbclient's setting: a grading kernel is stopped at once after its last cell (no "
                                "shutdown request, no atexit hooks of the student's: the outputs are in; graceful "
                                "cost 0.05-0.08 s per notebook)").tag(config=True)
    skip_cells_with_tag = Unicode(SKIP_TAG, help="cells with this tag are not run when grading (nbclient's "
                                  "skip_cells_with_tag); an nbgrader cell always runs, whatever its tags").tag(config=True)
    notebook_timeout = Integer(600, allow_none=True, help="seconds one notebook's cells may run in all, from its "
                               "first cell (0 or None: no limit). A cell running when it is up is interrupted as at "
                               "its own timeout; the cells after it are not run and score 0 as timed out. Holds on "
                               "every path: ./course grade, plain nbgrader autograde, formgrader").tag(config=True)
    _deadline = None   # time.monotonic() when the notebook's time is up (set at its first cell)

    def _get_timeout(self, cell):
        """nbclient's per-cell limit, cut to what is left of the notebook's (at least 1 s)."""
        timeout = super()._get_timeout(cell)
        if self._deadline is None:
            return timeout
        left = max(1, int(self._deadline - time.monotonic() + 0.999))
        return left if timeout is None else min(timeout, left)

    def preprocess_cell(self, cell, resources, index):
        """A code cell after the notebook's time is up is not run: it scores 0, as timed out."""
        if self._deadline is None and self.notebook_timeout:
            self._deadline = time.monotonic() + self.notebook_timeout
        if (self._deadline is not None and cell.cell_type == "code" and time.monotonic() >= self._deadline
                and cell.source.strip() and self.skip_cells_with_tag not in cell.metadata.get("tags", [])):
            self._timed_out.append(cell)
            cell.outputs = [NotebookNode(output_type="error", ename="NotebookTimeoutError", evalue="", traceback=[
                f"NotebookTimeoutError: not run: the notebook's time limit ({self.notebook_timeout} s) was up"])]
            return cell, resources
        return super().preprocess_cell(cell, resources, index)

    def __init__(self, *args, **kwargs):
        # every kernel starts sandboxed, through nbclient's own setting (nbgrader's Execute defaults it to
        # jupyter_client's AsyncKernelManager)
        kwargs.setdefault("kernel_manager_class", SandboxedKernelManager)
        super().__init__(*args, **kwargs)

    def preprocess(self, nb, resources=None, km=None):
        skipped = skip_demonstrations(nb, self.skip_cells_with_tag)

        resources = resources if resources is not None else {}
        meta = resources.setdefault("metadata", {})
        home = meta.get("path")
        scratch = tempfile.mkdtemp(prefix=SCRATCH_PREFIX)    # 0700, this account's alone
        self._timed_out = []
        self._deadline = None
        self.reset_caps()
        try:
            inputs = self._inputs(resources)
            if inputs is not None:
                with open(os.path.join(scratch, INPUTS_FILE), "xb") as f:
                    f.write(inputs)
            meta["path"] = scratch                           # nbclient starts the kernel in metadata.path
            return super().preprocess(nb, resources, km=km)
        finally:
            for cell in skipped:
                cell.outputs = [_stream(NOT_RUN)]
            resources[RESOURCES_KEY] = self.caps_report()
            meta["path"] = home
            resources[TIMED_OUT] = [i for i, c in enumerate(nb.cells) if any(c is t for t in self._timed_out)]
            shutil.rmtree(scratch, ignore_errors=True)
            self._deadline = None

    async def _async_handle_timeout(self, timeout, cell=None):
        """nbclient's cell timeout: remember the cell (its error output's name proves nothing), then interrupt."""
        if cell is not None:
            self._timed_out.append(cell)
        return await super()._async_handle_timeout(timeout, cell)


def skip_demonstrations(nb, tag: str = SKIP_TAG) -> list:
    """The code cells nbclient will skip (tagged ``tag``), outputs cleared; the tag is taken off every nbgrader cell.

    The tag marks a demonstration in the instructor's source — 09's training run, 08's RoPE trainings — that no
    graded cell depends on, so grading (and a learner's self-check) runs at the speed of the checks.  A tag in a
    submission is the student's: on their own cells it only skips what they could delete anyway; on a setup,
    solution or test cell it is ignored (those always run and are judged as ever).
    """
    skipped = []
    for cell in nb.cells:
        tags = cell.metadata.get("tags") or []
        if tag not in tags:
            continue
        meta = cell.metadata.get("nbgrader") or {}
        if any(meta.get(k) for k in ("grade", "solution", "locked", "task")) or cell.cell_type != "code":
            cell.metadata["tags"] = [t for t in tags if t != tag]
        else:
            cell.outputs = []
            skipped.append(cell)
    return skipped


def _stream(text):
    return NotebookNode(output_type="stream", name="stdout", text=text)


class JudgeRecords(_CourseRoot, NbGraderPreprocessor):
    """After the kernel: the verdict on every record, bound to the locked cell that asked for it; safe outputs."""

    course_root = Unicode("", help="the course folder holding graders/data (set by nbgrader_config.py)").tag(config=True)

    def preprocess(self, nb, resources):
        data = self._data(resources)
        reference = data[0] if data is not None else None
        timed_out = set(resources.get(TIMED_OUT) or ())
        overflow = (resources.get(RESOURCES_KEY) or {}).get("records") or {}
        nb.metadata.pop(KEY, None)   # the student's notebook: no verdict in it is ever read
        for cell in nb.cells:
            cell.metadata.pop(KEY, None)
        untouched = untouched_exercises(nb, reference)
        scores = {}                  # index of a hidden cell -> the judge's verdict on it
        for i, cell in enumerate(nb.cells):
            meta = cell.metadata.get("nbgrader", {})
            if cell.cell_type == "code":
                calls = check_calls(cell.source) if meta.get("grade") else []
                if calls:
                    scores[i] = judge_cell(cell, calls, reference, timed_out=i in timed_out, overflow=overflow.get(i),
                                           untouched=untouched)
                else:   # records in a cell that asked for none earn nothing there
                    cell.outputs = [o for o in cell.get("outputs", []) if MIME not in (o.get("data") or {})]
                    cell.metadata[KEY] = verdict(cell.outputs, [], [], [], i in timed_out)
        safe_notebook(nb)   # outputs, markdown, raw cells and widget state, safe to show an instructor
        for i, found in scores.items():   # the judge's score, the one execute_result nbgrader reads: the last output
            nb.cells[i].outputs.append(score_output(found, nb.cells[i].get("execution_count")))
        return nb, resources


def untouched_exercises(nb, reference) -> frozenset:
    """The exercises whose solution cell is as it was handed out (the stub, or a find-the-bug handout): nbgrader's
    own test, the cell's checksum against the released one (``OverwriteCells`` restores that from the gradebook).
    Their checks earn nothing, and the class report names no mistake for them."""
    from nbgrader.utils import compute_checksum

    cells = (reference or {}).get("cells") or {}       # exercise -> grade_id of its solution cell
    by_cell: dict = {}
    for ex, gid in cells.items():
        by_cell.setdefault(gid, []).append(ex)
    out = set()
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader") or {}
        gid = meta.get("grade_id")
        if meta.get("solution") and gid in by_cell and meta.get("checksum"):
            try:
                same = compute_checksum(cell) == meta["checksum"]
            except Exception:  # noqa: BLE001 - a cell nbgrader cannot checksum is not the handed-out one
                same = False
            if same:
                out.update(by_cell[gid])
    return frozenset(out)


# -- the verdict ----------------------------------------------------------------------------------------
def verdict(outputs, checks: list, tampering: list, notes: list, timed_out: bool, points: float = 0.0) -> dict:
    """The judge's record of one code cell (the format: :mod:`judge.autograded`).  ``outputs``: what
    the kernel left in the cell, before the judge's own outputs; ``checks``: the judged hidden checks, each with its
    ``weight`` and the ``points`` it earned; ``tampering``: why the judge scores the cell 0 whatever its checks;
    ``notes``: the grader's flags; ``points``: the cell's nbgrader points.

    A cell is scored 0 whatever its checks (``zeroed``) when nbgrader's cell time limit stopped it, the kernel
    raised an error outside the checks (a name that is not defined: the cell stopped), tampering was found, or
    it printed on stderr; otherwise it earns the points of the checks that pass."""
    errors = [o for o in outputs if o.get("output_type") == "error"]
    stderr = "".join(_text(o.get("text")) for o in outputs
                     if o.get("output_type") == "stream" and o.get("name") == "stderr")
    error = ({"ename": first_line(str(errors[0].get("ename") or "Error"), 120),
              "evalue": first_line(str(errors[0].get("evalue") or ""), 400)} if errors else None)
    failed = [c for c in checks if not c["passed"]]
    if timed_out:
        zeroed = "timed out (nbgrader's time limit: the cell's, or the notebook's)"
    elif error:
        zeroed = f"{error['ename']}: {error['evalue']}" if error["evalue"] else error["ename"]
    elif tampering:
        zeroed = f"{TAMPERING}: {tampering[0]}"
    elif stderr:
        zeroed = "printed on stderr: " + first_line(stderr)
    else:
        zeroed = None
    score = 0.0 if zeroed else cell_score(points, checks)
    if zeroed:
        failure = zeroed
    elif failed:
        failure = f"{failed[0]['name']}: {failed[0]['message']}"
    else:
        failure = None
    return {"schema": SCHEMA, "points": float(points), "score": score, "checks": checks, "tampering": tampering,
            "notes": notes, "timed_out": timed_out, "error": error, "stderr": first_line(stderr) if stderr else None,
            "zeroed": first_line(zeroed) if zeroed else None, "failure": first_line(failure) if failure else None}


def score_output(found: dict, execution_count=None) -> NotebookNode:
    """The cell's score as nbgrader reads it (``nbgrader.utils.determine_grade``: the first ``execute_result`` that
    casts to a float is a code grade cell's partial credit; an error or a stderr stream before it scores 0)."""
    return NotebookNode(output_type="execute_result", data={"text/plain": repr(float(found["score"]))}, metadata={},
                        execution_count=execution_count)


def judge_cell(cell, calls, reference, timed_out: bool = False, overflow: str | None = None,
               untouched: frozenset = frozenset()) -> dict:
    """Replace the records in ``cell`` by verdicts (one line per check, with the points it earned); write the
    verdict as data into ``cell.metadata["attncourse"]`` and return it (its ``score`` is what the cell earns: the
    caller writes it as the cell's one ``execute_result``, :func:`score_output`).

    ``overflow``: why the kernel's records in this cell went over their cap (IsolatedExecute dropped some):
    its records are discarded and the cell scores 0, with that reason.  ``untouched``: exercises whose solution
    cell is as it was handed out (:func:`untouched_exercises`): their checks earn nothing.
    """
    points = float(((cell.get("metadata") or {}).get("nbgrader") or {}).get("points", 0) or 0)
    if overflow:
        cell.outputs = [o for o in cell.get("outputs", []) if MIME not in (o.get("data") or {})]
    outputs, records = [], []
    for o in cell.get("outputs", []):
        data = o.get("data") or {}
        if MIME in data:
            records.append((len(outputs), data[MIME]))
            outputs.append(None)  # placeholder: the verdict goes where the record was
        else:
            outputs.append(o)
    kernel = [o for o in outputs if o is not None]
    errors = [o for o in kernel if o.get("output_type") == "error"]
    errored = timed_out or bool(errors)
    tampering, notes = [], []
    got_calls = [(r.get("exercise"), r.get("case")) if isinstance(r, dict) else (None, None) for _, r in records]
    numbers = [r.get("n") if isinstance(r, dict) else None for _, r in records]
    bound = (got_calls == calls and all(isinstance(n, int) for n in numbers)
             and numbers == sorted(set(numbers)))
    if errored:
        pass   # the kernel's error (or the timeout) is why the cell scores 0
    elif overflow:
        tampering.append(f"tampering suspected: {overflow} (limits in docs/GRADING.md); this cell scores 0")
    elif reference is None:
        tampering.append("the instructor's reference data for this section is missing: this check cannot be judged")
    elif not bound:
        tampering.append(_binding_problem(calls, got_calls))
    cases = (reference or {}).get("cases") or {}
    messages = (reference or {}).get("messages") or {}
    judged = {}                                  # index of a call -> (index of its output, problem)
    if reference is not None and (bound or errored):
        for i, ((idx, rec), (ex, case)) in enumerate(zip(records, calls)):
            if not isinstance(rec, dict) or (rec.get("exercise"), rec.get("case")) != (ex, case):
                break
            spec_dict = cases.get(f"{ex}:{case}")
            spec = StoredCase.from_dict(spec_dict) if spec_dict is not None else None
            judged[i] = (idx, judge_record(spec, rec, messages))
            notes += [n for n in rec.get("notes") or [] if isinstance(n, str)]
            if getattr(judged[i][1], "tampering", False) and not errored:   # a forged record: the cell scores 0
                tampering.append(f"tampering suspected: {label(ex, spec, case)}: {judged[i][1]}; this cell scores 0")
    if timed_out:
        stopped = "not checked: the cell hit nbgrader's time limit before this check"
    elif errors:
        stopped = f"not checked: the cell stopped before this check ({first_line(str(errors[0].get('ename')), 80)})"
    else:
        stopped = "not judged: " + (tampering[0] if tampering else "no record came back for it")
    checks = [_check(ex, case, cases.get(f"{ex}:{case}"), judged[i][1] if i in judged else stopped, i in judged,
                     reference, untouched) for i, (ex, case) in enumerate(calls)]
    earn(checks, points)
    lines = []
    for c, i in zip(checks, range(len(calls))):
        if i not in judged:
            continue
        worth = f"{_pts(c['points'])} / {_pts(c['weight'])}"
        lines += ([f"✓ {c['name']}  [{worth}]"] if c["passed"]
                  else [f"✗ {c['name']}  [{worth}]"] + _wrap(c["message"], indent="    "))
    found = verdict(kernel, checks, tampering, list(dict.fromkeys(notes)), timed_out, points)
    if lines:
        lines.append(_summary(found, len(judged), len(calls)))
    # one readable block of verdicts where the first record was; the records themselves are dropped
    first = min((judged[i][0] for i in judged), default=None)
    verdicts = {first: _stream("\n".join(lines) + "\n")} if lines else {}
    cell.outputs = [verdicts.get(i, o) for i, o in enumerate(outputs) if o is not None or i in verdicts]
    if found["notes"]:
        cell.outputs.append(_stream("(tampering suspected: " + "; ".join(found["notes"]) + ")\n"))
    if tampering and not errored:   # the reason, as an error output: nbgrader scores the cell 0 there
        message = "\n".join(tampering)
        shown = [f"{TAMPERING}:"] + [w for m in message.split("\n") for w in _wrap(m)]
        cell.outputs.append(NotebookNode(output_type="error", ename=TAMPERING, evalue=message, traceback=shown))
    cell.metadata[KEY] = found
    return found


def _check(ex, case, spec_dict, problem, judged: bool, reference, untouched) -> dict:
    """One hidden check's verdict as data (its ``points`` are filled in by :func:`_earn`)."""
    spec = StoredCase.from_dict(spec_dict) if spec_dict is not None else None
    weight = spec.points if spec is not None and spec.points is not None else 1.0
    if judged and problem is None and ex in untouched:
        problem = "not attempted: the code is as it was handed out (it earns nothing until you change it)"
    mistake = getattr(problem, "mistake", None)
    causes = (reference or {}).get("causes") or {}
    cause_key = causes.get(mistake, mistake) if mistake else None
    return {"name": label(ex, spec, case), "case": f"{ex}:{case}", "passed": problem is None,
            "weight": float(weight), "points": 0.0, "message": problem and str(problem),
            "cause": getattr(problem, "cause", None), "cause_key": cause_key,
            "cause_title": ((reference or {}).get("titles") or {}).get(cause_key) if cause_key else None,
            "limit": getattr(problem, "limit", None), "judged": judged, "untouched": ex in untouched}


def _pts(x: float) -> str:
    return f"{x:.3f}".rstrip("0").rstrip(".") or "0"


def _summary(found: dict, judged: int, calls: int) -> str:
    if found["zeroed"]:
        return f"→ 0 of {_pts(found['points'])} points: {found['zeroed']}"
    failed = sum(1 for c in found["checks"] if not c["passed"])
    if not failed:
        return f"→ {_pts(found['score'])} of {_pts(found['points'])} points: every check passed"
    return (f"→ {_pts(found['score'])} of {_pts(found['points'])} points: {failed} of {calls} checks failed "
            "(the reasons are above)")


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else (value or "")


def _wrap(text: str, indent: str = "", width: int = 100) -> list[str]:
    """Feedback lines that fit a page: nbgrader's HTML shows outputs unwrapped."""
    import textwrap

    return textwrap.wrap(text, width=width, initial_indent=indent, subsequent_indent=indent,
                         break_on_hyphens=False) or [indent]


def _binding_problem(calls, got) -> str:
    want = len(calls)
    if not got:
        why = "no record came back from the grader (was GRADER replaced, or its output removed?)"
    elif len(got) > want:
        why = f"{len(got)} records came back for {want} checks (extra or repeated records)"
    elif len(got) < want:
        why = f"only {len(got)} records came back for {want} checks"
    else:
        why = "the records do not match this cell's checks in order"
    return f"tampering suspected: {why}; this cell scores 0"


# -- nbgrader's metadata check, its schema compiled once --------------------------------------------------------
def _metadata_validator():
    """nbgrader's MetadataValidator (schema v3) whose per-cell JSON-schema check uses one compiled validator per
    process.  nbgrader calls ``jsonschema.validate`` for every cell, which checks the schema itself and builds a
    validator each time: 0.1 s for a notebook of 74 cells, paid twice per autograde.  Same checks, same errors
    (``jsonschema.validate`` is ``check_schema`` + ``best_match`` of the instance's errors)."""
    import jsonschema
    from nbgrader.nbgraderformat.common import BaseMetadataValidator, SchemaTooNewError, SchemaTooOldError
    from nbgrader.nbgraderformat.v3 import MetadataValidatorV3

    class SchemaOnce(BaseMetadataValidator):
        def validate_cell(self, cell):
            if "nbgrader" not in cell.metadata:
                return
            version = cell.metadata["nbgrader"].get("schema_version", 0)
            if version < self.schema_version:
                raise SchemaTooOldError(f"Outdated schema version: {version} (expected {self.schema_version})",
                                        version, self.schema_version)
            if version > self.schema_version:
                raise SchemaTooNewError(f"Schema version is too new: {version} (expected {self.schema_version})",
                                        version, self.schema_version)
            key = json.dumps(self.schema, sort_keys=True)
            checker = _SCHEMA_CHECKERS.get(key)
            if checker is None:
                cls = jsonschema.validators.validator_for(self.schema)
                cls.check_schema(self.schema)
                checker = _SCHEMA_CHECKERS.setdefault(key, cls(self.schema))
            error = jsonschema.exceptions.best_match(checker.iter_errors(cell.metadata["nbgrader"]))
            if error is not None:
                raise error

    class Validator(MetadataValidatorV3, SchemaOnce):   # V3's own checks, then (its super) the schema's, once
        pass

    return Validator()


_SCHEMA_CHECKERS: dict = {}


class SafeToShow(Preprocessor):
    """The renderer's own layer (nbgrader_config.py: ``HTMLExporter.preprocessors``, so formgrader and
    ``generate_feedback``): whatever notebook it is given, its outputs, attachments, raw cells and widget state
    are made safe (:func:`judge.sanitize.safe_notebook`) before nbconvert's template reads them (the classic
    template writes an image output's width and height unquoted, and runs JavaScript and widget outputs).
    Markdown is left to the ``markdown2html`` filter, which sanitizes it after rendering."""

    def preprocess(self, nb, resources):
        return safe_notebook(nb, markdown=False), resources


class CheckCellMetadataOnce(CheckCellMetadata):
    """nbgrader's ``CheckCellMetadata`` (its sanitize and autograde steps, generate_assignment's), with the
    metadata schema compiled once per process (:func:`_metadata_validator`)."""

    def preprocess(self, nb, resources):
        from nbgrader.nbgraderformat import ValidationError

        try:
            _metadata_validator().validate_nb(nb)
        except ValidationError:
            self.log.error(traceback.format_exc())
            msg = "Notebook failed to validate; the nbgrader metadata may be corrupted."
            self.log.error(msg)
            raise ValidationError(msg)
        return nb, resources
