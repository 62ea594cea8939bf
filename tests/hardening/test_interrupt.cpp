// Issue 13: SIGINT / SIGTERM during a batch run.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include <catch2/catch.hpp>
#include <string>

#include "tests/hardening/hostile_cli.hpp"

using namespace kiln::test;
using nlohmann::json;

namespace {

// Starts `command` with stdout and stderr going to `log`; returns its process id.
pid_t spawn(const std::string& command, const std::string& log) {
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const std::string line = "exec " + command + " >" + log + " 2>&1";
    execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

size_t complete_lines(const std::string& path) {
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
}

}  // namespace

// SIGINT / SIGTERM during a batch run: every result finished so far is in the output file as whole
// JSONL lines, the run stops, and the exit code says it was interrupted (128 + the signal).
TEST_CASE("SIGINT or SIGTERM during a batch run keeps the finished results and fails with a summary") {
  for (const int sig : {SIGINT, SIGTERM}) {
    const TempDir dir("kiln-signal");
    std::string lines;
    constexpr int kRequests = 3000;
    for (int i = 0; i < kRequests; ++i) {
      lines += json({{"prompt_ids", {5 + i % 50, 6, 7}}, {"max_tokens", 48}, {"ignore_eos", true}, {"seed", i}}).dump() + "\n";
    }
    const std::string requests = dir.write("requests.jsonl", lines);
    const std::string output = dir.file("results.jsonl"), log = dir.file("log.txt");
    const pid_t pid = spawn(std::string(KILN_TINY_LLAMA) + " --backend ref --random-weights 1 --no-progress --prompts-file " +
                                requests + " --output " + output,
                            log);
    // Wait for some results, so the interruption comes mid-run.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (complete_lines(output) < 3 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    kill(pid, sig);
    int status = 0;
    for (int i = 0; i < 3000 && waitpid(pid, &status, WNOHANG) == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (waitpid(pid, &status, WNOHANG) == 0) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      FAIL("the binary did not stop within 30 s of signal " << sig);
    }
    const std::string log_text = run_command("cat " + log).output;
    INFO("signal " << sig << "\n" << log_text);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 128 + sig);
    CHECK(contains(log_text, "interrupted"));

    std::ifstream in(output);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    REQUIRE(!text.empty());
    CHECK(text.back() == '\n');
    size_t results = 0;
    std::istringstream stream(text);
    for (std::string line; std::getline(stream, line); ++results) {
      const json j = json::parse(line);  // a torn line would not parse
      CHECK(j.contains("output_ids"));
      CHECK(j["output_ids"].size() == 48);
    }
    CHECK(results >= 3);
    CHECK(results < static_cast<size_t>(kRequests));
    CHECK(contains(log_text, std::to_string(results) + " of " + std::to_string(kRequests)));
  }
}
