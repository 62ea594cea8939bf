// `<model> serve`: the OpenAI-compatible server. Listens first (/health says 503 while loading),
// loads the model, serves until SIGTERM or SIGINT, then stops accepting, finishes what runs and
// exits 0.
#pragma once

#include "runtime/cli/options.hpp"
#include "runtime/model/model_def.hpp"

namespace kiln {

int run_serve(const ModelDef& model, const CliOptions& options);

}  // namespace kiln
