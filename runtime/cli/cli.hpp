// The command line of every generated model binary (build/bin/<model>).
#pragma once

#include "runtime/model/model_def.hpp"

namespace kiln {

// Parses argv, runs the model on the prompts, prints or writes the results. Returns the exit code.
int run_cli(const ModelDef& model, int argc, char** argv);

}  // namespace kiln
