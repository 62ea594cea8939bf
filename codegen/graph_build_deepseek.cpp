// ModelSpec -> Graph for DeepSeek-V2: MLA attention over a compressed latent cache, DeepSeekMoE.
#include "codegen/graph_build.hpp"
#include "runtime/core/error.hpp"

namespace kiln::codegen {

void build_deepseek(const ModelSpec& s, Graph& g) {
  (void)g;
  fail(s.source, ": deepseek_v2 graphs are not generated yet");
}

}  // namespace kiln::codegen
