// Builds the records of codegen/ops.def once, checking what the preprocessor cannot: known phase
// and source words, and a call for every phase.
#include "codegen/op_record.hpp"

#include "runtime/core/error.hpp"

namespace kiln::codegen {

namespace {

unsigned phase_bits(const std::string& phases) {
  const unsigned prefill = 1u << static_cast<unsigned>(Phase::prefill);
  const unsigned decode = 1u << static_cast<unsigned>(Phase::decode);
  const unsigned ref = 1u << static_cast<unsigned>(Phase::ref);
  if (phases == "all") return prefill | decode | ref;
  if (phases == "gpu") return prefill | decode;
  if (phases == "prefill") return prefill;
  if (phases == "decode") return decode;
  if (phases == "ref") return ref;
  fail("internal: ops.def: unknown phases '", phases, "' (all, gpu, prefill, decode, ref)");
}

ArgSource source_of(const std::string& s) {
  static const std::pair<const char*, ArgSource> kSources[] = {
      {"in", ArgSource::in},         {"in_opt", ArgSource::in_opt}, {"out", ArgSource::out}, {"inout", ArgSource::inout},
      {"weight", ArgSource::weight}, {"weight_opt", ArgSource::weight_opt}, {"matrix", ArgSource::matrix}, {"warm", ArgSource::warm},
      {"rows", ArgSource::rows},
      {"step", ArgSource::step},     {"kv", ArgSource::kv},     {"ctx", ArgSource::ctx},
      {"layer", ArgSource::layer},   {"fp8", ArgSource::fp8},   {"sums", ArgSource::sums}};
  for (const auto& [name, source] : kSources) {
    if (s == name) return source;
  }
  fail("internal: ops.def: unknown argument source '", s, "'");
}

CallHow how_of(const std::string& s) {
  if (s == "kernel") return CallHow::kernel;
  if (s == "host") return CallHow::host;
  if (s == "parts") return CallHow::parts;
  if (s == "none") return CallHow::none;
  fail("internal: ops.def: unknown call '", s, "' (kernel, host, parts, none)");
}

std::vector<OpRecord> build_records() {
  std::vector<OpRecord> records;
  auto add_call = [&](const std::string& phases, const std::string& how, const std::string& function) {
    const unsigned bits = phase_bits(phases);
    for (Phase p : kPhases) {
      if (bits & (1u << static_cast<unsigned>(p))) records.back().calls[static_cast<int>(p)] = {how_of(how), function};
    }
  };
#define KILN_OP(op, summary, template_header, ref_header)                                                \
  records.push_back({OpKind::op, #op, summary, template_header, ref_header});                            \
  records.back().calls[static_cast<int>(Phase::prefill)] = {CallHow::kernel, std::string("kiln::") + #op}; \
  records.back().calls[static_cast<int>(Phase::decode)] = {CallHow::kernel, std::string("kiln::") + #op};  \
  records.back().calls[static_cast<int>(Phase::ref)] = {CallHow::kernel, std::string("ref::") + #op};
#define KILN_SHAPE(type, member) records.back().shape.push_back({#type, #member});
#define KILN_ARG(phases, source, arg) records.back().args.push_back({phase_bits(#phases), source_of(#source), #arg});
#define KILN_CALL(phases, how, function) add_call(#phases, #how, #function);
#define KILN_TIE(expression) records.back().ties.push_back(expression);
#include "codegen/ops.def"
  for (const OpRecord& r : records) {
    if (r.template_header.empty() && r.call(Phase::decode).how == CallHow::kernel) {
      fail("internal: ops.def: ", r.name, " has a kernel call but no template header");
    }
    if (r.ref_header.empty() && r.call(Phase::ref).how != CallHow::parts) {
      fail("internal: ops.def: ", r.name, " has no reference header");
    }
  }
  return records;
}

}  // namespace

std::vector<const ArgSpec*> OpRecord::args_of(Phase p) const {
  std::vector<const ArgSpec*> out;
  for (const ArgSpec& a : args) {
    if (a.in(p)) out.push_back(&a);
  }
  return out;
}

const std::vector<OpRecord>& all_records() {
  static const std::vector<OpRecord> records = build_records();
  return records;
}

const OpRecord& record(OpKind kind) { return all_records().at(static_cast<size_t>(kind)); }
const char* op_name(OpKind kind) { return record(kind).name.c_str(); }
const char* op_summary(OpKind kind) { return record(kind).summary.c_str(); }

}  // namespace kiln::codegen
