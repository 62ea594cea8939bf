// parallel_for over [0, n) on a small persistent thread pool (one thread per core, at most 16).
// The CPU reference backend uses it for its matrix-vector products; nothing else needs threads.
#pragma once

#include <cstdint>
#include <functional>

namespace kiln {

// Calls body(begin, end) on disjoint chunks covering [0, n); returns when all are done.
// Runs inline when n is small (below `grain`) or when called from inside a pool thread.
// Safe to call from several threads at once (the rank threads of the CPU reference): callers take
// turns on the pool, each result is the same as if it ran alone.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body);

}  // namespace kiln
