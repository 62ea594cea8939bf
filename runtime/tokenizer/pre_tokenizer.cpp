#include "runtime/tokenizer/pre_tokenizer.hpp"

#include <algorithm>

#include "runtime/core/error.hpp"
#include "runtime/tokenizer/normalizer.hpp"
#include "runtime/tokenizer/sentencepiece_text.hpp"

namespace kiln {
namespace {

// HF's ByteLevel pattern (GPT-2's), run with Oniguruma there and with PCRE2 here.
const std::string kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

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

// HF Metaspace on each piece: every " " becomes "▁"; a "▁" goes in front unless the piece already
// starts with one (`first`: only for the piece at offset 0 of the input); with split, each "▁"
// starts a new piece (SplitDelimiterBehavior::MergedWithNext on the "▁").
void metaspace_pieces(const PreTokenizer::Step& step, bool at_input_start, Pieces& pieces, std::vector<Span>& out) {
  std::string buffer;
  buffer.reserve(pieces.buffer.size() + 3 * pieces.spans.size());
  for (const Span& span : pieces.spans) {
    const std::string_view piece = std::string_view(pieces.buffer).substr(span.first, span.second - span.first);
    const size_t begin = buffer.size();
    const bool wanted = step.prepend == PrependScheme::always ||
                        (step.prepend == PrependScheme::first && at_input_start && span.first == 0);
    if (wanted && piece.front() != ' ' && !piece.starts_with(kMetaspace)) buffer.append(kMetaspace);
    buffer.append(replace_all(piece, " ", kMetaspace));
    const size_t end = buffer.size();
    size_t piece_begin = begin;
    if (step.split_at_metaspace) {
      for (size_t at = buffer.find(kMetaspace, begin + 1); at != std::string::npos;
           at = buffer.find(kMetaspace, at + kMetaspace.size())) {
        out.push_back({static_cast<uint32_t>(piece_begin), static_cast<uint32_t>(at)});
        piece_begin = at;
      }
    }
    out.push_back({static_cast<uint32_t>(piece_begin), static_cast<uint32_t>(end)});
  }
  pieces.buffer = std::move(buffer);
}

}  // namespace

const std::string& PreTokenizer::gpt2_pattern() { return kGpt2; }

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

void PreTokenizer::add_metaspace(PrependScheme prepend, bool split) {
  Step step;
  step.kind = Step::Kind::metaspace;
  step.prepend = prepend;
  step.split_at_metaspace = split;
  steps_.push_back(std::move(step));
}

void PreTokenizer::split(std::string_view segment, Pieces& out, bool at_input_start) const {
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
    } else if (step.kind == Step::Kind::metaspace) {
      metaspace_pieces(step, at_input_start, out, next);
    } else {
      for (const Span& span : out.spans) split_span(out.buffer, span, step, scratch, next);
    }
    out.spans.swap(next);
  }
}

}  // namespace kiln
