"""The grader that the notebooks' hidden test cells call — the part that runs in the student's kernel.

The locked setup cell of every notebook creates one ``Grader`` before any
student code runs::

    from attncourse.kernel import Grader
    GRADER = Grader("02_qkv_by_hand")

Hidden test cells (stripped from the student release) then call
``GRADER.check(exercise, case, answer)``.  What happens depends on where the
kernel runs:

* **Autograding** (nbgrader with the course's config): the autograder wrote the
  section's hidden *inputs* — never the reference outputs — into the kernel's
  scratch folder (:data:`attncourse.protocol.cases.INPUTS_FILE`).  ``check`` runs the student's function or
  module on a case's inputs (CPU, the best accelerator present or ``meta``;
  float32/float64/bfloat16), with a time limit, stdout/stderr/warnings swallowed
  and exits blocked, and publishes a *record* of what came back
  (:mod:`attncourse.protocol.records`, encoded by :mod:`attncourse.kernel.encode`).  It makes no verdict: the judge
  (:class:`judge.preprocessors.JudgeRecords`) compares the records with the
  reference in the nbgrader process, where student code never runs.
* **Autograding without the course's judge** (nbgrader's config not loaded): every
  check fails; judging in the student's kernel could be fooled.
* **Elsewhere** (an instructor running a source notebook, the test suite,
  ``authoring.cuda_check``): the grader reads the instructor's full data from
  ``graders/data`` and reports each check's verdict at once, printing ``✓`` or raising :class:`GradingError` with
  the judge's message: the verdict of the same judge, passed in (the tests) or asked in a process of its own
  (:mod:`attncourse.kernel.verdicts`); nothing here imports the judge.
"""
from __future__ import annotations

import os as _os
from pathlib import Path as _Path

from ..protocol.cases import DEVICE_ARG, INPUTS_FILE, StoredCase, label as _label
from ..protocol.records import MIME, VERSION
from ..teach.devices import best_device as _best_device
from . import trusted as T
from .encode import encode_answer
from .watch import Watch

# Longest a single graded call of student code may run (an infinite loop earns nothing
# for that check; nbgrader's per-cell timeout is the backstop).
CHECK_TIMEOUT_ENV = "ATTNCOURSE_CHECK_TIMEOUT"
DATA_ENV = "ATTNCOURSE_ROOT"


class GradingError(AssertionError):
    """A graded check failed; the message says why."""


class _CheckTimeout(BaseException):
    """Raised inside student code when a graded call runs past the time limit."""


def _exit_blocked(*args, **kwargs):
    raise SystemExit("os._exit()/os.abort() is disabled while grading")


def _on_alarm(signum, frame):
    raise _CheckTimeout()


def _publish(record: dict, text: str):
    """Send a record out of the kernel as display data (the judge reads it from the cell's outputs)."""
    from IPython.display import publish_display_data

    publish_display_data({MIME: record, "text/plain": text})


_publish_record = _publish


def find_course_root(start=None):
    """The course folder holding ``graders/data``: $ATTNCOURSE_ROOT, else the nearest parent of cwd."""
    env = T.environ_get(DATA_ENV)
    if env and (_Path(env) / "graders" / "data").is_dir():
        return _Path(env)
    here = _Path(start or T.getcwd()).resolve()
    for p in (here, *here.parents):
        if (p / "graders" / "data").is_dir() and (p / "nbgrader_config.py").is_file():
            return p
    return None


def _install_guard(grader):
    """While autograding: before every cell, put GRADER back, re-block exits and re-silence warnings.

    Runs as an IPython ``pre_run_cell`` hook.  It protects the *honest* student
    (a warning on stderr would score a test cell 0; an accidental ``GRADER = ...``
    would lose every later check), not the verdict: the verdict is made outside
    the kernel, and a rebound or faked GRADER simply produces no valid records.
    """
    try:
        ip = get_ipython()  # noqa: F821  (defined inside IPython only)
    except NameError:
        return
    if ip is None or not grader.autograding:
        return
    ns = ip.user_ns
    state = {"bound": None}
    exits = [(_os, "_exit", _exit_blocked), (_os, "abort", _exit_blocked)]
    try:
        import posix as _posix
        exits.append((_posix, "_exit", _exit_blocked))
    except ImportError:  # pragma: no cover
        pass

    def guard(*_a, **_k):
        if ns.get("GRADER") is grader:
            state["bound"] = True
        elif state["bound"]:
            grader._notes.append("GRADER was rebound by student code (restored)")
            ns["GRADER"] = grader
        T.simplefilter("ignore")
        for mod, name, fn in exits:
            if mod.__dict__.get(name) is not fn:
                mod.__dict__[name] = fn

    ip.events.register("pre_run_cell", guard)
    guard()


