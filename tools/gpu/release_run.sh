#!/usr/bin/env bash
# One GPU-machine run of what a submission measures, from binaries built elsewhere:
#   tools/gpu/release_run.sh CARRY OUT [models...]
# CARRY holds tests/ (the GPU test programs), bin/ (model binaries of this tree) and, optionally,
# base/ (the same models built from the last landed commit). Writes under OUT: the GPU tests'
# output, the decode benchmark (with the baseline beside it when base/ is there) and time to first
# token of the first request against the tenth.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
source "$(dirname "$0")/nccl_path.sh"  # the binaries link NCCL
carry=$1
out=$2
shift 2
models=${*:-smollm2-135m qwen3-0.6b llama-3.2-1b qwen3-8b llama-3.1-8b deepseek-v2-lite}
root=$(cd "$(dirname "$0")/../.." && pwd)
status=0
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/device.txt"

tools/gpu/run_gpu_tests.sh "$carry" "$out/tests" || status=1

baseline=()
[ -d "$carry/base" ] && baseline=(--baseline-bin-dir "$carry/base")
PYTHONUNBUFFERED=1 python3 "$root/tools/bench/bench.py" $models --no-hf --bin-dir "$carry/bin" "${baseline[@]}" \
  --out "$out/bench.md" || status=1
for m in qwen3-0.6b llama-3.2-1b; do
  PYTHONUNBUFFERED=1 python3 "$root/tools/bench/ttft.py" "$m" --bin-dir "$carry/bin" | tee -a "$out/ttft.txt" || status=1
done
exit $status
