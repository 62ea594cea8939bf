// The tensor-parallel backend: one backend per rank (the rank's build of the model, its slices of
// the weights, its share of every KV page), driven in lockstep. The engine writes each step once,
// into rank 0's staging; the other ranks get a copy of its used prefix (the arrays sit at the same
// offsets in every rank's staging), then every rank runs the step, meeting in the collectives the
// generated forward calls. Rank 0's logits are whole after the forward's all-gather, so only rank
// 0 samples.
//
// Why the other ranks' staging may be rewritten once rank 0's sample() returns: that call waits
// for rank 0's stream, which is past the step's last all-gather, which completes only when every
// rank's stream reached it, i.e. after each rank's upload of that staging.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/engine/backend.hpp"
#include "runtime/engine/rank_threads.hpp"
#include "runtime/parallel/cpu_collective.hpp"
#include "runtime/parallel/nccl_collective.hpp"

namespace kiln {

namespace {

const ModelDef& rank_def(const ModelDef& model, int32_t ranks) {
  std::string built;
  for (const TensorParallelDef& tp : model.tensor_parallel) {
    if (tp.ranks == ranks) return tp.rank_def();
    built += ", " + std::to_string(tp.ranks);
  }
  fail("--tensor-parallel-size ", ranks, ": ", model.info.name, " was built for 1", built,
       " (build.tensor_parallel in ", model.info.source, " lists the sizes built; regenerate with the size added)");
}

class TensorParallelBackend final : public Backend {
 public:
  TensorParallelBackend(const ModelDef& model, int32_t ranks, bool cuda, const WeightOrigin& origin,
                        const BackendOptions& options)
      : rank_model_(rank_def(model, ranks)), cuda_(cuda) {
    if (cuda) {
      const int32_t gpus = cuda_device_count();
      if (gpus < ranks) fail("--tensor-parallel-size ", ranks, " needs ", ranks, " GPUs; ", gpus, " are visible");
      std::vector<int> devices(ranks);
      for (int32_t r = 0; r < ranks; ++r) devices[r] = r;
      nccl_ = std::make_unique<NcclGroup>(devices);
      // Decode graphs gather max_batch rows of logits; larger prefill gathers go in chunks.
      nccl_->reserve_gather(static_cast<int64_t>(model.info.max_batch) * model.info.vocab_size);
    } else {
      cpu_ = std::make_unique<CpuCollectiveGroup>(ranks);
    }
    threads_ = std::make_unique<RankThreads>(ranks, [this](const std::string& why) { abort(why); });
    backends_.resize(ranks);
    // Every rank loads and warms up at once: warm-up runs the forward, whose collectives need all.
    threads_->run_all([&](int32_t r) {
      BackendOptions rank_options = options;
      rank_options.rank = r;
      rank_options.device = r;
      rank_options.collective = collective(r);
      backends_[r] = cuda ? make_cuda_backend(rank_model_, origin, rank_options)
                          : make_ref_backend(rank_model_, origin, rank_options);
    });
    const BackendInfo& first = backends_[0]->info();
    info_ = first;
    info_.device = std::to_string(ranks) + " × " + first.device + " (tensor parallel)";
    info_.weight_bytes = info_.kv_bytes_per_token = 0;
    info_.load_seconds = 0;
    info_.ranks = ranks;
    info_.rank_decode_weight_bytes = rank_model_.info.decode_weight_bytes;
    if (first.expert_usage != nullptr) {
      expert_usage_.assign(static_cast<size_t>(rank_model_.info.num_layers) * rank_model_.info.num_routed_experts, 0);
      info_.expert_usage = expert_usage_.data();
    }
    kv_pages_ = backends_[0]->kv_pages();
    for (const auto& b : backends_) {
      info_.weight_bytes += b->info().weight_bytes;
      info_.kv_bytes_per_token += b->info().kv_bytes_per_token;
      info_.load_seconds = std::max(info_.load_seconds, b->info().load_seconds);
      kv_pages_ = std::min(kv_pages_, b->kv_pages());  // every rank holds its share of each page
    }
  }

