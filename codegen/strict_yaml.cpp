#include "codegen/strict_yaml.hpp"

#include <yaml-cpp/eventhandler.h>

#include <set>
#include <sstream>
#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/core/file_io.hpp"

namespace kiln::codegen {
namespace {

class StrictEvents final : public YAML::EventHandler {
 public:
  StrictEvents(const std::string& path, int max_depth) : path_(path), max_depth_(max_depth) {}

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override { node(mark, nullptr); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override {
    fail(where(mark), "aliases (*name) are not supported in kiln configs; write the value out");
  }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t, const std::string& value) override {
    node(mark, &value);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    open(mark, false);
  }
  void OnSequenceEnd() override { frames_.pop_back(); }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    open(mark, true);
  }
  void OnMapEnd() override { frames_.pop_back(); }

 private:
  struct Frame {
    bool is_map = false;
    bool expect_key = true;  // maps: the next node is a key
    std::string path;        // dotted path of this container ("" for the document)
    std::set<std::string> keys;
    std::string last_key;
  };

  std::string where(const YAML::Mark& mark) const { return path_ + ":" + std::to_string(mark.line + 1) + ": "; }

  // A node is a key or a value; `scalar` is null for null nodes and containers.
  // Returns the dotted path of the node when it is a value.
  std::string node(const YAML::Mark& mark, const std::string* scalar, bool container = false) {
    if (frames_.empty()) return "";
    Frame& top = frames_.back();
    if (!top.is_map) return top.path;
    if (!top.expect_key) {
      top.expect_key = true;
      return top.path.empty() ? top.last_key : top.path + "." + top.last_key;
    }
    if (scalar == nullptr || container) fail(where(mark), "a mapping key must be a plain name, in '", top.path, "'");
    const std::string dotted = top.path.empty() ? *scalar : top.path + "." + *scalar;
    if (!top.keys.insert(*scalar).second) fail(where(mark), "repeated key '", dotted, "' (each key may appear once)");
    top.last_key = *scalar;
    top.expect_key = false;
    return dotted;
  }

  void open(const YAML::Mark& mark, bool is_map) {
    if (static_cast<int>(frames_.size()) >= max_depth_) {
      fail(where(mark), "nested deeper than ", max_depth_, " levels of mappings and lists");
    }
    const std::string path = node(mark, nullptr, /*container=*/true);
    frames_.push_back({is_map, true, path, {}, {}});
  }

  const std::string& path_;
  int max_depth_;
  std::vector<Frame> frames_;
};

// Counts documents after the first.
class DocumentCounter final : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

}  // namespace

YAML::Node load_yaml_strict(const std::string& path, int max_depth) {
  const std::string text = read_file(path);
  try {
    std::istringstream stream(text);
    YAML::Parser parser(stream);
    StrictEvents events(path, max_depth);
    if (!parser.HandleNextDocument(events)) return YAML::Node();  // an empty file
    DocumentCounter more;
    if (parser.HandleNextDocument(more)) fail(path, ": more than one YAML document; a kiln config is one mapping");
    return YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    fail(path, ":", e.mark.line + 1, ": not valid YAML: ", e.msg);
  }
}

}  // namespace kiln::codegen
