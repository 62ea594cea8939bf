// What the generated CUDA forward receives each step: the step's arrays on the device (CudaStep)
// and the memory it works in (CudaContext). The engine fills both; nvcc-only header.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "runtime/cuda/check.hpp"
#include "runtime/cuda/op_timeline.hpp"
#include "runtime/parallel/collective.hpp"

namespace kiln {

namespace cuda {
class GemmRunner;  // cuBLASLt, gemm.hpp
}

// A StepBatch uploaded to the device, plus the host-side counts kernels are launched with.
struct CudaStep {
  int num_tokens = 0;
  int num_seqs = 0;
  int num_logits = 0;
  int num_samples = 0;          // the first logit rows: one per sequence that samples (StepBatch::num_samples)
  int max_query_len = 0;        // longest run of new tokens of one sequence (prefill grid)
  int max_pages_per_seq = 0;    // row stride of block_tables
  const int* token_ids = nullptr;     // [num_tokens]
  const int* positions = nullptr;     // [num_tokens]
  const int* slot_mapping = nullptr;  // [num_tokens]
  const int* query_start = nullptr;   // [num_seqs + 1]
  const int* context_len = nullptr;   // [num_seqs]
  const int* block_tables = nullptr;  // [num_seqs × max_pages_per_seq]
  const int* logit_rows = nullptr;    // [num_logits]
  // The same context lengths on the host (the step's pinned staging memory), for host-side
  // decisions while the forward is enqueued (mla_expanded.hpp groups sequences by them).
  const int* host_context_len = nullptr;  // [num_seqs]
};

struct CudaContext {
  char* arena = nullptr;            // activations, ModelInfo::gpu_arena_bytes, offsets in model.hpp
  char* kv_cache = nullptr;         // [num_layers][num_pages][page_size × kv_elems_per_token] bf16
  int64_t kv_layer_bytes = 0;       // one layer's pages
  const float* rope = nullptr;      // [max_context][rotary_dim / 2][cos, sin]
  float* scratch = nullptr;         // ModelInfo::gpu_scratch_bytes (decode attention partials)
  unsigned* decode_counters = nullptr;  // ModelInfo::gpu_decode_counter_words, zeroed once (prep_attention.cuh)
  cuda::GemmRunner* gemm = nullptr; // prefill projections
  // The prefill projections beside the others (on side_stream): cuBLASLt with a workspace of its
  // own, which two GEMMs at once must not share; null where the model has no side stream.
  cuda::GemmRunner* side_gemm = nullptr;
  // bf16 rows of the largest projection kept quantized (the prefill GEMM's weight; null: none is)
  __nv_bfloat16* dequantized = nullptr;
  // The prefill's inputs quantized to FP8 for an FP8 projection (templates/fp8_rows.hpp: codes [tokens, k]
  // and scales [k / 128, tokens] of the most tokens a step prefills, padded, and the longest such k;
  // null: no projection is FP8, or the step's capacity is no multiple of kFp8GemmRows, so that the
  // padded rows would not fit the step's buffers).
  uint8_t* fp8_inputs = nullptr;
  float* fp8_input_scales = nullptr;
  // MLA prefill's expanded keys and values (ModelInfo::gpu_mla_expanded_bytes; null: the model
  // prefills MLA absorbed, or has none).
  __nv_bfloat16* mla_expanded = nullptr;
  unsigned char* expert_usage = nullptr;  // null, or [num_layers][num_routed_experts] flags (--profile; mapped host memory)
  // Decode steps of more rows than this run their bf16 projections on cuBLASLt, where the build
  // has that branch (cuda::decode_on_gemm; ModelInfo::decode_gemm_above); INT_MAX: never.
  int decode_gemm_above = INT_MAX;
  cudaStream_t stream = nullptr;
  int rank = 0;                     // tensor-parallel rank (0 without tensor parallelism)
  Collective* collective = nullptr; // NCCL sums and gathers of the ranks; null without tensor parallelism
  // Tensor parallelism: how much of the next projection's weight a decode all-reduce warms in L2
  // (half the GPU's L2 with --l2-warm; 0: none, the default).
  long long l2_warm_bytes = 0;
  // The whole-step decode kernel's counters (ModelInfo::step_sync_words, zeroed once); null: decode
  // runs op by op (the model has no such kernel, or no --megakernel).
  unsigned* step_sync = nullptr;
  // With --profile: where the whole-step kernel writes its stages' times ([stage][block] (start, end) ns).
  unsigned long long* step_timeline = nullptr;
  // With --profile: the per-op decode's events (the generated decode marks every op; op_timeline.hpp).
  cuda::OpTimeline* op_timeline = nullptr;

