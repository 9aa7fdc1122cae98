"""Section 11's tools around Triton: where its kernels run, a bounds-checked interpreter, and what a kernel read.

* :func:`triton_mode` — chooses, before the first ``@triton.jit``, how kernels run here: compiled for the GPU
  where one can compile (a CUDA device, outside the grading sandbox), else in Triton's interpreter
  (``TRITON_INTERPRET=1``: each program runs in Python and NumPy on the CPU, one after the other).  Triton reads
  that setting when a function is decorated (``triton.knobs.runtime.interpret``, Triton 3.6–3.9), its own
  library's included (``tl.max``, ``tl.sum``, ``tl.cdiv`` are ``@jit`` functions of ``triton.language``): where
  ``triton.language`` was imported before with the compiler on — ``import torch._dynamo`` imports it, and the
  grading kernels' fork server preloads that — those functions are replaced by interpreted ones
  (:func:`_interpreted_language`).  Compiling needs new processes (``ptxas``, a C compiler, ``ldconfig``), which
  the grading sandbox's syscall filter refuses: there, and wherever no CUDA device is, it interprets.
* In the interpreter every ``tl.load`` and ``tl.store`` is checked against the tensors the launch was given: an
  access outside all of them (a partial tile left unmasked) raises :class:`OutOfBounds` naming the program,
  instead of reading whatever memory lies there or corrupting it (the interpreter itself checks nothing; on a
  GPU the same bug is an illegal memory access, or silent garbage).
* :func:`traffic` counts, per tensor, the ``tl.load`` calls that read it, the bytes read and the program that
  read them: section 11 measures with it the key tiles a FlashAttention program visits.
* :func:`no_torch_math` refuses, while a launcher runs, the torch operations that compute attention (products,
  softmax, exponentials, reductions, PyTorch's fused attention): the kernel is what must compute it.
* :func:`run_and_count` is what the hidden tests wrap a launcher in: both of the above;
  :func:`interpreted` runs compiled kernels in the interpreter for a while (to count on a GPU machine).

Where Triton is missing (macOS and Windows have no wheels) :func:`triton_mode` raises an ImportError saying so.
"""
from __future__ import annotations

import contextlib
import importlib.util
import os
from collections import Counter

import numpy as np
import torch

from .devices import best_device

INTERPRET_ENV = "TRITON_INTERPRET"
MISSING = ("section 11 needs Triton (pip install triton==3.7.1, which ./course setup installs on Linux); Triton "
           "has wheels for Linux only: on macOS or Windows run this notebook in a Linux container, under WSL or on "
           "a hosted Linux notebook")


class OutOfBounds(IndexError):
    """A ``tl.load`` or ``tl.store`` outside every tensor the kernel was given (raised by the checked interpreter)."""


class TorchMathRefused(RuntimeError):
    """The launcher computed part of the answer with torch instead of the kernel."""


# -- where kernels run ------------------------------------------------------------------------------------------
def syscall_filtered() -> bool:
    """True inside a seccomp filter (the grading sandbox): no new process may start, so nothing can be compiled."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Seccomp:"):
                    return line.split(":", 1)[1].strip() not in ("", "0")
    except OSError:
        pass
    return False


def can_compile() -> tuple[bool, str]:
    """(True, '') where Triton can compile kernels for a GPU here, else (False, why not)."""
    if best_device().type != "cuda":
        return False, "no CUDA GPU here"
    if syscall_filtered():
        return False, ("a syscall filter is in force (the grading sandbox): compiling runs ptxas and a C compiler as "
                       "new processes")
    return True, ""


def interpreting() -> bool:
    """Whether a kernel decorated now runs in Triton's interpreter."""
    return os.environ.get(INTERPRET_ENV, "0") == "1"


