// How much memory the machine can still give this process, for the size checks made before large
// host allocations (a KV pool on the CPU): an allocation beyond it ends in bad_alloc or the OOM
// killer, never in a message that names the setting to change.
#pragma once

#include <cstdint>

namespace kiln {

// MemAvailable from /proc/meminfo (what the kernel estimates can be allocated without swapping),
// or the free physical pages where that file is missing.
int64_t host_memory_available();

}  // namespace kiln
