"""Benchmark (not a test): the course's multi-head attention vs nn.MultiheadAttention vs F.scaled_dot_product_attention.

    .venv/bin/python -m bench.attention_bench            # CPU, T = 256 ... 2048, about a minute

For each sequence length T (batch 1, d_model 512, 8 heads, float32, inference under no_grad):

* time: median wall-clock of 5 runs after 1 warm-up, torch.get_num_threads() threads;
* peak memory: the largest amount of memory the CPU allocator holds during one forward, measured with
  torch.profiler (profile_memory=True): the peak of the running sum of every allocation/free event it
  records.  This counts torch tensors only (not Python objects), which is what attention's memory is.
  For reference, the analytic size of the explicit (B, h, T, T) float32 weights is printed too.

The course module is the instructor's reference from graders/s04_multi_head.py (instructor code).
Ratios are relative to the fused kernel.  Results vary with the machine and its load; see bench/results.txt.
"""
from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]

from authoring.references import define
from graders.s04_multi_head import MHA

D_MODEL, HEADS, BATCH = 512, 8, 1
LENGTHS = [256, 512, 1024, 2048]


class FusedMHA(nn.Module):
    """Same projections as the course module, attention by F.scaled_dot_product_attention (no weights kept)."""

    def __init__(self, course):
        super().__init__()
        self.qkv, self.out, self.h = course.qkv, course.out, course.n_heads

    def forward(self, x, mask=None):
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.h, D // self.h).permute(2, 0, 3, 1, 4)   # each (B, h, T, d_k)
        ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out(ctx.transpose(1, 2).reshape(B, T, D))


def peak_bytes(fn) -> int:
    """Peak of live tensor memory during fn(), from the profiler's allocation events."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted((e for e in prof.events() if getattr(e, "cpu_memory_usage", 0)),
                    key=lambda e: e.time_range.start)
    live = peak = 0
    for e in events:
        live += e.cpu_memory_usage
        peak = max(peak, live)
    return peak


def median_time(fn, runs=5) -> float:
    fn()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main():
    torch.manual_seed(0)
    Course = define(MHA, MHA.reference)
    course = Course(D_MODEL, HEADS).eval()
    torch_mha = nn.MultiheadAttention(D_MODEL, HEADS, batch_first=True).eval()
    with torch.no_grad():
        torch_mha.in_proj_weight.copy_(course.qkv.weight)
        torch_mha.in_proj_bias.copy_(course.qkv.bias)
        torch_mha.out_proj.weight.copy_(course.out.weight)
        torch_mha.out_proj.bias.copy_(course.out.bias)
    fused = FusedMHA(course).eval()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU, B={BATCH}, d_model={D_MODEL}, "
          f"heads={HEADS}, float32, causal mask, no_grad")
    print(f"{'T':>5} | {'time ms: course':>15} {'nn.MHA':>8} {'fused':>8} | {'peak MiB: course':>16} {'nn.MHA':>8} "
          f"{'fused':>8} | {'weights MiB':>11} | ratios course/fused: time, mem; nn.MHA/fused: time, mem")
    for T in LENGTHS:
        x = torch.randn(BATCH, T, D_MODEL)
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        runs = {
            "course": lambda: course(x, causal),
            # need_weights=False lets nn.MultiheadAttention use its fast path too
            "torch": lambda: torch_mha(x, x, x, attn_mask=~causal, need_weights=False)[0],
            "fused": lambda: fused(x, causal),
        }
        with torch.no_grad():
            ref = runs["course"]()
            for name, fn in runs.items():
                assert torch.allclose(fn(), ref, atol=1e-4), f"{name} disagrees with the course module at T={T}"
            t = {k: median_time(fn) for k, fn in runs.items()}
            m = {k: peak_bytes(fn) for k, fn in runs.items()}
        w_mib = BATCH * HEADS * T * T * 4 / 2**20
        mib = {k: v / 2**20 for k, v in m.items()}
        print(f"{T:5d} | {1e3 * t['course']:15.1f} {1e3 * t['torch']:8.1f} {1e3 * t['fused']:8.1f} | "
              f"{mib['course']:16.1f} {mib['torch']:8.1f} {mib['fused']:8.1f} | {w_mib:11.1f} | "
              f"{t['course'] / t['fused']:.2f}x, {m['course'] / m['fused']:.2f}x; "
              f"{t['torch'] / t['fused']:.2f}x, {m['torch'] / m['fused']:.2f}x")


if __name__ == "__main__":
    main()
