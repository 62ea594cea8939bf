#include "runtime/tokenizer/pre_tokenizer.hpp"

#include <algorithm>

#include "runtime/core/error.hpp"

namespace kiln {
namespace {

// The patterns below are the ones the models' tokenizer.json files use (HF tokenizers runs them
// with Oniguruma); llama.cpp maps each `tokenizer.ggml.pre` name to the same splits.
const std::string kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const std::string kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const std::string kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// DeepSeek LLM (and DeepSeek-V2, which shares its vocabulary): six splits in sequence. The second
// class is the cased letters (Lu, Ll, Lt) as DeepSeek listed them; non-ASCII code points are
// written as escapes because several are canonical singletons (U+2126 OHM SIGN, U+212A KELVIN
// SIGN, U+1FBE, ...) that an editor or a copy through NFC would silently change.
const std::string kDeepSeekNewline = R"([\r\n])";
const std::string kDeepSeekLetters =
    R"(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF})"
    R"(\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1})"
    R"(\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5})"
    R"(\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A})"
    R"(\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B})"
    R"(\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC})"
    R"(\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107})"
    R"(\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134})"
    R"(\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4})"
    R"(\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787})"
    R"(\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A})"
    R"(\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2})"
    R"(\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)";
const std::string kDeepSeekPunctuation = R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)";
const std::string kDeepSeekTrailingSpace = R"(\s+$)";
const std::string kDeepSeekCjk = R"([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";
const std::string kDeepSeekDigits = R"(\p{N}+)";
const std::string kEachDigit = R"(\p{N})";

using Span = std::pair<uint32_t, uint32_t>;

// (range, is_match) covering a whole piece, as HF's find_matches produces it.
struct Part {
  uint32_t begin, end;
  bool match;
};

// Buffers reused across pieces so that splitting allocates only while they grow.
struct SplitScratch {
  std::vector<std::pair<size_t, size_t>> matches;
  std::vector<Part> parts;
  std::vector<Span> kept;
};

// Applies one split to [begin, end) of `text`, appending the resulting non-empty spans; mirrors
// HF tokenizers' NormalizedString::split for each SplitDelimiterBehavior.
void split_span(const std::string& text, Span span, const PreTokenizer::Step& step, SplitScratch& scratch,
                std::vector<Span>& out) {
  scratch.matches.clear();
  const std::string_view piece = std::string_view(text).substr(span.first, span.second - span.first);
  step.regex->find_all(piece, scratch.matches);

  if (step.behavior == SplitBehavior::isolated) {
    // The common case (every model kiln supports): matches and the gaps between them, in order;
    // inverting changes nothing for Isolated.
    uint32_t prev = 0;
    for (const auto& [b, e] : scratch.matches) {
      if (b > prev) out.push_back({span.first + prev, span.first + static_cast<uint32_t>(b)});
      out.push_back({span.first + static_cast<uint32_t>(b), span.first + static_cast<uint32_t>(e)});
      prev = static_cast<uint32_t>(e);
    }
    if (prev < piece.size()) out.push_back({span.first + prev, span.second});
    return;
  }

  std::vector<Part>& parts = scratch.parts;
  parts.clear();
  uint32_t prev = 0;
  for (const auto& [b, e] : scratch.matches) {
    if (b > prev) parts.push_back({prev, static_cast<uint32_t>(b), false});
    parts.push_back({static_cast<uint32_t>(b), static_cast<uint32_t>(e), true});
    prev = static_cast<uint32_t>(e);
  }
  if (prev < piece.size()) parts.push_back({prev, static_cast<uint32_t>(piece.size()), false});
  if (step.invert) {
    for (Part& part : parts) part.match = !part.match;
  }

  std::vector<Span>& kept = scratch.kept;
  kept.clear();
  switch (step.behavior) {
    case SplitBehavior::isolated:
      for (const Part& part : parts) kept.push_back({part.begin, part.end});
      break;
    case SplitBehavior::removed:
      for (const Part& part : parts) {
        if (!part.match) kept.push_back({part.begin, part.end});
      }
      break;
    case SplitBehavior::merged_with_previous: {
      bool previous_match = false;
      for (const Part& part : parts) {
        if (part.match && !previous_match && !kept.empty()) {
          kept.back().second = part.end;
        } else {
          kept.push_back({part.begin, part.end});
        }
        previous_match = part.match;
      }
      break;
    }
    case SplitBehavior::merged_with_next: {
      bool previous_match = false;
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        if (it->match && !previous_match && !kept.empty()) {
          kept.back().first = it->begin;
        } else {
          kept.push_back({it->begin, it->end});
        }
        previous_match = it->match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    }
    case SplitBehavior::contiguous: {
      bool previous_match = false;
      bool first = true;
      for (const Part& part : parts) {
        if (!first && part.match == previous_match) {
          kept.back().second = part.end;
        } else {
          kept.push_back({part.begin, part.end});
        }
        previous_match = part.match;
        first = false;
      }
      break;
    }
  }
  for (const Span& s : kept) {
    if (s.second > s.first) out.push_back({span.first + s.first, span.first + s.second});
  }
}

}  // namespace

