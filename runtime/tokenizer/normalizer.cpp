#include "runtime/tokenizer/normalizer.hpp"

#include "runtime/tokenizer/unicode_nfc.hpp"

namespace kiln {

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  if (from.empty()) return std::string(text);
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (true) {
    const size_t hit = text.find(from, pos);
    if (hit == std::string_view::npos) break;
    out.append(text.substr(pos, hit - pos));
    out.append(to);
    pos = hit + from.size();
  }
  out.append(text.substr(pos));
  return out;
}

std::string Normalizer::apply(std::string_view text) const {
  std::string current(text);
  std::vector<std::pair<size_t, size_t>> matches;
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Kind::nfc:
        if (!nfc_quick_check(current)) current = to_nfc(current);  // most text is already NFC
        break;
      case Kind::prepend:
        // HF prepends only to non-empty text.
        if (!current.empty()) current = step.text + current;
        break;
      case Kind::replace_string:
        current = replace_all(current, step.text, step.replacement);
        break;
      case Kind::replace_regex: {
        matches.clear();
        step.regex->find_all(current, matches);
        std::string out;
        size_t pos = 0;
        for (const auto& [begin, end] : matches) {
          out.append(current, pos, begin - pos);
          out += step.replacement;
          pos = end;
        }
        out.append(current, pos);
        current = std::move(out);
        break;
      }
    }
  }
  return current;
}

}  // namespace kiln