  ~TensorParallelBackend() override {
    // Each rank's backend is freed on its own thread (its GPU current there).
    try {
      threads_->run_all([&](int32_t r) { backends_[r].reset(); });
    } catch (...) {
    }
  }

  const char* name() const override { return cuda_ ? "cuda" : "ref"; }
  int32_t kv_pages() const override { return kv_pages_; }
  int32_t swap_pages() const override {
    int32_t pages = backends_[0]->swap_pages();
    for (const auto& b : backends_) pages = std::min(pages, b->swap_pages());  // each rank swaps its share
    return pages;
  }
  void swap_kv(std::span<const PageSwap> copies, bool to_host) override {
    threads_->run_all([&](int32_t r) { backends_[r]->swap_kv(copies, to_host); });
  }
  const BackendInfo& info() const override { return info_; }
  StepBuffer& step_buffer(StepPhase phase) override { return backends_[0]->step_buffer(phase); }

  void forward(const StepBatch& step) override {
    StepBuffer& source = backends_[0]->step_buffer(step.phase);
    const int64_t ints = source.used_ints(step);
    threads_->run_all([&](int32_t r) {
      if (r == 0) return backends_[0]->forward(step);
      StepBuffer& mine = backends_[r]->step_buffer(step.phase);
      std::memcpy(mine.data(), source.data(), static_cast<size_t>(ints) * sizeof(int32_t));
      StepBatch view = mine.view(step.phase, step.num_tokens(), step.num_seqs(), step.num_logits());
      view.max_pages_per_seq = step.max_pages_per_seq;
      view.num_samples = step.num_samples;
      backends_[r]->forward(view);
    });
  }

  SampleResult sample(const SampleBatch& batch) override {
    SampleResult result = backends_[0]->sample(batch);
    // The step's routing (--profile): each rank flagged the chosen experts it holds. Rank 0's
    // sample() has waited for the step, whose all-reduces every rank took part in.
    if (!expert_usage_.empty()) {
      std::fill(expert_usage_.begin(), expert_usage_.end(), 0);
      for (const auto& b : backends_) {
        const uint8_t* flags = b->info().expert_usage;
        for (size_t i = 0; i < expert_usage_.size(); ++i) expert_usage_[i] |= flags[i];
      }
    }
    return result;
  }
  SampleResult logprobs(int32_t first_logit_row, std::span<const int32_t> tokens, int32_t top_n) override {
    return backends_[0]->logprobs(first_logit_row, tokens, top_n);
  }
  void copy_logits(int32_t first, int32_t count, float* out) override {
    backends_[0]->copy_logits(first, count, out);
  }

 private:
  Collective* collective(int32_t r) {
    return nccl_ ? static_cast<Collective*>(&nccl_->rank(r)) : &cpu_->rank(r);
  }
  void abort(const std::string& why) {
    if (nccl_) nccl_->abort(why);
    if (cpu_) cpu_->abort(why);
  }

  const ModelDef& rank_model_;
  bool cuda_;
  std::unique_ptr<NcclGroup> nccl_;
  std::unique_ptr<CpuCollectiveGroup> cpu_;
  std::unique_ptr<RankThreads> threads_;
  std::vector<std::unique_ptr<Backend>> backends_;
  int32_t kv_pages_ = 0;
  BackendInfo info_;
  std::vector<uint8_t> expert_usage_;  // --profile on a MoE model: the ranks' flags together
};

}  // namespace

std::unique_ptr<Backend> make_tensor_parallel_backend(const ModelDef& model, int32_t ranks, bool cuda,
                                                      const WeightOrigin& weights, const BackendOptions& options) {
  if (ranks < 2) fail("internal: a tensor-parallel backend of ", ranks, " rank");
  return std::make_unique<TensorParallelBackend>(model, ranks, cuda, weights, options);
}

}  // namespace kiln
