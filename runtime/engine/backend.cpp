#include "runtime/engine/backend.hpp"

#include <algorithm>
#include <cstdio>
#include <string>
#include <string_view>

#include "runtime/core/error.hpp"
#include "runtime/core/host_memory.hpp"

namespace kiln {

void check_step_fits(const ModelInfo& model, const StepBatch& step) {
  if (step.num_tokens() > model.max_batched_tokens) {
    fail("step of ", step.num_tokens(), " tokens exceeds max_batched_tokens (", model.max_batched_tokens, ")");
  }
}

StepCapacity step_capacity(const ModelInfo& m, StepPhase phase) {
  const int32_t pages_per_seq = (m.max_context + m.page_size - 1) / m.page_size;
  if (phase == StepPhase::decode) return {m.max_batch, m.max_batch, m.max_batch, pages_per_seq};
  // Logit rows: a sample per sequence, and at most two per token (prompt logits and prompt logprobs).
  return {m.max_batched_tokens, m.max_batch, 2 * m.max_batched_tokens + m.max_batch, pages_per_seq};
}

void check_logit_rows(int32_t first, int32_t count, int32_t available) {
  if (first < 0 || count < 0 || first + count > available) {
    fail("internal: logits rows ", first, "..", first + count, " requested, the step has ", available);
  }
}

namespace {

std::string gib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", static_cast<double>(bytes) / (1 << 30));
  return text;
}

}  // namespace

int32_t swap_pages_for(int64_t swap_bytes, int64_t page_bytes) {
  if (swap_bytes < 0) fail("--swap-space: ", swap_bytes, " bytes; expected 0 or more");
  if (swap_bytes == 0) return 0;
  const int64_t available = host_memory_available();
  if (swap_bytes > available) {
    fail("--swap-space: ", gib(swap_bytes), " of host memory for swapped-out KV pages, but only ", gib(available),
         " is available; give less (0: preempted requests recompute instead)");
  }
  return static_cast<int32_t>(std::min<int64_t>(swap_bytes / page_bytes, 1 << 30));
}

void check_kv_pool_fits(const ModelInfo& model, int64_t pages, int64_t page_bytes, int64_t available,
                        const char* memory) {
  // The block manager keeps a token table and a page record per page on the host; on the CPU
  // backend the pool itself is host memory too.
  const int64_t bookkeeping_per_page = static_cast<int64_t>(model.page_size) * 4 + 64;
  const bool on_host = std::string_view(memory) == "CPU memory";
  int64_t pool = 0, bookkeeping = 0;
  const bool overflow = __builtin_mul_overflow(pages, page_bytes, &pool) ||
                        __builtin_mul_overflow(pages, bookkeeping_per_page, &bookkeeping) ||
                        (on_host && __builtin_add_overflow(pool, bookkeeping, &pool));
  if (overflow || pool > available) {
    fail("--kv-pages ", pages, ": a KV pool of ", pages, " pages (", model.page_size, " tokens, ", page_bytes,
         " bytes each) needs ", overflow ? std::string("more than 8 EiB") : gib(pool), " of ", memory, ", but only ",
         gib(available), " is available; give fewer pages");
  }
  const int64_t host_available = on_host ? available : host_memory_available();
  if (bookkeeping > host_available) {
    fail("--kv-pages ", pages, ": the bookkeeping of ", pages, " KV pages needs ", gib(bookkeeping),
         " of CPU memory, but only ", gib(host_available), " is available; give fewer pages");
  }
}

}  // namespace kiln
