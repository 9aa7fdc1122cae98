"""Section 11's facts: its kernels compute attention and its gradients, its prediction is what the kernel loads, its
find-the-bug handout is the named mistake; and the tools under it (attncourse.teach.flash) do what the notebook
says: Triton runs interpreted where it cannot compile (inside the grading sandbox, in a kernel forked from the
preloaded fork server that imported Triton's library with the compiler on), the interpreter checks every access,
the traffic count sees the tiles a kernel loads, and a launcher that computes with torch is refused. Each
protection is paired with the honest case."""
from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap

import pytest
import torch

from attncourse.course import missing_requirement
from tests.harness import ROOT

SECTION = "11_flash_attention_triton"
pytestmark = pytest.mark.skipif(bool(missing_requirement(SECTION)), reason=missing_requirement(SECTION) or "")


def _ex(name):
    from graders import load_section

    return load_section(SECTION).exercise(name)


def _define(name, code=None):
    """An exercise's reference (or ``code``), as the hidden tests see it: the given code first, no wrap."""
    from dataclasses import replace

    from authoring.references import define

    ex = _ex(name)
    return define(replace(ex, wrap=None), ex.reference if code is None else code)


def _mistake(name, key):
    return [m for m in _ex(name).mistakes if m.key == key][0].code


def _plain(q, k, v, causal):
    """Attention in float64 the plain way: (output, log-sum-exp)."""
    s = q.double() @ k.double().transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        t = q.shape[-2]
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    return s.softmax(-1) @ v.double(), s.logsumexp(-1)


def _code(*parts: str) -> str:
    return "\n".join(textwrap.dedent(part) for part in parts)


def _run(folder, *parts: str, timeout=300) -> dict:
    """The code in a fresh Python (the interpreter's set-up is process-wide), from a file (a compiled-mode @jit
    function must be defined in one); its last line of output, as JSON."""
    script = folder / "probe.py"
    script.write_text(_code(*parts))
    p = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                       env={"PATH": "/usr/bin:/bin", "HOME": str(folder), "PYTHONPATH": str(ROOT)})
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_forward_reference_is_attention_and_loads_no_tile_above_the_diagonal():
    from attncourse.teach.flash import traffic

    forward = _define("flash_attention_forward")
    q, k, v = torch.randn(3, 2, 2, 45, 16).unbind(0)           # T = 45: partial last tiles of 16
    for causal in (False, True):
        with traffic(k=k) as seen:
            o, lse = forward(q, k, v, causal=causal, block_m=16, block_n=16)
        o_ref, lse_ref = _plain(q, k, v, causal)
        assert torch.allclose(o.double(), o_ref, atol=1e-5) and torch.allclose(lse.double(), lse_ref, atol=1e-5)
        # 3 query tiles per head: 3 key tiles each, or 1, 2 and 3 with the mask; 4 heads
        assert seen.loads["k"] == 4 * (6 if causal else 9)


def test_backward_reference_equals_autograd_in_float64():
    backward = _define("flash_attention_backward_dkdv")
    q, k, v, do = torch.randn(4, 1, 2, 37, 16, dtype=torch.float64).unbind(0)
    for causal in (False, True):
        kg, vg = k.clone().requires_grad_(), v.clone().requires_grad_()
        o, lse = _plain(q, kg, vg, causal)
        o.backward(do)
        dk, dv = backward(q, k, v, o.detach(), lse.detach(), do, causal=causal, block_m=16, block_n=32)
        assert torch.allclose(dk, kg.grad, atol=1e-6) and torch.allclose(dv, vg.grad, atol=1e-6), causal


@pytest.mark.slow   # a kernel at T = 1024 in the interpreter, twice: seconds
def test_predicted_tiles_are_what_the_kernel_loads():
    """The prediction exercise's answer is what the reference kernel's loads of k count at T = 1024, 64 × 64."""
    from attncourse.teach.flash import traffic

    forward = _define("flash_attention_forward")
    q, k, v = torch.randn(3, 1, 1, 1024, 64).unbind(0)         # one storage: k is told apart by its memory
    counts = []
    for causal in (False, True):
        with traffic(k=k, v=v) as seen:
            forward(q, k, v, causal=causal, block_m=64, block_n=64)
        counts.append(seen.loads["k"])
        assert seen.bytes_read["k"] == seen.bytes_read["v"] == counts[-1] * 64 * 64 * 4
    assert tuple(_define("predicted_tiles")) == tuple(counts) == (256, 136)


