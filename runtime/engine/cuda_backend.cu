// The CUDA backend: bf16 weights on the GPU, the generated forward (prefill: cuBLASLt + our
// kernels; decode: our kernels only, replayed from CUDA graphs captured at start), the GPU sampler.
//
// Memory is sized once at start: weights, the activation arena and attention scratch (sizes from
// codegen), the step buffers, and then the KV pool from what is left of --gpu-mem-util, plus one
// padding page that decode steps padded to a graph's batch size read and write.
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
#include "runtime/weights/quant_repack.hpp"
#include "templates/common.cuh"

namespace kiln {

bool cuda_available() { return cuda_device_count() > 0; }

int32_t cuda_device_count() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
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
  // For the buffers cuBLASLt writes (activations, logits): compute-sanitizer's initcheck does not
  // count the stores of its Hopper GEMMs (TMA) as writes, and reported every later read of their
  // outputs as a read of uninitialized memory. Zeroed once, those reads are of written memory to
  // it too; the KV cache stays as allocated, so that initcheck still sees a read of a slot no step
  // wrote.
  void zero(cudaStream_t stream) {
    if (bytes_ > 0) KILN_CUDA(cudaMemsetAsync(ptr_, 0, static_cast<size_t>(bytes_), stream));
  }

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

// Pinned host memory freed with its owner.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(int64_t bytes, unsigned flags) { KILN_CUDA(cudaHostAlloc(&ptr_, static_cast<size_t>(bytes), flags)); }
  ~PinnedBuffer() { cudaFreeHost(ptr_); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  template <typename T>
  T* get() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
};

// One phase's steps: the StepBuffer the engine writes a step into (pinned memory), its device
// mirror, and the upload. The device copy has the same layout, so a step's arrays keep fixed device
// addresses (what captured graphs replay against).
class PhaseStaging {
 public:
  explicit PhaseStaging(StepCapacity capacity)
      : host_(StepBuffer::ints(capacity) * 4, cudaHostAllocDefault),
        buffer_(capacity, host_.get<int32_t>()),
        device_(StepBuffer::ints(capacity) * 4) {}

  StepBuffer& buffer() { return buffer_; }

  // One copy of the prefix that holds `step`; returns its device view.
  CudaStep upload(const StepBatch& step, cudaStream_t stream) {
    KILN_CUDA(cudaMemcpyAsync(device_.get(), buffer_.data(), static_cast<size_t>(buffer_.used_ints(step)) * 4,
                              cudaMemcpyHostToDevice, stream));
    return device_view(step);
  }

  // Where `step`'s arrays are on the device (after an upload).
  CudaStep device_view(const StepBatch& step) const {
    const int32_t* base = device_.get<int32_t>();
    auto at = [&](std::span<const int32_t> array) { return base + buffer_.offset_of(array); };
    CudaStep d;
    d.num_tokens = step.num_tokens();
    d.num_seqs = step.num_seqs();
    d.num_logits = step.num_logits();
    d.num_samples = step.num_samples;
    d.max_query_len = step.max_query_len();
    d.max_pages_per_seq = step.max_pages_per_seq;
    d.token_ids = at(step.token_ids);
    d.positions = at(step.positions);
    d.slot_mapping = at(step.slot_mapping);
    d.query_start = at(step.query_start);
    d.context_len = at(step.context_len);
    d.block_tables = at(step.block_tables);
    d.logit_rows = at(step.logit_rows);
    d.host_context_len = step.context_len.data();
    return d;
  }

 private:
  PinnedBuffer host_;
  StepBuffer buffer_;
  DeviceBuffer device_;
};

// The batch sizes decode graphs are captured for: every size up to 8, then multiples of 8 (a step
// of S sequences runs the graph of the smallest size >= S, padded), and max_batch itself.
std::vector<int32_t> decode_graph_sizes(int32_t max_batch) {
  std::vector<int32_t> sizes;
  for (int32_t s = 1; s <= max_batch; s = s < 8 ? s + 1 : s + 8) sizes.push_back(s);
  if (sizes.back() != max_batch) sizes.push_back(max_batch);
  return sizes;
}

class CudaBackend final : public Backend {
 public:
  CudaBackend(const ModelDef& model, const WeightOrigin& origin, const BackendOptions& options)
      : model_(model),
        use_graphs_(options.cuda_graphs),
        device_(bind_device(options.device)),
        prefill_(step_capacity(model.info, StepPhase::prefill)),
        decode_(step_capacity(model.info, StepPhase::decode)) {
    const ModelInfo& m = model.info;
    cudaDeviceProp prop{};
    KILN_CUDA(cudaGetDeviceProperties(&prop, device_));
    info_.device = prop.name;
    KILN_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));

