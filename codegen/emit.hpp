// Emitters: Graph -> the text of generated/<model>/. Each file has its own emitter (emit_*.cpp);
// all are pure functions of (spec, graph), so generation is deterministic and diffable.
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "codegen/graph.hpp"
#include "codegen/model_spec.hpp"

namespace kiln::codegen {

struct GeneratedFile {
  std::string name;  // path inside generated/<model>/: "model.hpp", "tp2/model.hpp"
  std::string text;
};

// Everything generated for one model, in a fixed order: its graph's files, then each
// tensor-parallel build's (tp<N>/...).
std::vector<GeneratedFile> emit_model(const ModelSpec& spec);

// Writes the files into `dir` (created if needed), touching only files whose content changed, and
// removes stale files kilnc generated earlier. Returns the names written.
std::vector<std::string> write_generated(const std::string& dir, const std::vector<GeneratedFile>& files);

// ---- per-file emitters ----
std::string emit_model_hpp(const ModelSpec& spec, const Graph& graph);
std::string emit_weights_inc(const ModelSpec& spec, const Graph& graph);
std::string emit_model_cpp(const ModelSpec& spec, const Graph& graph);
std::string emit_forward_ref(const ModelSpec& spec, const Graph& graph);
std::string emit_kernels_cu(const ModelSpec& spec, const Graph& graph);
std::string emit_forward_cu(const ModelSpec& spec, const Graph& graph);
std::string emit_cmake(const ModelSpec& spec, const Graph& graph);
std::string emit_main_cpp(const ModelSpec& spec);

// ---- helpers shared by the emitters ----
std::string banner(const ModelSpec& spec, const std::string& purpose);  // the "generated, do not edit" header
std::string model_summary(const ModelSpec& spec);                        // one paragraph, model-card style
std::string shape_text(const std::vector<int64_t>& shape);               // "[576, 576]"
std::string pad(const std::string& s, size_t width);                     // left-aligned column (UTF-8 aware)
std::string real_literal(double v);                                      // float literal: 1e-05f
std::string wrap(const std::string& text, size_t width);                 // words joined into lines

// Lines with indentation, for emitters that write nested code.
class Code {
 public:
  Code& line(const std::string& text = "");
  Code& comment(const std::string& text);    // "// " + text: one idea per line
  Code& paragraph(const std::string& text);  // a comment wrapped at 100 columns
  void indent() { depth_ += 2; }
  void dedent() { depth_ -= 2; }
  std::string str() const { return out_.str(); }

 private:
  std::ostringstream out_;
  int depth_ = 0;
};

}  // namespace kiln::codegen
