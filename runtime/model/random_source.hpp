// Deterministic pseudo-random weights as a TensorSource (benchmarks and tests without a
// checkpoint): the HF tensors a model's manifest names, each value a function of the seed, the HF
// tensor's name and the value's flat index in the whole HF tensor. So the random weights of a
// tensor-parallel rank (loaded through its own manifest) are exactly its slices of the whole
// model's random weights.
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/model/model_def.hpp"
#include "runtime/model/tensor_source.hpp"

namespace kiln {

// Lists the first layout of every manifest entry that is not tied ({L} over the entry's layers,
// {E} over its experts) with its whole HF shape (runtime/model/weight_loader.hpp whole_hf_rows; a
// 1-D kiln tensor's HF tensor is a vector [cols]). Vectors hold norms, 1 + 0.1·u; matrices
// 0.02·√3·u (standard deviation 0.02, HF's initializer_range); u uniform in [-1, 1) from
// splitmix64. Two entries naming one HF tensor with different shapes are an internal error.
std::unique_ptr<TensorSource> open_random_source(const ModelDef& model, uint64_t seed);

}  // namespace kiln