def triton_mode(interpret: bool | None = None) -> str:
    """Choose how the kernels decorated from now on run, and say it in one line.

    ``interpret=None``: compiled where a GPU can compile (:func:`can_compile`), interpreted elsewhere (or where
    ``TRITON_INTERPRET=1`` is set already); ``True``: always interpreted (the reference build runs on CPU
    tensors). Call it before the first ``@triton.jit``. Raises ImportError where Triton is not installed."""
    if importlib.util.find_spec("triton") is None:
        raise ImportError(MISSING)
    native, why = can_compile()
    if interpret or not native or interpreting():
        os.environ[INTERPRET_ENV] = "1"
        install_checks()
        _interpreted_language()       # where torch (or anything) imported triton.language with the compiler on
        why = why or ("asked for" if interpret else f"{INTERPRET_ENV}=1 is set")
    import triton

    if interpreting():
        return (f"Triton {triton.__version__}: kernels run in its interpreter on the CPU ({why}), every load and "
                "store checked against the tensors given")
    return f"Triton {triton.__version__}: kernels are compiled for {torch.cuda.get_device_name()}"


# -- the checked interpreter ------------------------------------------------------------------------------------
# per tensor argument of the running launch: (first byte, one past the last, host-to-device offset), host addresses
_LAUNCH: list = []
_WATCHES: list = []     # the active traffic recorders


def _extent(t: torch.Tensor):
    """(first byte, one past the last byte) that a tensor's elements occupy, or None for an empty tensor."""
    if t.numel() == 0:
        return None
    span = sum((n - 1) * s for n, s in zip(t.shape, t.stride())) + 1
    return t.data_ptr(), t.data_ptr() + span * t.element_size()


def _tensors(dev, hst):
    """(device tensor, host tensor) pairs inside a launch argument (tuples and tensor descriptors included)."""
    if isinstance(hst, torch.Tensor) and isinstance(dev, torch.Tensor):
        return [(dev, hst)]
    if isinstance(hst, tuple) and isinstance(dev, tuple):
        return [p for d, h in zip(dev, hst) for p in _tensors(d, h)]
    base_d, base_h = getattr(dev, "base", None), getattr(hst, "base", None)
    if isinstance(base_d, torch.Tensor) and isinstance(base_h, torch.Tensor):
        return [(base_d, base_h)]
    return []


