#!/usr/bin/env bash
# Runs the GPU test programs under compute-sanitizer, on the GPU machine:
#   tools/gpu/compute_sanitizer.sh BUILD_DIR OUT_DIR [TOOL...]
# TOOLs: memcheck (out-of-bounds and misaligned accesses, leaks), racecheck (shared-memory races),
# synccheck (illegal __syncthreads / barrier use), initcheck (reads of uninitialized global
# memory); all four by default. Every test case but the hidden timing ones and "[soak]" (thousands
# of steps: hours under a sanitizer) runs once per tool, in a process of its own, with
# KILN_GPU_TEST_QUICK set so that timed loops launch once (the checks stay). A sanitizer slows a
# program 10-100x mostly on the host, so the runs go KILN_SANITIZER_JOBS at a time (default: the
# machine's cores) on the one GPU: the whole set then takes about as long as its slowest case.
# KILN_SANITIZER_PROGRAMS picks programs (default: all three); KILN_SANITIZER_TIMEOUT is the limit
# of one run in seconds (default 1800); KILN_SANITIZER_DURATIONS names an earlier run's runs.txt, so
# that the runs that took longest there (and those it lacks) start first. KILN_SANITIZER_RUNS names a
# file of lines "PROGRAM TOOL CASE NAME" (a rerun of some runs): only those run.
# Logs: OUT_DIR/<program>/<tool>/<case number>.txt; OUT_DIR/cases.txt numbers the cases;
# OUT_DIR/runs.txt has one verdict line per run and OUT_DIR/summary.txt one per program and tool,
# with the sanitizer's summary lines added up. Exit 1 when any run reports an error, fails its
# checks or times out. compute-sanitizer is the CUDA toolkit's.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
source "$(dirname "$0")/nccl_path.sh"  # the binaries link NCCL
usage="usage: tools/gpu/compute_sanitizer.sh BUILD_DIR OUT_DIR [TOOL...]"
build=${1:?$usage}
out=${2:?$usage}
shift 2
tools=("$@")
[ ${#tools[@]} -eq 0 ] && tools=(memcheck racecheck synccheck initcheck)
for tool in "${tools[@]}"; do
  case $tool in
    memcheck | racecheck | synccheck | initcheck) ;;
    *) echo "compute_sanitizer.sh: unknown tool '$tool' (memcheck, racecheck, synccheck or initcheck)" >&2; exit 1 ;;
  esac
done
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
[ -x "$sanitizer" ] || { echo "compute-sanitizer not found (expected in the CUDA toolkit)" >&2; exit 1; }
export KILN_SANITIZER_BIN=$sanitizer KILN_SANITIZER_OUT=$out KILN_SANITIZER_BUILD=$build
export KILN_SANITIZER_TIMEOUT=${KILN_SANITIZER_TIMEOUT:-1800}
export KILN_GPU_TEST_QUICK=1
jobs=${KILN_SANITIZER_JOBS:-$(nproc)}
mkdir -p "$out"
: >"$out/cases.txt"
: >"$out/runs.txt"
: >"$out/summary.txt"
status=0

# Each case's name goes into a file of its own, read back with Catch2's --input-file (which quotes
# it), with Catch2's escapes for what a quoted name cannot hold: a backslash, a comma, a quote.
tasks=()
programs=(${KILN_SANITIZER_PROGRAMS:-test_kernels_gpu test_serving_gpu test_golden_gpu})
for t in "${programs[@]}"; do
  program=$build/tests/$t
  if [ ! -x "$program" ]; then
    echo "$t: missing ($program)" | tee -a "$out/summary.txt"
    status=1
    continue
  fi
  mkdir -p "$out/$t"
  n=0
  while IFS= read -r name; do
    # (The programs print the device's line before Catch2 lists anything.)
    [[ -z $name || $name == "device: "* ]] && continue
    n=$((n + 1))
    printf '%s\n' "$name" | sed 's/[\\,"]/\\&/g' >"$out/$t/case$n.name"
    printf '%s %d %s\n' "$t" "$n" "$name" >>"$out/cases.txt"
  done < <("$program" "~[soak]~[.]" --list-test-names-only 2>/dev/null)
  if [ "$n" -eq 0 ]; then
    echo "$t: lists no test cases (no GPU?)" | tee -a "$out/summary.txt"
    status=1
    continue
  fi
  for tool in "${tools[@]}"; do
    mkdir -p "$out/$t/$tool"
    for ((i = 1; i <= n; i++)); do
      if [[ -n ${KILN_SANITIZER_RUNS:-} ]] &&
        ! grep -qxF "$t $tool $(awk -v t="$t" -v i="$i" '$1 == t && $2 == i { sub(/^[^ ]+ [^ ]+ /, ""); print }' \
          "$out/cases.txt")" "$KILN_SANITIZER_RUNS"; then
        continue
      fi
      tasks+=("$t $tool $i")
    done
  done
