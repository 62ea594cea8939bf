// Shared helpers for the tokenizer tests: fixture paths, cached tokenizers, seeded random text,
// GGUF vocabularies built in memory.
#pragma once

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/core/file_io.hpp"
#include "runtime/tokenizer/tokenizer.hpp"
#include "runtime/tokenizer/utf8.hpp"
#include "runtime/weights/gguf.hpp"
#include "tests/weights/test_support.hpp"

namespace kiln::test {

inline std::string tokenizer_test_dir() { return std::string(KILN_SOURCE_DIR) + "/tests/tokenizer"; }

// The committed copies of llama.cpp's vocab files (tests/tokenizer/vectors/ggml-vocab-NAME.gguf).
inline std::string vector_gguf(const std::string& name) {
  return tokenizer_test_dir() + "/vectors/ggml-vocab-" + name + ".gguf";
}
inline const std::vector<std::string>& vector_names() {
  static const std::vector<std::string> names{"gpt-2", "deepseek-llm", "llama-spm"};
  return names;
}
inline const std::vector<std::string>& fixture_names() {
  static const std::vector<std::string> names{"gpt2", "llama3", "qwen3", "deepseek", "smollm2", "llama2_json"};
  return names;
}
inline std::string fixture_dir(const std::string& name) { return tokenizer_test_dir() + "/fixtures/" + name; }

// Loading a 100k-token vocabulary takes a moment; load each once per test binary.
inline const Tokenizer& gguf_tokenizer(const std::string& name) {
  static std::map<std::string, Tokenizer> cache;
  auto it = cache.find(name);
  if (it == cache.end()) it = cache.emplace(name, Tokenizer::from_gguf_file(vector_gguf(name))).first;
  return it->second;
}
inline const Tokenizer& fixture_tokenizer(const std::string& name) {
  static std::map<std::string, Tokenizer> cache;
  auto it = cache.find(name);
  if (it == cache.end()) it = cache.emplace(name, Tokenizer::from_model_dir(fixture_dir(name))).first;
  return it->second;
}

inline nlohmann::json read_json(const std::string& path) { return nlohmann::json::parse(read_file(path)); }

inline std::vector<int32_t> ids_of(const nlohmann::json& list) { return list.get<std::vector<int32_t>>(); }

// Seeded random Unicode text: ASCII, Latin-1, Greek and Cyrillic, CJK and Hangul, emoji (with ZWJ
// and modifiers), combining marks, Arabic/Hebrew/Devanagari/Thai, digits, whitespace runs and
// newlines. Every string is valid UTF-8; surrogates and noncharacters are never produced.
inline std::vector<std::string> random_unicode_strings(size_t count, uint32_t seed) {
  static const std::vector<std::pair<char32_t, char32_t>> ranges{
      {0x20, 0x7E},     {0x41, 0x5A},     {0x61, 0x7A},     {0x30, 0x39},     {0xA0, 0xFF},
      {0x100, 0x17F},   {0x391, 0x3C9},   {0x1F00, 0x1FFC}, {0x410, 0x44F},   {0x4E00, 0x9FA5},
      {0x3041, 0x30FA}, {0xAC00, 0xD7A3}, {0x1100, 0x11FF}, {0x1F300, 0x1F64F}, {0x1F680, 0x1F6C5},
      {0x300, 0x36F},   {0x600, 0x6FF},   {0x5D0, 0x5EA},   {0x900, 0x97F},   {0xE01, 0xE5B},
      {0xFF01, 0xFF5E}, {0x2000, 0x206F}, {0x10400, 0x1044F}};
  static const std::vector<std::string> whitespace{" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ",
                                                   "\xC2\xA0", "\xE3\x80\x80", "\xE2\x80\x8D", "\xEF\xB8\x8F"};
  std::mt19937 rng(seed);
  const auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  std::vector<std::string> out;
  for (size_t i = 0; i < count; ++i) {
    std::string text;
    const size_t parts = 1 + pick(10);
    for (size_t p = 0; p < parts; ++p) {
      if (pick(4) == 0) {
        text += whitespace[pick(whitespace.size())];
        continue;
      }
      const auto [lo, hi] = ranges[pick(ranges.size())];
      const size_t length = 1 + pick(8);
      for (size_t c = 0; c < length; ++c) utf8::append(text, lo + static_cast<char32_t>(pick(hi - lo + 1)));
    }
    out.push_back(std::move(text));
  }
  return out;
}

// A tokenizer from a metadata-only GGUF image built in memory (GgufBuilder's kv_* calls).
inline Tokenizer load_gguf_tokenizer(const GgufBuilder& builder, const std::string& origin) {
  const auto image = builder.build();  // GgufFile::parse does not own it; the tokenizer copies what it needs
  return Tokenizer::from_gguf(GgufFile::parse(image, origin));
}

}  // namespace kiln::test
