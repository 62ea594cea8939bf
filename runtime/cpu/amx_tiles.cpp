#include "runtime/cpu/amx_tiles.hpp"

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace kiln::cpu {

uint32_t cpuid7_edx() {
#if defined(__x86_64__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return edx;
#endif
  return 0;
}

bool amx_tiles_granted() {
#if defined(__x86_64__)
  static const bool granted = [] {
    if (((cpuid7_edx() >> 24) & 1) == 0) return false;  // AMX-TILE
    constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return granted;
#else
  return false;
#endif
}

}  // namespace kiln::cpu
