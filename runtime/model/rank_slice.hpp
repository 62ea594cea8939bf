// Whether a weight source is a tensor-parallel (or expert-parallel) rank's slice of an HF tensor:
// any of its rank fields set. One rule for the generator's WeightSource (codegen/graph.hpp), which
// instantiates no quantized kernel for such a matrix, and the runtime's (model_def.hpp), whose
// loader holds it as bf16 rows only.
#pragma once

namespace kiln {

template <typename Source>
constexpr bool is_rank_slice(const Source& s) {
  return s.rank_rows != 0 || s.rank_cols != 0 || s.cols != 0 || s.rank_group != 1 || s.hf_rows != 0 || s.hf_cols != 0 ||
         s.rank_experts != 0;
}

}  // namespace kiln
