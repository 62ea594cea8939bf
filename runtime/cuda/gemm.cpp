// GemmRunner: prefill projections through cuBLASLt.
//
// Row-major out[rows, n] = in[rows, k] · weight[n, k]ᵀ is, read column-major, D[n, rows] =
// W[n, k] · X[k, rows]: A is the weight stored as a column-major [k, n] matrix (lda = k) used
// transposed, B is the input as a column-major [k, rows] matrix (ldb = k), D is [n, rows] (ldd = n).
// A plan (descriptors + the heuristic's algorithm) is built once per shape, mode and operand
// alignment and reused: nothing is allocated per call, so calls can be captured in CUDA graphs.
#include "runtime/cuda/gemm.hpp"

#include <cublasLt.h>

#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "runtime/core/error.hpp"

namespace kiln::cuda {

namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;
// The row count the shared per-shape algorithm is chosen for (a full prefill chunk, where speed
// matters most), and the row counts it must also run at.
constexpr int kReferenceRows = 2048;
constexpr int kProbeRows[] = {1, 2, 3, 4, 5, 7, 8, 13, 16, 31, 64, 100, 513, 1000, 2048};

const char* mode_name(GemmOut mode) {
  switch (mode) {
    case GemmOut::store_bf16: return "store_bf16";
    case GemmOut::add_f32: return "add_f32";
    case GemmOut::store_f32: return "store_f32";
  }
  return "unknown";
}

struct Shape {
  int rows, n, k;
  GemmOut mode;
};

void check(cublasStatus_t status, const char* call, const Shape& s) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    fail("cuBLASLt ", call, " failed with ", cublasLtGetStatusName(status), " (", cublasLtGetStatusString(status),
         ") for gemm rows=", s.rows, " n=", s.n, " k=", s.k, " mode=", mode_name(s.mode));
  }
}

// Largest power of two (up to 256) dividing the address: cuBLASLt picks kernels by operand alignment.
uint32_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

struct PlanKey {
  int rows, n, k;
  GemmOut mode;
  uint32_t align_in, align_weight, align_out;
  bool operator<(const PlanKey& o) const {
    return std::tie(rows, n, k, mode, align_in, align_weight, align_out) <
           std::tie(o.rows, o.n, o.k, o.mode, o.align_in, o.align_weight, o.align_out);
  }
};

struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  float beta = 0.0f;

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

}  // namespace

struct GemmRunner::State {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::map<PlanKey, Plan> plans;
  std::map<PlanKey, cublasLtMatmulAlgo_t> algos;  // rows = 0: one per shape, for every row count

  const Plan& plan(const PlanKey& key) {
    auto found = plans.find(key);
    if (found != plans.end()) return found->second;
    const Shape s{key.rows, key.n, key.k, key.mode};
    Plan& p = plans[key];
    try {
      build(key, s, p);
    } catch (...) {
      plans.erase(key);
      throw;
    }
    return p;
  }

