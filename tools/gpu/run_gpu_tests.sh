#!/usr/bin/env bash
# Runs every GPU test program of a build on the GPU machine and writes each one's output to OUT_DIR.
#   tools/gpu/run_gpu_tests.sh BUILD_DIR OUT_DIR [catch2 args...]
# The binaries need only the CUDA toolkit's libcublasLt and NCCL there (cudart is linked
# statically); NCCL is taken from PyTorch's wheel when the toolkit lacks it. A test binary missing
# from the build is a failure (exit 1), not a test that passed by not running. With 2+ GPUs the
# tensor-parallel cases run too (NVLink multicast stays off: NCCL_NVLS_ENABLE=0).
# KILN_GPU_TESTS_PARALLEL=1 runs the programs at the same time (a correctness run: the whole then
# takes as long as test_kernels_gpu, about 2.5 minutes; printed timings mean nothing then).
set -uo pipefail
export NCCL_NVLS_ENABLE=0
source "$(dirname "$0")/nccl_path.sh"
build=${1:-build}
out=${2:-gpu-tests}
shift 2 || true
mkdir -p "$out"
: >"$out/summary.txt"

# One program: its output in OUT_DIR/<program>.txt, a line in OUT_DIR/summary.txt.
run_one() {
  local t=$1 start=$SECONDS
  shift
  timeout 900 "$build/tests/$t" "$@" >"$out/$t.txt" 2>&1
  local rc=$?
  echo "$t exit $rc after $((SECONDS - start)) s" >>"$out/summary.txt"
  return $rc
}

status=0
pids=()
for t in test_kernels_gpu test_serving_gpu test_golden_gpu test_nccl_collective; do
  if [ ! -x "$build/tests/$t" ]; then
    echo "$t missing: $build/tests/$t is not an executable" >>"$out/summary.txt"
    status=1
    continue
  fi
  if [ "${KILN_GPU_TESTS_PARALLEL:-0}" = 1 ]; then
    run_one "$t" "$@" &
    pids+=($!)
  else
    run_one "$t" "$@" || status=1
  fi
done
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
cat "$out/summary.txt"
for t in test_kernels_gpu test_serving_gpu test_golden_gpu test_nccl_collective; do
  [ -f "$out/$t.txt" ] || continue
  echo "== $t"
  grep -E "FAILED|passed|failed|error|Error|All tests" "$out/$t.txt" | tail -n 12
done
exit $status