class Grader:
    """Hidden-test runner for one section; create it in the locked setup cell."""

    def __init__(self, section: str, judge=None):
        """``judge``: ``judge_record(spec, record, messages) -> problem or None``, used only where the instructor's
        full data is at hand (their own notebook, the tests pass the judge's own); by default the course checkout's
        judge in a process of its own (:class:`attncourse.kernel.verdicts.VerdictProcess`, beside ``graders/data``):
        this package, which students' kernels import, holds no judge and imports none."""
        self.section = section
        self._judge = judge
        self._count = 0
        self._notes: list = []
        self._reference = None      # the instructor's full data (only when not autograding)
        inputs = T.path_join(T.getcwd(), INPUTS_FILE)
        self.autograding = T.isfile(inputs)
        self._cases = {}
        self._refused = None
        # In-process judging only: a list to collect every check's verdict into (``check_now``, the tests) instead
        # of raising at the first failed one: {"name", "key", "problem" (None: passed), "points" (its weight)}.
        self.collect: list | None = None
        if not self.autograding and T.environ_get("NBGRADER_EXECUTION") == "autograde":
            # nbgrader is autograding but the course's judge did not share the inputs: its config was not
            # loaded (or the section has no reference data).  Judging here, in the student's kernel, could be
            # fooled; every hidden check fails instead.
            self._refused = ("the course's autograder is not configured (nbgrader_config.py was not loaded, or "
                             "this section has no reference data): hidden checks cannot be judged")
        elif self.autograding:
            try:
                self._cases = T.torch_load(inputs, weights_only=True)["cases"]
            except T.Exception_ as exc:  # every check then records the problem; the judge scores it 0
                self._cases = None
                self._load_problem = f"the hidden inputs could not be read ({T.type_(exc).__name__})"
        else:
            root = find_course_root()
            if root is not None:
                path = root / "graders" / "data" / f"{section}.pt"
                self._reference = T.torch_load(str(path), weights_only=True)
                self._cases = self._reference["cases"]
                if self._judge is None:
                    from .verdicts import VerdictProcess

                    self._judge = VerdictProcess(root, section)
        _install_guard(self)

    # -- public API -------------------------------------------------------------
    def check(self, exercise: str, case: str, answer, **context):
        """Run ``answer`` (a value, a function or a module class) on a hidden case and report it."""
        __tracebackhide__ = True  # noqa: F841  (IPython shows the message, not grader internals)
        key = f"{exercise}:{case}"
        if self._refused:
            raise GradingError(self._refused)
        self._count += 1
        record = {"v": VERSION, "n": self._count, "exercise": exercise, "case": case}
        if self._cases is None:
            record["problem"] = self._load_problem
            spec = None
        elif key not in self._cases:
            if not self.autograding and self._reference is None:
                raise GradingError(
                    "The hidden reference data is not available here: hidden tests run when an "
                    "instructor autogrades, or through the course's self-check (see README).")
            record["problem"] = f"no hidden case {key!r} in section {self.section}"
            spec = None
        else:
            spec = StoredCase.from_dict(self._cases[key])
            try:   # one check never stops the cell's later ones: whatever happens here is this check's record
                record.update(run(spec, answer, context))
            except KeyboardInterrupt:
                raise
            except T.BaseException_ as exc:
                record["problem"] = f"the grader could not run or describe the answer ({T.type_(exc).__name__})"
        if self._notes:
            record["notes"] = list(dict.fromkeys(self._notes))
        name = _label(exercise, spec, case)
        if self.autograding:
            _publish_record(record, f"{name}: checked by the autograder")
            return
        problem = self._judge(spec, record, self._reference.get("messages", {}))
        if self.collect is not None:
            self.collect.append({"name": name, "key": key, "problem": problem,
                                 "points": (self._cases.get(key) or {}).get("points")})
            return
        if problem is not None:
            raise GradingError(f"{name}: {problem}")
        T.print_(f"✓ {name}")


