#!/bin/bash
# Builds llama.cpp's llama-bench and llama-quantize (CUDA, sm_90a) from .carry/llama.cpp-src.tar.xz and
# packs binaries + the libraries they load + gguf-py into $OUT/llama.cpp-bin.tar.xz (bench/README.md).
# On the CPU machine (no driver): LCPP_NATIVE=OFF and the driver library left undefined until run time.
set -euo pipefail
W=${LCPP_WORK:-/tmp/lcpp}; OUT=${OUT:-$W/out}; mkdir -p "$W" "$OUT"
export PATH=$PATH:/usr/local/cuda/bin
[ -d "$W/llama.cpp" ] || tar xJf .carry/llama.cpp-src.tar.xz -C "$W"
commit=$(cut -c1-8 "$W/llama.cpp/COMMIT")
extra=()
if ! nvidia-smi >/dev/null 2>&1; then extra+=(-DCMAKE_EXE_LINKER_FLAGS=-Wl,--allow-shlib-undefined -DCMAKE_SHARED_LINKER_FLAGS=-Wl,--allow-shlib-undefined); fi
cmake -S "$W/llama.cpp" -B "$W/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90a-real -DGGML_NATIVE=${LCPP_NATIVE:-ON} -DGGML_CUDA_NCCL=OFF -DLLAMA_CURL=OFF \
  -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
  -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DBUILD_SHARED_LIBS=ON -DCMAKE_BUILD_RPATH_USE_ORIGIN=ON \
  -DLLAMA_BUILD_COMMIT="$commit" -DLLAMA_BUILD_NUMBER=0 "${extra[@]}" > "$W/cmake.log"
cmake --build "$W/build" -j"$(nproc)" --target llama-bench llama-quantize
P=$W/pack/llama.cpp; rm -rf "$W/pack"; mkdir -p "$P/bin"
cp "$W/build/bin/llama-bench" "$W/build/bin/llama-quantize" "$P/bin/"
for so in "$W"/build/bin/*.so*; do cp -P "$so" "$P/bin/"; done
strip --strip-unneeded "$P"/bin/* 2>/dev/null || true
cp -r "$W/llama.cpp/gguf-py" "$W/llama.cpp/COMMIT" "$P/"
tar cJf "$OUT/llama.cpp-bin.tar.xz" -C "$W/pack" llama.cpp
ls -la "$OUT/llama.cpp-bin.tar.xz"
