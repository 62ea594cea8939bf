// GemmRunner: prefill projections through cuBLASLt.
//
// Row-major out[rows, n] = in[rows, k] · weight[n, k]ᵀ is, read column-major, D[n, rows] =
// W[n, k] · X[k, rows]: A is the weight stored as a column-major [k, n] matrix (lda = k) used
// transposed, B is the input as a column-major [k, rows] matrix (ldb = k), D is [n, rows] (ldd = n).
// A plan (descriptors + the heuristic's algorithm) is built once per shape, mode and operand
// alignment, plus two layouts per row count, and reused: nothing is allocated per call, so calls
// can be captured in CUDA graphs. The prefill's plans share one algorithm over every row count
// (shared_algorithm); a decode step's (run_decode) are chosen for their one row count.
#include "runtime/cuda/gemm.hpp"

#include <cublasLt.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <span>
#include <tuple>
#include <vector>

#include "runtime/core/error.hpp"

namespace kiln::cuda {

// Named, not anonymous: GemmRunner::State (a member of an exported class) holds a map of these.
namespace gemm_plans {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;
// The row count the shared per-shape algorithm is chosen for (a full prefill chunk, where speed
// matters most), and the row counts it must also run at.
constexpr int kReferenceRows = 2048;
constexpr int kProbeRows[] = {1, 2, 3, 4, 5, 7, 8, 13, 16, 31, 64, 100, 513, 1000, 2048};
constexpr int kFp8ProbeRows[] = {4, 8, 12, 16, 32, 64, 100, 512, 1000, 2048};  // multiples of kFp8GemmRows

const char* mode_name(LinearOut mode) {
  switch (mode) {
    case LinearOut::store_bf16: return "store_bf16";
    case LinearOut::add_f32: return "add_f32";
    case LinearOut::store_f32: return "store_f32";
  }
  return "unknown";
}

// The longest weight (n) an FP8 GEMM with per-token scales takes: the length of the vector of
// ones that stands for its per-channel scales (Llama-3.1-70B's gate|up is 57,344).
constexpr int kMaxOuterN = 1 << 18;

// The operands a GEMM takes: bf16 (run); E4M3 with block scales, the weight's per 128 × 128 and the
// input's per 128 columns of a row (run_fp8 with scale tensors); E4M3 with one scale per weight and
// one per token (run_fp8 with a weight scale).
enum class GemmOperands { bf16, fp8_blocks, fp8_per_token };

// Operand alignments are part of the key: cuBLASLt picks kernels by them.
struct ShapeKey {
  int n, k;
  LinearOut mode;
  uint32_t align_in, align_weight, align_out;
  GemmOperands operands = GemmOperands::bf16;
  // 0: the prefill's plan, one algorithm for every row count; else a decode step's, for that count.
  int decode_rows = 0;
  bool operator<(const ShapeKey& o) const {
    return std::tie(n, k, mode, align_in, align_weight, align_out, operands, decode_rows) <
           std::tie(o.n, o.k, o.mode, o.align_in, o.align_weight, o.align_out, o.operands, o.decode_rows);
  }
  bool fp8() const { return operands != GemmOperands::bf16; }
  cudaDataType_t in_type() const { return fp8() ? CUDA_R_8F_E4M3 : CUDA_R_16BF; }
  cudaDataType_t out_type() const { return mode == LinearOut::store_bf16 ? CUDA_R_16BF : CUDA_R_32F; }
};

void check(cublasStatus_t status, const char* call, const ShapeKey& s, int rows) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    fail("cuBLASLt ", call, " failed with ", cublasLtGetStatusName(status), " (", cublasLtGetStatusString(status),
         ") for gemm rows=", rows, " n=", s.n, " k=", s.k, " mode=", mode_name(s.mode));
  }
}

// Largest power of two (up to 256) dividing the address: cuBLASLt picks kernels by operand alignment.
uint32_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

