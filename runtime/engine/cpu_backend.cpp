// The two CPU backends: both run the generated forward_ref and the CPU sampler. The reference
// ("ref") holds every weight in fp32: slow but exact, the oracle; CI checks every model family
// through it. The fast one ("cpu") keeps the projections as the file stores them (bf16 rows, ggml's
// blocks: WeightFormat::cpu), which forward_ref's linear op then runs through runtime/cpu's kernels,
// and its dense KV pages in bf16 (runtime/cpu/attention.hpp reads them).
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "runtime/core/error.hpp"
#include "runtime/core/host_memory.hpp"
#include "runtime/core/parallel.hpp"
#include "runtime/cpu/linear.hpp"
#include "runtime/cpu/quant_dot.hpp"
#include "runtime/engine/backend.hpp"
#include "runtime/model/rope_table.hpp"
#include "runtime/model/weight_loader.hpp"
#include "runtime/serving/sampler_cpu.hpp"

namespace kiln {

namespace {

// Zeroed floats from calloc: a pool this large comes from mmap, whose pages the kernel zeroes as
// they are first touched, so a KV pool sized for the whole context costs nothing until used
// (zero-filling SmolLM2's 755 MB default pool took a few hundred ms before the first token).
class ZeroedFloats {
 public:
  void allocate(size_t count, const char* what) {
    data_.reset(static_cast<float*>(std::calloc(std::max<size_t>(count, 1), sizeof(float))));
    if (!data_) fail("cannot allocate ", count * sizeof(float), " bytes of CPU memory for the ", what);
  }
  float* data() const { return data_.get(); }
  bool empty() const { return !data_; }

 private:
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float, Free> data_;
};

// Floats that hold `bytes` (the KV pool and swap space hold fp32 or bf16 values).
size_t floats_for(int64_t bytes) { return static_cast<size_t>((bytes + 3) / 4); }

class CpuBackend final : public Backend {
 public:
  CpuBackend(const ModelDef& model, const WeightOrigin& origin, const BackendOptions& options, bool fast)
      : model_(model),
        fast_(fast),
        prefill_steps_(step_capacity(model.info, StepPhase::prefill)),
        decode_steps_(step_capacity(model.info, StepPhase::decode)) {
    const ModelInfo& m = model.info;
    const auto start = std::chrono::steady_clock::now();
    const WeightFormat format = fast ? WeightFormat::cpu : WeightFormat::f32;
    weights_ = origin.source ? load_weights(model, *origin.source, format, sink_, options.rank, options.quantize)
                             : random_weights(model, origin.random_seed, format, sink_, options.rank, options.quantize);
    rank_ = options.rank;
    collective_ = options.collective;
    forward_ = model.make_ref_forward(weights_.table);
    info_.load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    // Without a GPU memory budget to size from, default to two sequences of the full context.
    const int32_t pages_per_seq = (m.max_context + m.page_size - 1) / m.page_size;
    kv_pages_ = options.kv_pages > 0 ? options.kv_pages : 2 * pages_per_seq;
    // The fast backend keeps dense K and V in bf16, as the GPU does (half the bytes attention reads);
    // MLA's latent rows stay fp32 (their ops are the reference's).
    kv_bf16_ = fast && m.head_dim > 0;
    const int64_t value_bytes = kv_bf16_ ? 2 : 4;
    page_bytes_ = static_cast<int64_t>(m.page_size) * m.kv_elems_per_token * value_bytes;
    check_kv_pool_fits(m, kv_pages_, page_bytes_ * m.num_layers, host_memory_available(), "CPU memory");
    kv_cache_.allocate(floats_for(static_cast<int64_t>(kv_pages_) * m.num_layers * page_bytes_), "KV cache");
    swap_pages_ = swap_pages_for(options.swap_space_bytes, page_bytes_ * m.num_layers);
    arena_.allocate(static_cast<size_t>(m.ref_arena_bytes / 4 + 1), "activations");
    rope_ = build_rope_table(m.rope, m.max_context);
    if (options.profile && m.num_routed_experts > 0) {
      expert_usage_.assign(static_cast<size_t>(m.num_layers) * m.num_routed_experts, 0);
      info_.expert_usage = expert_usage_.data();
    }

    info_.device = "CPU (" + std::to_string(parallel_threads()) + " threads" +
                   (fast ? std::string(", ") + cpu::dot_isa() + cpu::block_isa_suffix() + cpu::bf16_isa_suffix() : std::string()) +
                   ")";
    info_.weight_bytes = weights_.bytes;
    if (fast) {
      info_.decode_weight_bytes = m.decode_weight_bytes - weights_.quantized_bf16_bytes + weights_.quantized_bytes -
                                  weights_.packed_bf16_saved_bytes;
      info_.weight_formats = weight_formats_text(weights_, "fp32, other projections bf16");
    } else {
      info_.weight_formats = "fp32";
    }
    info_.kv_bytes_per_token = static_cast<int64_t>(m.kv_elems_per_token) * m.num_layers * value_bytes;
  }

