"""Benchmark (not a test): section 11's FlashAttention kernels compiled for a GPU, against F.scaled_dot_product_attention.

    .venv/bin/python -m bench.flash_bench               # on a CUDA GPU: the checks, then the timings (a few minutes)
    .venv/bin/python -m bench.flash_bench --quick       # T = 1024 and 4096, float16 only
    .venv/bin/python -m bench.flash_bench --smoke       # any machine: the same code paths, interpreted, tiny sizes
    PYTHONPATH=. python3 -m bench.flash_bench --quick   # a GPU machine with torch and triton but not the course's venv

1. **The checks.** The instructor's kernels (the solution cells of source/11_flash_attention_triton, compiled by
   Triton for the GPU, not interpreted) through every hidden case of section 11, judged by the course's judge
   against graders/data: section 11 graded natively. (Inside the grading sandbox the same cases run in Triton's
   interpreter, on the GPU's tensors: compiling needs helper processes the sandbox refuses.) The tile counts of
   the hidden cases come from a second, interpreted run on CPU copies (attncourse.teach.flash.run_and_count).
2. **The timings** (``triton.testing.do_bench``: median of its runs, ms): B = 4, H = 16, d = 64, T = 512 … 8192,
   float16 and float32, causal and not. The forward kernel (the best of a few tile sizes) against
   ``F.scaled_dot_product_attention`` (PyTorch's own fused kernel: FlashAttention-2's for float16 on recent GPUs)
   and plain attention (``softmax(q kᵀ/√d) v`` in three operations, where the scores fit in memory); the largest
   error of each against float32 plain attention on the first head; TFLOP/s counting 4·B·H·T²·d for the forward
   (half of it causal). Then the forward plus the dK/dV kernel against SDPA's forward plus backward (which also
   computes dQ: the course's backward has no dQ kernel, so that ratio flatters it by one kernel).

``--out FILE`` also writes every row as JSON. Without CUDA (and without ``--smoke``) it says so and exits 0.
"""
from __future__ import annotations

import argparse
import json
import linecache
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
SECTION = "11_flash_attention_triton"
CELLS = ("given_probes", "softmax_rows", "flash_attention_forward", "predicted_tiles", "flash_forward_exp2",
         "flash_attention_backward_dkdv")


def instructor_kernels(interpret: bool | None = None) -> dict:
    """The namespace of section 11's solution cells, executed as the notebook runs them (``triton_mode()`` first:
    compiled on a CUDA GPU). The source is registered with linecache: a compiled ``@triton.jit`` function needs it."""
    from attncourse.teach.flash import triton_mode
    from graders.spec import PRELUDE, source_cells

    mode = triton_mode(interpret)
    cells = source_cells(SECTION)
    src = (PRELUDE + "from attncourse.teach.flash import interpreting, no_torch_math, run_and_count\n"
           "import triton\nimport triton.language as tl\n\n" + "\n\n".join(cells[c] for c in CELLS) + "\n")
    name = f"<{SECTION} instructor kernels>"
    linecache.cache[name] = (len(src), None, src.splitlines(True), name)
    ns = {"__name__": "bench_flash", "MODE": mode}
    exec(compile(src, name, "exec"), ns)
    return ns


def run_checks(ns: dict) -> int:
    """Every hidden case of section 11 on the instructor's kernels in ``ns``; returns the number that failed."""
    from attncourse.kernel import Grader, GradingError
    from graders import load_section
    from judge.verdict import judge_record

    os.environ.setdefault("ATTNCOURSE_ROOT", str(ROOT))
    grader = Grader(SECTION, judge=judge_record)
    failed = passed = 0
    for ex in load_section(SECTION).exercises:
        answer = ns[ex.wrap](ns[ex.name]) if ex.wrap else ns[ex.name]
        for case in ex.cases:
            start = time.perf_counter()
            try:
                with open(os.devnull, "w") as sink:
                    stdout, sys.stdout = sys.stdout, sink
                    try:
                        grader.check(ex.name, case.name, answer)
                    finally:
                        sys.stdout = stdout
                verdict, passed = "ok", passed + 1
            except GradingError as err:
                verdict, failed = f"FAIL: {err}", failed + 1
            print(f"  {ex.name:30s} {case.name:22s} {time.perf_counter() - start:6.2f} s  {verdict}")
    print(f"checks: {passed} passed, {failed} failed")
    return failed


def plain(q, k, v, causal):
    s = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
    if causal:
        t = q.shape[-2]
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return s.softmax(-1) @ v


def timer(device):
    if device.type == "cuda":
        from triton.testing import do_bench

        return lambda fn: do_bench(fn)

    def wall(fn, repeat=2):
        fn()
        start = time.perf_counter()
        for _ in range(repeat):
            fn()
        return 1e3 * (time.perf_counter() - start) / repeat
    return wall


