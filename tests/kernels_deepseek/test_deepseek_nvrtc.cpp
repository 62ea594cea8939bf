// The DeepSeek-V2 kernel templates, instantiated at real and odd shapes, compile under NVRTC the
// way CI compiles generated kernels.cu (-default-device, C++20), for sm_90a and for compute_80
// PTX, without a warning. No GPU needed: NVRTC only compiles.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "tests/support/nvrtc_compile.hpp"

namespace {

const char* const kInstantiations = R"(
#include "templates/mla.cuh"
#include "templates/mla_attention.cuh"
#include "templates/moe.cuh"
#include "templates/norm_inplace.cuh"

namespace probe {
using kiln::bf16;

void norms(bf16* rows, const bf16* w, cudaStream_t s) {
  kiln::rmsnorm_inplace<512, 576>(rows, w, 3, 1e-6f, s);
  kiln::rmsnorm_inplace<1536, 1536>(rows, w, 3, 1e-6f, s);
  kiln::rmsnorm_inplace<24, 30>(rows, w, 3, 1e-6f, s);
  kiln::rmsnorm_inplace<7, 13>(rows, w, 3, 1e-6f, s);
}

void projections(const bf16* in, const bf16* w, bf16* out, const int* slots, bf16* cache, cudaStream_t s) {
  kiln::mla_kv_write<512, 64, 16>(in, slots, cache, 5, s);
  kiln::mla_kv_write<24, 6, 5>(in, slots, cache, 5, s);
  kiln::mla_kv_write<13, 3, 7>(in, slots, cache, 5, s);
  kiln::mla_q_absorb<16, 128, 64, 512>(in, w, out, 5, s);
  kiln::mla_q_absorb<128, 128, 64, 512>(in, w, out, 5, s);
  kiln::mla_q_absorb<4, 16, 8, 32>(in, w, out, 5, s);
  kiln::mla_q_absorb<3, 8, 6, 24>(in, w, out, 5, s);
  kiln::mla_v_up<16, 512, 128>(in, w, out, 5, s);
  kiln::mla_v_up<3, 24, 10>(in, w, out, 5, s);
  kiln::mla_v_up<5, 20, 16>(in, w, out, 5, s);
  kiln::mla_v_up<2, 13, 7>(in, w, out, 5, s);
}

void attention(const bf16* q, const bf16* cache, bf16* out, const int* qs, const int* pos, const int* bt,
               const int* ctx, float* scratch, cudaStream_t s) {
  kiln::mla_attention_prefill<16, 512, 64, 16>(q, cache, out, qs, pos, bt, 9, 2, 100, 0.11f, s);
  kiln::mla_attention_prefill<128, 512, 64, 16>(q, cache, out, qs, pos, bt, 9, 2, 100, 0.11f, s);
  kiln::mla_attention_prefill<20, 512, 64, 5>(q, cache, out, qs, pos, bt, 9, 2, 100, 0.11f, s);
  kiln::mla_attention_prefill<3, 24, 6, 5>(q, cache, out, qs, pos, bt, 9, 2, 100, 0.27f, s);
  kiln::mla_attention_decode<16, 512, 64, 16, 512, 16>(q, cache, out, ctx, bt, 9, 2, 0.11f, scratch, s);
  kiln::mla_attention_decode<128, 512, 64, 16, 64, 32>(q, cache, out, ctx, bt, 9, 2, 0.11f, scratch, s);
  kiln::mla_attention_decode<20, 512, 64, 5, 64, 32>(q, cache, out, ctx, bt, 9, 2, 0.11f, scratch, s);
  kiln::mla_attention_decode<4, 32, 8, 16, 512, 1>(q, cache, out, ctx, bt, 9, 2, 0.25f, scratch, s);
}

void experts(const float* logits, int* ids, float* weights, const bf16* h, const bf16* w, bf16* out, int* scratch,
             float* x, cudaStream_t s) {
  kiln::moe_route<64, 6, 1, 1, false, false>(logits, ids, weights, 7, 1.0f, s);
  kiln::moe_route<160, 6, 8, 3, true, false>(logits, ids, weights, 7, 16.0f, s);
  kiln::moe_route<6, 2, 1, 1, false, true>(logits, ids, weights, 7, 1.0f, s);
  kiln::moe_route<256, 8, 8, 4, true, true>(logits, ids, weights, 7, 2.5f, s);
  kiln::moe_gate_up<64, 6, 2048, 1408>(h, w, ids, out, scratch, 7, s);
  kiln::moe_down<64, 6, 2048, 1408>(h, w, ids, weights, scratch, x, 7, s);
  kiln::moe_gate_up<160, 6, 5120, 1536>(h, w, ids, out, scratch, 7, s);
  kiln::moe_down<160, 6, 5120, 1536>(h, w, ids, weights, scratch, x, 7, s);
  kiln::moe_gate_up<6, 2, 48, 20>(h, w, ids, out, scratch, 7, s);
  kiln::moe_down<6, 2, 48, 20>(h, w, ids, weights, scratch, x, 7, s);
  kiln::moe_gate_up<5, 2, 36, 10>(h, w, ids, out, scratch, 7, s);
  kiln::moe_down<5, 2, 36, 10>(h, w, ids, weights, scratch, x, 7, s);
}
}  // namespace probe
)";

}  // namespace

TEST_CASE("DeepSeek kernel templates compile under NVRTC for sm_90a without warnings", "[kernels][nvrtc]") {
  kiln::test::check_nvrtc_clean(kInstantiations, "deepseek_instantiations.cu", "sm_90a");
}

TEST_CASE("DeepSeek kernel templates compile under NVRTC to compute_80 PTX without warnings", "[kernels][nvrtc]") {
  kiln::test::check_nvrtc_clean(kInstantiations, "deepseek_instantiations.cu", "compute_80");
}
