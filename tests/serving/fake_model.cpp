#include "fake_model.hpp"

#include <algorithm>

#include "runtime/core/error.hpp"
#include "runtime/core/hash.hpp"

namespace kiln::testing {

namespace {

StepCapacity capacity(int32_t num_kv_slots, int32_t page_size) {
  constexpr int32_t kMaxTokens = 8192, kMaxSeqs = 512;
  return {kMaxTokens, kMaxSeqs, kMaxTokens + kMaxSeqs, (num_kv_slots + page_size - 1) / page_size};
}

}  // namespace

FakeModel::FakeModel(int32_t num_kv_slots, int32_t page_size, int32_t vocab_size)
    : page_size_(page_size),
      vocab_size_(vocab_size),
      kv_(num_kv_slots),
      prefill_steps_(capacity(num_kv_slots, page_size)),
      decode_steps_(capacity(num_kv_slots, page_size)) {}

std::vector<float> FakeModel::logits_for(std::span<const int32_t> context) const {
  uint64_t h = 0x243F6A8885A308D3ull;
  for (int32_t t : context) h = mix64(h ^ static_cast<uint32_t>(t));
  std::vector<float> logits(vocab_size_);
  for (int32_t v = 0; v < vocab_size_; ++v) {
    // Uniform in [-4, 4) with 2^-20 resolution: ties are rare but possible, like real logits.
    const uint64_t r = mix64(h + kGoldenGamma * static_cast<uint64_t>(v + 1));
    logits[v] = static_cast<float>(static_cast<double>(r >> 44) / 1048576.0 * 8.0 - 4.0);
  }
  return logits;
}

std::vector<float> FakeModel::forward(const StepBatch& batch) {
  const auto num_slots = static_cast<int32_t>(kv_.size());
  for (int32_t row = 0; row < batch.num_tokens(); ++row) {
    const int32_t slot = batch.slot_mapping[row];
    if (slot < 0 || slot >= num_slots) fail("fake model: row ", row, " writes slot ", slot, " of ", num_slots);
    kv_[slot] = Slot{batch.token_ids[row], batch.positions[row]};
  }
  std::vector<float> out;
  out.reserve(static_cast<size_t>(batch.num_logits()) * vocab_size_);
  std::vector<int32_t> context;
  for (int32_t row : batch.logit_rows) {
    const auto seq = static_cast<int32_t>(
        std::upper_bound(batch.query_start.begin(), batch.query_start.end(), row) - batch.query_start.begin() - 1);
    const int32_t last = batch.positions[row];
    if (last + 1 > batch.context_len[seq]) {
      fail("fake model: logit row ", row, " at position ", last, " is beyond context_len ", batch.context_len[seq]);
    }
    context.clear();
    for (int32_t pos = 0; pos <= last; ++pos) {
      const int32_t entry = pos / page_size_;
      if (entry >= batch.max_pages_per_seq) fail("fake model: position ", pos, " is beyond the block table");
      const int32_t page = batch.block_tables[static_cast<size_t>(seq) * batch.max_pages_per_seq + entry];
      const int32_t slot = page * page_size_ + pos % page_size_;
      if (slot < 0 || slot >= num_slots || kv_[slot].position != pos) {
        fail("fake model: sequence ", seq, " position ", pos, " reads slot ", slot, " holding position ",
             slot >= 0 && slot < num_slots ? kv_[slot].position : -1);
      }
      context.push_back(kv_[slot].token);
    }
    const std::vector<float> logits = logits_for(context);
    out.insert(out.end(), logits.begin(), logits.end());
  }
  return out;
}

void FakeModel::swap(std::span<const PageSwap> copies, bool to_host) {
  for (const PageSwap& c : copies) {
    const size_t device = static_cast<size_t>(c.device_page) * page_size_, host = static_cast<size_t>(c.host_page) * page_size_;
    if (c.device_page < 0 || device + page_size_ > kv_.size() || c.host_page < 0) {
      fail("fake model: swap of page ", c.device_page, " <-> host page ", c.host_page, " is out of range");
    }
    if (swap_.size() < host + page_size_) swap_.resize(host + page_size_);
    for (int32_t i = 0; i < page_size_; ++i) {
      if (to_host) {
        swap_[host + i] = kv_[device + i];
      } else {
        kv_[device + i] = swap_[host + i];
      }
    }
  }
}

}  // namespace kiln::testing
