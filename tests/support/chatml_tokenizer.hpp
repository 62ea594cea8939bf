// A tiny byte-level BPE tokenizer.json with ChatML's markers, for tests and fuzzers that need a
// tokenizer small enough for the tiny models (tiny-qwen3 has 512 vocabulary rows). Header-only.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "runtime/tokenizer/byte_level.hpp"

namespace kiln::test {

// 256 byte tokens (id = byte, no merges) plus <|im_start|> 256, <|im_end|> 257, <|endoftext|> 258,
// all special, and a reasoning model's <think> 259 and </think> 260 (added, not special: their text
// is the answer's, as in Qwen3's vocabulary).
inline nlohmann::json chatml_tokenizer_json() {
  using nlohmann::json;
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level::byte_to_text(static_cast<uint8_t>(b))] = b;
  json added = json::array();
  int id = 256;
  for (const char* marker : {"<|im_start|>", "<|im_end|>", "<|endoftext|>"}) {
    added.push_back({{"id", id++}, {"content", marker}, {"special", true}, {"normalized", false}});
  }
  for (const char* tag : {"<think>", "</think>"}) {
    added.push_back({{"id", id++}, {"content", tag}, {"special", false}, {"normalized", false}});
  }
  return {{"added_tokens", added},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}}}};
}

}  // namespace kiln::test