done
if [[ -n ${KILN_SANITIZER_RUNS:-} ]]; then
  # A line that names no listed case is a mistake, not a run that passed by not running.
  while IFS= read -r line; do
    [[ -z $line ]] && continue
    read -r t tool name <<<"$line"
    grep -qxF "$t $name" <(cut -d' ' -f1,3- "$out/cases.txt") ||
      { echo "KILN_SANITIZER_RUNS: no case '$name' in $t" | tee -a "$out/summary.txt"; status=1; }
  done <"$KILN_SANITIZER_RUNS"
  [ ${#tasks[@]} -eq 0 ] && { echo "KILN_SANITIZER_RUNS: no run picked" | tee -a "$out/summary.txt"; exit 1; }
fi

# One run: PROGRAM TOOL CASE -> OUT/PROGRAM/TOOL/CASE.txt and a verdict line in OUT/runs.txt.
run_case() {
  local t=$1 tool=$2 i=$3 out=$KILN_SANITIZER_OUT
  local options=(--tool "$tool" --error-exitcode 99)
  case $tool in
    memcheck) options+=(--leak-check full --print-limit 50) ;;
    # Every hazard shown (no limit), so that each can be told apart below.
    racecheck) options+=(--racecheck-report hazard --print-limit 0) ;;
    *) options+=(--print-limit 50) ;;
  esac
  local log=$out/$t/$tool/$i.txt start=$SECONDS
  timeout "$KILN_SANITIZER_TIMEOUT" "$KILN_SANITIZER_BIN" "${options[@]}" "$KILN_SANITIZER_BUILD/tests/$t" \
    -f "$out/$t/case$i.name" >"$log" 2>&1
  local rc=$? verdict line
  case $rc in
    0) verdict=clean ;;
    99) verdict=ERRORS ;;
    124) verdict=TIMEOUT ;;
    *) verdict="exit-$rc" ;;
  esac
  line=$(grep -E "(ERROR|RACECHECK) SUMMARY" "$log" | tail -1 | sed 's/^=* *//')
  # The sanitizer's exit code stands in for the program's when it found errors: the checks passed
  # only where Catch2 says so ("All tests passed", or for a case without assertions, one that
  # passed and none that failed).
  if [[ $rc -ne 124 ]] && ! grep -q -E "^All tests passed|^test cases: +[0-9]+ \| +[0-9]+ passed$" "$log"; then
    verdict=FAILED
  fi
  if [[ $tool == racecheck && $verdict == ERRORS ]]; then
    # cuBLASLt's Hopper GEMMs (nvjet_*) order their shared memory with mbarriers and TMA, which
    # racecheck does not model: it reports WAR hazards inside them whose values do not change.
    # (Leaving them out with --kernel-name-exclude makes the sanitizer fail on a hardware exception
    # in them, CUDA 13.0.) A hazard is a line "Potential ... hazard detected" and the two accesses'
    # lines after it; those whose accesses are both in nvjet kernels are counted apart, any other
    # hazard is ours, and any other error stays an error, as do hazards the log does not show.
    local ours theirs others reported
    read -r ours theirs < <(awk '/Potential .* hazard detected/ { h = $0; n = 2; next }
        n > 0 { h = h " " $0; if (--n == 0) { if (h ~ /nvjet/ && h !~ /kiln/) theirs++; else ours++ } }
        END { print ours + 0, theirs + 0 }' "$log")
    others=$(grep -E "^=+ *(Error|Warning|Internal|Program hit)" "$log" | grep -c -v "hazard detected")
    reported=$(sed -n 's/.*RACECHECK SUMMARY: .*(\([0-9]*\) errors\{0,1\}, \([0-9]*\) warnings\{0,1\}).*/\1 \2/p' "$log" |
      awk '{ print $1 + $2 }')
    if [[ $ours -eq 0 && $theirs -gt 0 && $others -eq 0 && ${reported:-0} -eq $theirs ]]; then verdict=clean; fi
    line="$line; hazards: $ours in our kernels, $theirs inside cuBLASLt's nvjet GEMMs"
  fi
  printf '%s %s %s %s %ds; %s\n' "$t" "$tool" "$i" "$verdict" $((SECONDS - start)) "${line:-no summary line}" \
    >>"$out/runs.txt"
}
export -f run_case

order() {
  if [[ -n ${KILN_SANITIZER_DURATIONS:-} && -f ${KILN_SANITIZER_DURATIONS:-} ]]; then
    awk 'NR == FNR { d = $5; sub(/s;?$/, "", d); took[$1 " " $2 " " $3] = d + 0; next }
         { print (($0 in took) ? took[$0] : 1e9), $0 }' "$KILN_SANITIZER_DURATIONS" - | sort -s -k1,1nr | cut -d' ' -f2-
  else
    cat
  fi
}
printf '%s\n' "${tasks[@]}" | order | xargs -P "$jobs" -L 1 bash -c 'run_case "$0" "$1" "$2"'

# Per program and tool: how many runs were clean, and the sanitizer's counts added up.
for t in "${programs[@]}"; do
  for tool in "${tools[@]}"; do
    awk -v t="$t" -v tool="$tool" '
      $1 == t && $2 == tool {
        runs++; verdict[$4]++
        if (match($0, /[0-9]+ (errors|hazards?)/)) { split(substr($0, RSTART, RLENGTH), w, " "); found += w[1]; unit = w[2] }
        if (match($0, /hazards: [0-9]+ in our kernels, [0-9]+ inside/)) { split(substr($0, RSTART, RLENGTH), w, " "); ours += w[2]; theirs += w[6] }
      }
      END {
        if (runs == 0) exit
        line = sprintf("%s %s: %d runs", t, tool, runs)
        for (v in verdict) line = line sprintf(", %s %d", v, verdict[v])
        line = line sprintf("; the sanitizer summaries add up to %d %s", found, unit == "" ? "errors" : unit)
        if (tool == "racecheck") line = line sprintf(" (%d in our kernels, %d inside cuBLASLt)", ours, theirs)
        print line
      }' "$out/runs.txt" | tee -a "$out/summary.txt"
  done
done
grep -v " clean " "$out/runs.txt" | grep -q . && status=1
exit $status
