// `<model> chat`: a multi-turn chat in the model's own template. Each turn renders the whole
// conversation, so the previous turns' KV pages come from the prefix cache; the answer streams as
// it is generated. /clear starts over, /exit (or end of input) quits, Ctrl-C stops an answer.
// From a pipe, each input line is one user message and only the answers are printed.
#pragma once

#include "runtime/cli/options.hpp"
#include "runtime/model/model_def.hpp"

namespace kiln {

int run_chat(const ModelDef& model, const CliOptions& options);

}  // namespace kiln
