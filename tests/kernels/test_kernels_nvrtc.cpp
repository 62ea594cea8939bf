// Every kernel template, instantiated at odd shapes (and at a large real one), compiles under
// NVRTC the way CI compiles generated kernels.cu (-default-device, C++20), for sm_90a and for
// compute_80 PTX, without a warning. No GPU needed: NVRTC only compiles.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "tests/support/nvrtc_compile.hpp"

namespace {

const char* const kInstantiations = R"(
#include "templates/activation.cuh"
#include "templates/attention.cuh"
#include "templates/attention_prep.cuh"
#include "templates/embedding.cuh"
#include "templates/gemv.cuh"
#include "templates/kv_cache.cuh"
#include "templates/norm.cuh"
#include "templates/rope.cuh"

namespace probe {
using kiln::bf16;

void elementwise(const int* ids, const bf16* table, float* x, const bf16* w, bf16* out, const int* rows,
                 bf16* qkv, const int* pos, const float* rope_table, const int* slots, bf16* cache, cudaStream_t s) {
  kiln::embed<200>(ids, table, x, 7, s);
  kiln::embed<999>(ids, table, x, 7, s);
  kiln::rmsnorm<1000>(x, w, out, 3, 1e-5f, s);
  kiln::rmsnorm<999>(x, w, out, 3, 1e-5f, s);
  kiln::rmsnorm_rows<144>(x, rows, w, out, 2, 1e-6f, s);
  kiln::qk_rmsnorm<6, 2, 48, 480>(qkv, w, w, 5, 1e-6f, s);
  kiln::qk_rmsnorm<3, 1, 40, 200>(qkv, w, w, 5, 1e-6f, s);
  kiln::rope<8, 48, 48, 480, false>(qkv, 0, pos, rope_table, 5, s);
  kiln::rope<6, 48, 32, 480, true>(qkv, 96, pos, rope_table, 5, s);
  kiln::kv_write<2, 48, 5, 480>(qkv, 288, 384, slots, cache, 5, s);
  kiln::kv_write<2, 32, 8, 257>(qkv, 129, 193, slots, cache, 5, s);
  kiln::silu_mul<999>(qkv, out, 5, s);
  kiln::silu_mul<8192>(qkv, out, 5, s);
}

void projections(const bf16* in, const bf16* w, bf16* out_bf16, float* out_f32, cudaStream_t s) {
  kiln::gemv<200, 144, kiln::GemvOut::store_bf16>(in, w, out_bf16, 3, s);
  kiln::gemv<1000, 200, kiln::GemvOut::add_f32>(in, w, out_f32, 3, s);
  kiln::gemv<33, 100, kiln::GemvOut::store_f32>(in, w, out_f32, 3, s);
  kiln::gemv<17, 30, kiln::GemvOut::store_bf16>(in, w, out_bf16, 3, s);
  kiln::gemv<5, 7, kiln::GemvOut::add_f32>(in, w, out_f32, 3, s);
  kiln::gemv<128256, 2048, kiln::GemvOut::store_f32>(in, w, out_f32, 3, s);
}

void attention_prep(bf16* qkv, const bf16* norm, const int* pos, const float* rope_table, const int* slots,
                    bf16* cache, cudaStream_t s) {
  kiln::attention_prep<6, 2, 48, 480, 5, true>(qkv, norm, norm, 1e-6f, pos, rope_table, slots, cache, 5, s);
  kiln::attention_prep<6, 2, 48, 482, 5, false>(qkv, nullptr, nullptr, 1e-6f, pos, rope_table, slots, cache, 5, s);
  kiln::attention_prep<4, 2, 16, 128, 5, true>(qkv, norm, norm, 1e-6f, pos, rope_table, slots, cache, 5, s);
  kiln::attention_prep<3, 1, 20, 101, 5, true>(qkv, norm, norm, 1e-6f, pos, rope_table, slots, cache, 5, s);
  kiln::attention_prep<16, 8, 128, 4096, 16, true>(qkv, norm, norm, 1e-6f, pos, rope_table, slots, cache, 5, s);
}

void attention(const bf16* q, const bf16* cache, bf16* out, const int* qs, const int* pos, const int* bt,
               const int* ctx, float* scratch, cudaStream_t s) {
  kiln::attention_prefill<6, 2, 48, 5, 480>(q, cache, out, qs, pos, bt, 9, 2, 100, 0.14f, s);
  kiln::attention_prefill<6, 2, 40, 5, 400>(q, cache, out, qs, pos, bt, 9, 2, 100, 0.15f, s);
  kiln::attention_prefill<16, 8, 128, 16, 4096>(q, cache, out, qs, pos, bt, 9, 2, 100, 0.08f, s);
  kiln::attention_decode<6, 2, 48, 5, 480, 64, 32>(q, cache, out, ctx, bt, 9, 2, 0.14f, scratch, s);
  kiln::attention_decode<6, 2, 40, 5, 400, 64, 32>(q, cache, out, ctx, bt, 9, 2, 0.15f, scratch, s);
  kiln::attention_decode<4, 2, 32, 5, 256, 512, 1>(q, cache, out, ctx, bt, 9, 2, 0.17f, scratch, s);
}
}  // namespace probe
)";

}  // namespace

TEST_CASE("kernel templates compile under NVRTC for sm_90a without warnings", "[kernels][nvrtc]") {
  kiln::test::check_nvrtc_clean(kInstantiations, "instantiations.cu", "sm_90a");
}

TEST_CASE("kernel templates compile under NVRTC to compute_80 PTX without warnings", "[kernels][nvrtc]") {
  kiln::test::check_nvrtc_clean(kInstantiations, "instantiations.cu", "compute_80");
}
