#include "runtime/core/op_profile.hpp"

#include <map>

#include "runtime/core/error.hpp"

namespace kiln {

OpTiming& OpProfile::family(const char* op) {
  for (OpTiming& t : ops_) {
    if (t.op == op) return t;
  }
  return ops_.emplace_back(OpTiming{op});
}

void OpProfile::add(std::span<const OpMark> marks, std::span<const double> seconds, const StepReads& reads) {
  if (marks.size() != seconds.size()) {
    fail("internal: a decode step's op profile with ", marks.size(), " marks and ", seconds.size(), " times");
  }
  // An expert op runs once per MoE layer; the step's chosen experts are spread over its runs so
  // that the family's sum is exact.
  std::map<std::string, int64_t> expert_runs;
  for (const OpMark& m : marks) {
    if (m.reads == OpReads::experts) ++expert_runs[m.op];
  }
  for (size_t i = 0; i < marks.size(); ++i) {
    const OpMark& m = marks[i];
    double bytes = 0;
    switch (m.reads) {
      case OpReads::weights: bytes = static_cast<double>(m.bytes); break;
      case OpReads::token_rows: bytes = static_cast<double>(m.bytes) * static_cast<double>(reads.tokens); break;
      case OpReads::kv_cache:
        bytes = static_cast<double>(reads.kv_tokens) * static_cast<double>(reads.kv_bytes_per_token);
        break;
      case OpReads::experts:
        if (reads.experts_read > 0) {
          bytes = static_cast<double>(m.bytes) * static_cast<double>(reads.experts_read) /
                  static_cast<double>(expert_runs[m.op]);
        }
        break;
    }
    OpTiming& t = family(m.op);
    t.seconds += seconds[i];
    t.bytes += bytes;
  }
  ++steps_;
}

}  // namespace kiln
