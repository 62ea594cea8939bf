// Tokenizer::from_tokenizer_json / from_model_dir: HF tokenizers' tokenizer.json (BPE model) and
// the transformers config files next to it.
#include <algorithm>
#include <filesystem>
#include <optional>

#include <nlohmann/json.hpp>

#include "runtime/core/error.hpp"
#include "runtime/core/strict_json.hpp"
#include "runtime/tokenizer/sentencepiece_text.hpp"
#include "runtime/tokenizer/tokenizer_impl.hpp"

namespace kiln {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// Strict: duplicate keys and nesting deeper than kJsonMaxDepth are errors, so the recursive
// loaders below see at most that many levels.
std::optional<json> parse_optional_json(const fs::path& path) {
  if (!fs::exists(path)) return std::nullopt;
  return read_json_file(path.string());
}

// object[key], or null when `object` is no object or lacks the key; a reference, never a copy of
// the subtree.
const json& member(const json& object, const char* key) {
  static const json kNull;
  if (!object.is_object()) return kNull;
  const auto it = object.find(key);
  return it == object.end() ? kNull : *it;
}

// object[key] when it is a string, else "".
std::string string_member(const json& object, const char* key) {
  const json& value = member(object, key);
  return value.is_string() ? value.get<std::string>() : std::string();
}

// Accessors that name the file and field in every error.
struct Reader {
  const std::string& origin;

