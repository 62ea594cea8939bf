#include "runtime/serving/sampler_cpu.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <optional>

#include "runtime/core/error.hpp"

namespace kiln {
namespace {

// sampling_exp is ten fmas per token. Without -mfma they are glibc calls (software fmaf on old
// CPUs, a call even on new ones); an FMA clone of the per-token loops, picked at load time, is
// about 20x faster and gives the same bits (fma is exactly rounded either way).
#if defined(__x86_64__) && defined(__GNUC__)
#define KILN_FMA_CLONES __attribute__((target_clones("fma", "default")))
#else
#define KILN_FMA_CLONES
#endif

// Weight keys of a row; returns their total mass.
KILN_FMA_CLONES uint64_t weight_keys(std::span<const float> x, float max_logit, float inv_temperature,
                                     uint32_t* keys) {
  uint64_t total = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    keys[i] = float_bits(sampling_weight(x[i], max_logit, inv_temperature));
    total += key_mass(keys[i]);
  }
  return total;
}

// The row's largest logit and the lowest id that holds it, or nullopt where a logit is NaN or
// infinite. First the largest and the bad bits over 16 running lanes the compiler's vectors take,
// then the first id equal to it: a branch per logit and a load that waited on the last compare
// took about 8x as long (Llama-3's 128,256 logits: ~1% of a 1B model's CPU decode step).
struct Largest {
  int32_t id;
  float logit;
};
std::optional<Largest> largest_logit(std::span<const float> x) {
  constexpr size_t kLanes = 16;
  float top[kLanes];
  uint32_t bad[kLanes] = {};
  std::fill(top, top + kLanes, -INFINITY);
  const auto nonfinite = [](float v) { return (std::bit_cast<uint32_t>(v) & 0x7F800000u) == 0x7F800000u; };
  size_t i = 0;
  for (; i + kLanes <= x.size(); i += kLanes) {
    for (size_t l = 0; l < kLanes; ++l) {
      const float v = x[i + l];
      bad[l] |= nonfinite(v);
      top[l] = v > top[l] ? v : top[l];
    }
  }
  float largest = -INFINITY;
  uint32_t any_bad = 0;
  for (size_t l = 0; l < kLanes; ++l) {
    largest = top[l] > largest ? top[l] : largest;
    any_bad |= bad[l];
  }
  for (; i < x.size(); ++i) {
    any_bad |= nonfinite(x[i]);
    largest = x[i] > largest ? x[i] : largest;
  }
  if (any_bad) return std::nullopt;
  const auto at = std::find(x.begin(), x.end(), largest);  // the lowest id wins ties
  return Largest{static_cast<int32_t>(at - x.begin()), largest};
}

// Σ exp(x_i - max), for the log-softmax.
KILN_FMA_CLONES double exp_sum(std::span<const float> x, float max_logit) {
  double sum = 0.0;
  for (float v : x) sum += sampling_exp(v - max_logit);
  return sum;
}

// The largest of `candidates` (keys >= floor_key) at which `above` plus the weight of the
// candidates >= it reaches `required`, or 0 when all of them together stay below it. Sorts them.
template <typename Weight>
uint32_t threshold_by_sort(std::vector<uint32_t>& candidates, uint64_t above, uint64_t required, Weight weight) {
  std::sort(candidates.begin(), candidates.end(), std::greater<>());
  uint64_t sum = above;
  for (size_t i = 0; i < candidates.size();) {
    const uint32_t key = candidates[i];
    for (; i < candidates.size() && candidates[i] == key; ++i) sum += weight(key);
    if (sum >= required) return key;  // the whole tie group at `key` is in
  }
  return 0;
}

// Largest key τ >= floor_key with Σ weight(key >= τ) >= required, or 0 when the keys >= floor_key
// together stay below `required` (then τ lies below floor_key, and floor_key is the tighter
// threshold). Weight 1 per token gives the top-k threshold, the token's mass the top-p one.
// One pass buckets the weight by the keys' top bits; only the bucket where the running sum
// crosses `required` is sorted. Small vocabularies sort every key instead: the histogram's
// 2^15 buckets cost more to clear and scan than sorting a thousand keys.
template <typename Weight>
uint32_t upper_set_threshold(const std::vector<uint32_t>& keys, uint32_t floor_key, uint64_t required,
                             Weight weight) {
  constexpr size_t kSortAllBelow = 1024;
  if (keys.size() < kSortAllBelow) {
    std::vector<uint32_t> candidates;
    for (uint32_t key : keys) {
      if (key >= floor_key) candidates.push_back(key);
    }
    return threshold_by_sort(candidates, 0, required, weight);
  }
  constexpr int kBucketShift = 15;  // keys < 2^30: 2^15 buckets, each 1/128 of a binade wide
  // The 256 KiB histogram is kept per thread: allocated per call, it was mapped and unmapped for
  // every top-k / top-p row (and made sampling 40x slower under AddressSanitizer).
  thread_local std::vector<uint64_t> bucket_weight;
  bucket_weight.assign(size_t{1} << (30 - kBucketShift), 0);
  for (uint32_t key : keys) {
    if (key >= floor_key) bucket_weight[key >> kBucketShift] += weight(key);
  }
  uint64_t above = 0;  // weight of the buckets above the current one
  for (size_t b = bucket_weight.size(); b-- > 0;) {
    if (above + bucket_weight[b] < required) {
      above += bucket_weight[b];
      continue;
    }
    std::vector<uint32_t> bucket;
    for (uint32_t key : keys) {
      if (key >= floor_key && (key >> kBucketShift) == b) bucket.push_back(key);
    }
    return threshold_by_sort(bucket, above, required, weight);
  }
  return 0;
}

// max and log Σ exp(x - max) of a row: the log-softmax's two constants.
struct LogSoftmax {
  float max_logit;
  double log_sum;
  float logprob(float x) const { return static_cast<float>(static_cast<double>(x - max_logit) - log_sum); }
};
LogSoftmax log_softmax_of(std::span<const float> x) {
  float m = x[0];
  for (float v : x) m = v > m ? v : m;
  return LogSoftmax{m, std::log(exp_sum(x, m))};
}

}  // namespace