// The B (input) and D (output) layouts of one row count.
struct RowLayouts {
  cublasLtMatrixLayout_t b = nullptr, d = nullptr;

  RowLayouts(const ShapeKey& s, int rows) {
    check(cublasLtMatrixLayoutCreate(&b, s.in_type(), s.k, rows, s.k), "cublasLtMatrixLayoutCreate(B)", s, rows);
    try {
      check(cublasLtMatrixLayoutCreate(&d, s.out_type(), s.n, rows, s.n), "cublasLtMatrixLayoutCreate(D)", s, rows);
    } catch (...) {
      cublasLtMatrixLayoutDestroy(b);
      throw;
    }
  }
  RowLayouts(const RowLayouts&) = delete;
  RowLayouts& operator=(const RowLayouts&) = delete;
  ~RowLayouts() {
    cublasLtMatrixLayoutDestroy(d);
    cublasLtMatrixLayoutDestroy(b);
  }
};

// Everything of a shape that does not depend on the row count: the operation, the weight's layout
// and one algorithm; then the row layouts of each row count seen.
struct ShapePlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr;
  cublasLtMatmulAlgo_t algo{};
  float beta = 0.0f;
  std::map<int, RowLayouts> rows;

  ShapePlan() = default;
  ShapePlan(const ShapePlan&) = delete;
  ShapePlan& operator=(const ShapePlan&) = delete;
  ~ShapePlan() {
    rows.clear();
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

}  // namespace gemm_plans

using namespace gemm_plans;

struct GemmRunner::State {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  // kMaxOuterN ones: the per-channel scales of the per-token FP8 GEMMs (cuBLASLt wants the vector
  // aligned: 4 bytes past an alignment it returned NOT_SUPPORTED).
  float* ones = nullptr;
  std::map<ShapeKey, ShapePlan> plans;

  // The plan of a shape and the layouts of a row count, built on first use. The first use of a
  // row count checks that the shape's algorithm runs there.
  std::pair<const ShapePlan&, const RowLayouts&> plan(const ShapeKey& key, int rows) {
    auto found = plans.find(key);
    if (found == plans.end()) {
      found = plans.try_emplace(key).first;
      try {
        build(key, found->second);
      } catch (...) {
        plans.erase(found);
        throw;
      }
    }
    ShapePlan& p = found->second;
    auto layouts = p.rows.find(rows);
    if (layouts == p.rows.end()) {
      layouts = p.rows.try_emplace(rows, key, rows).first;
      cublasLtMatmulHeuristicResult_t result{};
      if (cublasLtMatmulAlgoCheck(handle, p.op, p.a, layouts->second.b, layouts->second.d, layouts->second.d, &p.algo,
                                  &result) != CUBLAS_STATUS_SUCCESS) {
        p.rows.erase(layouts);
        if (key.decode_rows > 0) {
          fail("cuBLASLt: the algorithm its heuristic chose for a decode step of gemm rows=", rows, " n=", key.n,
               " k=", key.k, " mode=", mode_name(key.mode), " does not run there");
        }
        fail("cuBLASLt: the algorithm shared by every row count of gemm n=", key.n, " k=", key.k,
             " mode=", mode_name(key.mode), " does not run at rows=", rows, " (it was checked at 1..",
             kReferenceRows, " rows)");
      }
    }
    return {p, layouts->second};
  }

