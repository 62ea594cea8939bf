#!/usr/bin/env bash
# Runs the GPU test programs under compute-sanitizer, on the GPU machine:
#   tools/gpu/compute_sanitizer.sh BUILD_DIR OUT_DIR [TOOL...]
# TOOLs: memcheck (out-of-bounds and misaligned accesses, leaks), racecheck (shared-memory races),
# synccheck (illegal __syncthreads / barrier use), initcheck (reads of uninitialized global
# memory); all four by default. Each program runs once per tool with every test case but the
# hidden timing ones and "[soak]" (thousands of steps: hours under a sanitizer), and with
# KILN_GPU_TEST_QUICK set, so timed loops launch once (the checks stay).
# Logs: OUT_DIR/<program>.<tool>.txt; OUT_DIR/summary.txt has each run's sanitizer summary line.
# Exit 1 when any run reports an error, fails its checks or times out (KILN_SANITIZER_TIMEOUT
# seconds per run, default 1800). KILN_SANITIZER_PROGRAMS picks programs (default: all three).
# compute-sanitizer is the CUDA toolkit's.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
source "$(dirname "$0")/nccl_path.sh"  # the binaries link NCCL
build=${1:?usage: tools/gpu/compute_sanitizer.sh BUILD_DIR OUT_DIR [TOOL...]}
out=${2:?usage: tools/gpu/compute_sanitizer.sh BUILD_DIR OUT_DIR [TOOL...]}
shift 2
tools=("$@")
[ ${#tools[@]} -eq 0 ] && tools=(memcheck racecheck synccheck initcheck)
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
[ -x "$sanitizer" ] || { echo "compute-sanitizer not found (expected in the CUDA toolkit)" >&2; exit 1; }
timeout_s=${KILN_SANITIZER_TIMEOUT:-1800}
export KILN_GPU_TEST_QUICK=1
mkdir -p "$out"
: >"$out/summary.txt"
status=0

for t in ${KILN_SANITIZER_PROGRAMS:-test_kernels_gpu test_serving_gpu test_golden_gpu}; do
  program=$build/tests/$t
  if [ ! -x "$program" ]; then
    echo "$t: missing ($program)" | tee -a "$out/summary.txt"
    status=1
    continue
  fi
  for tool in "${tools[@]}"; do
    options=(--tool "$tool" --error-exitcode 99 --print-limit 50)
    case $tool in
      memcheck) options+=(--leak-check full) ;;
      # cuBLASLt's Hopper GEMMs (nvjet_*) order their shared memory with mbarriers and TMA, which
      # racecheck does not model: it reports WAR hazards inside them whose values do not even
      # change. Our kernels are all still checked.
      racecheck) options+=(--racecheck-report all --kernel-name-exclude kns=nvjet) ;;
    esac
    log=$out/$t.$tool.txt
    echo "== $t under $tool"
    timeout "$timeout_s" "$sanitizer" "${options[@]}" "$program" "~[soak]" >"$log" 2>&1
    rc=$?
    line=$(grep -E "(ERROR|RACECHECK) SUMMARY" "$log" | tail -1 | sed 's/^=* *//')
    case $rc in
      0) verdict=clean ;;
      99) verdict="ERRORS"; status=1 ;;
      124) verdict="TIMED OUT after ${timeout_s}s"; status=1 ;;
      *) verdict="exit $rc (test failures?)"; status=1 ;;
    esac
    echo "$t $tool: $verdict; ${line:-no summary line}" | tee -a "$out/summary.txt"
  done
done
exit $status