def test_exp2_handout_is_the_named_mistake_and_the_fix_gives_the_natural_lse():
    ex = _ex("flash_forward_exp2")
    assert ex.handout == "lse_base2"
    buggy, fixed = _define(ex.name, _mistake(ex.name, ex.handout)), _define(ex.name)
    q, k, v = torch.randn(3, 1, 2, 40, 16).unbind(0)
    o_ref, lse_ref = _plain(q, k, v, True)
    o, lse = buggy(q, k, v, causal=True)
    assert torch.allclose(o.double(), o_ref, atol=1e-5)                             # passes the visible check ...
    assert torch.allclose(lse.double(), lse_ref / math.log(2), atol=1e-4)          # ... its lse is in base 2
    o, lse = fixed(q, k, v, causal=True)
    assert torch.allclose(lse.double(), lse_ref, atol=1e-5)


def test_checked_interpreter_stops_an_unmasked_tile_and_passes_the_masked_one():
    """The forward's tail_loads_unmasked mistake raises OutOfBounds where its loads leave k; the reference, the same
    code with the masks, reads nothing outside (the count of what it read is exact)."""
    from triton.runtime.errors import InterpreterError

    q, k, v = torch.randn(3, 1, 1, 37, 16).unbind(0)
    unmasked = _define("flash_attention_forward", _mistake("flash_attention_forward", "tail_loads_unmasked"))
    with pytest.raises(InterpreterError, match="outside every tensor given to the kernel"):
        unmasked(q.clone(), k.clone(), v.clone(), causal=False, block_m=16, block_n=16)
    o, _ = _define("flash_attention_forward")(q, k, v, causal=False, block_m=16, block_n=16)
    assert torch.allclose(o.double(), _plain(q, k, v, False)[0], atol=1e-5)


def test_torch_math_is_refused_in_a_launcher_and_an_honest_one_runs():
    from attncourse.teach.flash import TorchMathRefused, run_and_count

    q, k, v = torch.randn(3, 1, 1, 20, 16).unbind(0)
    kwargs = dict(causal=True, block_m=16, block_n=16)
    cheat = _define("flash_attention_forward", _mistake("flash_attention_forward", "torch_launcher"))
    with pytest.raises(TorchMathRefused, match="computed with torch"):
        run_and_count(cheat, (q, k, v), kwargs, of=1)

    def sdpa(q, k, v, causal=False, block_m=16, block_n=16):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal), None

    with pytest.raises(TorchMathRefused, match="scaled_dot_product"):
        run_and_count(sdpa, (q, k, v), kwargs, of=1)
    (o, lse), tiles = run_and_count(_define("flash_attention_forward"), (q, k, v), kwargs, of=1)
    assert tiles == 1 + 2 and torch.allclose(o.double(), _plain(q, k, v, True)[0], atol=1e-5)   # 2 query tiles


KERNEL = """
    @triton.jit
    def softmax_kernel(X, Y, C, BLOCK: tl.constexpr):
        cols = tl.arange(0, BLOCK)
        x = tl.load(X + cols, mask=cols < C, other=float("-inf"))
        e = tl.exp(x - x.max(axis=0))                        # a tensor method that forwards to tl.max ...
        tl.store(Y + cols, e / tl.sum(e, axis=0), mask=cols < C)   # ... and tl.sum: @jit functions of triton.language

    x, y = torch.randn(10), torch.empty(10)
    def launch():
        try:
            softmax_kernel[(1,)](x, y, 10, BLOCK=16)
            return bool(torch.allclose(y, x.softmax(0), atol=1e-6))
        except Exception as exc:
            return type(exc).__name__ + ": " + str(exc)[:200]
"""


