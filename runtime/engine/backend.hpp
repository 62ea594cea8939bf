// A backend runs a model's forward on one device and samples from its logits. The engine drives
// it step by step; the CPU reference backend and the CUDA backend implement it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/core/step_batch.hpp"
#include "runtime/model/model_def.hpp"
#include "runtime/core/op_profile.hpp"
#include "runtime/engine/step_profile.hpp"
#include "runtime/model/tensor_source.hpp"
#include "runtime/model/weight_loader.hpp"
#include "runtime/serving/sample_batch.hpp"
#include "runtime/serving/sampling_math.hpp"

namespace kiln {

// Where the weights come from: a checkpoint, or deterministic random values.
struct WeightOrigin {
  const TensorSource* source = nullptr;  // null: random weights from `random_seed`
  uint64_t random_seed = 0;
};

struct BackendOptions {
  int32_t kv_pages = 0;        // 0: decide (GPU: from free memory × gpu_mem_util)
  double gpu_mem_util = 0.9;   // fraction of the GPU memory kiln may use in all
  bool cuda_graphs = true;     // replay captured graphs for decode steps (captured at start)
  // --profile: count the routed experts each step reads (MoE; the routing kernels flag them in
  // BackendInfo::expert_usage) and time the decode's ops (BackendInfo::op_profile) or the
  // whole-step decode kernel's stages (BackendInfo::step_profile); each decode step then waits for
  // its times. Off by default.
  bool profile = false;
  // --megakernel: decode steps small enough run the model's whole-step kernel
  // (templates/decode_step.cuh) when it has one. Off by default: on an H100 it is ahead of the
  // per-op path on the smallest models only (bench/RESULTS.md, 2026-11-23).
  bool megakernel = false;
  // --batch-invariant: decode steps of more sequences than one GEMV pass keep the GEMV, whose
  // sums for a sequence do not depend on the batch, instead of the bf16 projections' cuBLASLt
  // GEMM (ModelInfo::decode_gemm_above); builds of max_batch up to one pass never leave the GEMV.
  bool batch_invariant = false;
  // Tensor parallelism: each decode all-reduce warms the next projection's weight in L2 while the
  // ranks exchange (ops.def all_reduce's `warm`). Off unless --l2-warm: on two H200s the warm made a
  // Llama-3.1-8B decode step 4.46 ms where it takes 2.89 without (bench/RESULTS.md, 2026-11-27).
  bool l2_warm = false;
  // Kernels launch as programmatic dependents of the kernel before them (templates/common.cuh: the
  // next op's blocks start, and request their weights, while the last blocks of the one before
  // still run); --no-pdl launches them plainly, to measure it. Process-wide: the last backend made
  // sets it.
  bool pdl = true;
  // --swap-space: host memory a preempted sequence's KV can be swapped out to (Backend::swap_kv);
  // 0: preempted sequences recompute.
  int64_t swap_space_bytes = 0;
  // --quantize fp8: every matrix quantized to FP8 at load (weight_loader.hpp's Quantize).
  Quantize quantize = Quantize::none;
  // One rank of a tensor-parallel group (make_tensor_parallel_backend sets these for each rank's
  // backend, which runs the rank's ModelDef): its rank, its GPU and the group's collective.
  int32_t rank = 0;
  int32_t device = 0;
  Collective* collective = nullptr;
};

// What a backend measured about itself, for the summary and --output-format json.
struct BackendInfo {
  std::string device;            // "CPU (16 threads)", "NVIDIA H100 80GB HBM3"
  int64_t weight_bytes = 0;      // in the backend's format
  // What a decode step reads of the weights besides the routed experts, where the backend holds
  // them in other formats than the generator counted (bf16): a GGUF file's quantized projections.
  // 0: the model's ModelInfo::decode_weight_bytes.
  int64_t decode_weight_bytes = 0;
  std::string weight_formats;    // "bf16", or how many projections keep a GGUF file's blocks
  int64_t kv_bytes_per_token = 0;
  double load_seconds = 0;
  // With BackendOptions::profile: [num_layers][num_routed_experts] flags the last step's routing
  // set, in host memory (read it after sample()); null otherwise or without MoE. Over tensor-parallel
  // ranks, every rank's experts (each rank flags the ones it holds).
  const uint8_t* expert_usage = nullptr;
  // Tensor parallelism: the ranks, and what one rank's decode step reads of its weights besides
  // the routed experts (its shards and the weights every rank keeps whole; 0 with one GPU).
  int32_t ranks = 1;
  int64_t rank_decode_weight_bytes = 0;
  // With BackendOptions::profile on the CUDA backend: the whole-step decode kernel's stages, over
  // the decode steps that ran it; null otherwise.
  const StepProfile* step_profile = nullptr;
  // With BackendOptions::profile on the CUDA backend: the per-op decode's op families, over the
  // decode steps that ran op by op; null otherwise.
  const OpProfile* op_profile = nullptr;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;  // "ref", "cpu", "cuda"
  virtual int32_t kv_pages() const = 0;
  virtual const BackendInfo& info() const = 0;

