#include "runtime/tokenizer/tokenizer.hpp"

#include <sstream>

#include "runtime/core/error.hpp"
#include "runtime/tokenizer/byte_level.hpp"
#include "runtime/tokenizer/sentencepiece_text.hpp"
#include "runtime/tokenizer/tokenizer_impl.hpp"
#include "runtime/tokenizer/utf8.hpp"

namespace kiln {
namespace {

bool is_special_kind(TokenKind kind) { return kind == TokenKind::control || kind == TokenKind::unknown; }

}  // namespace

void Tokenizer::Impl::set_token(int64_t id, const std::string& text, TokenKind kind) {
  // Ids index a dense table: a corrupt id must fail here, not allocate gigabytes.
  if (id < 0 || id >= id_limit) {
    fail(origin, ": token \"", text, "\" has id ", id, ", expected 0..", id_limit - 1,
         id_limit < kMaxIds ? " (the file declares " + std::to_string(id_limit) + " tokens)" : std::string());
  }
  if (static_cast<size_t>(id) >= texts.size()) {
    texts.resize(id + 1);
    kinds.resize(id + 1, TokenKind::unused);
  }
  if (!texts[id].empty() && texts[id] != text) {
    // An added token may take over a vocabulary id, as in HF (its text wins for decoding); two
    // vocabulary entries with one id are a broken file.
    const bool added = kind == TokenKind::control || kind == TokenKind::user_defined;
    if (!added) fail(origin, ": id ", id, " is used by both \"", texts[id], "\" and \"", text, "\"");
    if (const auto it = ids.find(texts[id]); it != ids.end() && it->second == id) ids.erase(it);
  }
  texts[id] = text;
  kinds[id] = kind;
  if (text.empty()) return;  // unusable: nothing can match or spell it
  const auto [it, inserted] = ids.emplace(text, id);
  if (!inserted && it->second != id) {
    // HF lists tokens such as "<|endoftext|>" both in the model vocabulary and as added tokens
    // with the same id; two different ids for one text are a broken file.
    fail(origin, ": token \"", text, "\" has two ids, ", it->second, " and ", id);
  }
}

void Tokenizer::Impl::compute_decoded_bytes(bool byte_level, bool metaspace) {
  bytes.assign(texts.size(), std::string());
  for (size_t id = 0; id < texts.size(); ++id) {
    const std::string& text = texts[id];
    switch (kinds[id]) {
      case TokenKind::normal:
        if (byte_level) {
          // A token outside the byte-level alphabet decodes to its own text, as HF's ByteLevel
          // decoder does.
          auto raw = byte_level::text_to_bytes(text);
          bytes[id] = raw ? std::move(*raw) : text;
        } else {
          bytes[id] = metaspace ? replace_all(text, kMetaspace, " ") : text;
        }
        break;
      case TokenKind::byte: {
        const int value = parse_byte_token(text);
        bytes[id] = value >= 0 ? std::string(1, static_cast<char>(value)) : text;
        break;
      }
      case TokenKind::control:
      case TokenKind::user_defined:
      case TokenKind::unknown:
        bytes[id] = text;
        break;
      case TokenKind::unused:
        break;  // decodes to nothing, as in llama.cpp
    }
  }
}

int32_t Tokenizer::Impl::find(std::string_view text) const {
  const auto it = ids.find(text);
  return it == ids.end() ? -1 : it->second;
}

Tokenizer::Tokenizer(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

namespace {

// Appends the ids of `text`. `at_input_start` is false when `text` continues a longer input
// (encode_pieces): Metaspace's `first` scheme puts its "▁" only at the start of the input.
void encode_into(const Tokenizer::Impl& m, std::string_view text, bool parse_special, bool at_input_start,
                 std::vector<int32_t>& out) {
  std::string sanitized;
  std::string_view input = text;
  if (!utf8::is_valid(text)) {
    sanitized = utf8::sanitize(text);
    input = sanitized;
  }

  std::vector<TextSegment> raw_segments, normalized_segments;
  Pieces pieces;
  std::string escaped;
  bool after_token = true;  // SentencePiece: a dummy prefix space before text that starts the sequence or follows a token

  // `input_start`: the segment begins the input (no added token or earlier piece before it).
  const auto encode_text = [&](std::string_view segment, bool input_start) {
    if (m.spm) {
      escaped.clear();
      if (m.spm_dummy_prefix && after_token) escaped += kMetaspace;
      escaped += replace_all(segment, " ", kMetaspace);
      m.spm->encode(escaped, out);
    } else if (m.pre_tokenizer.empty()) {
      m.bpe->encode(segment, out);
    } else {
      m.pre_tokenizer.split(segment, pieces, input_start);
      for (size_t i = 0; i < pieces.size(); ++i) m.bpe->encode(pieces[i], out);
    }
    after_token = false;
  };

  m.added.split(input, /*normalized_pass=*/false, parse_special, raw_segments);
  for (const TextSegment& segment : raw_segments) {
    if (segment.token >= 0) {
      out.push_back(segment.token);
      after_token = true;
      continue;
    }
    const bool raw_start = at_input_start && segment.begin == 0;
    const std::string_view raw = input.substr(segment.begin, segment.end - segment.begin);
    if (m.normalizer.empty() && !m.added.has_normalized()) {
      encode_text(raw, raw_start);
      continue;
    }
    const std::string normalized = m.normalizer.empty() ? std::string(raw) : m.normalizer.apply(raw);
    m.added.split(normalized, /*normalized_pass=*/true, parse_special, normalized_segments);
    for (const TextSegment& inner : normalized_segments) {
      if (inner.token >= 0) {
        out.push_back(inner.token);
        after_token = true;
      } else {
        encode_text(std::string_view(normalized).substr(inner.begin, inner.end - inner.begin),
                    raw_start && inner.begin == 0);
      }
    }
  }
}

}  // namespace

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_bos && impl_->bos >= 0) out.push_back(impl_->bos);
  encode_into(*impl_, text, parse_special, /*at_input_start=*/true, out);
  return out;
}

