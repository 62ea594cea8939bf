// Turns a failed CUDA runtime call into kiln::Error, naming the call (or what it was for).
#pragma once

#include <cuda_runtime.h>

#include <string_view>

#include "runtime/core/error.hpp"

namespace kiln {

inline void check_cuda(cudaError_t status, std::string_view what) {
  if (status != cudaSuccess) {
    fail("CUDA error ", cudaGetErrorName(status), " (", cudaGetErrorString(status), ") in ", what);
  }
}

#define KILN_CUDA_STRINGIFY_(x) #x
#define KILN_CUDA_STRINGIFY(x) KILN_CUDA_STRINGIFY_(x)
// KILN_CUDA(cudaMalloc(...)): the call's text and its file:line name the failure.
#define KILN_CUDA(call) ::kiln::check_cuda((call), #call " at " __FILE__ ":" KILN_CUDA_STRINGIFY(__LINE__))

}  // namespace kiln
