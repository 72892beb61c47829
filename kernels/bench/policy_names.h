// The flag names of the process-wide kernel policies that norm_bench sets
// (--ring, --param_staging, --column-reduce, --realign), and the lookups both ways.
#pragma once

#include <cstddef>
#include <string>
#include <utility>

#include "column_reduce.h"
#include "param_staging.h"
#include "realign_policy.h"
#include "ring_policy.h"

namespace normsvc::bench {

// The --ring names of the policies.
inline constexpr std::pair<const char*, kernels::detail::RingPolicy> kRingPolicies[] = {
    {"off", kernels::detail::RingPolicy::kOff},
    {"two-block-clusters", kernels::detail::RingPolicy::kTwoBlockClusters},
    {"every-plan", kernels::detail::RingPolicy::kEveryPlan},
};

// A policy by its flag name, and back (tables above).
template <typename Policy, std::size_t N>
bool ParseNamed(const std::pair<const char*, Policy> (&table)[N], const std::string& name,
                Policy* policy) {
  for (const auto& [n, p] : table) {
    if (name == n) {
      *policy = p;
      return true;
    }
  }
  return false;
}

template <typename Policy, std::size_t N>
const char* NameOf(const std::pair<const char*, Policy> (&table)[N], Policy policy) {
  for (const auto& [n, p] : table) {
    if (policy == p) return n;
  }
  return "?";
}

inline const char* RingPolicyName(kernels::detail::RingPolicy policy) {
  return NameOf(kRingPolicies, policy);
}

// The --param_staging names of the policies.
inline constexpr std::pair<const char*, kernels::detail::ParamStaging> kParamStagings[] = {
    {"off", kernels::detail::ParamStaging::kOff},
    {"one-wave", kernels::detail::ParamStaging::kOneWave},
    {"multi-warp-rows", kernels::detail::ParamStaging::kMultiWarpRows},
    {"every-launch", kernels::detail::ParamStaging::kEveryLaunch},
};

inline const char* ParamStagingName(kernels::detail::ParamStaging policy) {
  return NameOf(kParamStagings, policy);
}

// The --column-reduce names of the forms.
inline constexpr std::pair<const char*, kernels::detail::ColumnReduceForm> kColumnReduceForms[] = {
    {"auto", kernels::detail::ColumnReduceForm::kAuto},
    {"narrow", kernels::detail::ColumnReduceForm::kNarrow},
    {"wide", kernels::detail::ColumnReduceForm::kWide},
};

// The --realign names of the policies.
inline constexpr std::pair<const char*, kernels::detail::RealignPolicy> kRealignPolicies[] = {
    {"shift", kernels::detail::RealignPolicy::kShift},
    {"staged", kernels::detail::RealignPolicy::kStaged},
};

}  // namespace normsvc::bench
