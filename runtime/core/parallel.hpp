// parallel_for over [0, n) on one persistent thread pool for the whole run (one thread per core
// unless set_parallel_threads says otherwise, at most 64). The CPU backends use it for their
// matrix products and attention, the loader for repacking rows.
#pragma once

#include <cstdint>
#include <functional>

namespace kiln {

// Calls body(begin, end) on disjoint chunks covering [0, n); returns when all are done.
// Runs inline when n is small (below `grain`) or when called from inside a pool thread.
// Safe to call from several threads at once (the rank threads of the CPU reference): callers take
// turns on the pool, each result is the same as if it ran alone.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body);

// The pool's size from now on (the caller counts as one; 0: the physical cores this process may
// run on); with `pin`, worker i is pinned to the i-th of those cores (the caller is not pinned:
// the first core is left to it). For --threads, before the first parallel_for; a later call
// replaces the pool.
void set_parallel_threads(int32_t threads, bool pin);
int32_t parallel_threads();

// The physical cores this process may run on (hyper-threads of one core count once).
int32_t physical_cores();

}  // namespace kiln