def bench(ns: dict, lengths, dtypes, tiles, device, batch=4, heads=16, d=64, out_rows=None):
    forward, dkdv = ns["flash_attention_forward"], ns["flash_attention_backward_dkdv"]
    ms = timer(device)
    print(f"{'T':>5} {'dtype':>8} {'causal':>6} | {'flash ms':>9} {'tile':>7} {'TFLOP/s':>7} {'err':>8} | "
          f"{'sdpa ms':>8} {'err':>8} | {'plain ms':>8} | {'fwd+dkdv':>8} {'sdpa f+b':>8}")
    for T in lengths:
        for dtype in dtypes:
            for causal in (False, True):
                g = torch.Generator(device="cpu").manual_seed(T)
                q, k, v, do = (torch.randn(batch, heads, T, d, generator=g).to(device, dtype) for _ in range(4))
                ref = plain(q[:1, :1].float(), k[:1, :1].float(), v[:1, :1].float(), causal)
                best = None
                for bm, bn in tiles:
                    try:
                        t = ms(lambda: forward(q, k, v, causal=causal, block_m=bm, block_n=bn))
                    except Exception as exc:   # a tile size this GPU cannot hold (shared memory): the others are timed
                        print(f"  ({bm}x{bn} not timed: {type(exc).__name__}: {str(exc)[:120]})")
                        continue
                    if best is None or t < best[0]:
                        best = (t, bm, bn)
                if best is None:
                    continue
                t_flash, bm, bn = best
                o, lse = forward(q, k, v, causal=causal, block_m=bm, block_n=bn)
                err = (o[:1, :1].float() - ref).abs().max().item()
                t_sdpa = ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
                err_sdpa = (F.scaled_dot_product_attention(q, k, v, is_causal=causal)[:1, :1].float() - ref
                            ).abs().max().item()
                scores_bytes = batch * heads * T * T * q.element_size() * 3
                free = torch.cuda.mem_get_info()[0] if device.type == "cuda" else 4 * 2**30
                t_plain = ms(lambda: plain(q, k, v, causal)) if scores_bytes < 0.5 * free else float("nan")
                try:
                    t_fb = ms(lambda: forward_and_dkdv(forward, dkdv, q, k, v, do, causal, bm, bn))
                except Exception as exc:
                    print(f"  (dK/dV at {bm}x{bn} not timed: {type(exc).__name__}: {str(exc)[:120]})")
                    t_fb = float("nan")
                qg, kg, vg = (x.detach().clone().requires_grad_() for x in (q, k, v))
                t_sdpa_fb = ms(lambda: F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal).backward(do))
                flops = 4 * batch * heads * T * T * d * (0.5 if causal else 1.0)
                tflops = flops / (t_flash * 1e-3) / 1e12
                row = {"T": T, "dtype": str(dtype).replace("torch.", ""), "causal": causal, "flash_ms": t_flash,
                       "tile": [bm, bn], "tflops": tflops, "flash_err": err, "sdpa_ms": t_sdpa, "sdpa_err": err_sdpa,
                       "plain_ms": t_plain, "flash_fwd_dkdv_ms": t_fb, "sdpa_fwd_bwd_ms": t_sdpa_fb}
                if out_rows is not None:
                    out_rows.append(row)
                print(f"{T:>5} {row['dtype']:>8} {str(causal):>6} | {t_flash:9.3f} {bm:>3}x{bn:<3} {tflops:7.1f} "
                      f"{err:8.1e} | {t_sdpa:8.3f} {err_sdpa:8.1e} | {t_plain:8.3f} | {t_fb:8.3f} {t_sdpa_fb:8.3f}")


def forward_and_dkdv(forward, dkdv, q, k, v, do, causal, bm, bn):
    o, lse = forward(q, k, v, causal=causal, block_m=bm, block_n=bn)
    return dkdv(q, k, v, o, lse, do, causal=causal, block_m=bm, block_n=bn)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="T = 1024 and 4096, float16 only")
    ap.add_argument("--smoke", action="store_true", help="any machine: interpreted, tiny sizes (the code paths only)")
    ap.add_argument("--check-only", action="store_true")
    ap.add_argument("--out", help="write the timing rows to this JSON file")
    args = ap.parse_args(argv)
    cuda = torch.cuda.is_available()
    if not cuda and not args.smoke:
        print("no CUDA GPU here: nothing to time (section 11 is graded in Triton's interpreter on a CPU; "
              "--smoke runs this script's code paths interpreted)")
        return 0
    ns = instructor_kernels(interpret=True if args.smoke else None)
    device = torch.device("cuda" if cuda and not args.smoke else "cpu")
    gpu = torch.cuda.get_device_name() if cuda else "none"
    import triton

    print(f"torch {torch.__version__}, triton {triton.__version__}, GPU: {gpu}; {ns['MODE']}")
    failed = run_checks(ns)
    if args.check_only:
        return 1 if failed else 0
    rows: list = []
    if args.smoke:
        bench(ns, [64], [torch.float32], [(16, 16), (32, 32)], device, batch=1, heads=2, d=16, out_rows=rows)
    elif args.quick:
        bench(ns, [1024, 4096], [torch.float16], [(64, 64), (128, 64)], device, out_rows=rows)
    else:
        bench(ns, [512, 1024, 2048, 4096, 8192], [torch.float16, torch.float32], [(64, 64), (128, 64), (64, 32)],
              device, out_rows=rows)
    if args.out:
        Path(args.out).write_text(json.dumps({"gpu": gpu, "torch": torch.__version__, "triton": triton.__version__,
                                              "checks_failed": failed, "rows": rows}, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
