#include "codegen/emit_cuda_ops.hpp"

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

std::string rows(const Op& op) { return op.on_logit_rows ? "N" : "T"; }
const std::string& dim(const Op& op, const std::string& key) { return op.dims.at(key); }
const std::string& real(const Op& op, const std::string& key) { return op.reals.at(key); }

std::string gemv_out(Epilogue e) {
  switch (e) {
    case Epilogue::store: return "kiln::GemvOut::store_bf16";
    case Epilogue::residual_add: return "kiln::GemvOut::add_f32";
    case Epilogue::logits: return "kiln::GemvOut::store_f32";
  }
  return "";
}

std::string out_type(Epilogue e) { return e == Epilogue::store ? "bf16" : "float"; }

std::string gemm_out(Epilogue e) {
  switch (e) {
    case Epilogue::store: return "cuda::GemmOut::store_bf16";
    case Epilogue::residual_add: return "cuda::GemmOut::add_f32";
    case Epilogue::logits: return "cuda::GemmOut::store_f32";
  }
  return "";
}

}  // namespace

std::vector<CudaKernel> cuda_kernels(const Op& op, const Graph& g) {
  const std::string& name = op.kernel;
  switch (op.kind) {
    case OpKind::embed:
      return {{name, "void " + name + "(const int* token_ids, const bf16* table, float* x, int tokens, cudaStream_t stream)",
               "kiln::embed<" + dim(op, "dim") + ">(token_ids, table, x, tokens, stream);"}};
    case OpKind::rmsnorm:
      return {{name, "void " + name + "(const float* x, const bf16* weight, bf16* out, int rows, cudaStream_t stream)",
               "kiln::rmsnorm<" + dim(op, "dim") + ">(x, weight, out, rows, " + real(op, "eps") + ", stream);"}};
    case OpKind::rmsnorm_rows:
      return {{name,
               "void " + name +
                   "(const float* x, const int* rows, const bf16* weight, bf16* out, int num_rows, cudaStream_t stream)",
               "kiln::rmsnorm_rows<" + dim(op, "dim") + ">(x, rows, weight, out, num_rows, " + real(op, "eps") +
                   ", stream);"}};
    case OpKind::linear:
      return {{name,
               "void " + name + "(const bf16* in, const bf16* weight, " + out_type(op.epilogue) +
                   "* out, int tokens, cudaStream_t stream)",
               "kiln::gemv<" + dim(op, "n") + ", " + dim(op, "k") + ", " + gemv_out(op.epilogue) +
                   ">(in, weight, out, tokens, stream);"}};
    case OpKind::head_rmsnorm:
      return {{name,
               "void " + name + "(bf16* qkv, const bf16* q_weight, const bf16* k_weight, int tokens, cudaStream_t stream)",
               "kiln::qk_rmsnorm<" + dim(op, "heads") + ", " + dim(op, "kv_heads") + ", " + dim(op, "head_dim") + ", " +
                   dim(op, "row") + ">(qkv, q_weight, k_weight, tokens, " + real(op, "eps") + ", stream);"}};
    case OpKind::rope:
      return {{name, "void " + name + "(bf16* qkv, const int* positions, const float* table, int tokens, cudaStream_t stream)",
               "kiln::rope<" + dim(op, "heads") + " + " + dim(op, "kv_heads") + ", " + dim(op, "head_dim") + ", " +
                   dim(op, "head_dim") + ", " + dim(op, "row") + ", false>(qkv, 0, positions, table, tokens, stream);"}};
    case OpKind::kv_write:
      return {{name,
               "void " + name + "(const bf16* qkv, const int* slot_mapping, bf16* cache, int tokens, cudaStream_t stream)",
               "kiln::kv_write<" + dim(op, "kv_heads") + ", " + dim(op, "head_dim") + ", " + dim(op, "page_size") + ", " +
                   dim(op, "row") + ">(qkv, " + dim(op, "k_offset") + ", " + dim(op, "v_offset") +
                   ", slot_mapping, cache, tokens, stream);"}};
    case OpKind::attention: {
      const std::string args = dim(op, "heads") + ", " + dim(op, "kv_heads") + ", " + dim(op, "head_dim") + ", " +
                               dim(op, "page_size") + ", " + dim(op, "row");
      return {
          {name + "_prefill",
           "void " + name +
               "_prefill(const bf16* qkv, const bf16* cache, bf16* out, const int* query_start, const int* positions, "
               "const int* block_tables, int max_pages_per_seq, int num_seqs, int max_query_len, cudaStream_t stream)",
           "kiln::attention_prefill<" + args + ">(qkv, cache, out, query_start, positions, block_tables, "
                                               "max_pages_per_seq, num_seqs, max_query_len, " +
               real(op, "scale") + ", stream);"},
          {name + "_decode",
           "void " + name +
               "_decode(const bf16* qkv, const bf16* cache, bf16* out, const int* context_len, const int* block_tables, "
               "int max_pages_per_seq, int num_seqs, float* scratch, cudaStream_t stream)",
           "kiln::attention_decode<" + args + ", kAttnPartition, kAttnMaxPartitions>(qkv, cache, out, context_len, block_tables, "
                                               "max_pages_per_seq, num_seqs, " +
               real(op, "scale") + ", scratch, stream);"}};
    }
    case OpKind::silu_mul:
      return {{name, "void " + name + "(const bf16* gate_up, bf16* act, int tokens, cudaStream_t stream)",
               "kiln::silu_mul<" + dim(op, "dim") + ">(gate_up, act, tokens, stream);"}};
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
  }
  return {};
}