  void build(const ShapeKey& key, ShapePlan& p) {
    p.beta = key.mode == LinearOut::add_f32 ? 1.0f : 0.0f;
    check(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate", key, 0);
    const cublasOperation_t transpose = CUBLAS_OP_T, no_transpose = CUBLAS_OP_N;
    check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof transpose),
          "cublasLtMatmulDescSetAttribute(TRANSA)", key, 0);
    check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &no_transpose, sizeof no_transpose),
          "cublasLtMatmulDescSetAttribute(TRANSB)", key, 0);
    check(cublasLtMatrixLayoutCreate(&p.a, key.in_type(), key.k, key.n, key.k), "cublasLtMatrixLayoutCreate(A)", key, 0);
    if (key.operands == GemmOperands::fp8_per_token) {
      // One scale for the whole weight and one per token: cuBLASLt's per-channel × per-token
      // (OUTER_VEC) kernel, with the channels' vector all ones and the weight's scale as alpha (from
      // the host: with alpha a device pointer the same GEMM ran 16% slower). cuBLASLt 13.1 has no
      // kernel for a scalar weight scale beside per-token ones, nor for per-token ones beside 128 ×
      // 128 blocks (probed on an H200, bench/RESULTS.md eighteenth session).
      const cublasLtMatmulMatrixScale_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
      check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof mode),
            "cublasLtMatmulDescSetAttribute(A_SCALE_MODE)", key, 0);
      check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof mode),
            "cublasLtMatmulDescSetAttribute(B_SCALE_MODE)", key, 0);
      set_scales(key, p, ones, static_cast<const float*>(workspace));
    } else if (key.operands == GemmOperands::fp8_blocks) {
      // The weight's scales per 128 × 128 block ([n / 128][k / 128]: templates/weight_matrix.hpp's
      // fp8 layout), the input's per 128 columns of a row ([k / 128][rows]: templates/fp8_rows.hpp). Both
      // layouts found by a probe against a reference on an H200 (cuBLASLt 13.1). The pointers are
      // set per call (set_scales); the workspace stands in while the plan is chosen.
      const cublasLtMatmulMatrixScale_t weight_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
      const cublasLtMatmulMatrixScale_t input_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
      check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &weight_mode, sizeof weight_mode),
            "cublasLtMatmulDescSetAttribute(A_SCALE_MODE)", key, 0);
      check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &input_mode, sizeof input_mode),
            "cublasLtMatmulDescSetAttribute(B_SCALE_MODE)", key, 0);
      set_scales(key, p, static_cast<const float*>(workspace), static_cast<const float*>(workspace));
    }
    p.algo = key.decode_rows > 0 ? decode_algorithm(key, p.op, p.a) : shared_algorithm(key, p.op, p.a);
  }

  void set_scales(const ShapeKey& key, const ShapePlan& p, const float* weight_scales, const float* input_scales) {
    check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &weight_scales, sizeof weight_scales),
          "cublasLtMatmulDescSetAttribute(A_SCALE_POINTER)", key, 0);
    check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &input_scales, sizeof input_scales),
          "cublasLtMatmulDescSetAttribute(B_SCALE_POINTER)", key, 0);
  }

  // One algorithm per (n, k, mode, alignments), used for every row count, with split-K reductions
  // excluded: each output element then accumulates over k in the same order whatever the number of
  // rows, so a token's projection does not depend on what else shares the step (kiln's outputs
  // equal each request run alone). Of the heuristic's candidates at the reference row count, the
  // first one that runs at every probe row count is kept (a small count that could not run it
  // would otherwise need an algorithm of its own, and round differently).
  cublasLtMatmulAlgo_t shared_algorithm(const ShapeKey& key, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a) {
    std::vector<cublasLtMatmulHeuristicResult_t> candidates;
    {
      const RowLayouts reference(key, kReferenceRows);
      candidates = heuristic(key, op, a, reference, 16, /*split_k=*/false);
    }
    for (const auto& candidate : candidates) {
      bool runs_everywhere = true;
      for (int rows : key.fp8() ? std::span<const int>(kFp8ProbeRows) : std::span<const int>(kProbeRows)) {
        const RowLayouts probe(key, rows);
        cublasLtMatmulHeuristicResult_t r{};
        runs_everywhere = cublasLtMatmulAlgoCheck(handle, op, a, probe.b, probe.d, probe.d, &candidate.algo, &r) ==
                          CUBLAS_STATUS_SUCCESS;
        if (!runs_everywhere) break;
      }
      if (runs_everywhere) return candidate.algo;
    }
    fail("cuBLASLt has no split-K-free algorithm for gemm n=", key.n, " k=", key.k, " mode=", mode_name(key.mode),
         " that runs at every row count 1..", kReferenceRows);
  }

  // A decode step's algorithm: the heuristic's first for its row count, split-K reductions allowed.
  // Past one GEMV pass (cuda::decode_on_gemm) a step's sums already depend on its batch, and at a
  // few hundred rows the prefill's algorithm (chosen at 2,048) leaves most SMs idle on the narrow
  // projections: Llama-3.1-8B's down_proj (n 4,096, k 14,336) at 256 rows makes 32-64 output tiles
  // for 132 SMs. cuBLASLt's split-K adds its parts in a fixed order: the same step gives the same
  // bits on every run.
  cublasLtMatmulAlgo_t decode_algorithm(const ShapeKey& key, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a) {
    const RowLayouts layouts(key, key.decode_rows);
    return heuristic(key, op, a, layouts, 1, /*split_k=*/true).front().algo;
  }

  std::vector<cublasLtMatmulHeuristicResult_t> heuristic(const ShapeKey& key, cublasLtMatmulDesc_t op,
                                                         cublasLtMatrixLayout_t a, const RowLayouts& l, int count,
                                                         bool split_k) {
    const int rows = key.decode_rows > 0 ? key.decode_rows : kReferenceRows;
    cublasLtMatmulPreference_t pref = nullptr;
    check(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate", key, rows);
    struct PrefGuard {
      cublasLtMatmulPreference_t p;
      ~PrefGuard() { cublasLtMatmulPreferenceDestroy(p); }
    } guard{pref};
    const uint64_t workspace = kWorkspaceBytes;
    const uint32_t reductions = split_k ? CUBLASLT_REDUCTION_SCHEME_MASK : CUBLASLT_REDUCTION_SCHEME_NONE;
    const struct {
      cublasLtMatmulPreferenceAttributes_t attribute;
      const void* value;
      size_t size;
      const char* name;
    } preferences[] = {
        {CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace, "MAX_WORKSPACE_BYTES"},
        {CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reductions, sizeof reductions, "REDUCTION_SCHEME_MASK"},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &key.align_weight, sizeof key.align_weight, "MIN_ALIGNMENT_A_BYTES"},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &key.align_in, sizeof key.align_in, "MIN_ALIGNMENT_B_BYTES"},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &key.align_out, sizeof key.align_out, "MIN_ALIGNMENT_C_BYTES"},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &key.align_out, sizeof key.align_out, "MIN_ALIGNMENT_D_BYTES"},
    };
    for (const auto& pr : preferences) {
      check(cublasLtMatmulPreferenceSetAttribute(pref, pr.attribute, pr.value, pr.size), pr.name, key, rows);
    }

    std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(count));
    int found = 0;
    check(cublasLtMatmulAlgoGetHeuristic(handle, op, a, l.b, l.d, l.d, pref, count, results.data(), &found),
          "cublasLtMatmulAlgoGetHeuristic", key, rows);
    if (found == 0) {
      fail("cuBLASLt has no algorithm for gemm rows=", rows, " n=", key.n, " k=", key.k, " mode=", mode_name(key.mode),
           " (operand alignments in/weight/out: ", key.align_in, "/", key.align_weight, "/", key.align_out,
           " bytes)");
    }
    results.resize(static_cast<size_t>(found));
    return results;
  }
};

