#!/bin/bash
# On the GPU machine: unpack the peers (.carry/llama.cpp-bin.tar.xz, .carry/gpt-fast.tar.xz) and run
# tools/bench/bench.py with them on the kiln binaries in .carry/peerbin (bench/README.md, "Peers").
# Env: MODELS (default "llama-3.2-1b llama-3.1-8b"), QUANT (llama-quantize types, default Q4_0,Q8_0),
# BENCH_ARGS (more bench.py flags), BENCH_TIMEOUT_S (default 570).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" .carry/peers
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,driver_version --format=csv > "$OUT/device.txt"
for t in llama.cpp-bin gpt-fast; do tar xJf ".carry/$t.tar.xz" -C .carry/peers; done
chmod +x .carry/peerbin/* .carry/peers/llama.cpp/bin/* 2>/dev/null
export LD_LIBRARY_PATH=$PWD/.carry/peers/llama.cpp/bin:${LD_LIBRARY_PATH:-}
cat .carry/peers/llama.cpp/COMMIT .carry/peers/gpt-fast/COMMIT >> "$OUT/device.txt"
work=/tmp/peer-work; mkdir -p $work
timeout "${BENCH_TIMEOUT_S:-570}" python3 tools/bench/bench.py ${MODELS:-llama-3.2-1b llama-3.1-8b} \
  --bin-dir .carry/peerbin --gpt-fast .carry/peers/gpt-fast --llama-cpp .carry/peers/llama.cpp \
  --llama-cpp-quant "${QUANT:-Q4_0,Q8_0}" --peer-work $work --peer-timeout 300 \
  --out "$OUT/bench.md" --plot "$OUT/bench.png" ${BENCH_ARGS:-} > "$OUT/bench.log" 2>&1
echo "bench rc=$?" >> "$OUT/bench.log"
tail -40 "$OUT/bench.log"