def _element_bytes(ptrs) -> int:
    return max(1, int(ptrs.get_element_ty().primitive_bitwidth) // 8)


def _access(ptrs, mask, verb: str):
    """Check one interpreted load or store against the launch's tensors; tell the traffic recorders."""
    if not _LAUNCH:
        return
    from triton.runtime.interpreter import interpreter_builder

    addr = np.asarray(ptrs.data).astype(np.int64, copy=False)
    keep = np.broadcast_to(np.asarray(mask.data, dtype=bool), addr.shape)
    addr = addr[keep]
    if addr.size == 0:
        return
    size = _element_bytes(ptrs)
    inside = np.zeros(addr.shape, dtype=bool)
    for start, end, delta in _LAUNCH:
        hit = (addr >= start) & (addr + size <= end)
        if hit.any():
            inside |= hit
            if _WATCHES:
                program = tuple(int(i) for i in (interpreter_builder.grid_idx or ()))
                for watch in _WATCHES:
                    watch._saw(addr[hit] + delta, size, verb, program)
    if not inside.all():
        outside = int((~inside).sum())
        what = "tl.load reads" if verb == "read" else "tl.store writes"
        program = tuple(int(i) for i in (interpreter_builder.grid_idx or ()))
        raise OutOfBounds(f"{what} {outside} element(s) outside every tensor given to the kernel (program "
                          f"{program}): is the tile that runs past the end of the tensor masked (mask=... < T)?")


def install_checks():
    """Check every interpreted load and store (and feed :func:`traffic`); once per process, idempotent."""
    from triton.runtime import interpreter as I

    if getattr(I, "_attncourse_checked", False):
        return
    executor = I.GridExecutor
    init_args, call = executor._init_args_hst, executor.__call__

    def _init_args_hst(self, args_dev, kwargs):
        args_hst, kwargs_hst = init_args(self, args_dev, kwargs)
        pairs = [p for d, h in zip(args_dev, args_hst) for p in _tensors(d, h)]
        pairs += [p for k in kwargs_hst for p in _tensors(kwargs[k], kwargs_hst[k])]
        _LAUNCH[:] = [(*ext, dev.untyped_storage().data_ptr() - hst.untyped_storage().data_ptr())
                      for dev, hst in pairs if (ext := _extent(hst)) is not None]
        return args_hst, kwargs_hst

    def __call__(self, *args, **kwargs):
        try:
            return call(self, *args, **kwargs)
        finally:
            _LAUNCH.clear()

    builder = I.interpreter_builder
    load, store = builder.create_masked_load, builder.create_masked_store

    def create_masked_load(ptrs, mask, *rest, **kw):
        _access(ptrs, mask, "read")
        return load(ptrs, mask, *rest, **kw)

    def create_masked_store(ptrs, value, mask, *rest, **kw):
        _access(ptrs, mask, "write")
        return store(ptrs, value, mask, *rest, **kw)

    patch_tensor = I._patch_lang_tensor

    def _patch_lang_tensor(tensor, scope):
        # Triton 3.6's interpreter turns a one-element tensor into an int with int(array), which fails for the
        # (1,)-shaped result of tl.minimum: `range(0, tl.minimum(...), BLOCK)` then breaks. 3.7 squeezes first.
        patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

    executor._init_args_hst, executor.__call__ = _init_args_hst, __call__
    builder.create_masked_load, builder.create_masked_store = create_masked_load, create_masked_store
    I._patch_lang_tensor = _patch_lang_tensor
    I._attncourse_checked = True


class Traffic:
    """What the kernels launched inside :func:`traffic` read from (and wrote to) each watched tensor."""

    def __init__(self, tensors: dict):
        self._extents = {name: _extent(t) for name, t in tensors.items()}
        self._sizes = {name: t.element_size() for name, t in tensors.items()}
        self.loads: Counter = Counter()          # name -> tl.load calls that read it
        self.bytes_read: Counter = Counter()     # name -> bytes those loads read (masked-out elements not counted)
        self.bytes_written: Counter = Counter()  # name -> bytes stored into it
        self.by_program: dict = {name: Counter() for name in tensors}   # name -> program id -> loads
        self.reads: dict = {name: [] for name in tensors}   # name -> (program id, first element read) per load

    def _saw(self, addr, size, verb, program):
        for name, extent in self._extents.items():
            if extent is None:
                continue
            hit = (addr >= extent[0]) & (addr + size <= extent[1])
            n = int(hit.sum())
            if not n:
                continue
            if verb == "read":
                self.loads[name] += 1
                self.bytes_read[name] += n * size
                self.by_program[name][program] += 1
                self.reads[name].append((program, (int(addr[hit].min()) - extent[0]) // self._sizes[name]))
            else:
                self.bytes_written[name] += n * size


@contextlib.contextmanager
def traffic(**tensors):
    """``with traffic(k=k, v=v) as seen: launch(...)`` — ``seen.loads["k"]`` tl.load calls read ``k``,
    ``seen.bytes_read["k"]`` bytes, ``seen.by_program["k"][(i, j, 0)]`` loads by program ``(i, j)``,
    ``seen.reads["k"]`` (program, first element of ``k`` read) per load. A tensor is known by the memory its
    elements occupy: the launcher may pass it or views of it, not copies. Needs the interpreter."""
    if not interpreting():
        raise RuntimeError("counting what a kernel reads needs Triton's interpreter (TRITON_INTERPRET=1 before the "
                           "kernel is decorated)")
    install_checks()
    seen = Traffic(tensors)
    _WATCHES.append(seen)
    try:
        yield seen
    finally:
        _WATCHES.remove(seen)


# -- the launcher computes nothing -------------------------------------------------------------------------------
# ATen operations that compute attention's substance: products, the softmax and its exponentials, reductions,
# PyTorch's fused attention. Creating, viewing and copying tensors (and elementwise scaling) stay allowed.
REFUSED_OPS = frozenset({
    "mm", "bmm", "addmm", "baddbmm", "addbmm", "matmul", "dot", "vdot", "mv", "addmv", "linear", "_scaled_mm",
    "_softmax", "_log_softmax", "_safe_softmax", "softmax", "log_softmax", "exp", "exp_", "exp2", "expm1", "log",
    "log2", "log1p", "logsumexp", "logaddexp", "sigmoid", "sum", "nansum", "mean", "amax", "amin", "max", "min",
    "cumsum", "prod", "scaled_dot_product_attention", "_flash_attention_forward", "_efficient_attention_forward",
})
REFUSED_PREFIXES = ("_scaled_dot_product_",)


@contextlib.contextmanager
def no_torch_math():
    """While it is active, a torch operation of :data:`REFUSED_OPS` raises :class:`TorchMathRefused`."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Refuse(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func._overloadpacket.__name__
            if name in REFUSED_OPS or name.startswith(REFUSED_PREFIXES):
                raise TorchMathRefused(f"the launcher computed with torch (aten.{name}): here the Triton kernel "
                                       "computes the attention, and the launcher only allocates the outputs and "
                                       "launches it")
            return func(*args, **(kwargs or {}))

    with _Refuse():
        yield


# id of a compiled-mode @jit function -> (it, its interpreted twin): one twin each, as the interpreter compares
# reduction functions by identity (tl.standard._elementwise_max); keyed by id, since hashing a JITFunction walks
# the functions it calls
_INTERPRETED: dict = {}


def _twin(obj):
    from triton.runtime.interpreter import InterpretedFunction

    if id(obj) not in _INTERPRETED:
        _INTERPRETED[id(obj)] = (obj, InterpretedFunction(obj.fn))
    return _INTERPRETED[id(obj)][1]


def _interpreted_language(namespaces=()) -> list:
    """Every compiled-mode ``@jit`` function of ``triton.language`` (and of ``namespaces``) replaced by its
    interpreted twin, the tensor methods that forward to them (``x.max()``) included; returns what to put back."""
    import sys

    from triton.runtime.jit import JITFunction

    undo = []
    spaces = [vars(m) for name, m in list(sys.modules.items())
              if m is not None and (name == "triton.language" or name.startswith("triton.language."))]
    for space in spaces + list(namespaces):
        for key, obj in list(space.items()):
            if isinstance(obj, JITFunction):
                undo.append((space, key, obj))
                space[key] = _twin(obj)
    tensor = sys.modules["triton.language.core"].tensor
    for key, obj in list(vars(tensor).items()):
        if isinstance(obj, JITFunction):
            def member(*args, _fn=_twin(obj), **kwargs):
                return _fn(*args, **kwargs)
            undo.append((tensor, key, obj))
            setattr(tensor, key, member)
    return undo


def _put_back(undo: list):
    for where, key, obj in reversed(undo):
        if isinstance(where, dict):
            where[key] = obj
        else:
            setattr(where, key, obj)


@contextlib.contextmanager
def interpreted(namespace: dict):
    """While it is active, kernels run in the interpreter (so that :func:`traffic` sees them): where they are
    compiled, the compiled kernels (``JITFunction``) of ``namespace`` (a notebook's ``globals()``, a launcher's
    ``__globals__``) are replaced by interpreted ones, and CPU tensors must be given. Where they are interpreted
    already, it changes nothing."""
    if interpreting():
        yield
        return
    install_checks()
    undo = _interpreted_language([namespace])
    os.environ[INTERPRET_ENV] = "1"
    try:
        yield
    finally:
        os.environ.pop(INTERPRET_ENV, None)
        _put_back(undo)


def _on_cpu(value):
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu").clone()
    return value


def run_and_count(launcher, args: tuple, kwargs: dict, of: int):
    """``(launcher(*args, **kwargs), loads)``, with :func:`no_torch_math` in force; ``loads``: the ``tl.load``
    calls its kernels made that read ``args[of]``. Interpreted: one run. Compiled: the run on the given device,
    then a second, interpreted one on CPU copies to count (:func:`interpreted`, on the launcher's namespace)."""
    if interpreting():
        with no_torch_math(), traffic(counted=args[of]) as seen:
            out = launcher(*args, **kwargs)
        return out, seen.loads["counted"]
    with no_torch_math():
        out = launcher(*args, **kwargs)
    cpu = tuple(_on_cpu(a) for a in args)
    with interpreted(getattr(launcher, "__globals__", {})), no_torch_math(), traffic(counted=cpu[of]) as seen:
        launcher(*cpu, **kwargs)
    return out, seen.loads["counted"]
