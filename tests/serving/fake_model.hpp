// A deterministic stand-in for a model forward, for testing the serving loop without a model.
// It consumes a StepBatch the way a real forward does: every row's token goes into its KV slot
// (slot_mapping), then every logit row reads its sequence's whole context back through the block
// table. Its logits depend only on the context's token ids, so a wrong slot, a wrong block table or
// a wrongly shared prefix page changes the output.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/core/step_batch.hpp"

namespace kiln::testing {

class FakeModel {
 public:
  FakeModel(int32_t num_kv_slots, int32_t page_size, int32_t vocab_size);

  int32_t vocab_size() const { return vocab_size_; }
  // Where a step of `phase` is built (large enough for every test's scheduler settings; a block
  // table row can name every page of the pool).
  StepBuffer& step_buffer(StepPhase phase) { return phase == StepPhase::decode ? decode_steps_ : prefill_steps_; }
  // [batch.num_logits() x vocab_size] logits. Throws kiln::Error when a slot or block table entry
  // is out of range or a context position reads a slot holding another position.
  std::vector<float> forward(const StepBatch& batch);
  // The logits after this context, computed directly.
  std::vector<float> logits_for(std::span<const int32_t> context) const;
  // A step's KV page copies to and from a host swap space (as Backend::swap_kv); a swapped-in page
  // that was not swapped out with the same contents then shows as a wrong slot.
  void swap(std::span<const PageSwap> copies, bool to_host);

 private:
  struct Slot {
    int32_t token = -1;
    int32_t position = -1;
  };
  int32_t page_size_;
  int32_t vocab_size_;
  std::vector<Slot> kv_;
  std::vector<Slot> swap_;  // host pages, grown as they are named
  StepBuffer prefill_steps_, decode_steps_;
};

}  // namespace kiln::testing