  const char* name() const override { return fast_ ? "cpu" : "ref"; }
  int32_t kv_pages() const override { return kv_pages_; }
  int32_t swap_pages() const override { return swap_pages_; }

  // The swap space: [layers][swap pages][page values], like the pool's [layers][pages][page values].
  void swap_kv(std::span<const PageSwap> copies, bool to_host) override {
    if (copies.empty()) return;
    const int64_t layers = model_.info.num_layers;
    if (swap_.empty()) swap_.allocate(floats_for(layers * swap_pages_ * page_bytes_), "swap space");
    for (const PageSwap& c : copies) {
      if (c.device_page < 0 || c.device_page >= kv_pages_ || c.host_page < 0 || c.host_page >= swap_pages_) {
        fail("internal: swap of KV page ", c.device_page, " <-> host page ", c.host_page, " is outside the pools (",
             kv_pages_, ", ", swap_pages_, " pages)");
      }
      for (int64_t l = 0; l < layers; ++l) {
        char* pool = reinterpret_cast<char*>(kv_cache_.data()) + (l * kv_pages_ + c.device_page) * page_bytes_;
        char* host = reinterpret_cast<char*>(swap_.data()) + (l * swap_pages_ + c.host_page) * page_bytes_;
        if (to_host) {
          std::memcpy(host, pool, static_cast<size_t>(page_bytes_));
        } else {
          std::memcpy(pool, host, static_cast<size_t>(page_bytes_));
        }
      }
    }
  }
  const BackendInfo& info() const override { return info_; }

  StepBuffer& step_buffer(StepPhase phase) override {
    return phase == StepPhase::decode ? decode_steps_ : prefill_steps_;
  }

  void forward(const StepBatch& step) override {
    const ModelInfo& m = model_.info;
    check_step_fits(m, step);
    logits_.resize(static_cast<size_t>(step.num_logits()) * m.vocab_size);
    num_logits_ = step.num_logits();
    std::fill(expert_usage_.begin(), expert_usage_.end(), 0);
    const RefContext ctx{arena_.data(), kv_cache_.data(), kv_pages_, rope_.data(),
                         expert_usage_.empty() ? nullptr : expert_usage_.data(), rank_, collective_, fast_, kv_bf16_};
    forward_->forward(step, ctx, logits_.data());
  }

  SampleResult sample(const SampleBatch& batch) override {
    const size_t rows = batch.rows.size();
    check_logit_rows(0, static_cast<int32_t>(rows), num_logits_);
    const int32_t V = model_.info.vocab_size;
    return sample_batch_cpu(std::span<const float>(logits_.data(), rows * V), V, batch);
  }

  SampleResult logprobs(int32_t first_logit_row, std::span<const int32_t> tokens, int32_t top_n) override {
    check_logit_rows(first_logit_row, static_cast<int32_t>(tokens.size()), num_logits_);
    const int32_t V = model_.info.vocab_size;
    return logprobs_cpu(std::span<const float>(logits_.data() + static_cast<size_t>(first_logit_row) * V, tokens.size() * V),
                        V, tokens, top_n);
  }

  void copy_logits(int32_t first, int32_t count, float* out) override {
    check_logit_rows(first, count, num_logits_);
    const size_t V = model_.info.vocab_size;
    std::copy_n(logits_.data() + first * V, count * V, out);
  }

 private:
  const ModelDef& model_;
  bool fast_;
  StepBuffer prefill_steps_, decode_steps_;
  HostSink sink_;
  LoadedWeights weights_;
  std::unique_ptr<RefForward> forward_;
  int32_t kv_pages_ = 0;
  int32_t swap_pages_ = 0;
  bool kv_bf16_ = false;     // the KV pages hold bf16 (RefContext::kv_bf16)
  int64_t page_bytes_ = 0;   // one layer's part of a KV page
  ZeroedFloats kv_cache_, arena_;
  std::vector<float> rope_, logits_;
  ZeroedFloats swap_;  // --swap-space, taken at the first swap-out
  std::vector<uint8_t> expert_usage_;  // with --profile (MoE): the routing's flags
  int32_t num_logits_ = 0;
  int32_t rank_ = 0;                    // tensor-parallel rank (0 without)
  Collective* collective_ = nullptr;    // the rank group's sums and gathers
  BackendInfo info_;
};

}  // namespace

std::unique_ptr<Backend> make_ref_backend(const ModelDef& model, const WeightOrigin& weights,
                                          const BackendOptions& options) {
  return std::make_unique<CpuBackend>(model, weights, options, false);
}

std::unique_ptr<Backend> make_cpu_backend(const ModelDef& model, const WeightOrigin& weights,
                                          const BackendOptions& options) {
  return std::make_unique<CpuBackend>(model, weights, options, true);
}

}  // namespace kiln
