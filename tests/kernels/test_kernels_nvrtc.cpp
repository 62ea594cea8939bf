// Every kernel template, instantiated at odd shapes (and at large real ones), compiles under NVRTC
// the way CI compiles generated kernels.cu (-default-device, C++20), for sm_90a and for compute_80
// PTX, without a warning. No GPU needed: NVRTC only compiles. (Every generated model's kernels.cu
// is compiled the same way by tests/codegen.)
#include <catch2/catch.hpp>

#include "tests/support/nvrtc_compile.hpp"

namespace {

const char* const kInstantiations = R"(
#include "templates/attention.cuh"
#include "templates/attention_prep.cuh"
#include "templates/embed.cuh"
#include "templates/linear.cuh"
#include "templates/mla_attention.cuh"
#include "templates/mla_attention_expanded.cuh"
#include "templates/mla_kv_write.cuh"
#include "templates/mla_q_absorb.cuh"
#include "templates/mla_v_up.cuh"
#include "templates/moe_down.cuh"
#include "templates/moe_gate_up.cuh"
#include "templates/moe_route.cuh"
#include "templates/prep_attention.cuh"
#include "templates/rmsnorm.cuh"
#include "templates/rmsnorm_inplace.cuh"
#include "templates/rmsnorm_rows.cuh"
#include "templates/rope.cuh"
#include "templates/silu_mul.cuh"

namespace probe {
using kiln::bf16;
using kiln::LinearOut;
namespace shape = kiln::shape;

void rows(const int* ids, const bf16* table, float* x, const bf16* w, bf16* out, const int* logit_rows, bf16* qkv,
          const int* pos, const float* rope_table, cudaStream_t s) {
  kiln::embed<shape::embed{.vocab = 1000, .dim = 200}>(ids, table, x, 0, 7, s);
  kiln::embed<shape::embed{.vocab = 500, .dim = 999}>(ids, table, x, 1, 7, s);
  kiln::rmsnorm<shape::rmsnorm{.dim = 1000, .eps = 1e-5f}>(x, w, out, 3, s);
  kiln::rmsnorm<shape::rmsnorm{.dim = 999, .eps = 1e-5f}>(x, w, out, 3, s);
  kiln::rmsnorm_rows<shape::rmsnorm_rows{.dim = 144, .eps = 1e-6f}>(x, logit_rows, w, out, 2, s);
  kiln::rmsnorm_inplace<shape::rmsnorm_inplace{.dim = 512, .row = 576, .eps = 1e-6f}>(qkv, w, 3, s);
  kiln::rmsnorm_inplace<shape::rmsnorm_inplace{.dim = 7, .row = 13, .eps = 1e-6f}>(qkv, w, 3, s);
  kiln::rope<shape::rope{.heads = 8, .head_stride = 48, .rotary_dim = 48, .row = 480, .offset = 0, .interleaved = false}>(
      qkv, pos, rope_table, 5, s);
  kiln::rope<shape::rope{.heads = 6, .head_stride = 48, .rotary_dim = 32, .row = 480, .offset = 96, .interleaved = true}>(
      qkv, pos, rope_table, 5, s);
  kiln::silu_mul<shape::silu_mul{.dim = 999}>(qkv, out, 5, s);
  kiln::silu_mul<shape::silu_mul{.dim = 8192}>(qkv, out, 5, s);
}

void projections(const bf16* in, const bf16* w, bf16* out_bf16, float* out_f32, float* scratch, cudaStream_t s) {
  kiln::linear<shape::linear{.n = 200, .k = 144, .out = LinearOut::store_bf16, .sms = 132}>(in, w, out_bf16, 3, scratch, s);
  kiln::linear<shape::linear{.n = 1000, .k = 200, .out = LinearOut::add_f32, .sms = 132}>(in, w, out_f32, 3, scratch, s);
  kiln::linear<shape::linear{.n = 33, .k = 100, .out = LinearOut::store_f32, .sms = 108}>(in, w, out_f32, 3, scratch, s);
  kiln::linear<shape::linear{.n = 5, .k = 7, .out = LinearOut::add_f32, .sms = 132}>(in, w, out_f32, 3, scratch, s);
  kiln::linear<shape::linear{.n = 128256, .k = 2048, .out = LinearOut::store_f32, .sms = 132}>(in, w, out_f32, 3, scratch, s);
}

void attention(bf16* qkv, const bf16* norm, const int* pos, const float* rope_table, const int* slots, bf16* cache,
               const int* qs, const int* bt, const int* ctx, float* scratch, cudaStream_t s) {
  kiln::attention_prep<shape::attention_prep{.heads = 6, .kv_heads = 2, .head_dim = 48, .row = 480, .page_size = 5,
                                             .qk_norm = true, .eps = 1e-6f}>(qkv, norm, norm, pos, rope_table, slots,
                                                                             cache, 5, s);
  kiln::attention_prep<shape::attention_prep{.heads = 3, .kv_heads = 1, .head_dim = 20, .row = 101, .page_size = 5,
                                             .qk_norm = false, .eps = 1e-6f}>(qkv, nullptr, nullptr, pos, rope_table,
                                                                              slots, cache, 5, s);
  constexpr shape::attention kOdd48{.heads = 6, .kv_heads = 2, .head_dim = 48, .page_size = 5, .row = 480,
                                    .scale = 0.14f, .partition = 64, .max_partitions = 32};
  constexpr shape::attention kOdd40{.heads = 6, .kv_heads = 2, .head_dim = 40, .page_size = 5, .row = 400,
                                    .scale = 0.15f, .partition = 64, .max_partitions = 32};
  constexpr shape::attention kQwen{.heads = 16, .kv_heads = 8, .head_dim = 128, .page_size = 16, .row = 4096,
                                   .scale = 0.08f, .partition = 512, .max_partitions = 16};
  // Head dim 64 with 5 query heads a KV head and pages of 7: the wgmma kernel's other tile shape.
  constexpr shape::attention kWg64{.heads = 10, .kv_heads = 2, .head_dim = 64, .page_size = 7, .row = 896,
                                   .scale = 0.125f, .partition = 512, .max_partitions = 16};
  kiln::attention_prefill<kOdd48>(qkv, cache, qkv, qs, pos, bt, 9, 2, 100, s);
  kiln::attention_prefill<kOdd40>(qkv, cache, qkv, qs, pos, bt, 9, 2, 100, s);
  kiln::attention_prefill<kQwen>(qkv, cache, qkv, qs, pos, bt, 9, 2, 100, s);
  kiln::attention_prefill<kWg64>(qkv, cache, qkv, qs, pos, bt, 9, 2, 100, s);
  kiln::attention_decode<kOdd48>(qkv, cache, qkv, ctx, bt, 9, 2, scratch, s);
  kiln::attention_decode<kOdd40>(qkv, cache, qkv, ctx, bt, 9, 2, scratch, s);
  kiln::attention_decode<kQwen>(qkv, cache, qkv, ctx, bt, 9, 2, scratch, s);
  // The fused decode: a head dim of 48 in a 480-wide row, pages of 5; one of 20 with no GQA, 1-byte
  // spare columns, no q/k norm; partitions of 16 up to 131072 keys (the merge's factors outgrow the
  // attention's shared memory).
  unsigned* counters = nullptr;
  kiln::prep_attention<shape::prep_attention{.heads = 6, .kv_heads = 2, .head_dim = 48, .row = 480, .page_size = 5,
                                             .qk_norm = true, .eps = 1e-6f, .scale = 0.14f, .partition = 64,
                                             .max_partitions = 32}>(qkv, norm, norm, pos, rope_table, slots, cache, qkv,
                                                                    ctx, bt, 9, 2, scratch, counters, s);
  kiln::prep_attention<shape::prep_attention{.heads = 3, .kv_heads = 3, .head_dim = 20, .row = 181, .page_size = 5,
                                             .qk_norm = false, .eps = 1e-6f, .scale = 0.2f, .partition = 16,
                                             .max_partitions = 8192}>(qkv, nullptr, nullptr, pos, rope_table, slots,
                                                                      cache, qkv, ctx, bt, 9, 2, scratch, counters, s);
}

void mla(const bf16* in, const bf16* w, bf16* out, const int* slots, bf16* cache, const int* qs, const int* pos,
         const int* bt, const int* ctx, float* scratch, cudaStream_t s) {
  kiln::mla_kv_write<shape::mla_kv_write{.latent = 512, .rope = 64, .page_size = 16}>(in, slots, cache, 5, s);
  kiln::mla_kv_write<shape::mla_kv_write{.latent = 13, .rope = 3, .page_size = 7}>(in, slots, cache, 5, s);
  kiln::mla_q_absorb<shape::mla_q_absorb{.heads = 128, .nope = 128, .rope = 64, .latent = 512}>(in, w, out, 5, s);
  kiln::mla_q_absorb<shape::mla_q_absorb{.heads = 3, .nope = 8, .rope = 6, .latent = 24}>(in, w, out, 5, s);
  kiln::mla_v_up<shape::mla_v_up{.heads = 16, .latent = 512, .v = 128}>(in, w, out, 5, s);
  kiln::mla_v_up<shape::mla_v_up{.heads = 5, .latent = 20, .v = 16}>(in, w, out, 5, s);
  kiln::mla_v_up<shape::mla_v_up{.heads = 2, .latent = 13, .v = 7}>(in, w, out, 5, s);
  constexpr shape::mla_attention kV2{.heads = 128, .latent = 512, .rope = 64, .page_size = 16, .scale = 0.11f,
                                     .partition = 64, .max_partitions = 32};
  constexpr shape::mla_attention kOdd{.heads = 20, .latent = 512, .rope = 64, .page_size = 5, .scale = 0.11f,
                                      .partition = 512, .max_partitions = 16};
  constexpr shape::mla_attention kTiny{.heads = 3, .latent = 24, .rope = 6, .page_size = 5, .scale = 0.27f,
                                       .partition = 512, .max_partitions = 1};
  kiln::mla_attention_prefill<kV2>(in, cache, out, qs, pos, bt, 9, 2, 100, s);
  kiln::mla_attention_prefill<kOdd>(in, cache, out, qs, pos, bt, 9, 2, 100, s);
  kiln::mla_attention_prefill<kTiny>(in, cache, out, qs, pos, bt, 9, 2, 100, s);
  kiln::mla_attention_decode<kV2>(in, cache, out, ctx, bt, 9, 2, scratch, s);
  kiln::mla_attention_decode<kOdd>(in, cache, out, ctx, bt, 9, 2, scratch, s);
  kiln::mla_attention_decode<kTiny>(in, cache, out, ctx, bt, 9, 2, scratch, s);
  // The expanded prefill's kernels (its GEMMs are cuBLASLt's): DeepSeek-V2's heads, the tiny odd dims.
  constexpr shape::mla_attention_expanded kV2Expanded{.heads = 128, .nope = 128, .rope = 64, .latent = 512, .v = 128,
                                                      .page_size = 16, .scale = 0.11f, .keys = 8192};
  constexpr shape::mla_attention_expanded kTinyExpanded{.heads = 3, .nope = 8, .rope = 6, .latent = 24, .v = 10,
                                                        .page_size = 5, .scale = 0.27f, .keys = 512};
  const kiln::MlaExpanded<kV2Expanded> v2(out);
  const kiln::MlaExpanded<kTinyExpanded> tiny(out);
  kiln::mla_expand_gather<kV2Expanded>(cache, bt, 9, ctx, 2, 100, v2, s);
  kiln::mla_expand_gather<kTinyExpanded>(cache, bt, 9, ctx, 2, 100, tiny, s);
  kiln::mla_expanded_attention<kV2Expanded>(in, v2, out, qs, pos, ctx, 2, 100, s);
  kiln::mla_expanded_attention<kTinyExpanded>(in, tiny, out, qs, pos, ctx, 2, 100, s);
}

void experts(const float* logits, int* ids, float* weights, const bf16* h, const bf16* w, bf16* out, int* scratch,
             float* x, unsigned char* usage, cudaStream_t s) {
  kiln::moe_route<shape::moe_route{.experts = 160, .top_k = 6, .groups = 8, .topk_groups = 3, .group_limited = true,
                                   .normalize = false, .scaling = 16.0f, .local_experts = 40}>(logits, ids, weights, 7, 3, usage,
                                                                                          1, s);
  kiln::moe_route<shape::moe_route{.experts = 6, .top_k = 2, .groups = 1, .topk_groups = 1, .group_limited = false,
                                   .normalize = true, .scaling = 1.0f, .local_experts = 6}>(logits, ids, weights, 7, 0, nullptr, 0,
                                                                                      s);
  constexpr shape::moe_gate_up kLite{.experts = 64, .top_k = 6, .hidden = 2048, .inter = 1408, .sms = 132};
  constexpr shape::moe_gate_up kOdd{.experts = 5, .top_k = 2, .hidden = 36, .inter = 10, .sms = 132};
  kiln::moe_gate_up<kLite>(h, w, ids, out, scratch, 7, s);
  kiln::moe_gate_up<kOdd>(h, w, ids, out, scratch, 7, s);
  kiln::moe_gate_up_act<shape::moe_gate_up_act{.experts = 64, .top_k = 6, .hidden = 2048, .inter = 1408, .sms = 132}>(
      h, w, ids, out, out, scratch, 7, s);
  kiln::moe_gate_up_act<shape::moe_gate_up_act{.experts = 5, .top_k = 2, .hidden = 36, .inter = 10, .sms = 132}>(h, w, ids, out, out,
                                                                                                 scratch, 7, s);
  kiln::moe_down<shape::moe_down{.experts = 64, .top_k = 6, .hidden = 2048, .inter = 1408, .sms = 132}>(h, w, ids, weights, scratch,
                                                                                          out, x, x, 7, s);
  kiln::moe_down<shape::moe_down{.experts = 5, .top_k = 2, .hidden = 36, .inter = 10, .sms = 132}>(h, w, ids, weights, scratch, out,
                                                                                     nullptr, x, 7, s);
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