GemmRunner::GemmRunner() : state_(std::make_unique<State>()) {
  const cublasStatus_t created = cublasLtCreate(&state_->handle);
  if (created != CUBLAS_STATUS_SUCCESS) fail("cublasLtCreate failed with ", cublasLtGetStatusName(created));
  const cudaError_t status = cudaMalloc(&state_->workspace, kWorkspaceBytes);
  if (status != cudaSuccess) {
    cublasLtDestroy(state_->handle);
    fail("cudaMalloc of the 32 MiB cuBLASLt workspace failed: ", cudaGetErrorString(status));
  }
  const std::vector<float> ones(kMaxOuterN, 1.0f);
  cudaError_t made = cudaMalloc(&state_->ones, ones.size() * 4);
  if (made == cudaSuccess) made = cudaMemcpy(state_->ones, ones.data(), ones.size() * 4, cudaMemcpyHostToDevice);
  if (made != cudaSuccess) {
    cudaFree(state_->ones);
    cudaFree(state_->workspace);
    cublasLtDestroy(state_->handle);
    fail("cudaMalloc of the FP8 GEMM's scale vector failed: ", cudaGetErrorString(made));
  }
}

GemmRunner::~GemmRunner() {
  state_->plans.clear();
  cudaFree(state_->ones);
  cudaFree(state_->workspace);
  cublasLtDestroy(state_->handle);
}

