// The op records of codegen/ops.def as data: what the emitters render every op's kernel wrapper,
// template call and call sites (CUDA prefill, CUDA decode, CPU reference) from.
#pragma once

#include <string>
#include <vector>

namespace kiln::codegen {

enum class OpKind {
#define KILN_OP(name, summary, template_header, ref_header) name,
#include "codegen/ops.def"
};

// Where generated code runs an op: the two CUDA graphs and the CPU reference.
enum class Phase { prefill, decode, ref };
constexpr Phase kPhases[] = {Phase::prefill, Phase::decode, Phase::ref};

enum class ArgSource { in, in_opt, out, inout, weight, weight_opt, matrix, warm, rows, step, kv, ctx, layer, fp8, sums };

struct ShapeMember {
  std::string type;  // int, float, bool, LinearOut
  std::string name;
};

struct ArgSpec {
  unsigned phases = 0;  // bit per Phase
  ArgSource source = ArgSource::in;
  std::string name;     // the parameter's name; for step and ctx also the field it comes from
  bool in(Phase p) const { return phases & (1u << static_cast<unsigned>(p)); }
};

enum class CallHow { kernel, host, parts, none };
struct CallSpec {
  CallHow how = CallHow::kernel;
  std::string function;  // kiln::rmsnorm, cuda::linear, ref::rmsnorm; for none: the op it runs fused into
};

struct OpRecord {
  OpKind kind;
  std::string name;             // one name: ops.def, templates/<name>.cuh, kiln::<name>, ref::<name>
  std::string summary;
  std::string template_header;  // "" when the op has no kernel of its own
  std::string ref_header;       // "" for fused ops (the reference runs their parts)
  std::vector<ShapeMember> shape;
  std::vector<ArgSpec> args;
  CallSpec calls[3];            // by Phase
  std::vector<std::string> ties;  // static_assert expressions; {shape} is the op's shape constant

  const CallSpec& call(Phase p) const { return calls[static_cast<int>(p)]; }
  std::vector<const ArgSpec*> args_of(Phase p) const;
  // True when prefill and decode call different template functions, or the same one with
  // different arguments (two wrappers).
  bool split_phases() const {
    return call(Phase::prefill).how == CallHow::kernel && call(Phase::decode).how == CallHow::kernel &&
           (call(Phase::prefill).function != call(Phase::decode).function || args_of(Phase::prefill) != args_of(Phase::decode));
  }
};

const OpRecord& record(OpKind kind);
const std::vector<OpRecord>& all_records();
const char* op_name(OpKind kind);
const char* op_summary(OpKind kind);

}  // namespace kiln::codegen