  void build(const PlanKey& key, const Shape& s, Plan& p) {
    const cudaDataType_t out_type = key.mode == GemmOut::store_bf16 ? CUDA_R_16BF : CUDA_R_32F;
    p.beta = key.mode == GemmOut::add_f32 ? 1.0f : 0.0f;
    check(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate", s);
    const cublasOperation_t transpose = CUBLAS_OP_T, no_transpose = CUBLAS_OP_N;
    check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof transpose),
          "cublasLtMatmulDescSetAttribute(TRANSA)", s);
    check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &no_transpose, sizeof no_transpose),
          "cublasLtMatmulDescSetAttribute(TRANSB)", s);
    check(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, key.k, key.n, key.k), "cublasLtMatrixLayoutCreate(A)", s);
    check(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, key.k, key.rows, key.k), "cublasLtMatrixLayoutCreate(B)", s);
    check(cublasLtMatrixLayoutCreate(&p.d, out_type, key.n, key.rows, key.n), "cublasLtMatrixLayoutCreate(D)", s);

    p.algo = algorithm(key, s, p);
  }

  // One algorithm per (n, k, mode, alignments), reused for every row count, with split-K
  // reductions excluded: each output element then accumulates over k in the same order whatever
  // the number of rows, so a token's projection does not depend on what else shares the step
  // (kiln's outputs equal each request run alone). Of the heuristic's candidates at the reference
  // row count, the first one that runs at every probe row count is kept (a small count that could
  // not run it would otherwise get an algorithm of its own, and round differently).
  cublasLtMatmulAlgo_t algorithm(const PlanKey& key, const Shape& s, const Plan& p) {
    PlanKey shape_key = key;
    shape_key.rows = 0;
    auto known = algos.find(shape_key);
    if (known == algos.end()) known = algos.emplace(shape_key, shared_algorithm(key, s, p.op, p.a)).first;
    cublasLtMatmulHeuristicResult_t check_result{};
    if (cublasLtMatmulAlgoCheck(handle, p.op, p.a, p.b, p.d, p.d, &known->second, &check_result) != CUBLAS_STATUS_SUCCESS) {
      fail("cuBLASLt: the algorithm shared by every row count of gemm n=", s.n, " k=", s.k, " mode=", mode_name(s.mode),
           " does not run at rows=", s.rows, " (it was checked at 1..", kReferenceRows, " rows)");
    }
    return known->second;
  }

  cublasLtMatmulAlgo_t shared_algorithm(const PlanKey& key, const Shape& s, cublasLtMatmulDesc_t op,
                                        cublasLtMatrixLayout_t a) {
    const cudaDataType_t out_type = key.mode == GemmOut::store_bf16 ? CUDA_R_16BF : CUDA_R_32F;
    auto layouts = [&](int rows) {
      cublasLtMatrixLayout_t b = nullptr, d = nullptr;
      check(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, key.k, rows, key.k), "cublasLtMatrixLayoutCreate(B)", s);
      check(cublasLtMatrixLayoutCreate(&d, out_type, key.n, rows, key.n), "cublasLtMatrixLayoutCreate(D)", s);
      return std::pair{b, d};
    };
    auto release = [](std::pair<cublasLtMatrixLayout_t, cublasLtMatrixLayout_t> l) {
      cublasLtMatrixLayoutDestroy(l.first);
      cublasLtMatrixLayoutDestroy(l.second);
    };
    const auto reference = layouts(kReferenceRows);
    const std::vector<cublasLtMatmulHeuristicResult_t> candidates =
        heuristic(key, s, op, a, reference.first, reference.second, 16);
    release(reference);
    for (const auto& candidate : candidates) {
      bool runs_everywhere = true;
      for (int rows : kProbeRows) {
        const auto probe = layouts(rows);
        cublasLtMatmulHeuristicResult_t r{};
        runs_everywhere &= cublasLtMatmulAlgoCheck(handle, op, a, probe.first, probe.second, probe.second,
                                                   &candidate.algo, &r) == CUBLAS_STATUS_SUCCESS;
        release(probe);
        if (!runs_everywhere) break;
      }
      if (runs_everywhere) return candidate.algo;
    }
    fail("cuBLASLt has no split-K-free algorithm for gemm n=", s.n, " k=", s.k, " mode=", mode_name(s.mode),
         " that runs at every row count 1..", kReferenceRows);
  }

  std::vector<cublasLtMatmulHeuristicResult_t> heuristic(const PlanKey& key, const Shape& s, cublasLtMatmulDesc_t op,
                                                         cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                                         cublasLtMatrixLayout_t d, int count) {
    cublasLtMatmulPreference_t pref = nullptr;
    check(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate", s);
    struct PrefGuard {
      cublasLtMatmulPreference_t p;
      ~PrefGuard() { cublasLtMatmulPreferenceDestroy(p); }
    } guard{pref};
    const uint64_t workspace = kWorkspaceBytes;
    check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                               sizeof workspace),
          "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)", s);
    const uint32_t no_split_k = CUBLASLT_REDUCTION_SCHEME_NONE;
    check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &no_split_k,
                                               sizeof no_split_k),
          "cublasLtMatmulPreferenceSetAttribute(REDUCTION_SCHEME_MASK)", s);
    const struct {
      cublasLtMatmulPreferenceAttributes_t attribute;
      uint32_t value;
      const char* name;
    } alignments[] = {
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_weight, "MIN_ALIGNMENT_A_BYTES"},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_in, "MIN_ALIGNMENT_B_BYTES"},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_out, "MIN_ALIGNMENT_C_BYTES"},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_out, "MIN_ALIGNMENT_D_BYTES"},
    };
    for (const auto& al : alignments) {
      check(cublasLtMatmulPreferenceSetAttribute(pref, al.attribute, &al.value, sizeof al.value), al.name, s);
    }

    std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(count));
    int found = 0;
    check(cublasLtMatmulAlgoGetHeuristic(handle, op, a, b, d, d, pref, count, results.data(), &found),
          "cublasLtMatmulAlgoGetHeuristic", s);
    if (found == 0) {
      fail("cuBLASLt has no algorithm for gemm rows=", s.rows, " n=", s.n, " k=", s.k, " mode=", mode_name(s.mode),
           " (operand alignments in/weight/out: ", key.align_in, "/", key.align_weight, "/", key.align_out,
           " bytes)");
    }
    results.resize(static_cast<size_t>(found));
    return results;
  }
};

GemmRunner::GemmRunner() : state_(std::make_unique<State>()) {
  const Shape none{0, 0, 0, GemmOut::store_bf16};
  check(cublasLtCreate(&state_->handle), "cublasLtCreate", none);
  const cudaError_t status = cudaMalloc(&state_->workspace, kWorkspaceBytes);
  if (status != cudaSuccess) {
    cublasLtDestroy(state_->handle);
    fail("cudaMalloc of the 32 MiB cuBLASLt workspace failed: ", cudaGetErrorString(status));
  }
}

GemmRunner::~GemmRunner() {
  state_->plans.clear();
  cudaFree(state_->workspace);
  cublasLtDestroy(state_->handle);
}

void GemmRunner::run(const __nv_bfloat16* in, const __nv_bfloat16* weight, void* out, int rows, int n, int k,
                     GemmOut mode, cudaStream_t stream) {
  if (rows == 0) return;
  if (rows < 0 || n <= 0 || k <= 0) {
    fail("gemm: expected rows >= 0 and positive n, k; got rows=", rows, " n=", n, " k=", k);
  }
  const PlanKey key{rows, n, k, mode, alignment_of(in), alignment_of(weight), alignment_of(out)};
  const Plan& p = state_->plan(key);
  const float alpha = 1.0f;
  check(cublasLtMatmul(state_->handle, p.op, &alpha, weight, p.a, in, p.b, &p.beta, out, p.d, out, p.d, &p.algo,
                       state_->workspace, kWorkspaceBytes, stream),
        "cublasLtMatmul", Shape{rows, n, k, mode});
}

}  // namespace kiln::cuda