void GemmRunner::run(const __nv_bfloat16* in, const __nv_bfloat16* weight, void* out, int rows, int n, int k,
                     LinearOut mode, cudaStream_t stream) {
  run_bf16(in, weight, out, rows, n, k, mode, stream, false);
}

void GemmRunner::run_decode(const __nv_bfloat16* in, const __nv_bfloat16* weight, void* out, int rows, int n, int k,
                            LinearOut mode, cudaStream_t stream) {
  run_bf16(in, weight, out, rows, n, k, mode, stream, true);
}

void GemmRunner::run_bf16(const __nv_bfloat16* in, const __nv_bfloat16* weight, void* out, int rows, int n, int k,
                          LinearOut mode, cudaStream_t stream, bool decode) {
  if (rows == 0) return;
  if (rows < 0 || n <= 0 || k <= 0) {
    fail("gemm: expected rows >= 0 and positive n, k; got rows=", rows, " n=", n, " k=", k);
  }
  ShapeKey key{n, k, mode, alignment_of(in), alignment_of(weight), alignment_of(out)};
  if (decode) key.decode_rows = rows;
  const auto [p, l] = state_->plan(key, rows);
  const float alpha = 1.0f;
  check(cublasLtMatmul(state_->handle, p.op, &alpha, weight, p.a, in, l.b, &p.beta, out, l.d, out, l.d, &p.algo,
                       state_->workspace, kWorkspaceBytes, stream),
        "cublasLtMatmul", key, rows);
}

void GemmRunner::run_fp8(const uint8_t* in, const float* in_scales, const uint8_t* weight, const float* weight_scales,
                         float weight_scale, void* out, int rows, int n, int k, LinearOut mode, cudaStream_t stream) {
  if (rows == 0) return;
  if (rows < 0 || rows % kFp8GemmRows != 0 || n <= 0 || k <= 0 || !fp8_gemm_shape(n, k)) {
    fail("gemm_fp8: expected rows a multiple of ", kFp8GemmRows, ", n a multiple of 128 and k of 512; got rows=", rows,
         " n=", n, " k=", k);
  }
  const bool per_token = weight_scale > 0.0f;
  if (per_token && n > kMaxOuterN) {
    fail("gemm_fp8: a weight of one scale takes n <= ", kMaxOuterN, " (got n=", n, ", k=", k, ")");
  }
  ShapeKey key{n, k, mode, alignment_of(in), alignment_of(weight), alignment_of(out)};
  key.operands = per_token ? GemmOperands::fp8_per_token : GemmOperands::fp8_blocks;
  const auto [p, l] = state_->plan(key, rows);
  state_->set_scales(key, p, per_token ? state_->ones : weight_scales, in_scales);
  const float alpha = per_token ? weight_scale : 1.0f;
  check(cublasLtMatmul(state_->handle, p.op, &alpha, weight, p.a, in, l.b, &p.beta, out, l.d, out, l.d, &p.algo,
                       state_->workspace, kWorkspaceBytes, stream),
        "cublasLtMatmul (FP8)", key, rows);
}

}  // namespace kiln::cuda
