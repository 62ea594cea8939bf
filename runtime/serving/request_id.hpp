// Requests and the sequences that serve them share one id, chosen by the caller.
#pragma once

#include <cstdint>

namespace kiln {

using RequestId = uint64_t;

}  // namespace kiln
