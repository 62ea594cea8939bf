// OutputProcessor: a request's tokens into text deltas, with stop strings held back while they
// could still match and cut where they do. The tokenizer is tests/support's byte-level ChatML one
// (token id = the byte it decodes to; <|im_start|> 256, <|im_end|> 257, <|endoftext|> 258).
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/server/output_processor.hpp"
#include "tests/support/chatml_tokenizer.hpp"
#include "tests/support/temp_dir.hpp"

using namespace kiln;

namespace {

const Tokenizer& tokenizer() {
  static const test::TempDir dir("kiln-output-processor");
  static const Tokenizer t =
      Tokenizer::from_tokenizer_json(dir.write("tokenizer.json", test::chatml_tokenizer_json().dump()));
  return t;
}

std::vector<int32_t> byte_tokens(std::string_view text) {
  std::vector<int32_t> ids;
  for (unsigned char c : text) ids.push_back(c);
  return ids;
}

struct Fed {
  std::vector<std::string> deltas;  // one per token pushed (none after the finish)
  std::string text;                 // OutputProcessor::text()
  FinishReason reason = FinishReason::None;
  std::string stop_string;
};

// Pushes the tokens one event each; with `last_finishes`, the last event finishes the request
// (max_tokens), as the engine's last token does.
Fed feed(const SamplingParams& params, const std::vector<int32_t>& tokens, bool last_finishes = false) {
  OutputProcessor out(&tokenizer(), params);
  Fed f;
  for (size_t i = 0; i < tokens.size(); ++i) {
    TokenEvent e;
    e.id = 1;
    e.token = tokens[i];
    if (last_finishes && i + 1 == tokens.size()) {
      e.finished = true;
      e.reason = FinishReason::MaxTokens;
    }
    const OutputDelta d = out.push(e);
    f.deltas.push_back(d.text);
    if (d.finished) {
      f.reason = d.reason;
      f.stop_string = d.stop_string;
      break;
    }
  }
  f.text = out.text();
  return f;
}

SamplingParams with_stops(std::vector<std::string> stops) {
  SamplingParams p;
  p.stop = std::move(stops);
  return p;
}

using Deltas = std::vector<std::string>;

}  // namespace

TEST_CASE("without stop strings every token's text goes out with it") {
  const Fed f = feed(SamplingParams{}, byte_tokens("hello"), true);
  CHECK(f.deltas == Deltas{"h", "e", "l", "l", "o"});
  CHECK(f.text == "hello");
  CHECK(f.reason == FinishReason::MaxTokens);
}

TEST_CASE("a stop string split across tokens is held back while it could match, and cut where it does") {
  const Fed f = feed(with_stops({"lo w"}), byte_tokens("hello world"));
  CHECK(f.deltas == Deltas{"h", "e", "", "l", "", "", ""});  // each 'l' held; the second lets the first go
  CHECK(f.text == "hel");
  CHECK(f.reason == FinishReason::StopString);
  CHECK(f.stop_string == "lo w");

  SamplingParams included = with_stops({"lo w"});
  included.include_stop_str_in_output = true;
  CHECK(feed(included, byte_tokens("hello world")).text == "hello w");
}

TEST_CASE("held text that stops matching goes out with the next token") {
  const Fed f = feed(with_stops({"abc"}), byte_tokens("xabdab"));
  CHECK(f.deltas == Deltas{"x", "", "", "abd", "", ""});
  CHECK(f.reason == FinishReason::None);
  // The request's end releases what is held.
  CHECK(feed(with_stops({"abc"}), byte_tokens("xabdab"), true).text == "xabdab");
}

TEST_CASE("of stop strings ending in the same token's text, the one that starts first wins") {
  SamplingParams p = with_stops({"im_end", "<|im"});
  p.skip_special_tokens = false;  // <|im_end|>'s text counts
  const Fed f = feed(p, {'a', 257});
  CHECK(f.text == "a");
  CHECK(f.stop_string == "<|im");
  std::swap(p.stop[0], p.stop[1]);
  CHECK(feed(p, {'a', 257}).stop_string == "<|im");
}

TEST_CASE("before min_tokens a stop string is plain text, and is not matched across that point") {
  SamplingParams p = with_stops({"ab"});
  p.min_tokens = 4;
  const Fed f = feed(p, byte_tokens("abxab"));
  CHECK(f.deltas == Deltas{"a", "b", "x", "", ""});
  CHECK(f.text == "abx");
  CHECK(f.reason == FinishReason::StopString);
  p.min_tokens = 3;  // 'a' is the second token: out before the third, 'b', is looked at
  CHECK(feed(p, byte_tokens("xabab")).deltas == Deltas{"x", "a", "b", "", ""});
}