    const auto start = std::chrono::steady_clock::now();
    // One GPU: projections a GGUF file stores as Q8_0 / Q4_0 keep their blocks (the L2 warm-up of
    // tensor parallelism sizes its reads for bf16 rows, so its ranks load bf16).
    const WeightFormat format = m.tensor_parallel == 1 ? WeightFormat::gpu : WeightFormat::bf16;
    weights_ = origin.source ? load_weights(model, *origin.source, format, sink_, options.rank, options.quantize)
                             : random_weights(model, origin.random_seed, format, sink_, options.rank, options.quantize);
    forward_ = model.make_cuda_forward(weights_.table);
    info_.weight_bytes = weights_.bytes;
    info_.decode_weight_bytes = m.decode_weight_bytes - weights_.quantized_bf16_bytes + weights_.quantized_bytes;
    info_.weight_formats = weight_formats_text(weights_, "bf16");
    if (weights_.largest_quantized_values > 0) dequantized_.resize(weights_.largest_quantized_values * 2);
    const int32_t prefill_tokens = step_capacity(m, StepPhase::prefill).max_tokens;
    if (weights_.longest_fp8_row > 0 && prefill_tokens % kFp8GemmRows == 0) {  // the prefill's FP8 inputs (gemm.hpp)
      const int64_t values = int64_t{prefill_tokens} * weights_.longest_fp8_row;
      fp8_inputs_.resize(values);
      fp8_input_scales_.resize(values / kFp8InputBlock * 4);  // [k / 128][tokens] fp32
    }

    arena_.resize(m.gpu_arena_bytes);
    arena_.zero(stream_);
    scratch_.resize(m.gpu_scratch_bytes);
    if (m.side_stream) {  // the ops beside the others (CudaContext::fork, fork_prefill)
      side_scratch_.resize(m.gpu_side_scratch_bytes);
      KILN_CUDA(cudaStreamCreateWithFlags(&side_stream_, cudaStreamNonBlocking));
      side_gemm_ = std::make_unique<cuda::GemmRunner>();  // the prefill's projections beside the others
      KILN_CUDA(cudaEventCreateWithFlags(&fork_event_, cudaEventDisableTiming));
      KILN_CUDA(cudaEventCreateWithFlags(&join_event_, cudaEventDisableTiming));
    }
    mla_expanded_.resize(m.gpu_mla_expanded_bytes);
    mla_expanded_.zero(stream_);  // cuBLASLt writes most of it (see zero())
    decode_counters_.resize(m.gpu_decode_counter_words * 4);
    decode_counters_.zero(stream_);
    const std::vector<float> rope = build_rope_table(m.rope, m.max_context);
    rope_.resize(static_cast<int64_t>(rope.size()) * 4);
    KILN_CUDA(cudaMemcpy(rope_.get(), rope.data(), rope.size() * 4, cudaMemcpyHostToDevice));
    // Decode graphs write their fixed logits buffer; prefill grows its own for prompt logits.
    decode_logits_.resize(static_cast<int64_t>(m.max_batch) * m.vocab_size * 4);
    decode_logits_.zero(stream_);
    // Rows padded as the FP8 GEMM writes them (templates/fp8_rows.hpp), for an FP8 LM head.
    prefill_logits_.resize(static_cast<int64_t>(fp8_gemm_rows(m.max_batch)) * m.vocab_size * 4);
    prefill_logits_.zero(stream_);
    sampler_ = std::make_unique<CudaSampler>(m.max_batch);

