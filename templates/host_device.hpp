// KILN_HOST_DEVICE: a function the host compiler, nvcc and NVRTC all compile (the plain-C++
// headers shared by kernels and kilnc: kv_layout.hpp, gemv_plan.hpp).
#pragma once

#if defined(__CUDACC__)
#define KILN_HOST_DEVICE __host__ __device__
#else
#define KILN_HOST_DEVICE
#endif