TEST_CASE("a stop string of a character split over two tokens matches once the character is whole") {
  const Fed f = feed(with_stops({"\xc3\xa9"}), {'a', 0xc3, 0xa9});  // é
  CHECK(f.deltas == Deltas{"a", "", ""});
  CHECK(f.text == "a");
  CHECK(f.reason == FinishReason::StopString);
}

// Against a reference written from the definition: after each token, what went out is the text so
// far less its longest tail that some stop string starts with; the request stops at the first
// token whose text completes a stop string, the text cut where the earliest-starting one begins.
TEST_CASE("random stop strings and texts: deltas as early as possible, cut at the first match") {
  std::mt19937 rng(41);
  for (int round = 0; round < 2000; ++round) {
    const auto word = [&](int max_length) {
      std::string s(std::uniform_int_distribution<int>(1, max_length)(rng), 'a');
      for (char& c : s) c = static_cast<char>('a' + std::uniform_int_distribution<int>(0, 2)(rng));
      return s;
    };
    std::vector<std::string> stops;
    for (int i = std::uniform_int_distribution<int>(1, 3)(rng); i > 0; --i) stops.push_back(word(6));
    const std::string text = word(40);
    const Fed f = feed(with_stops(stops), byte_tokens(text));
    INFO("stops " << stops[0] << (stops.size() > 1 ? "," + stops[1] : "") << (stops.size() > 2 ? "," + stops[2] : "")
                  << ", text " << text);

    std::string out;
    size_t stop_end = std::string::npos, stop_start = 0;
    for (size_t i = 0; i < text.size() && stop_end == std::string::npos; ++i) {
      const std::string so_far = text.substr(0, i + 1);
      for (const std::string& s : stops) {  // the earliest start of those ending here
        if (so_far.size() >= s.size() && so_far.compare(so_far.size() - s.size(), s.size(), s) == 0 &&
            (stop_end == std::string::npos || so_far.size() - s.size() < stop_start)) {
          stop_end = i;
          stop_start = so_far.size() - s.size();
        }
      }
      if (stop_end != std::string::npos) break;
      size_t held = 0;
      for (const std::string& s : stops) {
        for (size_t n = std::min(s.size() - 1, so_far.size()); n > held; --n) {
          if (so_far.compare(so_far.size() - n, n, s, 0, n) == 0) held = n;
        }
      }
      REQUIRE(i < f.deltas.size());
      out += f.deltas[i];
      CHECK(out == so_far.substr(0, so_far.size() - held));
    }
    if (stop_end != std::string::npos) {
      CHECK(f.reason == FinishReason::StopString);
      CHECK(f.deltas.size() == stop_end + 1);
      CHECK(f.text == text.substr(0, stop_start));
    } else {
      CHECK(f.reason == FinishReason::None);
      CHECK(f.deltas.size() == text.size());
    }
  }
}

// The work a token costs must not grow with the text held back for a long stop string: a client
// sends the stop string and, through its prompt, can steer the text, and the processor runs on the
// engine's thread. 200,000 tokens all held by a stop string of 400,001 bytes, then one that ends the
// match, against the same tokens with a 2-byte stop string: comparing the held text's tails with
// the stop string (the first form) made that 4·10^10 byte comparisons, 0.44 s against 0.02 on this
// machine's 2 cores (a 2^20-byte hold would take seconds at one token); following it byte by byte,
// 2·10^5 steps.
TEST_CASE("a long stop string costs a token no more than a short one") {
  const std::vector<int32_t> tokens = [] {
    std::vector<int32_t> t(200000, 'a');
    t.push_back('c');
    return t;
  }();
  const auto seconds = [&](const std::string& stop) {
    const auto start = std::chrono::steady_clock::now();
    const Fed f = feed(with_stops({stop}), tokens, true);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    CHECK(f.text.size() == tokens.size());
    return s;
  };
  const double short_stop = seconds("ab");
  const double long_stop = seconds(std::string(400000, 'a') + "b");
  INFO("short stop string " << short_stop << " s, long " << long_stop << " s");
  CHECK(long_stop < 4 * short_stop + 0.05);
}
