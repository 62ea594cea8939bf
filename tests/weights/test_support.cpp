#include "test_support.hpp"

#include "runtime/core/dtype.hpp"
#include "runtime/weights/quant_repack.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>
#include <stdexcept>

namespace kiln::test {

TempDir::TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "kiln-test-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + pattern);
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void write_file(const std::string& path, std::span<const std::byte> bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

void write_file(const std::string& path, std::string_view text) {
  write_file(path, std::as_bytes(std::span(text.data(), text.size())));
}

std::optional<std::string> cached_smollm2() {
  std::filesystem::path cache;
  if (const char* env = std::getenv("KILN_CACHE"); env != nullptr && *env != '\0') {
    cache = env;
  } else if (const char* home = std::getenv("HOME"); home != nullptr) {
    cache = std::filesystem::path(home) / ".cache" / "kiln";
  } else {
    return std::nullopt;
  }
  const std::filesystem::path file = cache / "SmolLM2-135M-Instruct.Q4_1.gguf";
  if (std::filesystem::is_regular_file(file)) return file.string();
  return std::nullopt;
}

std::vector<float> permute_rows_like_llama_cpp(const std::vector<float>& hf, int64_t rows, int64_t cols, int64_t heads) {
  const int64_t head_dim = rows / heads, half = head_dim / 2;
  std::vector<float> out(hf.size());
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < half; ++i) {
      for (int64_t s = 0; s < 2; ++s) {
        std::copy_n(hf.begin() + (h * head_dim + s * half + i) * cols, cols, out.begin() + (h * head_dim + 2 * i + s) * cols);
      }
    }
  }
  return out;
}

std::vector<std::byte> random_scaled_blocks(size_t block_bytes, int64_t rows, int64_t k, uint32_t seed,
                                            int64_t block_values) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.001f, 0.1f);
  const size_t blocks = static_cast<size_t>(rows * k / block_values);
  std::vector<std::byte> out(blocks * block_bytes);
  for (size_t b = 0; b < blocks; ++b) {
    const uint16_t d = f32_to_f16(scale(rng));
    std::memcpy(out.data() + b * block_bytes, &d, 2);
    for (size_t i = 2; i < block_bytes; ++i) out[b * block_bytes + i] = std::byte(static_cast<uint8_t>(byte(rng)));
  }
  return out;
}

std::vector<std::byte> random_gguf_blocks(GgmlType type, int64_t rows, int64_t k, uint32_t seed) {
  const size_t block_bytes = ggml_block_bytes(type);
  std::vector<std::byte> out =
      random_scaled_blocks(block_bytes, rows, k, seed, static_cast<int64_t>(ggml_block_size(type)));
  if (type == GgmlType::Q4_1 || type == GgmlType::Q5_1) {
    // m = -d · u, u in [0, 16) (Q5_1: [0, 32)) from the random byte there: a block's values span zero
    const float per_byte = type == GgmlType::Q4_1 ? 1.0f / 16.0f : 1.0f / 8.0f;
    for (size_t b = 0; b < out.size(); b += block_bytes) {
      uint16_t d;
      std::memcpy(&d, out.data() + b, 2);
      const uint16_t m = f32_to_f16(-f16_to_f32(d) * static_cast<float>(static_cast<uint8_t>(out[b + 2])) * per_byte);
      std::memcpy(out.data() + b + 2, &m, 2);
    }
  }
  if (type == GgmlType::Q4_K || type == GgmlType::Q5_K) {
    for (size_t b = 0; b < out.size(); b += block_bytes) {
      out[b + 2] = std::byte{0x1F};  // dmin: fp16 0.0100 (0x211F); the sub-blocks' 6-bit mins vary
      out[b + 3] = std::byte{0x21};
    }
  }
  if (type == GgmlType::Q6_K || type == GgmlType::Q3_K) {
    // d ends the block: the finite scale drawn for its first bytes (quants, or Q3_K's third bits, too)
    for (size_t b = 0; b < out.size(); b += block_bytes) std::memcpy(out.data() + b + block_bytes - 2, out.data() + b, 2);
  }
  if (type == GgmlType::Q2_K) {  // d, dmin end the block: the drawn scale, and dmin as Q4_K's
    for (size_t b = 0; b < out.size(); b += block_bytes) {
      std::memcpy(out.data() + b + block_bytes - 4, out.data() + b, 2);
      out[b + block_bytes - 2] = std::byte{0x1F};
      out[b + block_bytes - 1] = std::byte{0x21};
    }
  }
  return out;
}

uint8_t random_finite_e4m3(std::mt19937& rng) {
  uint8_t v;
  do v = static_cast<uint8_t>(std::uniform_int_distribution<int>(0, 255)(rng)); while ((v & 0x7F) == 0x7F);
  return v;
}

Fp8Matrix random_fp8_matrix(int64_t n, int64_t k, uint32_t seed, bool one_scale) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> exponent(-12.0f, -4.0f);
  Fp8Matrix m{std::vector<std::byte>(static_cast<size_t>(matrix_bytes(MatrixFormat::fp8, n, k)), std::byte{0}),
              std::vector<float>(static_cast<size_t>(n * k))};
  std::vector<float> scales(static_cast<size_t>((n + kFp8BlockRows - 1) / kFp8BlockRows * fp8_scale_cols(k)));
  for (float& s : scales) s = std::exp2(exponent(rng));
  if (one_scale) {
    std::fill(scales.begin(), scales.end(), scales[0]);
    m.one_scale = scales[0];
  }
  std::vector<uint8_t> codes(static_cast<size_t>(k));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      const uint8_t v = random_finite_e4m3(rng);
      codes[c] = v;
      const float scale = scales[(r / kFp8BlockRows) * fp8_scale_cols(k) + c / kFp8BlockCols];
      m.values[r * k + c] = f8e4m3_to_f32(v) * scale;
    }
    repack_fp8_row(codes, n, k, r, m.matrix.data());
    if (r % kFp8BlockRows == 0) {
      for (int64_t j = 0; j < fp8_scale_cols(k); ++j) {
        set_fp8_scale(m.matrix.data(), n, k, r, j, scales[(r / kFp8BlockRows) * fp8_scale_cols(k) + j]);
      }
    }
  }
  return m;
}

}  // namespace kiln::test
