// One step of a busy-wait: tells the core it is spinning, so the sibling
// hyperthread runs and the loop's exit is not mispredicted.
#pragma once

namespace normsvc::server {

inline void SpinPause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace normsvc::server