const std::string& PreTokenizer::gpt2_pattern() { return kGpt2; }

PreTokenizer PreTokenizer::for_gguf_name(const std::string& name, const std::string& origin, bool& ignore_merges,
                                         bool& nfc) {
  PreTokenizer pre;
  ignore_merges = false;
  nfc = false;
  const std::string where = origin + ": tokenizer.ggml.pre '" + name + "'";
  const auto is_one_of = [&](std::initializer_list<const char*> names) {
    return std::any_of(names.begin(), names.end(), [&](const char* n) { return name == n; });
  };
  if (is_one_of({"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0",
                 "mellum", "mpt", "olmo", "jais", "trillion", "granite-docling", "exaone4"})) {
    pre.add_split(kGpt2, SplitBehavior::isolated, false, where);
  } else if (is_one_of({"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0",
                        "lfm2", "dbrx", "smaug-bpe"})) {
    pre.add_split(kLlama3, SplitBehavior::isolated, false, where);
    // llama.cpp looks whole words up first for these, as Llama 3's tokenizer.json asks.
    ignore_merges = !is_one_of({"dbrx", "smaug-bpe"});
  } else if (is_one_of({"qwen2", "deepseek-r1-qwen", "megrez", "stablelm2", "hunyuan"})) {
    pre.add_split(kQwen2, SplitBehavior::isolated, false, where);
    // Qwen2's tokenizer.json normalizes to NFC; the GGUF conversion drops the normalizer, so
    // restore it to tokenize as HF does (llama.cpp skips it).
    nfc = is_one_of({"qwen2", "deepseek-r1-qwen"});
  } else if (name == "deepseek-llm") {
    for (const std::string* pattern : {&kDeepSeekNewline, &kDeepSeekLetters, &kDeepSeekPunctuation,
                                       &kDeepSeekTrailingSpace, &kDeepSeekCjk, &kDeepSeekDigits}) {
      pre.add_split(*pattern, SplitBehavior::isolated, false, where);
    }
  } else if (is_one_of({"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b",
                        "mellum2"})) {
    // Digits(individual_digits=true) then ByteLevel's GPT-2 split.
    pre.add_split(kEachDigit, SplitBehavior::isolated, false, where);
    pre.add_split(kGpt2, SplitBehavior::isolated, false, where);
  } else {
    fail(where, " is not supported; supported byte-level pre-tokenizers: gpt-2 (and aliases), llama-bpe/llama3, "
                "qwen2, deepseek-llm, smollm (and starcoder-style aliases)");
  }
  return pre;
}

void PreTokenizer::add_split(const std::string& pattern, SplitBehavior behavior, bool invert,
                             const std::string& origin) {
  Step step;
  step.kind = Step::Kind::split;
  step.regex = std::make_shared<const Regex>(pattern, origin);
  step.behavior = behavior;
  step.invert = invert;
  steps_.push_back(std::move(step));
}

void PreTokenizer::add_prefix_space() {
  Step step;
  step.kind = Step::Kind::prefix_space;
  steps_.push_back(std::move(step));
}

void PreTokenizer::split(std::string_view segment, Pieces& out) const {
  out.buffer.assign(segment);
  out.spans.clear();
  if (segment.empty()) return;
  out.spans.push_back({0, static_cast<uint32_t>(segment.size())});
  std::vector<Span> next;
  SplitScratch scratch;
  for (const Step& step : steps_) {
    next.clear();
    if (step.kind == Step::Kind::prefix_space) {
      // HF ByteLevel(add_prefix_space): every piece not starting with a space gets one.
      std::string buffer;
      buffer.reserve(out.buffer.size() + out.spans.size());
      for (const Span& span : out.spans) {
        const uint32_t begin = static_cast<uint32_t>(buffer.size());
        if (out.buffer[span.first] != ' ') buffer.push_back(' ');
        buffer.append(out.buffer, span.first, span.second - span.first);
        next.push_back({begin, static_cast<uint32_t>(buffer.size())});
      }
      out.buffer = std::move(buffer);
    } else {
      for (const Span& span : out.spans) split_span(out.buffer, span, step, scratch, next);
    }
    out.spans.swap(next);
  }
}

}  // namespace kiln