    const int32_t pages_per_seq = step_capacity(m, StepPhase::decode).pages_per_seq;
    page_bytes_ = static_cast<int64_t>(m.page_size) * m.kv_elems_per_token * 2;  // bf16
    info_.kv_bytes_per_token = static_cast<int64_t>(m.kv_elems_per_token) * m.num_layers * 2;
    kv_pages_ = options.kv_pages > 0 ? options.kv_pages : pages_from_free_memory(options.gpu_mem_util, pages_per_seq);
    // The padding page and each layer's rounding up to kLayerAlign come out of what is free.
    check_kv_pool_fits(m, kv_pages_, page_bytes_ * m.num_layers,
                       free_device_memory() - (page_bytes_ + kLayerAlign) * m.num_layers, "GPU memory");
    padding_page_ = kv_pages_;  // past the block manager's pages: only padded rows touch it
    // Each layer's pages start on a 2 MiB boundary (the GPU's large page) whatever the pool size,
    // as they did before the padding page made the layer stride odd: a sequence's first pages then
    // share one large page per layer. (qwen3-0.6b decode against the last landed build: +1.7% with
    // the odd stride, +1.25% with this; bench/RESULTS.md, 2026-11-23.)
    kv_layer_bytes_ = (static_cast<int64_t>(kv_pages_ + 1) * page_bytes_ + kLayerAlign - 1) / kLayerAlign * kLayerAlign;
    kv_.resize(kv_layer_bytes_ * m.num_layers);
    swap_pages_ = swap_pages_for(options.swap_space_bytes, page_bytes_ * m.num_layers);
    if (options.profile && m.num_routed_experts > 0) {
      usage_bytes_ = static_cast<int64_t>(m.num_layers) * m.num_routed_experts;
      usage_ = std::make_unique<PinnedBuffer>(usage_bytes_, cudaHostAllocMapped);
      info_.expert_usage = usage_->get<uint8_t>();
    }
    if (options.profile) {
      op_timeline_ = std::make_unique<cuda::OpTimeline>();
      info_.op_profile = &op_profile_;
    }
    // The whole-step kernel reads bf16 rows: quantized projections decode op by op.
    if (options.megakernel && m.step_sync_words > 0 && weights_.quantized == 0) {
      step_sync_.resize(static_cast<int64_t>(m.step_sync_words) * 4);
      KILN_CUDA(cudaMemset(step_sync_.get(), 0, step_sync_.bytes()));
      if (options.profile) {
        // The kernel runs one block per SM (templates/decode_step.cuh).
        KILN_CUDA(cudaDeviceGetAttribute(&timeline_blocks_, cudaDevAttrMultiProcessorCount, device_));
        step_profile_ = std::make_unique<StepProfile>(m);
        timeline_.resize(static_cast<int64_t>(step_profile_->num_stages()) * timeline_blocks_ * 2 * 8);
        info_.step_profile = step_profile_.get();
      }
    }
    KILN_CUDA(cudaDeviceSynchronize());

