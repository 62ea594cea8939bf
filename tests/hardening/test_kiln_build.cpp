// Issue 13, defect 9: tools/kiln-build of an out-of-tree config whose model name equals an in-tree
// model's generated the new folder but built and printed the in-tree binary. It must refuse,
// naming both, before touching the build folder.
#include <catch2/catch.hpp>

#include <string>

#include "tests/support/run_command.hpp"
#include "tests/support/temp_dir.hpp"

TEST_CASE("kiln-build refuses an out-of-tree config named like an in-tree model") {
  const kiln::test::TempDir dir("kiln-build-name");
  // The folder name is the model name of an HF config.json: "tiny-qwen3", as the in-tree model.
  const std::string config = dir.file("tiny-qwen3/config.json");
  REQUIRE(kiln::test::run_command("cp " + std::string(KILN_SOURCE_DIR) + "/tests/golden/tiny-qwen3/config.json " + config)
              .exit_code == 0);
  const std::string env = "env KILN_BUILD_DIR=" + std::string(KILN_BINARY_DIR) + " ";
  const kiln::test::CommandResult r =
      kiln::test::run_command_limited(env + std::string(KILN_SOURCE_DIR) + "/tools/kiln-build " + config, 300);
  INFO(r.output);
  REQUIRE_FALSE(r.timed_out);
  CHECK(r.exit_code == 1);
  CHECK(r.output.find("tiny-qwen3") != std::string::npos);
  CHECK(r.output.find("--name") != std::string::npos);
  CHECK(r.output.find("bin/tiny-qwen3") == std::string::npos);  // no binary path printed

  // With another name it is not refused for its name (only --print-name: no build here).
  const kiln::test::CommandResult named = kiln::test::run_command(std::string(KILN_BINARY_DIR) + "/bin/kilnc " + config +
                                                                  " --name my-qwen3 --print-name");
  CHECK(named.exit_code == 0);
  CHECK(named.output == "my-qwen3\n");
}
