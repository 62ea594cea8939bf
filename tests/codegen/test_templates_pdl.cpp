// KILN_LAUNCH launches every template kernel as a programmatic dependent of the kernel before it
// (templates/common.cuh): such a kernel may start while its predecessor still runs, and only its
// wait orders it after the stream. A kernel without the wait would race with the one before;
// one that returns (`return;`) before it would let the kernel after it pass its own wait early.
// This reads every __global__ of templates/ and checks both: a wait in the body, and no
// `return;` before it. (What a kernel reads before its wait, weights only, is left to review.)
#include <catch2/catch.hpp>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <string>

namespace fs = std::filesystem;

namespace {

std::string without_line_comments(const std::string& text) {
  static const std::regex comment("//[^\n]*");
  return std::regex_replace(text, comment, "");
}

// The body of the function whose declaration starts at `at`: from its first '{' to the matching '}'.
std::string body_at(const std::string& text, size_t at) {
  const size_t open = text.find('{', at);
  if (open == std::string::npos) return {};
  int depth = 0;
  for (size_t i = open; i < text.size(); ++i) {
    if (text[i] == '{') ++depth;
    if (text[i] == '}' && --depth == 0) return text.substr(open, i + 1 - open);
  }
  return {};
}

std::string kernel_name(const std::string& text, size_t at) {
  size_t paren = text.find('(', at);
  auto name_before = [&](size_t end) {
    size_t begin = end;
    while (begin > 0 && (std::isalnum(static_cast<unsigned char>(text[begin - 1])) || text[begin - 1] == '_')) --begin;
    return text.substr(begin, end - begin);
  };
  if (name_before(paren) == "__launch_bounds__") paren = text.find('(', text.find(')', paren) + 1);
  return name_before(paren);
}

}  // namespace

TEST_CASE("every template kernel waits on the kernel before it before any return", "[codegen][pdl]") {
  int kernels = 0;
  for (const auto& entry : fs::recursive_directory_iterator(fs::path(KILN_SOURCE_DIR) / "templates")) {
    if (entry.path().extension() != ".cuh") continue;
    std::ifstream in(entry.path());
    const std::string text =
        without_line_comments({std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()});
    for (size_t at = text.find("__global__"); at != std::string::npos; at = text.find("__global__", at + 1)) {
      const std::string body = body_at(text, at);
      const std::string where = entry.path().filename().string() + ": " + kernel_name(text, at);
      INFO(where);
      REQUIRE(!body.empty());
      // pdl_release_and_wait() or a plain pdl_wait().
      static const std::regex wait_call("\\bpdl_(release_and_)?wait\\s*\\(");
      std::smatch found;
      const bool waits = std::regex_search(body, found, wait_call);
      CHECK(waits);
      const size_t wait = waits ? static_cast<size_t>(found.position(0)) : std::string::npos;
      // A kernel returns void: `return;` (a lambda's `return value;` before the wait is not one).
      static const std::regex return_word("\\breturn\\s*;");
      CHECK_FALSE(std::regex_search(body.substr(0, wait), return_word));
      ++kernels;
    }
  }
  CHECK(kernels >= 25);  // the walk found the templates (27 kernels when this was written)
}

// A non-coherent load (__ldg, ld.global.nc) promises that nothing writes its data while the kernel
// runs; ptxas acts on it and may issue the load before the PDL wait (it did: a quantized GEMV read
// its input rows before the RMSNorm that wrote them had finished; mma.cuh's load_after_wait_16).
// So __ldg is for weights and host-written step arrays only, in the files listed here, and the
// GEMVs read their activations coherently (RowLoad::after_wait).
TEST_CASE("templates read non-coherently only data no kernel of the step writes", "[codegen][pdl]") {
  const std::set<std::string> ldg_allowed = {
      "quant_values.cuh",  // the quantized matrices' scales (weights)
      "prefill_kv.cuh",    // the block tables (written by the host before the step)
      "mma.cuh",           // load_row_chunk's narrow (kK % 8 != 0) weight loads
  };
  int files = 0;
  for (const auto& entry : fs::recursive_directory_iterator(fs::path(KILN_SOURCE_DIR) / "templates")) {
    const std::string ext = entry.path().extension().string();
    if (ext != ".cuh" && ext != ".inc" && ext != ".hpp") continue;
    std::ifstream in(entry.path());
    const std::string text =
        without_line_comments({std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()});
    const std::string name = entry.path().filename().string();
    INFO(name);
    if (!ldg_allowed.contains(name)) CHECK(text.find("__ldg(") == std::string::npos);
    ++files;
  }
  CHECK(files >= 30);
}
