#include "codegen/emit_cuda_ops.hpp"

#include <initializer_list>

#include "codegen/graph_build.hpp"
#include "runtime/core/error.hpp"

namespace kiln::codegen {

namespace {

// The expression naming a weight field in the generated forward: per-layer weights live in `lw`.
std::string weight(const Op& op, const Graph& g, size_t i = 0) {
  const std::string& field = op.weights.at(i);
  for (const auto& w : g.weights) {
    if (w.field == field) return (w.per_layer ? "lw." : "w.") + field;
  }
  fail("internal: op ", op.label, " uses unknown weight ", field);
}

// silu_mul runs over T rows, or T × (experts per token) rows for the routed experts.
std::string silu_rows(const Op& op) {
  return op.dims.count("rows_per_token") ? "T * " + op.dims.at("rows_per_token") : "T";
}
std::string offset(const Op& op) { return op.dims.count("offset") ? op.dims.at("offset") : "0"; }
std::string rows(const Op& op) { return op.on_logit_rows ? "N" : "T"; }
const std::string& dim(const Op& op, const std::string& key) { return op.dims.at(key); }
const std::string& real(const Op& op, const std::string& key) { return op.reals.at(key); }

// Template arguments from the op's dims, in the template's parameter order: "d0, d1, ...".
std::string dims(const Op& op, std::initializer_list<const char*> keys) {
  std::string out;
  for (const char* key : keys) out += (out.empty() ? "" : ", ") + dim(op, key);
  return out;
}

// The prefill and decode wrappers of a paged attention over queries `q` and the KV cache, into `out`:
// kiln::<tmpl>_prefill<args> and kiln::<tmpl>_decode<args, partition, max partitions>.
std::vector<CudaKernel> attention_kernels(const Op& op, const std::string& tmpl, const std::string& q,
                                          const std::string& out, const std::string& args) {
  const std::string& name = op.kernel;
  return {
      {name + "_prefill",
       "void " + name + "_prefill(const bf16* " + q + ", const bf16* cache, bf16* " + out +
           ", const int* query_start, const int* positions, const int* block_tables, int max_pages_per_seq, "
           "int num_seqs, int max_query_len, cudaStream_t stream)",
       "kiln::" + tmpl + "_prefill<" + args + ">(" + q + ", cache, " + out +
           ", query_start, positions, block_tables, max_pages_per_seq, num_seqs, max_query_len, " + real(op, "scale") +
           ", stream);"},
      {name + "_decode",
       "void " + name + "_decode(const bf16* " + q + ", const bf16* cache, bf16* " + out +
           ", const int* context_len, const int* block_tables, int max_pages_per_seq, int num_seqs, "
           "float* scratch, cudaStream_t stream)",
       "kiln::" + tmpl + "_decode<" + args + ", kAttnPartition, kAttnMaxPartitions>(" + q + ", cache, " + out +
           ", context_len, block_tables, max_pages_per_seq, num_seqs, " + real(op, "scale") + ", scratch, stream);"}};
}

std::string gemv_out(Epilogue e) {
  switch (e) {
    case Epilogue::store: return "kiln::GemvOut::store_bf16";
    case Epilogue::residual_add: return "kiln::GemvOut::add_f32";
    case Epilogue::store_f32: return "kiln::GemvOut::store_f32";
  }
  return "";
}

std::string out_type(Epilogue e) { return e == Epilogue::store ? "bf16" : "float"; }

std::string gemm_out(Epilogue e) {
  switch (e) {
    case Epilogue::store: return "cuda::GemmOut::store_bf16";
    case Epilogue::residual_add: return "cuda::GemmOut::add_f32";
    case Epilogue::store_f32: return "cuda::GemmOut::store_f32";
  }
  return "";
}

}  // namespace

std::vector<CudaKernel> cuda_kernels(const Op& op, const Graph& g) {
  const std::string& name = op.kernel;
  switch (op.kind) {
    case OpKind::embed:
      return {{name,
               "void " + name + "(const int* token_ids, const bf16* table, float* x, int tokens, cudaStream_t stream)",
               "kiln::embed<" + dim(op, "dim") + ">(token_ids, table, x, tokens, stream);"}};
    case OpKind::rmsnorm:
      return {{name, "void " + name + "(const float* x, const bf16* weight, bf16* out, int rows, cudaStream_t stream)",
               "kiln::rmsnorm<" + dim(op, "dim") + ">(x, weight, out, rows, " + real(op, "eps") + ", stream);"}};
    case OpKind::rmsnorm_rows:
      return {
          {name,
           "void " + name +
               "(const float* x, const int* rows, const bf16* weight, bf16* out, int num_rows, cudaStream_t stream)",
           "kiln::rmsnorm_rows<" + dim(op, "dim") + ">(x, rows, weight, out, num_rows, " + real(op, "eps") +
               ", stream);"}};
    case OpKind::linear: {
      const std::string shape = dims(op, {"n", "k"}) + ", " + gemv_out(op.epilogue);
      const std::string out = out_type(op.epilogue) + "* out, int tokens, cudaStream_t stream)";
      return {{name, "void " + name + "(const bf16* in, const bf16* weight, " + out,
               "kiln::gemv<" + shape + ">(in, weight, out, tokens, stream);"}};
    }
    case OpKind::attention_prep:
      return {{name,
               "void " + name +
                   "(bf16* qkv, const bf16* q_norm, const bf16* k_norm, const int* positions, const float* table, "
                   "const int* slot_mapping, bf16* cache, int tokens, cudaStream_t stream)",
               "kiln::attention_prep<" + dims(op, {"heads", "kv_heads", "head_dim", "row", "page_size"}) + ", " +
                   (op.weights.empty() ? "false" : "true") + ">(qkv, q_norm, k_norm, " + real(op, "eps") +
                   ", positions, table, slot_mapping, cache, tokens, stream);"}};
    case OpKind::head_rmsnorm:
      return {
          {name,
           "void " + name + "(bf16* qkv, const bf16* q_weight, const bf16* k_weight, int tokens, cudaStream_t stream)",
           "kiln::qk_rmsnorm<" + dims(op, {"heads", "kv_heads", "head_dim", "row"}) +
               ">(qkv, q_weight, k_weight, tokens, " + real(op, "eps") + ", stream);"}};
    case OpKind::rope:
      return {
          {name,
           "void " + name + "(bf16* rows, const int* positions, const float* table, int tokens, cudaStream_t stream)",
           "kiln::rope<" + dims(op, {"heads", "head_stride", "rotary_dim", "row"}) + ", " +
               (op.interleaved ? "true" : "false") + ">(rows, " + offset(op) + ", positions, table, tokens, stream);"}};
    case OpKind::kv_write:
      return {
          {name,
           "void " + name + "(const bf16* qkv, const int* slot_mapping, bf16* cache, int tokens, cudaStream_t stream)",
           "kiln::kv_write<" + dims(op, {"kv_heads", "head_dim", "page_size", "row"}) + ">(qkv, " +
               dims(op, {"k_offset", "v_offset"}) + ", slot_mapping, cache, tokens, stream);"}};
    case OpKind::attention:
      return attention_kernels(op, "attention", "qkv", "out",
                               dims(op, {"heads", "kv_heads", "head_dim", "page_size", "row"}));
    case OpKind::silu_mul:
      return {{name, "void " + name + "(const bf16* gate_up, bf16* act, int rows, cudaStream_t stream)",
               "kiln::silu_mul<" + dim(op, "dim") + ">(gate_up, act, rows, stream);"}};
    case OpKind::rmsnorm_act:
      return {{name, "void " + name + "(bf16* rows, const bf16* weight, int tokens, cudaStream_t stream)",
               "kiln::rmsnorm_inplace<" + dims(op, {"dim", "row"}) + ">(rows, weight, tokens, " + real(op, "eps") +
                   ", stream);"}};
    case OpKind::mla_kv_write:
      return {
          {name,
           "void " + name + "(const bf16* kv_a, const int* slot_mapping, bf16* cache, int tokens, cudaStream_t stream)",
           "kiln::mla_kv_write<" + dims(op, {"latent", "rope", "page_size"}) +
               ">(kv_a, slot_mapping, cache, tokens, stream);"}};
    case OpKind::mla_q_absorb:
      return {{name, "void " + name + "(const bf16* q, const bf16* w_uk, bf16* q_mla, int tokens, cudaStream_t stream)",
               "kiln::mla_q_absorb<" + dims(op, {"heads", "nope", "rope", "latent"}) +
                   ">(q, w_uk, q_mla, tokens, stream);"}};
    case OpKind::mla_attention:
      return attention_kernels(op, "mla_attention", "q_mla", "o_lat",
                               dims(op, {"heads", "latent", "rope", "page_size"}));
    case OpKind::mla_v_up:
      return {{name,
               "void " + name + "(const bf16* o_lat, const bf16* w_uv, bf16* out, int tokens, cudaStream_t stream)",
               "kiln::mla_v_up<" + dims(op, {"heads", "latent", "v"}) + ">(o_lat, w_uv, out, tokens, stream);"}};
    case OpKind::moe_route:
      return {{name,
               "void " + name + "(const float* logits, int* ids, float* weights, int tokens, cudaStream_t stream)",
               "kiln::moe_route<" + dims(op, {"experts", "top_k", "groups", "topk_groups"}) + ", " +
                   (op.group_limited ? "true" : "false") + ", " + (op.normalize ? "true" : "false") +
                   ">(logits, ids, weights, tokens, " + real(op, "scaling") + ", stream);"}};
    case OpKind::moe_record:
      return {{name, "void " + name + "(const int* ids, unsigned char* usage, int tokens, cudaStream_t stream)",
               "kiln::moe_record<" + dims(op, {"experts", "top_k"}) + ">(ids, usage, tokens, stream);"}};
    case OpKind::moe_gate_up:
      return {{name,
               "void " + name +
                   "(const bf16* h, const bf16* weight, const int* ids, bf16* out, int* scratch, int tokens, "
                   "cudaStream_t stream)",
               "kiln::moe_gate_up<" + dims(op, {"experts", "top_k", "hidden", "inter"}) +
                   ">(h, weight, ids, out, scratch, tokens, stream);"}};
    case OpKind::moe_down:
      return {{name,
               "void " + name +
                   "(const bf16* act, const bf16* weight, const int* ids, const float* weights, const int* scratch, "
                   "float* x, int tokens, cudaStream_t stream)",
               "kiln::moe_down<" + dims(op, {"experts", "top_k", "hidden", "inter"}) +
                   ">(act, weight, ids, weights, scratch, x, tokens, stream);"}};
  }
  return {};
}

std::vector<std::string> cuda_headers(const Op& op) {
  switch (op.kind) {
    case OpKind::embed: return {"templates/embedding.cuh"};
    case OpKind::rmsnorm:
    case OpKind::rmsnorm_rows:
    case OpKind::head_rmsnorm: return {"templates/norm.cuh"};
    case OpKind::linear: return {"templates/gemv.cuh"};
    case OpKind::rope: return {"templates/rope.cuh"};
    case OpKind::kv_write: return {"templates/kv_cache.cuh"};
    case OpKind::attention: return {"templates/attention.cuh"};
    case OpKind::silu_mul: return {"templates/activation.cuh"};
    case OpKind::rmsnorm_act: return {"templates/norm_inplace.cuh"};
    case OpKind::mla_kv_write:
    case OpKind::mla_q_absorb:
    case OpKind::mla_v_up: return {"templates/mla.cuh"};
    case OpKind::mla_attention: return {"templates/mla_attention.cuh"};
    case OpKind::moe_route:
    case OpKind::moe_gate_up:
    case OpKind::moe_down: return {"templates/moe.cuh"};
    case OpKind::moe_record: return {"templates/moe_usage.cuh"};
    case OpKind::attention_prep: return {"templates/attention_prep.cuh"};
  }
  return {};
}

std::vector<std::string> ref_headers(const Op& op) {
  switch (op.kind) {
    case OpKind::mla_kv_write:
    case OpKind::mla_q_absorb:
    case OpKind::mla_attention:
    case OpKind::mla_v_up: return {"runtime/ref/mla.hpp"};
    case OpKind::moe_route:
    case OpKind::moe_record:
    case OpKind::moe_gate_up:
    case OpKind::moe_down: return {"runtime/ref/moe.hpp"};
    case OpKind::attention_prep: {
      std::vector<std::string> out;
      for (const Op& part : op.parts) {
        for (const auto& h : ref_headers(part)) out.push_back(h);
      }
      return out;
    }
    default: return {"runtime/ref/ops.hpp"};
  }
}

std::string cuda_call(const Op& op, const Graph& g, Phase phase) {
  const std::string& k = op.kernel;
  switch (op.kind) {
    case OpKind::embed:
      return k + "(step.token_ids, " + weight(op, g) + ", x, T, stream);";
    case OpKind::rmsnorm:
      return k + "(" + op.reads[0] + ", " + weight(op, g) + ", " + op.writes[0] + ", T, stream);";
    case OpKind::rmsnorm_rows:
      return k + "(" + op.reads[0] + ", step.logit_rows, " + weight(op, g) + ", " + op.writes[0] + ", N, stream);";
    case OpKind::linear:
      if (phase == Phase::decode) {
        return k + "(" + op.reads[0] + ", " + weight(op, g) + ", " + op.writes[0] + ", " + rows(op) + ", stream);";
      }
      return "cuda::gemm(ctx, " + op.reads[0] + ", " + weight(op, g) + ", " + op.writes[0] + ", " + rows(op) + ", " +
             dims(op, {"n", "k"}) + ", " + gemm_out(op.epilogue) + ");";
    case OpKind::head_rmsnorm:
      return k + "(" + op.reads[0] + ", " + weight(op, g, 0) + ", " + weight(op, g, 1) + ", T, stream);";
    case OpKind::rope:
      return k + "(" + op.reads[0] + ", step.positions, ctx.rope, T, stream);";
    case OpKind::kv_write:
      return k + "(" + op.reads[0] + ", step.slot_mapping, kv, T, stream);";
    case OpKind::attention:
    case OpKind::mla_attention:  // the same wrappers (attention_kernels)
      if (phase == Phase::decode) {
        return k + "_decode(" + op.reads[0] + ", kv, " + op.writes[0] +
               ", step.context_len, step.block_tables, step.max_pages_per_seq, step.num_seqs, ctx.scratch, stream);";
      }
      return k + "_prefill(" + op.reads[0] + ", kv, " + op.writes[0] +
             ", step.query_start, step.positions, step.block_tables, step.max_pages_per_seq, step.num_seqs, "
             "step.max_query_len, stream);";
    case OpKind::silu_mul:
      return k + "(" + op.reads[0] + ", " + op.writes[0] + ", " + silu_rows(op) + ", stream);";
    case OpKind::rmsnorm_act:
      return k + "(" + op.reads[0] + ", " + weight(op, g) + ", T, stream);";
    case OpKind::mla_kv_write:
      return k + "(" + op.reads[0] + ", step.slot_mapping, kv, T, stream);";
    case OpKind::mla_q_absorb:
    case OpKind::mla_v_up:
      return k + "(" + op.reads[0] + ", " + weight(op, g) + ", " + op.writes[0] + ", T, stream);";
    case OpKind::moe_route:
      return k + "(router_logits, topk_ids, topk_weights, T, stream);";
    case OpKind::attention_prep:
      return k + "(" + op.reads[0] + ", " +
             (op.weights.empty() ? "nullptr, nullptr" : weight(op, g, 0) + ", " + weight(op, g, 1)) +
             ", step.positions, ctx.rope, step.slot_mapping, kv, T, stream);";
    case OpKind::moe_record:
      return k + "(topk_ids, ctx.expert_usage + layer * " + dim(op, "experts") + ", T, stream);";
    case OpKind::moe_gate_up:
      return k + "(h, " + weight(op, g) + ", topk_ids, moe_gate_up, moe_scratch, T, stream);";
    case OpKind::moe_down:
      return k + "(moe_act, " + weight(op, g) + ", topk_ids, topk_weights, moe_scratch, x, T, stream);";
  }
  return "";
}

std::vector<std::string> ref_call(const Op& op, const Graph& g) {
  switch (op.kind) {
    case OpKind::embed:
      return {"ref::embed(step.token_ids.data(), T, " + weight(op, g) + ", " + dims(op, {"vocab", "dim"}) + ", x);"};
    case OpKind::rmsnorm:
      return {"ref::rmsnorm(" + op.reads[0] + ", " + weight(op, g) + ", " + op.writes[0] + ", T, " + dim(op, "dim") +
              ", " + real(op, "eps") + ");"};
    case OpKind::rmsnorm_rows:
      return {"ref::rmsnorm_rows(" + op.reads[0] + ", step.logit_rows.data(), N, " + weight(op, g) + ", " +
              op.writes[0] + ", " + dim(op, "dim") + ", " + real(op, "eps") + ");"};
    case OpKind::linear:
      return {"ref::linear(" + op.reads[0] + ", " + rows(op) + ", " + weight(op, g) + ", " + dims(op, {"n", "k"}) +
              ", " + op.writes[0] + ", /*accumulate=*/" + (op.epilogue == Epilogue::residual_add ? "true" : "false") +
              ");"};
    case OpKind::head_rmsnorm:
      return {"ref::head_rmsnorm(" + op.reads[0] + ", T, " + dim(op, "row") + ", 0, " +
                  dims(op, {"heads", "head_dim"}) + ", " + weight(op, g, 0) + ", " + real(op, "eps") + ");",
              "ref::head_rmsnorm(" + op.reads[0] + ", T, " + dim(op, "row") + ", kKvOffset, " +
                  dims(op, {"kv_heads", "head_dim"}) + ", " + weight(op, g, 1) + ", " + real(op, "eps") + ");"};
    case OpKind::rope:
      return {"ref::rope(" + op.reads[0] + ", T, " + dim(op, "row") + ", " + offset(op) + ", " +
              dims(op, {"heads", "head_stride", "rotary_dim"}) + ", /*interleaved=*/" +
              (op.interleaved ? "true" : "false") + ", step.positions.data(), ctx.rope);"};
    case OpKind::kv_write:
      return {"ref::kv_write(" + op.reads[0] + ", T, " + dims(op, {"row", "k_offset", "v_offset"}) +
              ", step.slot_mapping.data(), kv);"};
    case OpKind::attention:
      return {"ref::attention(" + op.reads[0] + ", " + dims(op, {"row", "heads"}) + ", " + real(op, "scale") +
              ", step, kv, " + op.writes[0] + ");"};
    case OpKind::silu_mul:
      return {"ref::silu_mul(" + op.reads[0] + ", " + silu_rows(op) + ", " + dim(op, "dim") + ", " + op.writes[0] +
              ");"};
    case OpKind::rmsnorm_act:
      return {"ref::rmsnorm(" + op.reads[0] + ", " + dim(op, "row") + ", " + weight(op, g) + ", " + op.writes[0] +
              ", " + dim(op, "row") + ", T, " + dim(op, "dim") + ", " + real(op, "eps") + ");"};
    case OpKind::mla_kv_write:
      return {"ref::mla_kv_write(" + op.reads[0] + ", T, step.slot_mapping.data(), kv);"};
    case OpKind::mla_q_absorb:
      return {"ref::mla_q_absorb(" + op.reads[0] + ", T, " + dims(op, {"heads", "nope", "rope", "latent"}) + ", " +
              weight(op, g) + ", " + op.writes[0] + ");"};
    case OpKind::mla_attention:
      return {"ref::mla_attention(" + op.reads[0] + ", " + dims(op, {"heads", "latent", "rope"}) + ", " +
              real(op, "scale") + ", step, kv, " + op.writes[0] + ");"};
    case OpKind::mla_v_up:
      return {"ref::mla_v_up(" + op.reads[0] + ", T, " + dims(op, {"heads", "latent", "v"}) + ", " + weight(op, g) +
              ", " + op.writes[0] + ");"};
    case OpKind::moe_route:
      return {"ref::moe_route(router_logits, T, " + dims(op, {"experts", "top_k", "groups", "topk_groups"}) +
              ", /*group_limited=*/" + (op.group_limited ? "true" : "false") + ", /*normalize=*/" +
              (op.normalize ? "true" : "false") + ", " + real(op, "scaling") + ", topk_ids, topk_weights);"};
    case OpKind::attention_prep: {
      std::vector<std::string> out;
      for (const Op& part : op.parts) {
        for (const auto& stmt : ref_call(part, g)) out.push_back(stmt);
      }
      return out;
    }
    case OpKind::moe_record:
      return {"ref::moe_record(topk_ids, T, " + dim(op, "top_k") + ", ctx.expert_usage + layer * " +
              dim(op, "experts") + ");"};
    case OpKind::moe_gate_up:
      return {"ref::moe_gate_up(h, T, topk_ids, " + dim(op, "top_k") + ", " + weight(op, g) + ", " +
              dims(op, {"hidden", "inter"}) + ", moe_gate_up);"};
    case OpKind::moe_down:
      return {"ref::moe_down(moe_act, T, topk_ids, topk_weights, " + dim(op, "top_k") + ", " + weight(op, g) + ", " +
              dims(op, {"hidden", "inter"}) + ", x);"};
  }
  return {};
}

}  // namespace kiln::codegen
