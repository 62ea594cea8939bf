// Issue 13: the serving soak on the CPU reference backend (tests/support/soak.hpp): 2,000 random
// requests of tiny-llama (random weights) through one engine whose KV pool holds only about three
// of them at once. Every request must finish exactly once, and each output (tokens, finish reason,
// logprobs) must equal the same request's run alone. A difference fails naming the request.
#include <catch2/catch.hpp>

#include <cstdlib>

#include "model.hpp"  // generated/tiny-llama
#include "tests/support/soak.hpp"

using namespace kiln;

TEST_CASE("serving soak: 2000 random requests through a small KV pool finish as if each ran alone") {
  // KILN_SOAK_REQUESTS: fewer in the sanitizer run (tools/test --sanitize), where each step costs
  // twenty times more; the same requests, the first N of them.
  const char* requests = std::getenv("KILN_SOAK_REQUESTS");
  const int count = requests ? std::atoi(requests) : 2000;
  REQUIRE(count >= 100);
  const ModelDef& model = models::tiny_llama::model_def();
  const test::SoakReport r = test::run_soak(model, count, 2024, [&](int32_t kv_pages) {
    return make_ref_backend(model, WeightOrigin{nullptr, 11}, BackendOptions{.kv_pages = kv_pages});
  });
  WARN(r.summary());
  for (const std::string& d : r.differences) WARN(d);
  CHECK(r.finished == r.requests);  // none lost
  CHECK(r.finished_twice == 0);
  CHECK(r.pool_pages < r.needed_pages / 10);  // too small for 10% of the requests at once
  CHECK(r.preemptions >= count / 20);  // and it did preempt
  CHECK(r.pages_in_use_after == 0);
  CHECK(r.differing == 0);
}
