// The CUDA backend: bf16 weights on the GPU, the generated forward (prefill: cuBLASLt + our
// kernels; decode: our kernels only, replayed from captured CUDA graphs), the GPU sampler.
//
// Memory is sized once at start: weights, the activation arena and attention scratch (sizes from
// codegen), the step buffers, and then the KV pool from what is left of --gpu-mem-util.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>

#include "runtime/core/error.hpp"
#include "runtime/cuda/check.hpp"
#include "runtime/cuda/context.hpp"
#include "runtime/cuda/gemm.hpp"
#include "runtime/engine/backend.hpp"
#include "runtime/model/rope_table.hpp"
#include "runtime/model/weight_loader.hpp"
#include "runtime/serving/sampler.hpp"

namespace kiln {

bool cuda_available() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

namespace {

// Device memory freed with the backend.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(int64_t bytes) { resize(bytes); }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void resize(int64_t bytes) {
    cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = bytes;
    if (bytes > 0) KILN_CUDA(cudaMalloc(&ptr_, static_cast<size_t>(bytes)));
  }
  template <typename T = char>
  T* get() const {
    return static_cast<T*>(ptr_);
  }
  int64_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  int64_t bytes_ = 0;
};

class DeviceSink final : public WeightSink {
 public:
  std::byte* allocate(int64_t bytes) override {
    buffer_.resize(bytes);
    return buffer_.get<std::byte>();
  }
  void write(std::byte* dst, const void* src, int64_t bytes) override {
    KILN_CUDA(cudaMemcpy(dst, src, static_cast<size_t>(bytes), cudaMemcpyHostToDevice));
  }

 private:
  DeviceBuffer buffer_;
};

// The step's int arrays live at fixed offsets of one device buffer (sized for the largest step),
// uploaded with one copy from pinned memory. Fixed addresses let captured graphs be replayed.
class StepBuffers {
 public:
  StepBuffers(int32_t max_tokens, int32_t max_seqs, int32_t pages_per_seq)
      : max_tokens_(max_tokens), max_seqs_(max_seqs), stride_(pages_per_seq) {
    token_ids_ = 0;
    positions_ = token_ids_ + max_tokens;
    slot_mapping_ = positions_ + max_tokens;
    logit_rows_ = slot_mapping_ + max_tokens;
    query_start_ = logit_rows_ + max_tokens;
    context_len_ = query_start_ + max_seqs + 1;
    block_tables_ = context_len_ + max_seqs;
    count_ = block_tables_ + static_cast<int64_t>(max_seqs) * pages_per_seq;
    device_.resize(count_ * 4);
    KILN_CUDA(cudaMallocHost(&host_, static_cast<size_t>(count_) * 4));
  }
  ~StepBuffers() { cudaFreeHost(host_); }

  // Copies `step` in (block tables re-laid at the fixed stride) and returns its device view.
  CudaStep upload(const StepBatch& step, cudaStream_t stream) {
    if (step.num_tokens() > max_tokens_ || step.num_seqs() > max_seqs_ || step.num_logits() > max_tokens_) {
      fail("internal: step of ", step.num_tokens(), " tokens / ", step.num_seqs(), " sequences exceeds the buffers");
    }
    if (step.max_pages_per_seq > stride_) fail("internal: block table wider than the model's max context");
    std::copy(step.token_ids.begin(), step.token_ids.end(), host_ + token_ids_);
    std::copy(step.positions.begin(), step.positions.end(), host_ + positions_);
    std::copy(step.slot_mapping.begin(), step.slot_mapping.end(), host_ + slot_mapping_);
    std::copy(step.logit_rows.begin(), step.logit_rows.end(), host_ + logit_rows_);
    std::copy(step.query_start.begin(), step.query_start.end(), host_ + query_start_);
    std::copy(step.context_len.begin(), step.context_len.end(), host_ + context_len_);
    for (int32_t s = 0; s < step.num_seqs(); ++s) {
      const int32_t* row = step.block_tables.data() + static_cast<int64_t>(s) * step.max_pages_per_seq;
      int32_t* dst = host_ + block_tables_ + static_cast<int64_t>(s) * stride_;
      std::copy(row, row + step.max_pages_per_seq, dst);
      std::fill(dst + step.max_pages_per_seq, dst + stride_, 0);
    }
    const int64_t used = block_tables_ + static_cast<int64_t>(step.num_seqs()) * stride_;
    KILN_CUDA(cudaMemcpyAsync(device_.get(), host_, static_cast<size_t>(used) * 4, cudaMemcpyHostToDevice, stream));

    CudaStep d;
    d.num_tokens = step.num_tokens();
    d.num_seqs = step.num_seqs();
    d.num_logits = step.num_logits();
    d.max_pages_per_seq = stride_;
    for (int32_t s = 0; s < step.num_seqs(); ++s) {
      d.max_query_len = std::max(d.max_query_len, step.query_start[s + 1] - step.query_start[s]);
    }
    const int32_t* base = device_.get<int32_t>();
    d.token_ids = base + token_ids_;
    d.positions = base + positions_;
    d.slot_mapping = base + slot_mapping_;
    d.logit_rows = base + logit_rows_;
    d.query_start = base + query_start_;
    d.context_len = base + context_len_;
    d.block_tables = base + block_tables_;
    return d;
  }

