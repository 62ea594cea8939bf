// The per-op decode profile (--profile on the per-op path): how long each op family of a decode
// step took on the GPU and how many bytes it read. The generated decode marks every op
// (CudaContext::mark) with what it reads, in bytes the generator computed from the shapes; the
// CUDA backend times the marks (runtime/cuda/op_timeline.hpp) and folds each step in here.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kiln {

// What an op's bytes are: the mark's bytes as they are, or a unit the step decides the count of.
enum class OpReads : int32_t {
  weights,     // bytes: the weights it streams, once per step whatever the batch
  token_rows,  // bytes: per token of the step (the embedding's rows)
  kv_cache,    // the layer's KV cache of every sequence (bytes unused: the step's context lengths say)
  experts,     // bytes: one routed expert's; times the experts the routing chose in this layer
};

// One op of the generated decode, in launch order.
struct OpMark {
  const char* op;  // its family: the projection's or norm's weight ("qkv_proj"), else the op ("attention")
  OpReads reads;
  int64_t bytes;
};

// What a step read beyond its weights: its tokens, the KV cache its attention read, the experts its
// routing chose.
struct StepReads {
  int64_t tokens = 0;
  int64_t kv_tokens = 0;              // Σ context lengths of the step's sequences
  int64_t kv_bytes_per_token = 0;     // one layer's, per token
  int64_t experts_read = -1;          // distinct (layer, expert) pairs the step read; -1: not counted
};

struct OpTiming {
  std::string op;
  double seconds = 0;  // summed over steps: from the previous op's end (or the step's start) to its own
  double bytes = 0;    // summed over steps
};

class OpProfile {
 public:
  // One step: its marks in launch order and the seconds up to each one.
  void add(std::span<const OpMark> marks, std::span<const double> seconds, const StepReads& reads);

  int64_t steps() const { return steps_; }
  // Families in the order a step first runs them.
  const std::vector<OpTiming>& ops() const { return ops_; }

 private:
  OpTiming& family(const char* op);
  std::vector<OpTiming> ops_;
  int64_t steps_ = 0;
};

}  // namespace kiln