  // Swap space (BackendOptions::swap_space_bytes): how many KV pages it holds (0: none), and the
  // copies of a step (ScheduledStep::swap_out with to_host, then swap_in), run before its forwards
  // and in order with them. The host memory is taken at the first swap-out.
  virtual int32_t swap_pages() const { return 0; }
  // (Inline, as every other member: a key function would pin Backend's vtable to libkiln_engine.)
  virtual void swap_kv(std::span<const PageSwap> copies, bool /*to_host*/) {
    if (!copies.empty()) fail("internal: the ", name(), " backend has no swap space, yet ", copies.size(), " KV pages swap");
  }

  // The staging memory the next step of `phase` is written into (build_step_batch).
  virtual StepBuffer& step_buffer(StepPhase phase) = 0;
  // Runs one step, built in step_buffer(step.phase); keeps logits [step.num_logits(), vocab] for
  // sample() / copy_logits().
  virtual void forward(const StepBatch& step) = 0;
  // Samples batch.rows[i] from logits row i (a step's sampling rows come first), with the rows'
  // logit edits and logprobs (runtime/serving/sample_batch.hpp). Called once after every
  // forward(), with no rows too: when it returns the step is complete, so its step_buffer() may be
  // written again.
  virtual SampleResult sample(const SampleBatch& batch) = 0;
  // Raw logprobs of given tokens: tokens[i] in logits row first_logit_row + i (outputs[i].logprob),
  // with that row's top_n most likely tokens (row_top(i, top_n)). For prompt logprobs.
  virtual SampleResult logprobs(int32_t first_logit_row, std::span<const int32_t> tokens, int32_t top_n) = 0;
  // Copies logits rows [first, first + count) to the host.
  virtual void copy_logits(int32_t first, int32_t count, float* out) = 0;
};

// Checks both backends make: a step within the model's build.max_batched_tokens, and logits rows
// within the last step's.
void check_step_fits(const ModelInfo& model, const StepBatch& step);
void check_logit_rows(int32_t first, int32_t count, int32_t available);
// The capacity of a phase's step buffer: decode steps hold at most max_batch sequences of one
// token; prefill steps max_batched_tokens tokens, each of which may keep its logits.
StepCapacity step_capacity(const ModelInfo& model, StepPhase phase);
// Before a KV pool of `pages` pages of `page_bytes` (all layers) is allocated in `memory` ("CPU
// memory", "GPU memory"), of which `available` bytes are free: the pool and the block manager's
// host bookkeeping must fit, or the error names --kv-pages and the sizes (--kv-pages 2000000000
// ended in std::bad_alloc).
void check_kv_pool_fits(const ModelInfo& model, int64_t pages, int64_t page_bytes, int64_t available,
                        const char* memory);
// The KV pages (of page_bytes, all layers) that swap_bytes of host memory hold; checked against the
// host memory available (the error names --swap-space).
int32_t swap_pages_for(int64_t swap_bytes, int64_t page_bytes);

// The CPU reference backend ("ref"): fp32 weights and activations, straightforward ops; the oracle
// every other backend is tested against.
std::unique_ptr<Backend> make_ref_backend(const ModelDef& model, const WeightOrigin& weights, const BackendOptions& options);
// The fast CPU backend ("cpu"): the same generated forward, its projections on the weights as the
// file stores them (bf16 rows, ggml's Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q4_K blocks) through runtime/cpu's kernels, on
// the thread pool of runtime/core/parallel.hpp (sized by --threads before the backend is made).
std::unique_ptr<Backend> make_cpu_backend(const ModelDef& model, const WeightOrigin& weights, const BackendOptions& options);
// Throws kiln::Error when no usable GPU is present.
std::unique_ptr<Backend> make_cuda_backend(const ModelDef& model, const WeightOrigin& weights, const BackendOptions& options);
// Whether a CUDA device is present and usable (the default backend choice).
bool cuda_available();
int32_t cuda_device_count();  // 0 without a usable GPU

// `ranks` backends, one per tensor-parallel rank, behind one Backend: the model's build for that
// many ranks (ModelDef::tensor_parallel), each rank on its own GPU (devices 0..ranks-1) talking
// through NCCL, or with `cuda` false as threads of this process on the CPU reference backend
// (simulated ranks). The scheduler and sampler see one backend: steps go to every rank, rank 0
// samples from the gathered logits. A rank that fails stops every rank with its error.
std::unique_ptr<Backend> make_tensor_parallel_backend(const ModelDef& model, int32_t ranks, bool cuda,
                                                      const WeightOrigin& weights, const BackendOptions& options);

}  // namespace kiln
