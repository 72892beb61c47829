// The realigning forward's process-wide setting (realign_policy.h): plain
// C++, so that it exists in builds without CUDA too (norm_bench and the
// tests set it).
#include "realign_policy.h"

#include <atomic>

namespace normsvc::kernels::detail {
namespace {

std::atomic<RealignPolicy> realign_policy{RealignPolicy::kStaged};

}  // namespace

RealignPolicy GetRealignPolicy() { return realign_policy.load(std::memory_order_relaxed); }

void SetRealignPolicy(RealignPolicy policy) {
  realign_policy.store(policy, std::memory_order_relaxed);
}

}  // namespace normsvc::kernels::detail
