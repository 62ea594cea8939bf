// kiln-tokenize: encode text to token ids, decode ids to text, run llama.cpp tokenizer test vectors
// and measure encode throughput, with the tokenizer of a tokenizer.json, an HF model directory or
// a GGUF file.
//
//   kiln-tokenize --gguf model.gguf "Hello world"         -> 9906 1917
//   kiln-tokenize --model-dir DIR --file prompt.txt
//   kiln-tokenize --tokenizer tokenizer.json --decode 9906,1917
//   kiln-tokenize --vectors ggml-vocab-gpt-2.gguf          -> 46/46 cases match
//   kiln-tokenize --gguf model.gguf --file book.txt --bench
#include <chrono>
#include <cstdio>
#include <iostream>
#include <iterator>

#include <CLI/CLI.hpp>

#include "runtime/core/error.hpp"
#include "runtime/core/file_io.hpp"
#include "runtime/tokenizer/tokenizer.hpp"
#include "runtime/tokenizer/vector_file.hpp"

namespace {

using kiln::Tokenizer;

std::string read_text(const std::string& path) {
  if (path == "-") return std::string(std::istreambuf_iterator<char>(std::cin), {});
  return kiln::read_file(path);
}

std::string join_ids(const std::vector<int32_t>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ' ';
    out += std::to_string(ids[i]);
  }
  return out;
}

// Shows control characters so that a failing case is readable on one line.
std::string printable(const std::string& text) {
  std::string out;
  for (const char c : text) {
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else out += c;
  }
  return out;
}

int run_vectors(const Tokenizer& tokenizer, const std::string& gguf_path) {
  const auto cases = kiln::read_tokenizer_vectors(gguf_path);
  size_t passed = 0;
  long first_failure = -1;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto ids = tokenizer.encode(cases[i].text);
    if (ids == cases[i].ids) {
      ++passed;
    } else if (first_failure < 0) {
      first_failure = static_cast<long>(i);
    }
  }
  std::printf("%s: %zu/%zu cases match\n", gguf_path.c_str(), passed, cases.size());
  if (first_failure < 0) return 0;
  const auto& bad = cases[first_failure];
  std::printf("first failing case %ld: \"%s\"\n  expected: %s\n  got:      %s\n", first_failure + 1,
              printable(bad.text).c_str(), join_ids(bad.ids).c_str(), join_ids(tokenizer.encode(bad.text)).c_str());
  return 1;
}

void run_bench(const Tokenizer& tokenizer, const std::string& sample, double megabytes) {
  if (sample.empty()) kiln::fail("--bench needs input text (an argument, --file or --vectors)");
  const size_t target = static_cast<size_t>(megabytes * 1e6);
  std::string text;
  text.reserve(target + sample.size());
  while (text.size() < target) text += sample;

  using clock = std::chrono::steady_clock;
  const auto seconds_since = [](clock::time_point start) {
    return std::chrono::duration<double>(clock::now() - start).count();
  };
  const auto report = [&](const char* what, double seconds, size_t tokens) {
    std::printf("%-28s %8.2f MB/s  %10.0f tokens/s  (%zu bytes, %zu tokens, %.3f s)\n", what,
                text.size() / seconds / 1e6, tokens / seconds, text.size(), tokens, seconds);
  };

  tokenizer.set_cache_enabled(false);
  auto start = clock::now();
  const auto uncached = tokenizer.encode(text);
  report("encode, piece cache off", seconds_since(start), uncached.size());

  tokenizer.set_cache_enabled(true);
  start = clock::now();
  const auto ids = tokenizer.encode(text);
  report("encode, piece cache on", seconds_since(start), ids.size());
  if (ids != uncached) kiln::fail("--bench: encoding with and without the cache differ");

  start = clock::now();
  const std::string decoded = tokenizer.decode(ids);
  const double decode_seconds = seconds_since(start);
  std::printf("%-28s %8.2f MB/s  %10.0f tokens/s\n", "decode", decoded.size() / decode_seconds / 1e6,
              ids.size() / decode_seconds);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kiln-tokenize: encode text to token ids, decode ids to text, check test vectors, benchmark"};
  std::string tokenizer_json, model_dir, gguf, file, decode_ids, vectors, text;
  bool add_bos = false, no_parse_special = false, skip_special = false, bench = false, info = false,
       show_tokens = false;
  double bench_mb = 8.0;
  auto* source = app.add_option_group("tokenizer source");
  source->add_option("--tokenizer", tokenizer_json, "tokenizer.json (config files beside it are read too)");
  source->add_option("--model-dir", model_dir, "Hugging Face model directory");
  source->add_option("--gguf", gguf, "GGUF file with tokenizer.ggml.* metadata");
  source->require_option(0, 1);
  const auto* text_option = app.add_option("text", text, "text to encode (default: --file, or stdin)");
  app.add_option("--file", file, "read the text to encode from this file ('-' for stdin)");
  app.add_option("--decode", decode_ids, "token ids to decode, separated by commas or spaces");
  app.add_option("--vectors", vectors,
                 "run NAME.gguf.inp / NAME.gguf.out test vectors (tokenizer from NAME.gguf unless given)");
  app.add_flag("--add-bos", add_bos, "prepend the BOS token when encoding");
  app.add_flag("--no-parse-special", no_parse_special, "treat special-token text as plain text");
  app.add_flag("--skip-special", skip_special, "drop special tokens when decoding");
  app.add_flag("--show-tokens", show_tokens, "print each id with its token text");
  app.add_flag("--info", info, "describe the tokenizer");
  app.add_flag("--bench", bench, "measure encode and decode throughput on the input text");
  app.add_option("--bench-mb", bench_mb, "size of the benchmark text in MB (the input repeated)")->check(
      CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  try {
    if (tokenizer_json.empty() && model_dir.empty() && gguf.empty()) {
      if (vectors.empty()) kiln::fail("no tokenizer: give --tokenizer, --model-dir, --gguf or --vectors");
      gguf = vectors;
    }
    const Tokenizer tokenizer = !tokenizer_json.empty() ? Tokenizer::from_tokenizer_json(tokenizer_json)
                                : !model_dir.empty()    ? Tokenizer::from_model_dir(model_dir)
                                                        : Tokenizer::from_gguf_file(gguf);
    if (info) std::printf("%s\n", tokenizer.describe().c_str());

    if (!decode_ids.empty()) {
      const std::string decoded = tokenizer.decode(kiln::parse_id_list(decode_ids, "--decode"), skip_special);
      std::fwrite(decoded.data(), 1, decoded.size(), stdout);
      std::printf("\n");
      return 0;
    }
    if (!vectors.empty() && !bench) return run_vectors(tokenizer, vectors);

    std::string input;
    if (text_option->count() > 0) {
      input = text;
    } else if (!file.empty()) {
      input = read_text(file);
    } else if (bench && !vectors.empty()) {
      for (const auto& item : kiln::read_tokenizer_vectors(vectors)) input += item.text + "\n";
    } else if (!info || bench) {
      input = read_text("-");
    }
    if (bench) {
      run_bench(tokenizer, input, bench_mb);
      return 0;
    }
    if (input.empty() && info) return 0;
    const auto ids = tokenizer.encode(input, add_bos, !no_parse_special);
    if (show_tokens) {
      for (const int32_t id : ids) {
        std::printf("%d\t%s\n", id, printable(std::string(tokenizer.token_text(id))).c_str());
      }
    } else {
      std::printf("%s\n", join_ids(ids).c_str());
    }
    return 0;
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "kiln-tokenize: %s\n", e.what());
    return 2;
  }
}