# -- running the student's code (kernel side) --------------------------------------------------------
def run(spec: StoredCase, answer, context: dict) -> dict:
    """Run ``answer`` on ``spec``'s inputs; the facts for a record (never a verdict)."""
    out = {"device": None}
    try:
        if spec.kind == "value":
            out.update(encode_answer(answer))
            return out
        if spec.kind == "raises":
            args = _materialise(spec.args or [], T.t_float32, T.cpu, False, context)
            kwargs = {k: _materialise(v, T.t_float32, T.cpu, False, context) for k, v in (spec.kwargs or {}).items()}
            got, exc = call_guarded(answer, *args, **kwargs)
            out.update(error_facts(exc) if exc is not None else {"answer": {"k": "other", "type": "no exception"}})
            return out
        if spec.kind == "attributes":
            return _attributes(answer, spec, out)
        device = _device(spec)
        out["device"] = T.str_(device)
        dtype = T.FLOAT_DTYPES[spec.dtype]
        args = _materialise(spec.args or [], dtype, device, spec.cast, context, spec.api)
        kwargs = {k: _materialise(v, dtype, device, spec.cast, context, spec.api) for k, v in (spec.kwargs or {}).items()}
        if spec.kind == "module":
            module, problem = _build_module(answer, spec, dtype, device)
            if problem:
                out["problem"] = problem
                return out
            fn = lambda *a, **k: T.Module_call(module, *a, **k)  # noqa: E731
        else:
            if not T.callable_(answer):
                out["problem"] = f"expected a function, got {T.describe_type(answer)}"
                return out
            fn = answer
        watch = Watch(answer, caller=globals(), libraries=_names_libraries(spec.how)) if spec.how else None
        with T.t_no_grad():
            got, exc = call_guarded(fn if watch is None else _watched(fn, watch), *args, **kwargs)
        if watch is not None:   # how it was computed: facts for the judge's rules (attncourse.kernel.watch)
            out["how"] = watch.record()
        out.update(error_facts(exc) if exc is not None else encode_answer(got))
    except _MissingContext as missing:
        out["problem"] = f"the test needs {missing.args[0]!r} to be passed to the grader"
    return out


def _names_libraries(how: dict) -> bool:
    """Whether a case's rules refuse a function of a library other than torch (then the record lists them)."""
    return T.any_(not p.startswith(("torch.", "aten.")) for _, patterns in (how.get("refuse") or [])
                  for p in patterns)


def _watched(fn, watch):
    """``fn`` called inside ``watch`` (the record of the tensor operations it runs)."""
    def call(*args, **kwargs):
        with watch:
            return fn(*args, **kwargs)
    return call


def _attributes(cls, spec: StoredCase, out: dict) -> dict:
    """A module built with ``init`` on the CPU: its attributes named in ``labels`` that it has, as a dict (the judge
    names a missing one)."""
    module, problem = _build_module(cls, spec, T.t_float32, T.cpu)
    if problem:
        out["problem"] = problem
        return out
    found = {}
    for name in spec.labels or []:
        value, exc = call_guarded(T.getattr_, module, name)
        if exc is None:
            found[name] = value
    out.update(encode_answer(found))
    return out


class _MissingContext(Exception):
    pass


def error_facts(exc) -> dict:
    t = T.type_(exc)
    try:
        text = T.str_(exc)[:2000]
    except T.BaseException_:
        text = ""
    return {"error": {"type": t.__name__, "mro": [c.__name__ for c in t.__mro__], "text": text}}


def _device(spec):
    if spec.device == "best":
        return _best_device()
    return T.t_device_cls(spec.device)


