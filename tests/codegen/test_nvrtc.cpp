// Every generated kernels.cu compiles with NVRTC for the architectures its config targets, and for
// compute_80 PTX (the portable target: no Hopper-only instructions outside guards). No GPU needed.
#include <nvrtc.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "codegen/config_load.hpp"

namespace fs = std::filesystem;

namespace {

std::string read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

struct Compiled {
  bool ok = false;
  std::string log;
  std::string ptx;  // for virtual targets
  size_t cubin_bytes = 0;
};

Compiled compile(const fs::path& file, const std::string& model_dir, const std::string& arch) {
  const std::string source = read(file);
  nvrtcProgram program;
  REQUIRE(nvrtcCreateProgram(&program, source.c_str(), file.string().c_str(), 0, nullptr, nullptr) == NVRTC_SUCCESS);
  const std::string arch_flag = "--gpu-architecture=" + arch;
  const std::string include_repo = std::string("-I") + KILN_SOURCE_DIR;
  const std::string include_model = "-I" + model_dir;
  const std::string include_cuda = std::string("-I") + KILN_CUDA_INCLUDE;
  const std::string include_cccl = std::string("-I") + KILN_CUDA_INCLUDE + "/cccl";
  const char* options[] = {arch_flag.c_str(), "-std=c++20", "-default-device", include_repo.c_str(),
                           include_model.c_str(), include_cuda.c_str(), include_cccl.c_str()};
  Compiled c;
  c.ok = nvrtcCompileProgram(program, 7, options) == NVRTC_SUCCESS;
  size_t size = 0;
  nvrtcGetProgramLogSize(program, &size);
  c.log.resize(size);
  nvrtcGetProgramLog(program, c.log.data());
  if (c.ok && arch.starts_with("compute_")) {
    nvrtcGetPTXSize(program, &size);
    c.ptx.resize(size);
    nvrtcGetPTX(program, c.ptx.data());
  } else if (c.ok) {
    nvrtcGetCUBINSize(program, &c.cubin_bytes);
  }
  nvrtcDestroyProgram(&program);
  return c;
}

}  // namespace

TEST_CASE("every generated kernels.cu compiles with NVRTC") {
  const fs::path root = KILN_SOURCE_DIR;
  int models = 0;
  for (const auto& entry : fs::directory_iterator(root / "generated")) {
    const fs::path kernels = entry.path() / "kernels.cu";
    if (!fs::exists(kernels)) continue;
    ++models;
    const std::string name = entry.path().filename().string();
    const auto spec = kiln::codegen::load_config((root / "configs" / (name + ".yaml")).string());
    // Each wrapper in kernels.cu must instantiate at least one kernel.
    const std::string text = read(kernels);
    const size_t wrappers = count(text, "\nvoid ");
    for (const std::string& arch : spec.build.gpu_archs) {
      INFO("generated/" << name << "/kernels.cu for " << arch);
      const Compiled c = compile(kernels, entry.path().string(), arch);
      INFO(c.log);
      CHECK(c.ok);
      CHECK(c.cubin_bytes > 0);
    }
    INFO("generated/" << name << "/kernels.cu for compute_80 PTX");
    const Compiled ptx = compile(kernels, entry.path().string(), "compute_80");
    INFO(ptx.log);
    REQUIRE(ptx.ok);
    const size_t entries = count(ptx.ptx, ".entry ");
    CHECK(entries >= wrappers);
  }
  CHECK(models > 0);
}
