// The GGUF TensorSource over a file the caller has already opened: the command line reads the
// tokenizer from the same file, and mapping and parsing it once serves both.
#pragma once

#include <memory>

#include "runtime/model/tensor_source.hpp"
#include "runtime/weights/gguf.hpp"

namespace kiln {

// Like open_gguf_source(path, model) (tensor_source.hpp); the source keeps `file` alive.
std::unique_ptr<TensorSource> open_gguf_source(std::shared_ptr<const GgufFile> file, const ModelInfo& model);

}  // namespace kiln