  const json& require(const json& object, const char* field, const std::string& where) const {
    if (!object.is_object() || !object.contains(field)) fail(origin, ": ", where, " has no \"", field, "\"");
    return object.at(field);
  }
  std::string string(const json& object, const char* field, const std::string& where) const {
    const json& value = require(object, field, where);
    if (!value.is_string()) fail(origin, ": ", where, ".", field, " must be a string, got ", value.type_name());
    return value.get<std::string>();
  }
  bool boolean(const json& object, const char* field, const std::string& where, bool fallback) const {
    if (!object.contains(field) || object.at(field).is_null()) return fallback;
    const json& value = object.at(field);
    if (!value.is_boolean()) fail(origin, ": ", where, ".", field, " must be true or false, got ", json_excerpt(value));
    return value.get<bool>();
  }
  // null, "" and absent all mean "not set".
  std::string optional_string(const json& object, const char* field, const std::string& where) const {
    if (!object.contains(field) || object.at(field).is_null()) return {};
    return string(object, field, where);
  }
};

// A regex for a tokenizer.json pattern: {"Regex": "..."} as is, {"String": "..."} literally.
std::string pattern_regex(const Reader& r, const json& pattern, const std::string& where) {
  if (pattern.is_object() && pattern.contains("Regex")) return r.string(pattern, "Regex", where);
  if (pattern.is_object() && pattern.contains("String")) {
    std::string literal = r.string(pattern, "String", where);
    std::string escaped;
    for (const char c : literal) {
      if (std::string_view("\\^$.|?*+()[]{}-/").find(c) != std::string_view::npos) escaped += '\\';
      escaped += c;
    }
    return escaped;
  }
  fail(r.origin, ": ", where, " must be {\"Regex\": ...} or {\"String\": ...}, got ", json_excerpt(pattern));
}

void load_normalizer(const Reader& r, const json& node, const std::string& where, Normalizer& out) {
  if (node.is_null()) return;
  const std::string type = r.string(node, "type", where);
  if (type == "Sequence") {
    const json& list = r.require(node, "normalizers", where);
    if (!list.is_array()) fail(r.origin, ": ", where, ".normalizers must be an array");
    for (size_t i = 0; i < list.size(); ++i) load_normalizer(r, list[i], where + ".normalizers[" + std::to_string(i) + "]", out);
  } else if (type == "NFC") {
    out.add({Normalizer::Kind::nfc, {}, {}, nullptr});
  } else if (type == "Prepend") {
    out.add({Normalizer::Kind::prepend, r.string(node, "prepend", where), {}, nullptr});
  } else if (type == "Replace") {
    const json& pattern = r.require(node, "pattern", where);
    const std::string content = r.string(node, "content", where);
    if (pattern.is_object() && pattern.contains("String")) {
      out.add({Normalizer::Kind::replace_string, r.string(pattern, "String", where + ".pattern"), content, nullptr});
    } else {
      const std::string regex = pattern_regex(r, pattern, where + ".pattern");
      out.add({Normalizer::Kind::replace_regex, {}, content, std::make_shared<const Regex>(regex, r.origin + ": " + where)});
    }
  } else {
    fail(r.origin, ": ", where, " has type \"", type, "\"; supported normalizers: NFC, Prepend, Replace, Sequence");
  }
}

SplitBehavior parse_behavior(const Reader& r, const std::string& name, const std::string& where) {
  if (name == "Removed") return SplitBehavior::removed;
  if (name == "Isolated") return SplitBehavior::isolated;
  if (name == "MergedWithPrevious") return SplitBehavior::merged_with_previous;
  if (name == "MergedWithNext") return SplitBehavior::merged_with_next;
  if (name == "Contiguous") return SplitBehavior::contiguous;
  fail(r.origin, ": ", where, ".behavior is \"", name,
       "\"; expected Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous");
}

// Metaspace's prepend_scheme, for the pre-tokenizer and the decoder alike. Older files carry
// add_prefix_space instead: true is "always", false is "never" (HF 0.19 and later reject false
// unless prepend_scheme says "never" too; the files that have it were written before
// prepend_scheme existed, when false meant exactly that). The replacement must be "▁", the
// character kiln spells and decodes spaces with.
PrependScheme metaspace_prepend_scheme(const Reader& r, const json& node, const std::string& where) {
  const std::string replacement = r.string(node, "replacement", where);
  if (replacement != kMetaspace) {
    fail(r.origin, ": ", where, ".replacement is \"", replacement, "\"; only \"", kMetaspace,
         "\" (U+2581) is supported");
  }
  const std::string scheme = r.optional_string(node, "prepend_scheme", where);
  PrependScheme prepend = PrependScheme::always;
  if (scheme == "first") {
    prepend = PrependScheme::first;
  } else if (scheme == "never") {
    prepend = PrependScheme::never;
  } else if (!scheme.empty() && scheme != "always") {
    fail(r.origin, ": ", where, ".prepend_scheme is \"", scheme, "\"; expected \"always\", \"first\" or \"never\"");
  }
  if (!r.boolean(node, "add_prefix_space", where, true)) {
    if (!scheme.empty() && prepend != PrependScheme::never) {
      fail(r.origin, ": ", where, ".add_prefix_space is false but .prepend_scheme is \"", scheme,
           "\"; they disagree (false means \"never\")");
    }
    prepend = PrependScheme::never;
  }
  return prepend;
}

// Adds the pre-tokenizer's steps and sets seen_byte_level when it includes ByteLevel (which must
// come last: the model works on raw bytes and maps them to the byte-level alphabet itself).
void load_pre_tokenizer(const Reader& r, const json& node, const std::string& where, PreTokenizer& out,
                        std::string& name, bool& seen_byte_level) {
  if (node.is_null()) return;
  const std::string type = r.string(node, "type", where);
  if (seen_byte_level) fail(r.origin, ": ", where, " (", type, ") follows ByteLevel; ByteLevel must be the last pre-tokenizer");
  if (type != "Sequence") name += name.empty() ? type : "+" + type;  // "Split+ByteLevel" for describe()
  if (type == "Sequence") {
    const json& list = r.require(node, "pretokenizers", where);
    if (!list.is_array()) fail(r.origin, ": ", where, ".pretokenizers must be an array");
    for (size_t i = 0; i < list.size(); ++i) {
      load_pre_tokenizer(r, list[i], where + ".pretokenizers[" + std::to_string(i) + "]", out, name, seen_byte_level);
    }
  } else if (type == "Split") {
    const std::string regex = pattern_regex(r, r.require(node, "pattern", where), where + ".pattern");
    const SplitBehavior behavior = parse_behavior(r, r.string(node, "behavior", where), where);
    out.add_split(regex, behavior, r.boolean(node, "invert", where, false), r.origin + ": " + where);
  } else if (type == "ByteLevel") {
    if (r.boolean(node, "add_prefix_space", where, true)) out.add_prefix_space();
    if (r.boolean(node, "use_regex", where, true)) {
      out.add_split(PreTokenizer::gpt2_pattern(), SplitBehavior::isolated, false, r.origin + ": " + where);
    }
    seen_byte_level = true;
  } else if (type == "Digits") {
    const bool individual = r.boolean(node, "individual_digits", where, false);
    out.add_split(R"(\p{N})", individual ? SplitBehavior::isolated : SplitBehavior::contiguous, false,
                  r.origin + ": " + where);
  } else if (type == "Metaspace") {
    const PrependScheme prepend = metaspace_prepend_scheme(r, node, where);
    out.add_metaspace(prepend, r.boolean(node, "split", where, true));
  } else {
    fail(r.origin, ": ", where, " has type \"", type,
         "\"; supported pre-tokenizers: ByteLevel, Split, Digits, Metaspace, Sequence");
  }
}

// How tokens become text. Byte-level decoders map the alphabet back to bytes; SentencePiece-style
// chains (Replace "▁" -> " " or Metaspace, ByteFallback, Fuse, Strip) spell spaces with "▁", read
// <0xXX> tokens as bytes, and may strip the dummy-prefix space.
struct DecoderInfo {
  bool byte_level = false;
  bool metaspace = false;
  bool strip_leading_space = false;
};

void load_decoder(const Reader& r, const json& node, const std::string& where, DecoderInfo& info) {
  if (node.is_null()) {
    fail(r.origin, ": ", where,
         " is null; a decoder (ByteLevel, or Metaspace or Replace/ByteFallback/Fuse/Strip) is required");
  }
  const std::string type = r.string(node, "type", where);
  if (type == "Sequence") {
    const json& list = r.require(node, "decoders", where);
    if (!list.is_array()) fail(r.origin, ": ", where, ".decoders must be an array");
    for (size_t i = 0; i < list.size(); ++i) load_decoder(r, list[i], where + ".decoders[" + std::to_string(i) + "]", info);
  } else if (type == "ByteLevel") {
    info.byte_level = true;
  } else if (type == "Replace") {
    const json& pattern = r.require(node, "pattern", where);
    const bool metaspace_to_space = member(pattern, "String") == kMetaspace && string_member(node, "content") == " ";
    if (!metaspace_to_space) {
      fail(r.origin, ": ", where, " replaces ", json_excerpt(pattern), "; only \"", kMetaspace, "\" -> \" \" is supported");
    }
    info.metaspace = true;
  } else if (type == "Metaspace") {
    // "▁" -> " ", and the text loses one leading space unless prepend_scheme is "never", as with
    // Strip. (HF drops every "▁" of the first token: the same unless that token holds several.)
    info.metaspace = true;
    if (metaspace_prepend_scheme(r, node, where) != PrependScheme::never) info.strip_leading_space = true;
  } else if (type == "ByteFallback" || type == "Fuse") {
    // Byte tokens always decode to their byte and pieces are always concatenated.
  } else if (type == "Strip") {
    const std::string content = r.string(node, "content", where);
    const std::optional<int64_t> start = json_integer(r.require(node, "start", where), 0, 1);
    const std::optional<int64_t> stop = json_integer(r.require(node, "stop", where), 0, 0);
    if (content != " " || !start || !stop) {
      fail(r.origin, ": ", where, " is ", json_excerpt(node), "; only Strip(\" \", start <= 1, stop 0) is supported");
    }
    info.strip_leading_space = info.strip_leading_space || *start == 1;
  } else {
    fail(r.origin, ": ", where, " has type \"", type,
         "\"; supported decoders: ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, Sequence");
  }
}

// The token a TemplateProcessing post-processor puts before the text, if any (Llama 3's BOS).
std::optional<std::string> leading_special_token(const json& node) {
  const std::string type = string_member(node, "type");
  if (type == "Sequence" && member(node, "processors").is_array()) {
    for (const json& inner : member(node, "processors")) {
      if (auto found = leading_special_token(inner)) return found;
    }
    return std::nullopt;
  }
  const json& single = member(node, "single");
  if (type != "TemplateProcessing" || !single.is_array() || single.empty()) return std::nullopt;
  const json& id = member(member(single.front(), "SpecialToken"), "id");
  if (!id.is_string()) return std::nullopt;
  return id.get<std::string>();
}

// "bos_token": "<s>" or {"content": "<s>", ...} or null.
std::optional<std::string> config_token(const json& config, const char* field) {
  if (!config.contains(field)) return std::nullopt;
  const json& value = config.at(field);
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content") && value.at("content").is_string()) {
    return value.at("content").get<std::string>();
  }
  return std::nullopt;
}