  // The generated forward's ops beside the others (codegen Op::beside): their stream, the fork and
  // join events, and the decode's scratch for them (ModelInfo::gpu_side_scratch_bytes); null: the
  // model has none. (The prefill's cuBLASLt runner for them is side_gemm, above.)
  cudaStream_t side_stream = nullptr;
  cudaEvent_t fork_event = nullptr, join_event = nullptr;
  float* side_scratch = nullptr;

  // Up to this many tokens the side ops run on the side stream; above (builds of larger batches)
  // on the stream: there the bf16 projections run on cuBLASLt (cuda::decode_on_gemm) unless
  // --batch-invariant, each filling the GPU (a side stream past 64 tokens was never measured).
  // DeepSeek-V2-Lite on an H200, bench/RESULTS.md: its shared experts beside the routed ones,
  // batch 1 -2.7%, batch 8 -2.5% (2026-12-03); with kv_a_proj_with_mqa beside q_proj too, batch
  // 64 11.17 -> 11.01 ms, the same tokens (2026-12-04; the shared experts alone there, in a
  // hand-made prototype, had measured +1.6%).
  static constexpr int kSideMaxTokens = 64;

  // The stream the side ops of a step of `tokens` tokens run on: the side stream, which waits here
  // for what the stream has done, or the stream itself (large batches, --profile's serial timeline).
  cudaStream_t fork(int tokens) const {
    if (side_stream == nullptr || tokens > kSideMaxTokens || op_timeline != nullptr) return stream;
    return fork_side();
  }
  // The same for a prefill step: the side stream at every token count, where the build has one
  // (and so a cuBLASLt runner for it). Each op alone fills the GPU, but not to its last wave, and
  // the routed experts stream their weights from DRAM while the shared experts' GEMMs keep the
  // tensor cores busy: DeepSeek-V2-Lite's 2,048-token prefill on an H100 24.21 -> 23.77 ms with its
  // kv_a projection and shared experts beside the others, the same tokens (one round;
  // bench/RESULTS.md 2026-12-08).
  // Not where some projection is kept quantized: its prefill GEMM expands the weight into
  // `dequantized`, or quantizes its inputs into `fp8_inputs`, one buffer for every projection, so
  // two of them may not run at once.
  cudaStream_t fork_prefill() const {
    if (side_stream == nullptr || side_gemm == nullptr || dequantized != nullptr || fp8_inputs != nullptr) return stream;
    return fork_side();
  }
  // The context the prefill's projections beside the others take (cuda::linear): `side` (fork_prefill's
  // answer) and its cuBLASLt runner.
  CudaContext beside(cudaStream_t side) const {
    CudaContext c = *this;
    if (side != stream) {
      c.stream = side;
      c.gemm = side_gemm;
    }
    return c;
  }
  // The stream waits for what `side` (fork's or fork_prefill's answer) has done.
  void join(cudaStream_t side) const {
    if (side == stream) return;
    KILN_CUDA(cudaEventRecord(join_event, side));
    KILN_CUDA(cudaStreamWaitEvent(stream, join_event, 0));
  }

  // After each op of the generated decode: what it read, for --profile (nothing without it).
  void mark(const char* op, OpReads reads, int64_t bytes) const {
    if (op_timeline != nullptr) op_timeline->mark(op, reads, bytes, stream);
  }

  // The side stream, made to wait for what the stream has done.
  cudaStream_t fork_side() const {
    KILN_CUDA(cudaEventRecord(fork_event, stream));
    KILN_CUDA(cudaStreamWaitEvent(side_stream, fork_event, 0));
    return side_stream;
  }

  template <typename T>
  T* kv_layer(int layer) const {
    return reinterpret_cast<T*>(kv_cache + static_cast<int64_t>(layer) * kv_layer_bytes);
  }
};

}  // namespace kiln
