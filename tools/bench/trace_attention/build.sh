#!/bin/bash
# Builds trace_attention (marks) and trace_attention_plain (no marks) into OUTDIR from this tree's
# attention_decode.cuh and prep_attention.cuh, or TEMPLATES_DIR's (a variant under test; the other
# templates they include always come from this tree). Run them on the GPU machine (argument: the shape set,
# batch or small; they need only the CUDA runtime). Usage: tools/bench/trace_attention/build.sh OUTDIR [TEMPLATES_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
out=${1:?usage: build.sh OUTDIR [TEMPLATES_DIR]}
templates=${2:-$root/templates}
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
mkdir -p "$out"
python3 "$here/make_traced.py" "$out/traced" --templates "$templates"
flags=(-std=c++20 -O3 -arch=sm_90a --expt-relaxed-constexpr -I"$out/traced" -I"$root")
"$nvcc" "${flags[@]}" -o "$out/trace_attention" "$here/trace_attention.cu" &
traced=$!
"$nvcc" "${flags[@]}" -DNOTRACE -o "$out/trace_attention_plain" "$here/trace_attention.cu"
wait "$traced"
echo "build.sh: $out/trace_attention $out/trace_attention_plain"