@pytest.mark.slow   # a fresh Python importing torch._dynamo: seconds
def test_triton_mode_interprets_a_library_imported_with_the_compiler_on(tmp_path):
    """torch._dynamo imports triton.language with the compiler on (the grading kernels' fork server preloads it):
    setting TRITON_INTERPRET afterwards leaves tl.max and tl.sum compiled-only and the kernel fails; triton_mode
    replaces them and it runs."""
    seen = _run(tmp_path, """
        import json, os, sys
        import torch, torch._dynamo
        assert "triton.language" in sys.modules
        os.environ["TRITON_INTERPRET"] = "1"               # the honest base: the setting alone, after the import
        import triton, triton.language as tl
    """, KERNEL, """
        before = launch()
        from attncourse.teach.flash import triton_mode
        mode = triton_mode()
    """, KERNEL, """
        print(json.dumps({"before": before, "after": launch(), "mode": mode}))
    """)
    assert "Cannot call @triton.jit'd outside of the scope of a kernel" in seen["before"]
    assert seen["after"] is True and "interpreter" in seen["mode"]


@pytest.mark.slow   # a fresh Python: seconds
def test_counting_a_compiled_kernel_runs_it_interpreted_then_puts_it_back(tmp_path):
    """Where kernels are compiled (a GPU machine) the hidden tests count tiles by running the launcher's kernels
    interpreted for a while. Shown on this CPU with a compiled-mode kernel, which cannot run here by itself."""
    seen = _run(tmp_path, """
        import json
        import torch, triton, triton.language as tl
        from triton.runtime.jit import JITFunction
        from attncourse.teach.flash import interpreted, interpreting, traffic
    """, KERNEL, """
        compiled = launch()                                  # no GPU, no interpreter: it cannot run
        with interpreted(globals()), traffic(x=x) as seen:
            inside = launch()
        print(json.dumps({"compiled": compiled, "inside": inside, "loads": seen.loads["x"],
                          "restored": isinstance(softmax_kernel, JITFunction) and not interpreting()}))
    """)
    assert seen["compiled"] is not True and seen["inside"] is True
    assert seen["loads"] == 1 and seen["restored"] is True


@pytest.mark.xdist_group("sandbox")
@pytest.mark.slow   # a fork server started: seconds
def test_a_kernel_forked_for_grading_interprets_inside_the_sandbox():
    """In a child of the grading kernels' fork server (seccomp in force, uid 65534, Triton preloaded with the
    compiler on by torch._dynamo): triton_mode chooses the interpreter because of the filter, a kernel runs with no
    new process started and nothing written under HOME, and an unmasked tile is stopped. The pairing: the fork
    server's children really refuse new processes, which compiling would need."""
    from judge import sandbox, zygote

    ok, why = sandbox.bwrap_works()
    if not ok:
        pytest.skip(f"sandbox unavailable here: {why}")
    env = sandbox.kernel_env({}, "/tmp")
    zyg = zygote.get(env, 64, 2048)
    assert zyg is not None, zygote.why_not()
    code = _code("""
        import json, os, subprocess, sys
        def _files():   # what HOME (/tmp) holds that this kernel could write: a course cloned under /tmp is bound
            return {os.path.join(d, f) for d, _, fs in os.walk(os.environ["HOME"]) for f in fs   # back read-only
                    if os.access(d, os.W_OK)}
        held = _files()
        preloaded = "triton.language" in sys.modules
        from attncourse.teach import flash
        mode = flash.triton_mode()
        import torch, triton, triton.language as tl
    """, KERNEL, """
        @triton.jit
        def unmasked(X, Y, BLOCK: tl.constexpr):
            cols = tl.arange(0, BLOCK)
            tl.store(Y + cols, tl.load(X + cols))
        try:
            unmasked[(1,)](x, y, BLOCK=16)
            oob = "ran"
        except Exception as exc:
            oob = str(exc)
        try:
            subprocess.run(["/bin/true"])
            spawn = "started"
        except OSError as exc:
            spawn = str(exc)
        written = sorted(_files() - held)
        print(json.dumps({"preloaded": preloaded, "filtered": flash.syscall_filtered(), "mode": mode,
                          "ran": launch(), "oob": oob, "spawn": spawn, "written": written}))
    """)
    rc, out, err = zyg.run(code, 64, 2048, env, timeout=240)
    assert rc == 0, err[-3000:]
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen["preloaded"] and seen["filtered"] and "interpreter" in seen["mode"], seen
    assert seen["ran"] is True and "outside every tensor given to the kernel" in seen["oob"], seen
    assert seen["spawn"] != "started" and seen["written"] == [], seen
