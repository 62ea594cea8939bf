#define PCRE2_CODE_UNIT_WIDTH 8
#include "runtime/tokenizer/regex.hpp"

#include <pcre2.h>

#include "runtime/core/error.hpp"
#include "runtime/tokenizer/utf8.hpp"

namespace kiln {
namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof buffer);
  return reinterpret_cast<const char*>(buffer);
}

// Match data and a JIT stack per thread: Regex objects are shared by concurrent encode() calls.
struct ThreadScratch {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;

  ThreadScratch() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    // Long runs of letters or whitespace need more than the default 32 KiB JIT stack.
    stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    if (!data || !context || !stack) fail("PCRE2: out of memory creating match data");
    pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~ThreadScratch() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

ThreadScratch& scratch() {
  thread_local ThreadScratch instance;
  return instance;
}

}  // namespace

struct Regex::Impl {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Impl() { pcre2_code_free(code); }
};

Regex::Regex(const std::string& pattern, const std::string& origin) : pattern_(pattern), impl_(new Impl) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                              PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (!impl_->code) {
    fail(origin, ": regex does not compile at offset ", offset, " (", pcre2_message(error), "): ", pattern);
  }
  // JIT is an optimisation: without it (unsupported CPU) pcre2_match interprets the pattern.
  impl_->jit = pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

void Regex::find_all(std::string_view subject, std::vector<std::pair<size_t, size_t>>& matches) const {
  ThreadScratch& local = scratch();
  const auto* text = reinterpret_cast<PCRE2_SPTR>(subject.data());
  size_t start = 0;
  while (start <= subject.size()) {
    // The caller guarantees valid UTF-8 (encode() sanitizes first), so skip PCRE2's re-check;
    // pcre2_jit_match is the JIT fast path without pcre2_match's per-call checks.
    const int rc = impl_->jit ? pcre2_jit_match(impl_->code, text, subject.size(), start, 0, local.data, local.context)
                              : pcre2_match(impl_->code, text, subject.size(), start, PCRE2_NO_UTF_CHECK, local.data,
                                            local.context);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    if (rc < 0) fail("PCRE2 match failed (", pcre2_message(rc), ") for pattern ", pattern_);
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(local.data);
    const size_t begin = ovector[0], end = ovector[1];
    if (end > begin) {
      matches.emplace_back(begin, end);
      start = end;
      continue;
    }
    // Empty match: step over one whole character.
    if (begin >= subject.size()) return;
    start = utf8::char_end(subject, begin);
  }
}

}  // namespace kiln