// "eos_token_id": 2 or [128001, 128009] or null.
std::vector<int64_t> config_ids(const json& config, const char* field, const std::string& origin) {
  std::vector<int64_t> ids;
  if (!config.contains(field) || config.at(field).is_null()) return ids;
  const json& value = config.at(field);
  if (value.is_number_integer()) {
    const auto id = json_integer(value);
    if (!id) fail(origin, ": ", field, " is ", json_excerpt(value), ", expected a token id");
    ids.push_back(*id);
  } else if (value.is_array()) {
    for (const json& item : value) {
      const auto id = json_integer(item);
      if (!id) fail(origin, ": ", field, " must hold integers, got ", json_excerpt(value));
      ids.push_back(*id);
    }
  } else {
    fail(origin, ": ", field, " must be an integer or a list of integers, got ", json_excerpt(value));
  }
  return ids;
}

}  // namespace

Tokenizer Tokenizer::from_model_dir(const std::string& dir) {
  const fs::path path = fs::path(dir) / "tokenizer.json";
  if (!fs::is_directory(dir)) fail(dir, ": not a directory (expected a Hugging Face model directory)");
  if (!fs::exists(path)) fail(dir, ": no tokenizer.json in this model directory");
  return from_tokenizer_json(path.string());
}

Tokenizer Tokenizer::from_tokenizer_json(const std::string& path) {
  auto impl = std::make_shared<Impl>();
  Impl& m = *impl;
  m.origin = path;
  const json root = read_json_file(path);
  if (!root.is_object()) fail(path, ": expected a JSON object at the top level");
  const Reader r{m.origin};

  // Model: BPE only (every family kiln supports uses it).
  const json& model = r.require(root, "model", "tokenizer.json");
  if (!model.is_object()) fail(path, ": \"model\" must be an object");
  const std::string model_type = model.contains("type") ? r.string(model, "type", "model") : "BPE";
  if (model_type != "BPE") fail(path, ": model.type is \"", model_type, "\"; only BPE is supported");
  for (const char* field : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (!r.optional_string(model, field, "model").empty()) {
      fail(path, ": model.", field, " is set; BPE with word prefixes or suffixes is not supported");
    }
  }
  if (model.contains("dropout") && model.at("dropout").is_number() && model.at("dropout").get<double>() > 0) {
    fail(path, ": model.dropout is set; BPE dropout makes encoding random and is not supported");
  }
  const json& vocab = r.require(model, "vocab", "model");
  if (!vocab.is_object() || vocab.empty()) fail(path, ": model.vocab must be a non-empty object of token -> id");
  const bool byte_fallback = r.boolean(model, "byte_fallback", "model", false);
  const json& added = member(root, "added_tokens");
  m.limit_ids(static_cast<int64_t>(vocab.size() + (added.is_array() ? added.size() : 0)));
  for (const auto& [text, id] : vocab.items()) {
    const std::optional<int64_t> value = json_integer(id);
    if (!value) fail(path, ": model.vocab[\"", text, "\"] must be an integer id, got ", json_excerpt(id));
    const bool is_byte = byte_fallback && parse_byte_token(text) >= 0;
    m.set_token(*value, text, is_byte ? TokenKind::byte : TokenKind::normal);
  }
  StringMap<int32_t> model_vocab = m.ids;

  const json& merge_list = r.require(model, "merges", "model");
  if (!merge_list.is_array()) fail(path, ": model.merges must be an array");
  std::vector<std::pair<std::string_view, std::string_view>> merges;  // views into `root`
  merges.reserve(merge_list.size());
  for (size_t i = 0; i < merge_list.size(); ++i) {
    const json& item = merge_list[i];
    if (item.is_string()) {
      // "a b": exactly one space separates the two tokens.
      const std::string_view line = item.get_ref<const std::string&>();
      const size_t space = line.find(' ');
      if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos) {
        fail(path, ": model.merges[", i, "] is \"", line, "\", expected two tokens separated by one space");
      }
      merges.emplace_back(line.substr(0, space), line.substr(space + 1));
    } else if (item.is_array() && item.size() == 2 && item[0].is_string() && item[1].is_string()) {
      merges.emplace_back(item[0].get_ref<const std::string&>(), item[1].get_ref<const std::string&>());
    } else {
      fail(path, ": model.merges[", i, "] is ", json_excerpt(item), ", expected \"a b\" or [\"a\", \"b\"]");
    }
  }

  // Added tokens: special ones are control tokens, the others user-defined.
  if (!added.is_null()) {
    if (!added.is_array()) fail(path, ": added_tokens must be an array");
    for (size_t i = 0; i < added.size(); ++i) {
      const std::string where = "added_tokens[" + std::to_string(i) + "]";
      const json& item = added[i];
      const json& id_value = r.require(item, "id", where);
      const std::optional<int64_t> id = json_integer(id_value);
      if (!id) fail(path, ": ", where, ".id must be an integer, got ", json_excerpt(id_value));
      AddedToken token;
      token.content = r.string(item, "content", where);
      token.special = r.boolean(item, "special", where, false);
      token.single_word = r.boolean(item, "single_word", where, false);
      token.lstrip = r.boolean(item, "lstrip", where, false);
      token.rstrip = r.boolean(item, "rstrip", where, false);
      token.normalized = r.boolean(item, "normalized", where, !token.special);
      if (token.content.empty()) fail(path, ": ", where, ".content is empty");
      m.set_token(*id, token.content, token.special ? TokenKind::control : TokenKind::user_defined);
      token.id = static_cast<int32_t>(*id);  // in range: set_token checked it
      m.added.add(token);
    }
  }

  load_normalizer(r, member(root, "normalizer"), "normalizer", m.normalizer);
  bool byte_level = false;
  load_pre_tokenizer(r, member(root, "pre_tokenizer"), "pre_tokenizer", m.pre_tokenizer, m.pre_tokenizer_name,
                     byte_level);
  DecoderInfo decoder;
  load_decoder(r, member(root, "decoder"), "decoder", decoder);
  if (byte_level != decoder.byte_level) {
    fail(path, ": the pre-tokenizer ", byte_level ? "is" : "is not", " ByteLevel but the decoder ",
         decoder.byte_level ? "is" : "is not", "; both must agree");
  }
  if (!byte_level && !decoder.metaspace) {
    fail(path, ": a BPE model without ByteLevel needs a decoder that maps \"", kMetaspace,
         "\" to spaces (Metaspace, or Replace \"", kMetaspace, "\" -> \" \")");
  }
  m.kind = byte_level ? "byte-level BPE" : "BPE";

  BpeModel::Options options;
  options.byte_level = byte_level;
  options.ignore_merges = r.boolean(model, "ignore_merges", "model", false);
  options.byte_fallback = byte_fallback;
  options.fuse_unk = r.boolean(model, "fuse_unk", "model", false);
  if (const std::string unk = r.optional_string(model, "unk_token", "model"); !unk.empty()) {
    options.unk_id = m.find(unk);
    if (options.unk_id < 0) fail(path, ": model.unk_token \"", unk, "\" is not in the vocabulary");
    if (m.kinds[options.unk_id] == TokenKind::normal) m.kinds[options.unk_id] = TokenKind::unknown;
  }
  m.bpe = std::make_unique<BpeModel>(model_vocab, merges, options, path);
  m.strip_leading_space = decoder.strip_leading_space;

  // BOS / EOS from the post-processor and the transformers config files beside tokenizer.json.
  const fs::path dir = fs::path(path).parent_path();
  const auto tokenizer_config = parse_optional_json(dir / "tokenizer_config.json");
  const auto generation_config = parse_optional_json(dir / "generation_config.json");
  const auto model_config = parse_optional_json(dir / "config.json");
  const auto resolve = [&](const std::string& text, const std::string& where) {
    const int32_t id = m.find(text);
    if (id < 0) fail(where, ": token \"", text, "\" is not in the vocabulary of ", path);
    return id;
  };
  const auto check_range = [&](int64_t id, const std::string& where) {
    if (id < 0 || static_cast<size_t>(id) >= m.texts.size()) {
      fail(where, ": token id ", id, " is outside the vocabulary of ", path, " (", m.texts.size(), " tokens)");
    }
    return static_cast<int32_t>(id);
  };
  const std::string tokenizer_config_path = (dir / "tokenizer_config.json").string();
  const std::optional<std::string> template_bos = leading_special_token(member(root, "post_processor"));
  if (tokenizer_config && config_token(*tokenizer_config, "bos_token")) {
    m.bos = resolve(*config_token(*tokenizer_config, "bos_token"), tokenizer_config_path + " bos_token");
  } else if (template_bos) {
    m.bos = resolve(*template_bos, path + " post_processor");
  } else {
    for (const auto& [config, name] : {std::pair{&generation_config, "generation_config.json"},
                                       std::pair{&model_config, "config.json"}}) {
      if (!*config) continue;
      const auto ids = config_ids(**config, "bos_token_id", (dir / name).string());
      if (!ids.empty()) {
        m.bos = check_range(ids.front(), (dir / name).string() + " bos_token_id");
        break;
      }
    }
  }
  if (tokenizer_config && member(*tokenizer_config, "add_bos_token").is_boolean()) {
    m.add_bos = member(*tokenizer_config, "add_bos_token").get<bool>();
  } else {
    m.add_bos = template_bos.has_value();
  }
  if (m.add_bos && m.bos < 0) fail(path, ": BOS is added by default but no BOS token is defined");

  const auto add_eos = [&](int32_t id) {
    if (std::find(m.eos.begin(), m.eos.end(), id) == m.eos.end()) m.eos.push_back(id);
  };
  if (generation_config) {
    const std::string where = (dir / "generation_config.json").string();
    for (const int64_t id : config_ids(*generation_config, "eos_token_id", where)) add_eos(check_range(id, where + " eos_token_id"));
  }
  if (tokenizer_config) {
    if (const auto eos = config_token(*tokenizer_config, "eos_token")) add_eos(resolve(*eos, tokenizer_config_path + " eos_token"));
  }
  if (model_config) {
    const std::string where = (dir / "config.json").string();
    for (const int64_t id : config_ids(*model_config, "eos_token_id", where)) add_eos(check_range(id, where + " eos_token_id"));
  }

  m.compute_decoded_bytes(byte_level, decoder.metaspace);
  return Tokenizer(std::move(impl));
}

}  // namespace kiln
