// Activation arena planning: every buffer gets a fixed byte offset at codegen. Buffers whose live
// ranges (first write .. last read, in op order over prologue, one layer, epilogue) do not overlap
// may share bytes. The residual stream lives through everything. First-fit, largest buffers first,
// so the plan is deterministic and close to the peak of simultaneously live bytes.
#include <algorithm>
#include <map>

#include "codegen/graph.hpp"
#include "runtime/core/error.hpp"

namespace kiln::codegen {

namespace {

constexpr int64_t kAlign = 256;  // keeps every buffer aligned for 16-byte vector access and cuBLASLt

int64_t align_up(int64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

struct Interval {
  int64_t first = -1, last = -1;
};

}  // namespace

ArenaPlan plan_arena(const Graph& graph, int64_t max_tokens, int64_t act_bytes) {
  std::map<std::string, Interval> live;
  int64_t step = 0;
  // A fused op's parts run within its step (a phase may run them one by one): their buffers live there.
  auto use = [&](const Op& op) {
    for (const auto& list : {op.reads(), op.writes()}) {
      for (const auto& name : list) {
        if (name == "logits") continue;  // the caller's output buffer, not in the arena
        Interval& iv = live[name];
        if (iv.first < 0) iv.first = step;
        iv.last = step;
      }
    }
  };
  // Ops beside the others (Op::beside) may run at any time up to their join, the first op that
  // reads what they wrote: every buffer they touch lives until then.
  std::vector<std::string> beside_reads, beside_writes;
  for (const Op* op : graph.all_ops()) {
    if (!op->beside && reads_any_of(*op, beside_writes)) {  // the join
      for (const auto& list : {beside_reads, beside_writes}) {
        for (const auto& name : list) live[name].last = step;
      }
      beside_reads.clear();
      beside_writes.clear();
    }
    visit_op_and_parts(*op, use);
    if (op->beside) {
      for (const auto& r : op->reads()) beside_reads.push_back(r);
      for (const auto& w : op->writes()) beside_writes.push_back(w);
    }
    ++step;
  }
  if (!beside_writes.empty()) fail("internal: an op beside the others that no later op waits for");
  // The residual stream is read in every layer after the one that wrote it: it lives throughout.
  live["x"] = {0, step};

  struct Item {
    std::string name;
    int64_t bytes;
    Interval iv;
  };
  std::vector<Item> items;
  for (const auto& b : graph.buffers) {
    auto it = live.find(b.name);
    if (it == live.end()) fail("internal: buffer '", b.name, "' is never used");
    const int64_t elem = b.elem == Elem::bf16 ? act_bytes : 4;
    items.push_back({b.name, align_up(graph.value(b.per_token) * max_tokens * elem), it->second});
  }
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.bytes > b.bytes; });

  ArenaPlan plan;
  std::vector<Item> placed;
  for (const Item& item : items) {
    // Candidate offsets: 0 and the end of every placed buffer whose life overlaps this one.
    std::vector<int64_t> candidates = {0};
    for (const Item& p : placed) candidates.push_back(plan.offset[p.name] + p.bytes);
    std::sort(candidates.begin(), candidates.end());
    for (int64_t offset : candidates) {
      bool clash = false;
      for (const Item& p : placed) {
        const bool overlap_life = !(p.iv.last < item.iv.first || item.iv.last < p.iv.first);
        const int64_t po = plan.offset[p.name];
        const bool overlap_bytes = offset < po + p.bytes && po < offset + item.bytes;
        if (overlap_life && overlap_bytes) {
          clash = true;
          break;
        }
      }
      if (!clash) {
        plan.offset[item.name] = offset;
        plan.bytes = std::max(plan.bytes, offset + item.bytes);
        break;
      }
    }
    placed.push_back(item);
  }
  return plan;
}

}  // namespace kiln::codegen