def _materialise(value, dtype, device, cast, context, api="torch"):
    """A fresh copy of a stored input on the case's device and dtype (a NumPy array for NumPy exercises)."""
    if T.type_(value) is T.Tensor:
        dt = T.t_dtype(value)
        target = dtype if (cast and T.t_is_floating_point(value)) else dt
        if api == "numpy":
            return T.ndarray_copy(T.t_numpy(T.t_to(T.t_clone(value), T.cpu, target)))
        if T.str_(device) == "meta":
            return T.t_empty(T.tuple_(T.t_shape(value)), dtype=target, device="meta")
        return T.t_to(T.t_clone(value), device, target)
    if T.type_(value) is T.str_ and value == DEVICE_ARG:   # the case's device, for a `device=` argument
        return device
    if T.type_(value) is T.str_ and value.startswith("$ctx:"):
        name = value[5:]
        if name not in context:
            raise _MissingContext(name)
        return context[name]
    if T.type_(value) is T.list_:
        return [_materialise(v, dtype, device, cast, context, api) for v in value]
    if T.type_(value) is T.tuple_:
        return T.tuple_(_materialise(v, dtype, device, cast, context, api) for v in value)
    return value


def call_guarded(fn, *args, **kwargs):
    """Call student code with warnings and stray stderr/stdout swallowed and a time limit; return (result, exc)."""
    sink = T.StringIO()
    try:
        limit = T.float_(T.environ_get(CHECK_TIMEOUT_ENV, "20") or 0)
    except T.ValueError_:
        limit = 20.0
    timed = limit > 0 and T.current_thread() is T.main_thread()
    old = None
    try:
        if timed:
            old = T.getsignal(T.SIGALRM)
            T.signal(T.SIGALRM, _on_alarm)
            T.setitimer(T.ITIMER_REAL, limit)
        try:
            with T.catch_warnings():
                T.simplefilter("ignore")
                with T.redirect_stderr(sink), T.redirect_stdout(sink):
                    return fn(*args, **kwargs), None
        finally:
            if timed:
                T.setitimer(T.ITIMER_REAL, 0)
                T.signal(T.SIGALRM, old if old is not None else 0)
    except _CheckTimeout:
        return None, _CheckTimeout(f"it ran for more than {limit:g} s (an infinite loop?)")
    except T.BaseException_ as exc:  # SystemExit included: it earns nothing
        if T.type_(exc) is KeyboardInterrupt:
            raise
        return None, exc


def _build_module(cls, spec, dtype, device):
    init = spec.init or {}
    if T.str_(device) == "meta":
        def make():
            with T.t_device_cls("meta"):
                return T.Module_to(cls(**init), dtype=dtype)
    else:
        def make():
            return T.Module_to(cls(**init), dtype=dtype)
    module, exc = call_guarded(make)
    if exc is not None:
        return None, f"constructing it with {init} raised {T.type_(exc).__name__}: {exc}"
    if not T.isinstance_(module, T.Module):
        return None, f"expected an nn.Module subclass, got {T.describe_type(module)}"
    for name, value in (spec.params or {}).items():
        try:
            p = T.Module_get_parameter(module, name)
        except T.Exception_:
            return None, f"the module has no parameter {name!r} (the contract names it)"
        want = T.tuple_(T.t_shape(value))
        have = T.tuple_(T.t_shape(p))
        if want != have:
            return None, f"parameter {name!r} has shape {have}, expected {want}"
        if T.str_(device) != "meta":
            with T.t_no_grad():
                T.tensor_copy_(p, value)
    if spec.params:
        # The hidden tests load their weights into exactly the contract's names: a parameter beyond them (a
        # bias the contract leaves out) would keep its random initial values.
        extra, exc = call_guarded(lambda: [n for n, _ in T.Module_named_parameters(module) if n not in spec.params])
        if exc is None and extra:
            return None, (f"the module has parameters the contract does not name: {', '.join(extra[:4])} (a bias "
                          "the contract leaves out? e.g. nn.Linear(..., bias=False))")
    if T.str_(device) != "meta":
        module, exc = call_guarded(T.Module_to, module, device)
        if exc is not None:
            return None, f"moving it to {device} raised {T.type_(exc).__name__}: {exc}"
    T.Module_eval(module)
    return module, None
