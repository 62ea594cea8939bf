// Compiles CUDA source with NVRTC the way CI checks kernels (no GPU needed): -default-device,
// C++20, the repository root, the CUDA include folder and CCCL on the include path.
#pragma once

#include <string>
#include <vector>

namespace kiln::test {

struct NvrtcResult {
  bool ok = false;
  std::string log;         // NVRTC's messages (warnings included)
  std::string ptx;         // for a virtual architecture (compute_XX)
  size_t cubin_bytes = 0;  // for a real one (sm_XX)
};

// `name` is the file name NVRTC reports in messages; `arch` e.g. "sm_90a" or "compute_80";
// `include_dirs` come after the repository root (e.g. a generated model's folder); `extra_options`
// end the command line (e.g. "-Ofc=max").
NvrtcResult nvrtc_compile(const std::string& source, const std::string& name, const std::string& arch,
                          const std::vector<std::string>& include_dirs = {},
                          const std::vector<std::string>& extra_options = {});

// Catch2 checks that `source` compiles for `arch` without a warning in NVRTC's log, to a non-empty
// cubin (sm_XX) or non-empty PTX (compute_XX). The log is shown on failure.
void check_nvrtc_clean(const std::string& source, const std::string& name, const std::string& arch);

}  // namespace kiln::test
