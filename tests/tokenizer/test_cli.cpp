// kiln-tokenize end to end: encode, decode, vectors (pass and fail), errors.
#include <catch2/catch.hpp>

#include "tests/support/run_command.hpp"
#include "tests/tokenizer/tokenizer_test_util.hpp"

namespace {

using Run = kiln::test::CommandResult;

Run run_cli(const std::string& arguments) {
  return kiln::test::run_command(std::string(KILN_BINARY_DIR) + "/bin/kiln-tokenize " + arguments);
}

std::string quoted(const std::string& path) { return "'" + path + "'"; }

}  // namespace

TEST_CASE("kiln-tokenize encodes and decodes") {
  const std::string gpt2 = quoted(kiln::test::vector_gguf("gpt-2"));
  CHECK(run_cli("--gguf " + gpt2 + " 'Hello world'").output == "15496 995\n");
  CHECK(run_cli("--gguf " + gpt2 + " --decode 15496,995").output == "Hello world\n");
  CHECK(run_cli("--gguf " + gpt2 + " < " + quoted(kiln::test::tokenizer_test_dir() + "/fixtures/cli/hello.txt")).output ==
        "15496 995\n");
  CHECK(run_cli("--gguf " + gpt2 + " --file " + quoted(kiln::test::tokenizer_test_dir() + "/fixtures/cli/hello.txt"))
            .output == "15496 995\n");
  CHECK(run_cli("--model-dir " + quoted(kiln::test::fixture_dir("llama3")) + " --add-bos ''").output == "1195\n");
}

TEST_CASE("kiln-tokenize --vectors reports matches, and names the first failing case") {
  const Run pass = run_cli("--vectors " + quoted(kiln::test::vector_gguf("deepseek-llm")));
  CHECK(pass.exit_code == 0);
  CHECK_THAT(pass.output, Catch::Contains("46/46 cases match"));

  const Run fail = run_cli("--gguf " + quoted(kiln::test::vector_gguf("gpt-2")) + " --vectors " +
                           quoted(kiln::test::tokenizer_test_dir() + "/fixtures/cli/wrong-ids.gguf"));
  CHECK(fail.exit_code == 1);
  CHECK_THAT(fail.output, Catch::Contains("1/2 cases match") && Catch::Contains("first failing case 2") &&
                              Catch::Contains("expected: 1 2 3") && Catch::Contains("got:      18435"));
}

TEST_CASE("kiln-tokenize reports errors on one line with exit code 2") {
  const Run missing = run_cli("--gguf /nonexistent/model.gguf hi");
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.output, Catch::StartsWith("kiln-tokenize: ") && Catch::Contains("/nonexistent/model.gguf"));
  const Run bad_ids = run_cli("--gguf " + quoted(kiln::test::vector_gguf("gpt-2")) + " --decode 1,x");
  CHECK(bad_ids.exit_code == 2);
  CHECK_THAT(bad_ids.output, Catch::Contains("--decode"));
}