float token_logprob_cpu(std::span<const float> logits, int32_t token) {
  return log_softmax_of(logits).logprob(logits[token]);
}

std::vector<TokenLogprob> top_logprobs_cpu(std::span<const float> logits, int32_t n) {
  const LogSoftmax ls = log_softmax_of(logits);
  std::vector<int32_t> ids(logits.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
  n = std::min<int32_t>(n, static_cast<int32_t>(ids.size()));
  // Highest logit first; the lower id first among equals (the CUDA kernel's order too).
  std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  std::vector<TokenLogprob> out;
  for (int32_t i = 0; i < n; ++i) out.push_back(TokenLogprob{ids[i], ls.logprob(logits[ids[i]])});
  return out;
}

SampleResult sample_batch_cpu(std::span<const float> logits, int32_t vocab_size, const SampleBatch& batch) {
  const size_t rows = batch.rows.size();
  if (vocab_size <= 0 || logits.size() != rows * static_cast<size_t>(vocab_size)) {
    fail("sample_batch_cpu: logits hold ", logits.size(), " values; expected ", rows, " rows x ", vocab_size, " tokens");
  }
  batch.check(vocab_size, "sample_batch_cpu");
  SampleResult result;
  result.outputs.reserve(rows);
  result.top.assign(rows * kMaxTopLogprobs, TokenLogprob{});
  std::vector<float> edited;
  for (size_t r = 0; r < rows; ++r) {
    const std::span<const float> raw = logits.subspan(r * vocab_size, vocab_size);
    SamplerRow row = batch.rows[r];
    const bool want_logprob = row.want_logprob != 0;
    row.want_logprob = 0;  // from the raw row, below
    const std::span<const LogitEdit> edits = batch.row_edits(r);
    const std::span<const TokenMaskWord> mask = batch.row_mask(r, vocab_size);
    SampleOutput out;
    if (edits.empty() && mask.empty()) {
      out = sample_row_cpu(raw, row);
    } else {
      edited.assign(raw.begin(), raw.end());
      for (const LogitEdit& e : edits) edited[e.token] = apply_logit_edit(edited[e.token], e);
      if (!mask.empty()) {
        for (int32_t t = 0; t < vocab_size; ++t) {
          if (!token_allowed(mask.data(), t)) edited[t] = kBannedLogit;
        }
      }
      out = sample_row_cpu(edited, row);
    }
    if (out.status == kSampleOk && (want_logprob || row.top_logprobs > 0)) {
      if (want_logprob) out.logprob = token_logprob_cpu(raw, out.token);
      if (row.top_logprobs > 0) {
        const std::vector<TokenLogprob> top = top_logprobs_cpu(raw, std::min(row.top_logprobs, kMaxTopLogprobs));
        std::copy(top.begin(), top.end(), result.top.begin() + r * kMaxTopLogprobs);
      }
    }
    result.outputs.push_back(out);
  }
  return result;
}

SampleResult logprobs_cpu(std::span<const float> logits, int32_t vocab_size, std::span<const int32_t> tokens, int32_t top_n) {
  if (vocab_size <= 0 || logits.size() != tokens.size() * static_cast<size_t>(vocab_size)) {
    fail("logprobs_cpu: logits hold ", logits.size(), " values; expected ", tokens.size(), " rows x ", vocab_size, " tokens");
  }
  top_n = std::clamp(top_n, 0, kMaxTopLogprobs);
  SampleResult result;
  result.top.assign(tokens.size() * kMaxTopLogprobs, TokenLogprob{});
  for (size_t r = 0; r < tokens.size(); ++r) {
    const std::span<const float> row = logits.subspan(r * vocab_size, vocab_size);
    SampleOutput out{tokens[r], 0.0f, kSampleOk};
    for (float x : row) {
      if (!std::isfinite(x)) out.status = kSampleBadLogits;
    }
    if (out.status == kSampleOk) {
      out.logprob = token_logprob_cpu(row, tokens[r]);
      const std::vector<TokenLogprob> top = top_logprobs_cpu(row, top_n);
      std::copy(top.begin(), top.end(), result.top.begin() + r * kMaxTopLogprobs);
    }
    result.outputs.push_back(out);
  }
  return result;
}

SampleOutput sample_row_cpu(std::span<const float> x, const SamplerRow& row, SampleTrace* trace) {
  const auto vocab = static_cast<int64_t>(x.size());
  if (vocab == 0 || vocab > kMaxSamplerVocab) {
    fail("sample_row_cpu: vocabulary size ", vocab, " is outside [1, ", kMaxSamplerVocab, "]");
  }

  const std::optional<Largest> top = largest_logit(x);
  if (!top) return SampleOutput{-1, 0.0f, kSampleBadLogits};
  const int32_t argmax = top->id;
  const float max_logit = top->logit;

  SampleOutput out;
  if (row_is_greedy(row)) {
    out.token = argmax;
  } else {
    const float inv_temperature = div_rn(1.0f, row.temperature);
    std::vector<uint32_t> keys(vocab);
    const uint64_t total = weight_keys(x, max_logit, inv_temperature, keys.data());

    uint32_t threshold = min_p_threshold(row);
    if (row_uses_top_k(row, static_cast<int32_t>(vocab))) {
      threshold = std::max(threshold, upper_set_threshold(keys, threshold, static_cast<uint64_t>(row.top_k),
                                                          [](uint32_t) { return uint64_t{1}; }));
    }
    if (row_uses_top_p(row)) {
      threshold = std::max(threshold, upper_set_threshold(keys, threshold, top_p_required_mass(row.top_p, total),
                                                          [](uint32_t key) { return key_mass(key); }));
    }

    uint64_t kept = 0;
    for (uint32_t key : keys) {
      if (key >= threshold) kept += key_mass(key);
    }
    const uint64_t target = sample_target(philox_random64(row.seed, row.counter), kept);
    uint64_t before = 0;
    for (int32_t i = 0; i < vocab; ++i) {
      if (keys[i] < threshold) continue;
      const uint64_t through = before + key_mass(keys[i]);
      if (through > target) {
        out.token = i;
        if (trace) *trace = SampleTrace{threshold, total, kept, target, before, through};
        break;
      }
      before = through;
    }
    // The top token always has key = bits(1.0f) >= threshold and mass 2^40, so kept > target and
    // the scan ends inside the vocabulary.
  }

  if (row.want_logprob) {
    const double sum = exp_sum(x, max_logit);
    out.logprob = static_cast<float>(static_cast<double>(x[out.token] - max_logit) - std::log(sum));
  }
  return out;
}

std::vector<SampleOutput> sample_cpu(std::span<const float> logits, int32_t vocab_size,
                                     std::span<const SamplerRow> rows) {
  if (vocab_size <= 0 || logits.size() != rows.size() * static_cast<size_t>(vocab_size)) {
    fail("sample_cpu: logits hold ", logits.size(), " values; expected ", rows.size(), " rows x ",
         vocab_size, " tokens");
  }
  std::vector<SampleOutput> out;
  out.reserve(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    out.push_back(sample_row_cpu(logits.subspan(r * vocab_size, vocab_size), rows[r]));
  }
  return out;
}

}  // namespace kiln