    ctx_.arena = arena_.get();
    ctx_.kv_cache = kv_.get();
    ctx_.kv_layer_bytes = kv_layer_bytes_;
    ctx_.rope = rope_.get<float>();
    ctx_.scratch = scratch_.get<float>();
    ctx_.side_stream = side_stream_;
    ctx_.fork_event = fork_event_;
    ctx_.join_event = join_event_;
    ctx_.side_scratch = side_scratch_.bytes() > 0 ? side_scratch_.get<float>() : nullptr;
    ctx_.mla_expanded = mla_expanded_.bytes() > 0 ? mla_expanded_.get<__nv_bfloat16>() : nullptr;
    ctx_.decode_counters = decode_counters_.bytes() > 0 ? decode_counters_.get<unsigned>() : nullptr;
    ctx_.gemm = &gemm_;
    ctx_.side_gemm = side_gemm_.get();
    ctx_.dequantized = dequantized_.bytes() > 0 ? dequantized_.get<__nv_bfloat16>() : nullptr;
    ctx_.fp8_inputs = fp8_inputs_.bytes() > 0 ? fp8_inputs_.get<uint8_t>() : nullptr;
    ctx_.fp8_input_scales = fp8_input_scales_.bytes() > 0 ? fp8_input_scales_.get<float>() : nullptr;
    ctx_.expert_usage = usage_ ? usage_->get<unsigned char>() : nullptr;
    ctx_.stream = stream_;
    ctx_.decode_gemm_above = options.batch_invariant || m.decode_gemm_above == 0 ? INT_MAX : m.decode_gemm_above;
    ctx_.rank = options.rank;
    ctx_.collective = options.collective;
    if (options.l2_warm) {
      int l2_bytes = 0;
      KILN_CUDA(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device_));
      ctx_.l2_warm_bytes = l2_bytes / 2;
    }
    kiln::detail::launch_with_pdl = options.pdl;
    ctx_.step_sync = step_sync_.bytes() > 0 ? step_sync_.get<unsigned>() : nullptr;
    ctx_.step_timeline = timeline_.bytes() > 0 ? timeline_.get<unsigned long long>() : nullptr;
    ctx_.op_timeline = op_timeline_.get();
    warm_up();
    info_.load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  ~CudaBackend() override {
    cudaSetDevice(device_);
    for (auto& [size, exec] : graphs_) cudaGraphExecDestroy(exec);
    if (side_stream_ != nullptr) {
      cudaEventDestroy(fork_event_);
      cudaEventDestroy(join_event_);
      cudaStreamDestroy(side_stream_);
    }
    cudaStreamDestroy(stream_);
  }

  const char* name() const override { return "cuda"; }
  int32_t kv_pages() const override { return kv_pages_; }
  const BackendInfo& info() const override { return info_; }
  int32_t swap_pages() const override { return swap_pages_; }

  // The swap space is pinned host memory [layers][swap pages][page bytes]; each page moves as one
  // 2-D copy (its part of every layer) on the forward's stream, so the step's kernels run after.
  void swap_kv(std::span<const PageSwap> copies, bool to_host) override {
    if (copies.empty()) return;
    const int64_t layers = model_.info.num_layers, host_pitch = page_bytes_ * swap_pages_;
    cudaSetDevice(device_);
    if (!swap_) swap_ = std::make_unique<PinnedBuffer>(host_pitch * layers, cudaHostAllocDefault);
    for (const PageSwap& c : copies) {
      if (c.device_page < 0 || c.device_page >= kv_pages_ || c.host_page < 0 || c.host_page >= swap_pages_) {
        fail("internal: swap of KV page ", c.device_page, " <-> host page ", c.host_page, " is outside the pools (",
             kv_pages_, ", ", swap_pages_, " pages)");
      }
      char* pool = kv_.get<char>() + c.device_page * page_bytes_;
      char* host = swap_->get<char>() + c.host_page * page_bytes_;
      if (to_host) {
        KILN_CUDA(cudaMemcpy2DAsync(host, host_pitch, pool, kv_layer_bytes_, page_bytes_, layers, cudaMemcpyDeviceToHost,
                                    stream_));
      } else {
        KILN_CUDA(cudaMemcpy2DAsync(pool, kv_layer_bytes_, host, host_pitch, page_bytes_, layers, cudaMemcpyHostToDevice,
                                    stream_));
      }
    }
  }

  StepBuffer& step_buffer(StepPhase phase) override {
    return phase == StepPhase::decode ? decode_.buffer() : prefill_.buffer();
  }

  void forward(const StepBatch& step) override {
    bind_device(device_);
    check_step_fits(model_.info, step);
    // The previous step's sample() synchronized: its routing flags are read, clear them.
    if (usage_) std::memset(usage_->get<uint8_t>(), 0, static_cast<size_t>(usage_bytes_));
    num_logits_ = step.num_logits();
    if (step.phase == StepPhase::decode) {
      logits_ = decode_logits_.get<float>();
      // The generated decode runs the whole-step kernel when it has its counters and the step fits.
      const bool whole_step = ctx_.step_sync != nullptr && step.num_seqs() <= model_.info.megakernel_max_batch;
      const bool profiled = warmed_up_;  // the warm-up's padded step is not the run's
      if (op_timeline_ && profiled && !whole_step) op_timeline_->start(stream_);
      if (use_graphs_) {
        const int32_t size = graph_size(step.num_seqs());
        decode_.upload(pad_decode(step, size), stream_);
        KILN_CUDA(cudaGraphLaunch(graphs_.at(size), stream_));
      } else {
        forward_->decode(decode_.upload(step, stream_), ctx_, logits_);
      }
      if (step_profile_ && profiled && whole_step) record_stages(step);
      if (op_timeline_ && profiled && !whole_step) record_ops(step);
    } else {
      ensure_prefill_logits(step.num_logits());
      logits_ = prefill_logits_.get<float>();
      forward_->prefill(prefill_.upload(step, stream_), ctx_, logits_);
    }
    KILN_CUDA(cudaGetLastError());
  }

  // --profile: the whole-step kernel's timeline of this step, added to the stage profile.
  void record_stages(const StepBatch& step) {
    timeline_host_.resize(timeline_.bytes() / 8);
    KILN_CUDA(cudaMemcpyAsync(timeline_host_.data(), timeline_.get(), timeline_.bytes(), cudaMemcpyDeviceToHost,
                              stream_));
    KILN_CUDA(cudaStreamSynchronize(stream_));
    step_profile_->add(timeline_host_, timeline_blocks_, step.context_len);
  }

  // --profile on the per-op path: the ops' times of this step, with what the step read.
  void record_ops(const StepBatch& step) {
    const ModelInfo& m = model_.info;
    StepReads reads;
    reads.tokens = step.num_tokens();
    for (int32_t len : step.context_len) reads.kv_tokens += len;
    reads.kv_bytes_per_token = static_cast<int64_t>(m.kv_elems_per_token) * 2;  // bf16
    if (usage_) {
      KILN_CUDA(cudaStreamSynchronize(stream_));  // the routing's flags are written
      const uint8_t* flags = usage_->get<uint8_t>();
      reads.experts_read = std::count_if(flags, flags + usage_bytes_, [](uint8_t f) { return f != 0; });
    }
    op_timeline_->finish(stream_, reads, op_profile_);
  }

  SampleResult sample(const SampleBatch& batch) override {
    bind_device(device_);
    check_logit_rows(0, static_cast<int32_t>(batch.rows.size()), num_logits_);
    // A step that samples nothing (decodes replaying tokens after a preemption) still ends here:
    // the next step is written into the pinned staging its upload may still be reading.
    if (batch.rows.empty()) {
      KILN_CUDA(cudaStreamSynchronize(stream_));
      return {};
    }
    const int64_t V = model_.info.vocab_size;
    SampleResult out = sampler_->sample(logits_, V, static_cast<int32_t>(V), batch, stream_);
    KILN_CUDA(cudaGetLastError());
    return out;
  }

  SampleResult logprobs(int32_t first_logit_row, std::span<const int32_t> tokens, int32_t top_n) override {
    bind_device(device_);
    check_logit_rows(first_logit_row, static_cast<int32_t>(tokens.size()), num_logits_);
    const int64_t V = model_.info.vocab_size;
    SampleResult out =
        sampler_->logprobs(logits_ + first_logit_row * V, V, static_cast<int32_t>(V), tokens, top_n, stream_);
    KILN_CUDA(cudaGetLastError());
    return out;
  }

  void copy_logits(int32_t first, int32_t count, float* out) override {
    bind_device(device_);
    check_logit_rows(first, count, num_logits_);
    const size_t V = model_.info.vocab_size;
    KILN_CUDA(cudaMemcpyAsync(out, logits_ + first * V, count * V * 4, cudaMemcpyDeviceToHost, stream_));
    KILN_CUDA(cudaStreamSynchronize(stream_));
  }

 private:
  // This backend's GPU made current on the calling thread (a tensor-parallel rank's calls may come
  // from any thread; the GPU is per thread). Returns it.
  static int bind_device(int device) {
    KILN_CUDA(cudaSetDevice(device));
    return device;
  }

  static int64_t free_device_memory() {
    size_t free_bytes = 0, total_bytes = 0;
    KILN_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
    return static_cast<int64_t>(free_bytes);
  }

  // KV pages from the memory left under the --gpu-mem-util budget, at most enough for every
  // sequence of a full batch at full context; at least one sequence of an eighth of the context
  // (fewer would serve almost nothing: ask for more memory instead).
  int32_t pages_from_free_memory(double util, int32_t pages_per_seq) const {
    size_t free_bytes = 0, total_bytes = 0;
    KILN_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
    constexpr int64_t kReserve = 512ll << 20;  // graphs, cuBLASLt, sampler, driver
    const int64_t budget = static_cast<int64_t>(util * static_cast<double>(total_bytes)) -
                           static_cast<int64_t>(total_bytes - free_bytes) - kReserve -
                           kLayerAlign * model_.info.num_layers;  // each layer's rounding up
    const int64_t per_page = page_bytes_ * model_.info.num_layers;
    const int64_t pages = std::min<int64_t>(budget / per_page - 1,  // the padding page
                                            static_cast<int64_t>(model_.info.max_batch) * pages_per_seq);
    const int64_t least = pages_per_seq / 8 + 1;
    if (pages < least) {
      fail("not enough GPU memory for the KV cache: ", budget >> 20, " MiB left under --gpu-mem-util ", util,
           " after the weights (", weights_.bytes >> 20, " MiB) hold ", std::max<int64_t>(pages, 0), " pages; ",
           least, " are needed for one sequence of an eighth of the context; raise --gpu-mem-util or set --kv-pages");
    }
    return static_cast<int32_t>(pages);
  }

  int32_t graph_size(int32_t seqs) const {
    for (const auto& [size, exec] : graphs_) {
      if (size >= seqs) return size;
    }
    fail("internal: decode step of ", seqs, " sequences exceeds the largest graph");
  }

  // `step` extended to `size` sequences in place (its buffer holds max_batch): the padding rows
  // decode token 0 at position 0 into the padding page, and their logits rows repeat row 0; the
  // sampler reads only the real rows. Every kernel handles its rows independently, so the real
  // rows come out as without padding.
  StepBatch pad_decode(const StepBatch& step, int32_t size) {
    const int32_t seqs = step.num_seqs(), logits = step.num_logits();
    StepBatch padded = decode_.buffer().view(StepPhase::decode, size, size, size);
    padded.num_samples = step.num_samples;
    const int32_t slot = padding_page_ * model_.info.page_size;
    padded.query_start[0] = 0;
    for (int32_t s = seqs; s < size; ++s) {
      padded.token_ids[s] = 0;
      padded.positions[s] = 0;
      padded.slot_mapping[s] = slot;
      padded.query_start[s + 1] = s + 1;
      padded.context_len[s] = 1;
      padded.block_tables[static_cast<size_t>(s) * padded.max_pages_per_seq] = padding_page_;
    }
    for (int32_t r = logits; r < size; ++r) padded.logit_rows[r] = 0;
    return padded;
  }

  // One prefill into the padding page (no sequence owns it), then a decode graph captured for every
  // batch size and uploaded, the batch-1 one replayed: every kernel module loaded, cuBLASLt plans
  // built, graphs ready, so a request's time to first token measures the model, not this setup.
  void warm_up() {
    const ModelInfo& m = model_.info;
    const int32_t n = std::max(1, std::min(m.page_size, 8));
    const int32_t slot = padding_page_ * m.page_size;
    StepBatch prefill = prefill_.buffer().view(StepPhase::prefill, n, 1, 1);
    for (int32_t i = 0; i < n; ++i) {
      prefill.token_ids[i] = i % m.vocab_size;
      prefill.positions[i] = i;
      prefill.slot_mapping[i] = slot + i;
    }
    prefill.query_start[0] = 0;
    prefill.query_start[1] = n;
    prefill.context_len[0] = n;
    prefill.block_tables[0] = padding_page_;
    prefill.logit_rows[0] = n - 1;
    prefill.num_samples = 1;
    forward(prefill);
    sample(SampleBatch::of({SamplerRow{.temperature = 0.0f}}));
    if (use_graphs_) {
      for (int32_t size : decode_graph_sizes(m.max_batch)) graphs_.emplace(size, capture_decode(size));
    }
    StepBatch decode = decode_.buffer().view(StepPhase::decode, 0, 0, 0);
    forward(pad_decode(decode, 1));  // one padded sequence: the batch-1 graph (or the plain decode)
    KILN_CUDA(cudaStreamSynchronize(stream_));
    warmed_up_ = true;
  }

  // The decode forward of `size` sequences as a graph over the decode staging buffer's fixed device
  // addresses and the fixed decode logits.
  cudaGraphExec_t capture_decode(int32_t size) {
    const StepBatch step = decode_.buffer().view(StepPhase::decode, size, size, size);
    cudaGraph_t graph;
    if (op_timeline_) op_timeline_->begin_capture();
    KILN_CUDA(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    forward_->decode(decode_.device_view(step), ctx_, decode_logits_.get<float>());
    KILN_CUDA(cudaStreamEndCapture(stream_, &graph));
    cudaGraphExec_t exec;
    KILN_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    KILN_CUDA(cudaGraphDestroy(graph));
    KILN_CUDA(cudaGraphUpload(exec, stream_));
    return exec;
  }

  void ensure_prefill_logits(int32_t rows) {
    const int64_t bytes = static_cast<int64_t>(fp8_gemm_rows(rows)) * model_.info.vocab_size * 4;
    if (bytes > prefill_logits_.bytes()) {  // prompt logits of a long prompt
      prefill_logits_.resize(bytes);
      prefill_logits_.zero(stream_);
    }
  }

  const ModelDef& model_;
  bool use_graphs_;
  int device_;
  cudaStream_t stream_ = nullptr;
  cudaStream_t side_stream_ = nullptr;  // with fork_event_ and join_event_: CudaContext::fork, fork_prefill
  cudaEvent_t fork_event_ = nullptr, join_event_ = nullptr;
  DeviceSink sink_;
  LoadedWeights weights_;
  std::unique_ptr<CudaForward> forward_;
  DeviceBuffer arena_, scratch_, side_scratch_, decode_counters_, rope_, kv_, decode_logits_, prefill_logits_;
  DeviceBuffer step_sync_;  // the whole-step decode kernel's counters (empty: op by op)
  DeviceBuffer mla_expanded_;  // MLA prefill's expanded keys and values (empty: none)
  DeviceBuffer dequantized_;  // bf16 rows of the largest quantized projection, for prefill (empty: none)
  DeviceBuffer fp8_inputs_, fp8_input_scales_;  // the prefill's inputs in FP8 (empty: no FP8 projection)
  DeviceBuffer timeline_;   // --profile: its stages' times, [stage][block] (start, end)
  int timeline_blocks_ = 0;
  std::vector<uint64_t> timeline_host_;  // the last step's timeline, read back
  std::unique_ptr<StepProfile> step_profile_;
  std::unique_ptr<cuda::OpTimeline> op_timeline_;  // --profile: the per-op decode's events
  OpProfile op_profile_;
  bool warmed_up_ = false;  // --profile counts the steps after warm_up()
  PhaseStaging prefill_, decode_;
  std::unique_ptr<PinnedBuffer> usage_;  // --profile, MoE: the routing's flags (mapped into the device)
  std::unique_ptr<PinnedBuffer> swap_;   // --swap-space, taken at the first swap-out
  int32_t swap_pages_ = 0;
  int64_t usage_bytes_ = 0;
  std::unique_ptr<CudaSampler> sampler_;
  cuda::GemmRunner gemm_;
  std::unique_ptr<cuda::GemmRunner> side_gemm_;  // CudaContext::side_gemm (models with a side stream)
  int64_t page_bytes_ = 0;
  static constexpr int64_t kLayerAlign = int64_t{2} << 20;
  int64_t kv_layer_bytes_ = 0;  // one layer's pages and the padding page, rounded up to kLayerAlign
  int32_t kv_pages_ = 0;
  int32_t padding_page_ = 0;
  float* logits_ = nullptr;  // the last forward's logits
  int32_t num_logits_ = 0;
  CudaContext ctx_;
  std::map<int32_t, cudaGraphExec_t> graphs_;  // by batch size
  BackendInfo info_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(const ModelDef& model, const WeightOrigin& weights,
                                           const BackendOptions& options) {
  if (!cuda_available()) fail("--backend cuda: no CUDA device is available");
  return std::make_unique<CudaBackend>(model, weights, options);
}

}  // namespace kiln
