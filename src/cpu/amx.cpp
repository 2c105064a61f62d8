// AMX detection and Linux's permission (amx.hpp).
#include "cpu/amx.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace ssmkit::cpu {
namespace {

AmxSupport Detect() {
  AmxSupport support;
#if defined(__x86_64__) && defined(__linux__)
  const char* setting = std::getenv("SSMKIT_AMX");
  if (setting != nullptr && std::strcmp(setting, "0") == 0) return support;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_max(0, nullptr) < 7) return support;
  __cpuid_count(7, 0, eax, ebx, ecx, edx);
  // CPUID leaf 7: EDX bit 22 AMX-BF16, 24 AMX-TILE, 25 AMX-INT8.
  const bool bf16 = (edx & (1u << 22)) != 0, tile = (edx & (1u << 24)) != 0,
             int8 = (edx & (1u << 25)) != 0;
  if (!tile) return support;
  __cpuid(1, eax, ebx, ecx, edx);
  constexpr unsigned kOsxsave = 1u << 27;
  if ((ecx & kOsxsave) == 0) return support;
  unsigned xcr0_low = 0, xcr0_high = 0;
  __asm__("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
  constexpr unsigned kTileState = (1u << 17) | (1u << 18);  // XTILECFG, XTILEDATA
  if ((xcr0_low & kTileState) != kTileState) return support;
  // Refused (a kernel before 5.16, or a thread's alternate signal stack too small for the
  // larger frames), a tile instruction would fault: no AMX.
  constexpr long kArchRequestComponentPermission = 0x1023, kTileData = 18;
  if (syscall(SYS_arch_prctl, kArchRequestComponentPermission, kTileData) != 0) return support;
  support.int8 = int8;
  support.bf16 = bf16;
#endif
  return support;
}

std::atomic<bool>& Enabled() {
  static std::atomic<bool> enabled{true};
  return enabled;
}

}  // namespace

AmxSupport AmxAvailable() {
  static const AmxSupport support = Detect();
  return support;
}

bool SetAmx(bool enable) {
  Enabled().store(enable, std::memory_order_relaxed);
  return AmxInt8() || AmxBf16();
}

bool AmxInt8() { return AmxAvailable().int8 && Enabled().load(std::memory_order_relaxed); }
bool AmxBf16() { return AmxAvailable().bf16 && Enabled().load(std::memory_order_relaxed); }

}  // namespace ssmkit::cpu