std::vector<int32_t> Tokenizer::encode_pieces(std::span<const TextPiece> pieces, bool add_bos) const {
  const Impl& m = *impl_;
  std::vector<int32_t> out;
  if (add_bos && m.bos >= 0) out.push_back(m.bos);
  // Whether the special piece at `i` strips whitespace on its left (lstrip) or right (rstrip).
  const auto strips = [&](size_t i, bool left) {
    if (i >= pieces.size() || !pieces[i].special) return false;
    const AddedToken* token = m.added.find(pieces[i].text);
    return token != nullptr && (left ? token->lstrip : token->rstrip);
  };
  bool at_input_start = true;  // nothing precedes this piece in the concatenation
  for (size_t i = 0; i < pieces.size(); ++i) {
    std::string_view text = pieces[i].text;
    if (!pieces[i].special) {
      if (i > 0 && strips(i - 1, /*left=*/false)) text = utf8::trim_white_space(text, /*front=*/true, /*back=*/false);
      if (strips(i + 1, /*left=*/true)) text = utf8::trim_white_space(text, /*front=*/false, /*back=*/true);
    }
    encode_into(m, text, /*parse_special=*/pieces[i].special, at_input_start, out);
    at_input_start = at_input_start && pieces[i].text.empty();
  }
  return out;
}

std::vector<TextSpan> Tokenizer::special_token_spans(std::string_view text) const {
  return impl_->added.special_spans(text);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  bool at_start = true;
  for (const int32_t id : ids) {
    std::string_view piece = token_bytes(id, skip_special);
    if (piece.empty()) continue;
    if (at_start && impl_->strip_leading_space && piece.front() == ' ') piece.remove_prefix(1);
    at_start = false;
    bytes.append(piece);
  }
  if (utf8::is_valid(bytes)) return bytes;
  return utf8::sanitize(bytes);
}

void Tokenizer::check_id(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->texts.size()) {
    fail(impl_->origin, ": token id ", id, " is outside the vocabulary (0..", impl_->texts.size() - 1, ")");
  }
}

int32_t Tokenizer::bos_id() const { return impl_->bos; }
const std::vector<int32_t>& Tokenizer::eos_ids() const { return impl_->eos; }
bool Tokenizer::add_bos_by_default() const { return impl_->add_bos; }
int32_t Tokenizer::token_id(std::string_view token) const { return impl_->find(token); }

std::string_view Tokenizer::token_text(int32_t id) const {
  check_id(id);
  return impl_->texts[id];
}

TokenKind Tokenizer::token_kind(int32_t id) const {
  check_id(id);
  return impl_->kinds[id];
}

bool Tokenizer::is_special(int32_t id) const { return is_special_kind(token_kind(id)); }

size_t Tokenizer::vocab_size() const { return impl_->texts.size(); }

std::string_view Tokenizer::token_bytes(int32_t id, bool skip_special) const {
  check_id(id);
  if (skip_special && is_special_kind(impl_->kinds[id])) return {};
  return impl_->bytes[id];
}

bool Tokenizer::strips_leading_space() const { return impl_->strip_leading_space; }

std::string Tokenizer::describe() const {
  const Impl& m = *impl_;
  std::ostringstream out;
  out << m.kind << ", " << m.texts.size() << " tokens";
  if (m.bpe) out << ", " << m.bpe->merge_count() << " merges";
  if (!m.pre_tokenizer_name.empty()) out << ", pre-tokenizer " << m.pre_tokenizer_name;
  const auto name = [&](int32_t id) { return "\"" + m.texts[id] + "\" (" + std::to_string(id) + ")"; };
  out << ", BOS " << (m.bos >= 0 ? name(m.bos) : std::string("none")) << (m.add_bos ? " added" : " not added");
  out << ", EOS";
  if (m.eos.empty()) out << " none";
  for (size_t i = 0; i < m.eos.size(); ++i) out << (i ? ", " : " ") << name(m.eos[i]);
  return out.str();
}

void Tokenizer::set_cache_enabled(bool enabled) const {
  if (impl_->bpe) impl_->bpe->set_cache_enabled(enabled);
  if (impl_->spm) impl_->spm->set_cache_enabled(enabled);
}

}  // namespace kiln
