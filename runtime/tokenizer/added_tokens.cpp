#include "runtime/tokenizer/added_tokens.hpp"

#include <algorithm>
#include <bitset>

#include "runtime/tokenizer/regex.hpp"
#include "runtime/tokenizer/utf8.hpp"

namespace kiln {
namespace {

// Rust regex's Unicode \w (HF decides single_word with `\w$` / `^\w`).
const Regex& word_char() {
  static const Regex regex(R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}])", "added-token word test");
  return regex;
}

bool is_word_char_at(std::string_view text, size_t pos) {
  size_t end = pos;
  utf8::next(text, end);
  std::vector<std::pair<size_t, size_t>> matches;
  word_char().find_all(text.substr(pos, end - pos), matches);
  return !matches.empty();
}

}  // namespace

// A byte trie over token contents; nodes in one vector, children in a small sorted map.
struct AddedTokenMatcher::Trie {
  struct Node {
    std::map<uint8_t, uint32_t> children;
    int32_t token_index = -1;  // index into tokens_ when a token ends here
  };
  std::vector<Node> nodes{Node{}};
  std::bitset<256> first_bytes;

  void insert(std::string_view text, int32_t token_index) {
    uint32_t node = 0;
    for (const char c : text) {
      const uint8_t b = static_cast<uint8_t>(c);
      const auto it = nodes[node].children.find(b);
      if (it != nodes[node].children.end()) {
        node = it->second;
      } else {
        const uint32_t child = static_cast<uint32_t>(nodes.size());
        nodes[node].children.emplace(b, child);
        nodes.emplace_back();
        node = child;
      }
    }
    nodes[node].token_index = token_index;
    first_bytes.set(static_cast<uint8_t>(text[0]));
  }

  // Longest token starting at `pos`: (token index, end), or (-1, pos). With `special_only` (the
  // matcher's tokens), only special ones count.
  std::pair<int32_t, size_t> longest_at(std::string_view text, size_t pos,
                                        const std::vector<AddedToken>* special_only = nullptr) const {
    int32_t best = -1;
    size_t best_end = pos;
    uint32_t node = 0;
    for (size_t i = pos; i < text.size(); ++i) {
      const auto it = nodes[node].children.find(static_cast<uint8_t>(text[i]));
      if (it == nodes[node].children.end()) break;
      node = it->second;
      const int32_t index = nodes[node].token_index;
      if (index >= 0 && (special_only == nullptr || (*special_only)[index].special)) {
        best = index;
        best_end = i + 1;
      }
    }
    return {best, best_end};
  }
};

AddedTokenMatcher::AddedTokenMatcher() : raw_(new Trie), normalized_(new Trie) {}
AddedTokenMatcher::~AddedTokenMatcher() = default;
AddedTokenMatcher::AddedTokenMatcher(AddedTokenMatcher&&) noexcept = default;
AddedTokenMatcher& AddedTokenMatcher::operator=(AddedTokenMatcher&&) noexcept = default;

void AddedTokenMatcher::add(const AddedToken& token) {
  if (token.content.empty()) return;
  tokens_.push_back(token);
  (token.normalized ? normalized_ : raw_)->insert(token.content, static_cast<int32_t>(tokens_.size() - 1));
}

bool AddedTokenMatcher::has_normalized() const { return normalized_->nodes.size() > 1; }

const AddedToken* AddedTokenMatcher::find(std::string_view content) const {
  for (const AddedToken& token : tokens_) {
    if (token.content == content) return &token;
  }
  return nullptr;
}

void AddedTokenMatcher::split(std::string_view text, bool normalized_pass, bool parse_special,
                              std::vector<TextSegment>& out) const {
  out.clear();
  const Trie& trie = normalized_pass ? *normalized_ : *raw_;
  size_t start_offset = 0;  // end of the last emitted token
  size_t pos = 0;
  if (trie.nodes.size() > 1) {
    while (pos < text.size()) {
      if (!trie.first_bytes.test(static_cast<uint8_t>(text[pos]))) {
        ++pos;
        continue;
      }
      const auto [index, match_end] = trie.longest_at(text, pos);
      if (index < 0) {
        ++pos;
        continue;
      }
      const AddedToken& token = tokens_[index];
      size_t start = pos;
      size_t stop = match_end;
      // A discarded match still consumes its text, as in HF's find_iter over the automaton.
      pos = match_end;
      if (token.special && !parse_special) continue;
      if (token.single_word) {
        const bool word_before = start > 0 && is_word_char_at(text, utf8::char_start_before(text, start));
        const bool word_after = stop < text.size() && is_word_char_at(text, stop);
        if (word_before || word_after) continue;
      }
      if (token.lstrip) {
        size_t new_start = start;
        while (new_start > start_offset) {
          const size_t prev = utf8::char_start_before(text, new_start);
          size_t tmp = prev;
          if (!utf8::is_white_space(utf8::next(text, tmp))) break;
          new_start = prev;
        }
        start = new_start;
      }
      if (token.rstrip) {
        while (stop < text.size()) {
          size_t tmp = stop;
          if (!utf8::is_white_space(utf8::next(text, tmp))) break;
          stop = tmp;
        }
        pos = stop;
      }
      if (start_offset < start) out.push_back({-1, start_offset, start});
      out.push_back({token.id, start, stop});
      start_offset = stop;
    }
  }
  if (start_offset < text.size()) out.push_back({-1, start_offset, text.size()});
}

std::vector<TextSpan> AddedTokenMatcher::special_spans(std::string_view text) const {
  std::vector<TextSpan> spans;
  for (size_t pos = 0; pos < text.size();) {
    // The longest special token starting here, from either trie.
    size_t end = 0;
    for (const Trie* trie : {raw_.get(), normalized_.get()}) {
      if (trie->nodes.size() <= 1 || !trie->first_bytes.test(static_cast<uint8_t>(text[pos]))) continue;
      const auto [index, match_end] = trie->longest_at(text, pos, &tokens_);
      if (index >= 0) end = std::max(end, match_end);
    }
    if (end > pos) {
      spans.push_back({pos, end});
      pos = end;
    } else {
      ++pos;
    }
  }
  return spans;
}

}  // namespace kiln
