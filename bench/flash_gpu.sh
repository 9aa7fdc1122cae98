#!/usr/bin/env bash
# Section 11 on a GPU machine, in one go (the device tool's H200: its own python3 with torch and triton, no course
# venv, no network): the hidden cases run in Triton's interpreter on CUDA tensors, as grading in the sandbox runs
# them (authoring.cuda_check), then compiled for the GPU and timed against F.scaled_dot_product_attention
# (bench.flash_bench). Logs and JSON go to $OUT (default /tmp).
#   bench/flash_gpu.sh            # --quick: T = 1024 and 4096, float16 (about two minutes on an H200, estimated)
#   bench/flash_gpu.sh --full     # T = 512 ... 8192, float16 and float32
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=. PYTHONUNBUFFERED=1
out="${OUT:-/tmp}"
size="--quick"; [ "${1:-}" = "--full" ] && size=""
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | tee "$out/flash_gpu.txt"
python3 -m authoring.cuda_check 11_flash_attention_triton 2>&1 | tee "$out/flash_cuda_check.log"
python3 -m bench.flash_bench $size --out "$out/flash_bench.json" 2>&1 | tee "$out/flash_bench.log"
