#include "tests/support/nvrtc_compile.hpp"

#include <catch2/catch.hpp>
#include <nvrtc.h>

#include <stdexcept>

namespace kiln::test {

NvrtcResult nvrtc_compile(const std::string& source, const std::string& name, const std::string& arch,
                          const std::vector<std::string>& include_dirs, const std::vector<std::string>& extra_options) {
  nvrtcProgram program = nullptr;
  if (nvrtcCreateProgram(&program, source.c_str(), name.c_str(), 0, nullptr, nullptr) != NVRTC_SUCCESS) {
    throw std::runtime_error("nvrtcCreateProgram failed for " + name);
  }
  const std::string cuda_include = KILN_CUDA_INCLUDE_DIR;
  std::vector<std::string> options = {"-default-device", "--gpu-architecture=" + arch, "-std=c++20",
                                      std::string("-I") + KILN_SOURCE_DIR};
  for (const std::string& dir : include_dirs) options.push_back("-I" + dir);
  options.push_back("-I" + cuda_include);
  options.push_back("-I" + cuda_include + "/cccl");
  options.insert(options.end(), extra_options.begin(), extra_options.end());
  std::vector<const char*> argv;
  for (const std::string& o : options) argv.push_back(o.c_str());

  NvrtcResult r;
  r.ok = nvrtcCompileProgram(program, static_cast<int>(argv.size()), argv.data()) == NVRTC_SUCCESS;
  size_t size = 0;
  nvrtcGetProgramLogSize(program, &size);
  r.log.resize(size);
  nvrtcGetProgramLog(program, r.log.data());
  if (r.ok && arch.starts_with("compute_")) {
    nvrtcGetPTXSize(program, &size);
    r.ptx.resize(size);
    nvrtcGetPTX(program, r.ptx.data());
  } else if (r.ok) {
    nvrtcGetCUBINSize(program, &r.cubin_bytes);
  }
  nvrtcDestroyProgram(&program);
  return r;
}

void check_nvrtc_clean(const std::string& source, const std::string& name, const std::string& arch) {
  const NvrtcResult c = nvrtc_compile(source, name, arch);
  INFO(name << " for " << arch << ":\n" << c.log);
  REQUIRE(c.ok);
  CHECK(c.log.find("warning") == std::string::npos);
  if (arch.starts_with("compute_")) {
    CHECK(!c.ptx.empty());
  } else {
    CHECK(c.cubin_bytes > 0);
  }
}

}  // namespace kiln::test
