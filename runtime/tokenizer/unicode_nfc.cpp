#include "runtime/tokenizer/unicode_nfc.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "runtime/tokenizer/utf8.hpp"

namespace kiln {
namespace {

struct NfcClass {
  char32_t cp;
  uint8_t combining_class;
};
struct NfcDecomposition {
  char32_t cp;
  uint16_t offset;
  uint8_t length;
};
struct NfcComposition {
  char32_t first, second, composite;
};
struct NfcRange {
  char32_t lo, hi;
};

#include "runtime/tokenizer/unicode_nfc_data.inc"

// Hangul syllables decompose and compose arithmetically (Unicode 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
                   kSCount = kLCount * kNCount;

uint8_t combining_class(char32_t cp) {
  if (cp < 0x300) return 0;
  const auto it = std::lower_bound(std::begin(kCombiningClass), std::end(kCombiningClass), cp,
                                   [](const NfcClass& entry, char32_t key) { return entry.cp < key; });
  return it != std::end(kCombiningClass) && it->cp == cp ? it->combining_class : 0;
}

bool is_unstable(char32_t cp) {
  if (cp < 0x300) return false;
  const auto it = std::upper_bound(std::begin(kNfcUnstable), std::end(kNfcUnstable), cp,
                                   [](char32_t key, const NfcRange& range) { return key < range.lo; });
  return it != std::begin(kNfcUnstable) && cp <= std::prev(it)->hi;
}

void decompose(char32_t cp, std::vector<char32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t index = cp - kSBase;
    out.push_back(kLBase + index / kNCount);
    out.push_back(kVBase + (index % kNCount) / kTCount);
    if (index % kTCount != 0) out.push_back(kTBase + index % kTCount);
    return;
  }
  const auto it = std::lower_bound(std::begin(kDecomposition), std::end(kDecomposition), cp,
                                   [](const NfcDecomposition& entry, char32_t key) { return entry.cp < key; });
  if (it == std::end(kDecomposition) || it->cp != cp) {
    out.push_back(cp);
    return;
  }
  out.insert(out.end(), kDecompositionData + it->offset, kDecompositionData + it->offset + it->length);
}

// The primary composite of (first, second), or 0.
char32_t compose_pair(char32_t first, char32_t second) {
  if (first >= kLBase && first < kLBase + kLCount && second >= kVBase && second < kVBase + kVCount) {
    return kSBase + ((first - kLBase) * kVCount + (second - kVBase)) * kTCount;
  }
  if (first >= kSBase && first < kSBase + kSCount && (first - kSBase) % kTCount == 0 &&
      second > kTBase && second < kTBase + kTCount) {
    return first + (second - kTBase);
  }
  const NfcComposition key{first, second, 0};
  const auto it = std::lower_bound(std::begin(kComposition), std::end(kComposition), key,
                                   [](const NfcComposition& a, const NfcComposition& b) {
                                     return a.first != b.first ? a.first < b.first : a.second < b.second;
                                   });
  return it != std::end(kComposition) && it->first == first && it->second == second ? it->composite : 0;
}

}  // namespace

bool nfc_quick_check(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    if (static_cast<uint8_t>(text[pos]) < 0xCC) {  // below U+0300 (and every ASCII byte)
      pos += static_cast<uint8_t>(text[pos]) < 0x80 ? 1 : 2;
      continue;
    }
    if (is_unstable(utf8::next(text, pos))) return false;
  }
  return true;
}

std::string to_nfc(std::string_view text) {
  if (nfc_quick_check(text)) return std::string(text);

  // 1. Full canonical decomposition.
  std::vector<char32_t> cps;
  cps.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) decompose(utf8::next(text, pos), cps);

  // 2. Canonical ordering: stable sort of each run of non-starters by combining class.
  for (size_t i = 0; i < cps.size();) {
    if (combining_class(cps[i]) == 0) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < cps.size() && combining_class(cps[end]) != 0) ++end;
    std::stable_sort(cps.begin() + i, cps.begin() + end,
                     [](char32_t a, char32_t b) { return combining_class(a) < combining_class(b); });
    i = end;
  }

  // 3. Canonical composition: each character combines with the last starter unless blocked.
  std::vector<char32_t> out;
  out.reserve(cps.size());
  size_t starter = SIZE_MAX;  // index in `out` of the last starter
  int last_class = -1;         // class of the last character appended after that starter
  for (const char32_t cp : cps) {
    const int klass = combining_class(cp);
    if (starter != SIZE_MAX) {
      const bool blocked = last_class != -1 && (last_class == 0 || last_class >= klass);
      if (!blocked) {
        if (const char32_t composite = compose_pair(out[starter], cp)) {
          out[starter] = composite;
          continue;
        }
      }
    }
    if (klass == 0) {
      starter = out.size();
      last_class = -1;
    } else {
      last_class = klass;
    }
    out.push_back(cp);
  }

  std::string result;
  result.reserve(text.size());
  for (const char32_t cp : out) utf8::append(result, cp);
  return result;
}

}  // namespace kiln
