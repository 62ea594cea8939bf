// Tool calls written as a Python list of calls, `[get_weather(city="Paris", days=2), now()]`: the
// format of Llama 3.2's and Llama 4's pythonic tool-calling templates (vLLM's `pythonic` parser).
// Arguments are keywords whose values are Python literals (strings in either quotes, triple-quoted
// too; numbers; True / False / None; lists, tuples, dicts), turned into a JSON object in their
// order. Anything else (a positional argument, a name that is not a literal, a set, a call of a
// dotted name) is not a call list: the answer stays text.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "runtime/server/tool_parser.hpp"

namespace kiln {

// The calls of `text` when all of it (white space aside) is a non-empty list of calls; nullopt
// otherwise. Nesting deeper than kJsonMaxDepth is refused, not followed.
std::optional<std::vector<ToolCall>> parse_pythonic_calls(std::string_view text);

}  // namespace kiln
