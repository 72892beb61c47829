// The realigning forward's process-wide settings (realign_policy.h): plain
// C++, so that they exist, and are tested, in builds without CUDA too.
#include "realign_policy.h"

#include <atomic>

namespace normsvc::kernels::detail {
namespace {

std::atomic<RealignPolicy> realign_policy{RealignPolicy::kStaged};
std::atomic<int> realign_stages{2};

}  // namespace

RealignPolicy GetRealignPolicy() { return realign_policy.load(std::memory_order_relaxed); }

void SetRealignPolicy(RealignPolicy policy) {
  realign_policy.store(policy, std::memory_order_relaxed);
}

int GetRealignStages() { return realign_stages.load(std::memory_order_relaxed); }

bool SetRealignStages(int stages) {
  if (stages < 2 || stages > 4) return false;
  realign_stages.store(stages, std::memory_order_relaxed);
  return true;
}

}  // namespace normsvc::kernels::detail
