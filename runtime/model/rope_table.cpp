#include "runtime/model/rope_table.hpp"

#include <algorithm>
#include <cmath>

#include "runtime/core/error.hpp"

namespace kiln {

namespace {

// HF's get_mscale: the YaRN magnitude correction for a context extension `scale`.
double yarn_mscale(double scale, double mscale) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

// Mirrors torch's float32 arithmetic of compute_default_rope_parameters:
// 1 / base ** (arange(0, dim, 2).float() / dim), all in fp32.
std::vector<float> default_inv_freq(double theta, int32_t dim) {
  std::vector<float> inv(dim / 2);
  for (int32_t i = 0; i < dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    inv[i] = 1.0f / std::pow(static_cast<float>(theta), exponent);
  }
  return inv;
}

// HF _compute_llama3_parameters: long wavelengths divided by `factor`, short ones kept, the band in
// between blended.
void apply_llama3(const RopeInfo& r, std::vector<float>& inv) {
  const float factor = static_cast<float>(r.factor);
  const float low = static_cast<float>(r.low_freq_factor), high = static_cast<float>(r.high_freq_factor);
  const float old_len = static_cast<float>(r.original_max_position_embeddings);
  const float low_freq_wavelen = old_len / low, high_freq_wavelen = old_len / high;
  for (float& f : inv) {
    const float wavelen = static_cast<float>(2 * M_PI) / f;
    float scaled = wavelen > low_freq_wavelen ? f / factor : f;
    const float smooth = (old_len / wavelen - low) / (high - low);
    const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
    if (medium) scaled = (1 - smooth) * scaled / factor + smooth * scaled;
    f = scaled;
  }
}

// HF _compute_yarn_parameters: interpolated and extrapolated frequencies blended by a linear ramp
// over the dimensions between the beta_fast and beta_slow correction points (truncated).
void apply_yarn(const RopeInfo& r, std::vector<float>& inv) {
  const int32_t dim = r.rotary_dim;
  const double base = r.theta;
  auto correction_dim = [&](double rotations) {
    return (dim * std::log(r.original_max_position_embeddings / (rotations * 2 * M_PI))) / (2 * std::log(base));
  };
  double low = std::floor(correction_dim(r.beta_fast));
  double high = std::ceil(correction_dim(r.beta_slow));
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // as HF: avoid a division by zero
  const float factor = static_cast<float>(r.factor);
  for (int32_t i = 0; i < dim / 2; ++i) {
    const float pos_freq = std::pow(static_cast<float>(base), static_cast<float>(2 * i) / static_cast<float>(dim));
    const float extrapolation = 1.0f / pos_freq;
    const float interpolation = 1.0f / (factor * pos_freq);
    const float ramp = std::clamp(static_cast<float>((i - low) / (high - low)), 0.0f, 1.0f);
    const float extrapolation_factor = 1.0f - ramp;
    inv[i] = interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor;
  }
}

}  // namespace

std::vector<float> rope_inv_freq(const RopeInfo& rope) {
  if (rope.rotary_dim <= 0 || rope.rotary_dim % 2 != 0) fail("rope: rotary_dim ", rope.rotary_dim, " must be even");
  std::vector<float> inv = default_inv_freq(rope.theta, rope.rotary_dim);
  if (rope.kind == RopeKind::llama3) apply_llama3(rope, inv);
  if (rope.kind == RopeKind::yarn) apply_yarn(rope, inv);
  return inv;
}

double rope_attention_factor(const RopeInfo& rope) {
  if (rope.kind != RopeKind::yarn) return 1.0;
  if (rope.mscale != 0 && rope.mscale_all_dim != 0) {
    return yarn_mscale(rope.factor, rope.mscale) / yarn_mscale(rope.factor, rope.mscale_all_dim);
  }
  return yarn_mscale(rope.factor, 1.0);
}

double yarn_softmax_scale_factor(const RopeInfo& rope) {
  if (rope.kind != RopeKind::yarn || rope.mscale_all_dim == 0) return 1.0;
  const double m = yarn_mscale(rope.factor, rope.mscale_all_dim);
  return m * m;
}

std::vector<float> build_rope_table(const RopeInfo& rope, int32_t positions) {
  const std::vector<float> inv = rope_inv_freq(rope);
  const float attention_factor = static_cast<float>(rope_attention_factor(rope));
  const size_t half = inv.size();
  std::vector<float> table(static_cast<size_t>(positions) * half * 2);
  for (int32_t p = 0; p < positions; ++p) {
    for (size_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(p) * inv[i];  // fp32, as HF's inv_freq @ positions
      table[(p * half + i) * 2 + 0] = static_cast<float>(std::cos(static_cast<double>(angle))) * attention_factor;
      table[(p * half + i) * 2 + 1] = static_cast<float>(std::sin(static_cast<double>(angle))) * attention_factor;
    }
  }
  return table;
}

std::vector<float> rope_freq_divisors(const RopeInfo& rope) {
  RopeInfo plain = rope;
  plain.kind = RopeKind::standard;
  const std::vector<float> base = rope_inv_freq(plain), scaled = rope_inv_freq(rope);
  std::vector<float> divisors(base.size());
  for (size_t i = 0; i < base.size(); ++i) divisors[i] = base[i] / scaled[i];
  return divisors;
}

}  // namespace kiln