std::string cuda_call(const Op& op, const Graph& g, Phase phase) {
  const std::string& k = op.kernel;
  switch (op.kind) {
    case OpKind::embed: return k + "(step.token_ids, " + weight(op, g) + ", x, T, stream);";
    case OpKind::rmsnorm:
      return k + "(" + op.reads[0] + ", " + weight(op, g) + ", " + op.writes[0] + ", T, stream);";
    case OpKind::rmsnorm_rows:
      return k + "(" + op.reads[0] + ", step.logit_rows, " + weight(op, g) + ", " + op.writes[0] + ", N, stream);";
    case OpKind::linear:
      if (phase == Phase::decode) {
        return k + "(" + op.reads[0] + ", " + weight(op, g) + ", " + op.writes[0] + ", " + rows(op) + ", stream);";
      }
      return "cuda::gemm(ctx, " + op.reads[0] + ", " + weight(op, g) + ", " + op.writes[0] + ", " + rows(op) + ", " +
             dim(op, "n") + ", " + dim(op, "k") + ", " + gemm_out(op.epilogue) + ");";
    case OpKind::head_rmsnorm:
      return k + "(" + op.reads[0] + ", " + weight(op, g, 0) + ", " + weight(op, g, 1) + ", T, stream);";
    case OpKind::rope: return k + "(" + op.reads[0] + ", step.positions, ctx.rope, T, stream);";
    case OpKind::kv_write: return k + "(" + op.reads[0] + ", step.slot_mapping, kv, T, stream);";
    case OpKind::attention:
      if (phase == Phase::decode) {
        return k + "_decode(" + op.reads[0] + ", kv, " + op.writes[0] +
               ", step.context_len, step.block_tables, step.max_pages_per_seq, step.num_seqs, ctx.scratch, stream);";
      }
      return k + "_prefill(" + op.reads[0] + ", kv, " + op.writes[0] +
             ", step.query_start, step.positions, step.block_tables, step.max_pages_per_seq, step.num_seqs, "
             "step.max_query_len, stream);";
    case OpKind::silu_mul: return k + "(" + op.reads[0] + ", " + op.writes[0] + ", T, stream);";
  }
  return "";
}

std::vector<std::string> ref_call(const Op& op, const Graph& g) {
  switch (op.kind) {
    case OpKind::embed:
      return {"ref::embed(step.token_ids.data(), T, " + weight(op, g) + ", " + dim(op, "vocab") + ", " + dim(op, "dim") +
              ", x);"};
    case OpKind::rmsnorm:
      return {"ref::rmsnorm(" + op.reads[0] + ", " + weight(op, g) + ", " + op.writes[0] + ", T, " + dim(op, "dim") +
              ", " + real(op, "eps") + ");"};
    case OpKind::rmsnorm_rows:
      return {"ref::rmsnorm_rows(" + op.reads[0] + ", step.logit_rows.data(), N, " + weight(op, g) + ", " +
              op.writes[0] + ", " + dim(op, "dim") + ", " + real(op, "eps") + ");"};
    case OpKind::linear:
      return {"ref::linear(" + op.reads[0] + ", " + rows(op) + ", " + weight(op, g) + ", " + dim(op, "n") + ", " +
              dim(op, "k") + ", " + op.writes[0] + ", /*accumulate=*/" +
              (op.epilogue == Epilogue::residual_add ? "true" : "false") + ");"};
    case OpKind::head_rmsnorm:
      return {"ref::head_rmsnorm(" + op.reads[0] + ", T, " + dim(op, "row") + ", 0, " + dim(op, "heads") + ", " +
                  dim(op, "head_dim") + ", " + weight(op, g, 0) + ", " + real(op, "eps") + ");",
              "ref::head_rmsnorm(" + op.reads[0] + ", T, " + dim(op, "row") + ", kKvOffset, " + dim(op, "kv_heads") +
                  ", " + dim(op, "head_dim") + ", " + weight(op, g, 1) + ", " + real(op, "eps") + ");"};
    case OpKind::rope:
      return {"ref::rope(" + op.reads[0] + ", T, " + dim(op, "row") + ", 0, " + dim(op, "heads") + " + " +
              dim(op, "kv_heads") + ", " + dim(op, "head_dim") + ", " + dim(op, "head_dim") +
              ", /*interleaved=*/false, step.positions.data(), ctx.rope);"};
    case OpKind::kv_write:
      return {"ref::kv_write(" + op.reads[0] + ", T, " + dim(op, "row") + ", " + dim(op, "k_offset") + ", " +
              dim(op, "v_offset") + ", step.slot_mapping.data(), kv);"};
    case OpKind::attention:
      return {"ref::attention(" + op.reads[0] + ", " + dim(op, "row") + ", " + dim(op, "heads") + ", " +
              real(op, "scale") + ", step, kv, " + op.writes[0] + ");"};
    case OpKind::silu_mul:
      return {"ref::silu_mul(" + op.reads[0] + ", T, " + dim(op, "dim") + ", " + op.writes[0] + ");"};
  }
  return {};
}

}  // namespace kiln::codegen