 private:
  int32_t max_tokens_, max_seqs_, stride_;
  int64_t token_ids_, positions_, slot_mapping_, logit_rows_, query_start_, context_len_, block_tables_, count_;
  DeviceBuffer device_;
  int32_t* host_ = nullptr;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(const ModelDef& model, const WeightOrigin& origin, const BackendOptions& options)
      : model_(model), use_graphs_(options.cuda_graphs) {
    const ModelInfo& m = model.info;
    cudaDeviceProp prop{};
    KILN_CUDA(cudaGetDeviceProperties(&prop, 0));
    info_.device = prop.name;
    KILN_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));

    const auto start = std::chrono::steady_clock::now();
    weights_ = origin.source ? load_weights(model, *origin.source, WeightFormat::bf16, sink_)
                             : random_weights(model, origin.random_seed, WeightFormat::bf16, sink_);
    forward_ = model.make_cuda_forward(weights_.table);
    info_.weight_bytes = weights_.bytes;

    arena_.resize(m.gpu_arena_bytes);
    scratch_.resize(m.gpu_scratch_bytes);
    const std::vector<float> rope = build_rope_table(m.rope, m.max_context);
    rope_.resize(static_cast<int64_t>(rope.size()) * 4);
    KILN_CUDA(cudaMemcpy(rope_.get(), rope.data(), rope.size() * 4, cudaMemcpyHostToDevice));
    const int32_t pages_per_seq = (m.max_context + m.page_size - 1) / m.page_size;
    // A step holds at most max_batch sequences (the scheduler's limit), and samples one row each.
    steps_ = std::make_unique<StepBuffers>(m.max_batched_tokens, m.max_batch, pages_per_seq);
    logits_.resize(static_cast<int64_t>(m.max_batch) * m.vocab_size * 4);
    sampler_ = std::make_unique<CudaSampler>(m.max_batch);

    page_bytes_ = static_cast<int64_t>(m.page_size) * m.kv_elems_per_token * 2;  // bf16
    info_.kv_bytes_per_token = static_cast<int64_t>(m.kv_elems_per_token) * m.num_layers * 2;
    kv_pages_ = options.kv_pages > 0 ? options.kv_pages : pages_from_free_memory(options.gpu_mem_util, pages_per_seq);
    check_kv_pool_fits(m, kv_pages_, page_bytes_ * m.num_layers, free_device_memory(), "GPU memory");
    kv_.resize(static_cast<int64_t>(kv_pages_) * page_bytes_ * m.num_layers);
    usage_bytes_ = static_cast<int64_t>(m.num_layers) * m.num_routed_experts;
    usage_.resize(usage_bytes_);
    if (usage_bytes_ > 0) KILN_CUDA(cudaMallocHost(&usage_host_, static_cast<size_t>(usage_bytes_)));
    KILN_CUDA(cudaDeviceSynchronize());

    ctx_.arena = arena_.get();
    ctx_.kv_cache = kv_.get();
    ctx_.kv_layer_bytes = static_cast<int64_t>(kv_pages_) * page_bytes_;
    ctx_.rope = rope_.get<float>();
    ctx_.scratch = scratch_.get<float>();
    ctx_.gemm = &gemm_;
    ctx_.expert_usage = usage_.get<unsigned char>();
    ctx_.stream = stream_;
    warm_up();
    info_.load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  ~CudaBackend() override {
    destroy_graphs();
    cudaFreeHost(usage_host_);
    cudaStreamDestroy(stream_);
  }

  const char* name() const override { return "cuda"; }
  int32_t kv_pages() const override { return kv_pages_; }
  const BackendInfo& info() const override { return info_; }

  void forward(const StepBatch& step) override {
    const ModelInfo& m = model_.info;
    check_step_fits(m, step);
    ensure_logits_rows(step.num_logits());
    num_logits_ = step.num_logits();
    const CudaStep d = steps_->upload(step, stream_);
    float* logits = logits_.get<float>();
    if (!step.decode_only()) {
      forward_->prefill(d, ctx_, logits);
    } else {
      if (use_graphs_) {
        KILN_CUDA(cudaGraphLaunch(decode_graph(d, logits), stream_));
      } else {
        decode(d, logits);
      }
      // Read back with the step; sample() waits for the stream, so the flags are on the host by
      // the time last_step_experts_read() counts them.
      if (usage_bytes_ > 0) {
        KILN_CUDA(cudaMemcpyAsync(usage_host_, usage_.get(), static_cast<size_t>(usage_bytes_),
                                  cudaMemcpyDeviceToHost, stream_));
      }
    }
    KILN_CUDA(cudaGetLastError());
  }

  std::vector<SampleOutput> sample(int32_t first_logit_row, std::span<const SamplerRow> rows) override {
    check_logit_rows(first_logit_row, static_cast<int32_t>(rows.size()), num_logits_);
    const int64_t V = model_.info.vocab_size;
    std::vector<SampleOutput> out =
        sampler_->sample(logits_.get<float>() + first_logit_row * V, V, static_cast<int32_t>(V), rows, stream_);
    KILN_CUDA(cudaGetLastError());
    return out;
  }

  void copy_logits(int32_t first, int32_t count, float* out) override {
    check_logit_rows(first, count, num_logits_);
    const size_t V = model_.info.vocab_size;
    KILN_CUDA(cudaMemcpyAsync(out, logits_.get<float>() + first * V, count * V * 4, cudaMemcpyDeviceToHost, stream_));
    KILN_CUDA(cudaStreamSynchronize(stream_));
  }

  int64_t last_step_experts_read() override {
    return std::count(usage_host_, usage_host_ + usage_bytes_, static_cast<unsigned char>(1));
  }

 private:
  // KV pages from the memory left under the --gpu-mem-util budget, at most enough for every
  // sequence of a full batch at full context.
  static int64_t free_device_memory() {
    size_t free_bytes = 0, total_bytes = 0;
    KILN_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
    return static_cast<int64_t>(free_bytes);
  }

  int32_t pages_from_free_memory(double util, int32_t pages_per_seq) const {
    size_t free_bytes = 0, total_bytes = 0;
    KILN_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
    constexpr int64_t kReserve = 512ll << 20;  // graphs, cuBLASLt, sampler, driver
    const int64_t budget = static_cast<int64_t>(util * static_cast<double>(total_bytes)) -
                           static_cast<int64_t>(total_bytes - free_bytes) - kReserve;
    const int64_t per_page = page_bytes_ * model_.info.num_layers;
    const int64_t pages = std::min<int64_t>(budget / per_page, static_cast<int64_t>(model_.info.max_batch) * pages_per_seq);
    if (pages < pages_per_seq / 8 + 1) {
      fail("not enough GPU memory for the KV cache: ", budget >> 20, " MiB left under --gpu-mem-util ", util,
           " after the weights (", weights_.bytes >> 20, " MiB); raise --gpu-mem-util or set --kv-pages");
    }
    return static_cast<int32_t>(pages);
  }

  // One prefill and one decode before serving, confined to KV page 0 (no sequence owns a page yet,
  // and a page is always written before it is read): every kernel module gets loaded, cuBLASLt
  // plans built and the batch-1 decode graph captured, so a request's time to first token
  // measures the model rather than this setup.
  void warm_up() {
    const int32_t n = std::max(1, std::min(model_.info.page_size, 8));
    StepBatch prefill;
    for (int32_t i = 0; i < n; ++i) {
      prefill.token_ids.push_back(i % model_.info.vocab_size);
      prefill.positions.push_back(i);
      prefill.slot_mapping.push_back(i);
    }
    prefill.query_start = {0, n};
    prefill.context_len = {n};
    prefill.block_tables = {0};
    prefill.max_pages_per_seq = 1;
    prefill.logit_rows = {n - 1};
    StepBatch decode = prefill;  // the last position again, as a one-token decode
    decode.token_ids = {prefill.token_ids.back()};
    decode.positions = {n - 1};
    decode.slot_mapping = {n - 1};
    decode.query_start = {0, 1};
    decode.logit_rows = {0};
    const SamplerRow greedy{.temperature = 0.0f};
    for (const StepBatch* step : {&prefill, &decode}) {
      forward(*step);
      sample(0, std::span(&greedy, 1));
    }
    KILN_CUDA(cudaStreamSynchronize(stream_));
  }

  // The decode graph for this shape, captured on first use and replayed after (its step buffers
  // and logits live at fixed addresses). A graph bakes in the launch sizes: the sequences and the
  // rows that need logits (fewer than the sequences while a re-admitted sequence replays its
  // generated tokens), so both key it.
  cudaGraphExec_t decode_graph(const CudaStep& d, float* logits) {
    const std::pair<int, int> key{d.num_seqs, d.num_logits};
    auto it = graphs_.find(key);
    if (it != graphs_.end()) return it->second;
    cudaGraph_t graph;
    KILN_CUDA(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    decode(d, logits);
    KILN_CUDA(cudaStreamEndCapture(stream_, &graph));
    cudaGraphExec_t exec;
    KILN_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    KILN_CUDA(cudaGraphDestroy(graph));
    graphs_[key] = exec;
    return exec;
  }

  // One decode forward; the MoE layers flag the experts they choose, so the flags are cleared first
  // (inside the graph when captured).
  void decode(const CudaStep& d, float* logits) {
    if (usage_bytes_ > 0) KILN_CUDA(cudaMemsetAsync(usage_.get(), 0, static_cast<size_t>(usage_bytes_), stream_));
    forward_->decode(d, ctx_, logits);
  }

  void ensure_logits_rows(int32_t rows) {
    const int64_t bytes = static_cast<int64_t>(rows) * model_.info.vocab_size * 4;
    if (bytes <= logits_.bytes()) return;
    logits_.resize(bytes);  // --dump-logits of a long prompt
    destroy_graphs();       // they write the old buffer
  }

  void destroy_graphs() {
    for (auto& [shape, exec] : graphs_) cudaGraphExecDestroy(exec);
    graphs_.clear();
  }


  const ModelDef& model_;
  bool use_graphs_;
  cudaStream_t stream_ = nullptr;
  DeviceSink sink_;
  LoadedWeights weights_;
  std::unique_ptr<CudaForward> forward_;
  DeviceBuffer arena_, scratch_, rope_, kv_, logits_, usage_;
  int64_t usage_bytes_ = 0;
  unsigned char* usage_host_ = nullptr;  // pinned: the last decode step's expert flags
  std::unique_ptr<StepBuffers> steps_;
  std::unique_ptr<CudaSampler> sampler_;
  cuda::GemmRunner gemm_;
  int64_t page_bytes_ = 0;
  int32_t kv_pages_ = 0;
  int32_t num_logits_ = 0;
  CudaContext ctx_;
  std::map<std::pair<int, int>, cudaGraphExec_t> graphs_;  // (sequences, logits rows)
  BackendInfo info_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(const ModelDef& model, const WeightOrigin& weights,
                                           const BackendOptions& options) {
  if (!cuda_available()) fail("--backend cuda: no CUDA device is available");
  return std::make_unique<CudaBackend>(model, weights, options);
}

}  // namespace kiln
