# Sourced by tools/test and tools/sanitizer-build: sets `launchers`, the CMake arguments that run
# compilers through ccache when it is installed (tools/install-deps installs it).
# ccache 4.7 hashes the working directory into our nvcc compiles (its log says "Hashing CWD",
# though they have no -g), so the sanitizer build's CUDA objects, whose command lines are the main
# build's, missed the main build's cache (~150 s of CI on 2 cores). nvcc here never writes debug
# information (no -g, -G or -lineinfo), so an object does not depend on the folder it was built in:
# CUDA compiles run with CCACHE_NOHASHDIR. C++ compiles keep the default (the sanitizer builds carry
# line tables).
launchers=()
if command -v ccache >/dev/null; then
  launchers=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache "-DCMAKE_CUDA_COMPILER_LAUNCHER=env;CCACHE_NOHASHDIR=1;ccache")
fi
