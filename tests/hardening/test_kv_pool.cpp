// Issue 13: KV pools too large for the machine (defect 5) or too small for a request (defect 10).
#include <catch2/catch.hpp>
#include <string>

#include "tests/hardening/hostile_cli.hpp"

using namespace kiln::test;
using nlohmann::json;

// Defect 5: a KV pool far larger than the machine ended in "internal error: std::bad_alloc".
TEST_CASE("a KV pool larger than the machine's memory (--kv-pages) is a clear error before allocating") {
  const CommandResult r = tiny_llama("--random-weights 1 --prompt-ids 1,2 --max-tokens 1 --kv-pages 2000000000");
  CHECK(r.exit_code == 1);
  CHECK(contains(r.output, "--kv-pages 2000000000"));
  CHECK_FALSE(contains(r.output, "internal error"));
  CHECK_FALSE(contains(r.output, "bad_alloc"));
}

// Defect 10: a request cut short because the whole KV pool is smaller than its context was
// reported as max_context with exit code 0.
TEST_CASE("a request that outgrows the whole KV pool is reported as such, with a failing exit code") {
  // tiny-llama: pages of 8 tokens; 3 prompt tokens leave room for 5 of the 20 asked for.
  const CommandResult r = tiny_llama(
      "--random-weights 1 --prompt-ids 5,6,7 --max-tokens 20 --temperature 0 --ignore-eos --kv-pages 1 "
      "--output-format json");
  CHECK(r.exit_code == 1);
  CHECK(contains(r.output, "--kv-pages"));
  const json j = report_of(r);
  CHECK(j["requests"][0]["finish_reason"] == "kv_pool_full");
  CHECK(j["requests"][0]["output_ids"].size() == 5);

  const CommandResult text = tiny_llama("--random-weights 1 --prompt-ids 5,6,7 --max-tokens 20 --ignore-eos --kv-pages 1");
  CHECK(text.exit_code == 1);
  CHECK(contains(text.output, "KV"));
}

