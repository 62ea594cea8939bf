// Tokenizer::from_gguf: the `tokenizer.ggml.*` metadata llama.cpp writes and reads.
#include <algorithm>

#include "runtime/core/error.hpp"
#include "runtime/tokenizer/sentencepiece_text.hpp"
#include "runtime/tokenizer/tokenizer_impl.hpp"
#include "runtime/weights/gguf.hpp"

namespace kiln {
namespace {

constexpr std::string_view kPrefix = "tokenizer.ggml.";

std::string key(std::string_view name) { return std::string(kPrefix) + std::string(name); }

// GGUF token_type values (llama.cpp's llama_token_type).
TokenKind kind_from_gguf(int64_t type) {
  switch (type) {
    case 1: return TokenKind::normal;
    case 2: return TokenKind::unknown;
    case 3: return TokenKind::control;
    case 4: return TokenKind::user_defined;
    case 6: return TokenKind::byte;
    default: return TokenKind::unused;  // 5 (unused) and 0 (undefined) decode to nothing
  }
}

// Control tokens that end generation although the file does not name them (llama.cpp finds them
// by text the same way: GGUF has keys for EOS, EOT and EOM only).
constexpr std::string_view kEndOfGenerationTexts[] = {
    "<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|endoftext|>", "<|end_of_text|>",
    "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",  // <｜end▁of▁sentence｜>
};

}  // namespace

Tokenizer Tokenizer::from_gguf_file(const std::string& path) { return from_gguf(GgufFile(path)); }

bool Tokenizer::gguf_has_vocabulary(const GgufFile& gguf) {
  return gguf.has(key("tokens")) && !(gguf.has(key("model")) && gguf.get_string(key("model")) == "none");
}

Tokenizer Tokenizer::from_gguf(const GgufFile& gguf) {
  auto impl = std::make_shared<Impl>();
  Impl& m = *impl;
  m.origin = gguf.origin();
  if (!gguf.has(key("model")) || !gguf.has(key("tokens"))) {
    fail(m.origin, ": no tokenizer in this GGUF (", key("model"), " and ", key("tokens"),
         " are required; the file has metadata keys for the weights only)");
  }
  const std::string model = gguf.get_string(key("model"));
  if (model != "gpt2" && model != "llama") {
    fail(m.origin, ": ", key("model"), " is '", model,
         "'; supported: 'gpt2' (byte-level BPE) and 'llama' (SentencePiece BPE)");
  }
  const bool byte_level = model == "gpt2";
  m.kind = byte_level ? "byte-level BPE" : "SentencePiece BPE";

  const std::vector<std::string>& tokens = gguf.get_string_array(key("tokens"));
  if (tokens.empty()) fail(m.origin, ": ", key("tokens"), " is empty");
  std::vector<int64_t> types;
  if (gguf.has(key("token_type"))) {
    types = gguf.get_int_array(key("token_type"));
    if (types.size() != tokens.size()) {
      fail(m.origin, ": ", key("token_type"), " has ", types.size(), " entries for ", tokens.size(), " tokens");
    }
  }
  m.limit_ids(static_cast<int64_t>(tokens.size()));
  for (size_t id = 0; id < tokens.size(); ++id) {
    const TokenKind kind = types.empty() ? TokenKind::normal : kind_from_gguf(types[id]);
    m.set_token(static_cast<int64_t>(id), tokens[id], tokens[id].empty() ? TokenKind::unused : kind);
  }

  // Special and user-defined tokens are matched in the text before BPE, as llama.cpp does.
  for (size_t id = 0; id < tokens.size(); ++id) {
    const TokenKind kind = m.kinds[id];
    if (kind == TokenKind::control || kind == TokenKind::unknown || kind == TokenKind::user_defined) {
      AddedToken token;
      token.id = static_cast<int32_t>(id);
      token.content = tokens[id];
      token.special = kind != TokenKind::user_defined;
      m.added.add(token);
    }
  }

  const auto optional_id = [&](std::string_view name, int32_t fallback) -> int32_t {
    if (!gguf.has(key(name))) return fallback;
    const int64_t id = gguf.get_int(key(name));
    if (id < 0 || static_cast<size_t>(id) >= tokens.size()) {
      fail(m.origin, ": ", key(name), " is ", id, ", outside the vocabulary of ", tokens.size(), " tokens");
    }
    return static_cast<int32_t>(id);
  };

  if (byte_level) {
    if (!gguf.has(key("merges"))) fail(m.origin, ": ", key("merges"), " is missing (required for 'gpt2' BPE)");
    const std::vector<std::string>& lines = gguf.get_string_array(key("merges"));
    std::vector<std::pair<std::string_view, std::string_view>> merges;  // views into `gguf`
    merges.reserve(lines.size());
    for (size_t i = 0; i < lines.size(); ++i) {
      // The separator is the first space after the first character, as llama.cpp splits.
      const std::string_view line = lines[i];
      const size_t space = line.size() > 1 ? line.find(' ', 1) : std::string_view::npos;
      if (space == std::string_view::npos) {
        fail(m.origin, ": ", key("merges"), "[", i, "] is \"", line, "\", expected two tokens separated by a space");
      }
      merges.emplace_back(line.substr(0, space), line.substr(space + 1));
    }
    if (!gguf.has(key("pre"))) {
      fail(m.origin, ": ", key("pre"), " is missing; without it the pre-tokenizer is unknown (re-convert the model "
           "with a recent llama.cpp)");
    }
    const std::string pre = gguf.get_string(key("pre"));
    PreTokenizer::GgufSettings settings;
    m.pre_tokenizer = PreTokenizer::for_gguf_name(pre, m.origin, settings);
    m.pre_tokenizer_name = pre;
    if (settings.nfc) m.normalizer.add({Normalizer::Kind::nfc, {}, {}, nullptr});
    BpeModel::Options options;
    options.byte_level = true;
    options.ignore_merges = settings.ignore_merges;
    m.bpe = std::make_unique<BpeModel>(m.ids, merges, options, m.origin);
    // llama.cpp's default for the family (BOS for Llama 3) unless the file says otherwise.
    m.add_bos = settings.add_bos;
  } else {
    if (!gguf.has(key("scores"))) fail(m.origin, ": ", key("scores"), " is missing (required for 'llama' SentencePiece)");
    const std::vector<double> scores = gguf.get_float_array(key("scores"));
    if (scores.size() != tokens.size()) {
      fail(m.origin, ": ", key("scores"), " has ", scores.size(), " entries for ", tokens.size(), " tokens");
    }
    StringMap<int32_t> pieces;
    int32_t unk = -1;
    for (size_t id = 0; id < tokens.size(); ++id) {
      const TokenKind kind = m.kinds[id];
      if (kind == TokenKind::normal || kind == TokenKind::user_defined) pieces.emplace(tokens[id], id);
      if (kind == TokenKind::unknown && unk < 0) unk = static_cast<int32_t>(id);
    }
    unk = optional_id("unknown_token_id", unk);
    m.spm = std::make_unique<SpmModel>(std::move(pieces), std::vector<float>(scores.begin(), scores.end()),
                                       byte_token_ids(m.ids), unk);
    m.spm_dummy_prefix = gguf.has(key("add_space_prefix")) ? gguf.get_bool(key("add_space_prefix")) : true;
    m.strip_leading_space = m.spm_dummy_prefix;
    m.add_bos = true;
    m.pre_tokenizer_name = "sentencepiece";
  }

  // Defaults follow llama.cpp: SentencePiece vocabularies have <s> = 1 and </s> = 2.
  const int32_t default_bos = !byte_level && tokens.size() > 1 ? 1 : -1;
  const int32_t default_eos = !byte_level && tokens.size() > 2 ? 2 : -1;
  m.bos = optional_id("bos_token_id", default_bos);
  const auto add_eos = [&](int32_t id) {
    if (id >= 0 && std::find(m.eos.begin(), m.eos.end(), id) == m.eos.end()) m.eos.push_back(id);
  };
  add_eos(optional_id("eos_token_id", default_eos));
  add_eos(optional_id("eot_token_id", -1));
  add_eos(optional_id("eom_token_id", -1));
  for (const std::string_view text : kEndOfGenerationTexts) {
    const int32_t id = m.find(text);
    if (id >= 0 && m.kinds[id] == TokenKind::control) add_eos(id);
  }
  if (gguf.has(key("add_bos_token"))) {
    m.add_bos = gguf.get_bool(key("add_bos_token"));
    if (m.add_bos && m.bos < 0) fail(m.origin, ": ", key("add_bos_token"), " is true but ", key("bos_token_id"), " is not set");
  } else if (m.bos < 0) {
    m.add_bos = false;  // the family's default cannot apply without a BOS token
  }

  m.compute_decoded_bytes(byte_level, /*metaspace=*/!byte_level);
  return Tokenizer(std::move(impl));
}

}  // namespace kiln
