#include "bench_options.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernel_registry.h"
#include "policy_names.h"
#include "realign_policy.h"

namespace normsvc::bench {
namespace {

constexpr const char kUsage[] =
    "usage: norm_bench [--json PATH] [--iterations N] [--quick] [--forward-only]\n"
    "                  [--backward-only] [--backward-dx-only] [--hidden H]\n"
    "                  [--dtype bf16|fp32|fp16]\n"
    "                  [--ring off|two-block-clusters|every-plan]\n"
    "                  [--param_staging off|one-wave|multi-warp-rows|every-launch] [--realign "
    "shift|staged]\n"
    "                  [--backward-realign on|off]\n"
    "                  [--elements N] [--affine full|gamma|none] [--residual]\n"
    "                  [--column-reduce auto|narrow|wide] [--discard-partials on|off]\n";

// Sets the policy named `value` from `table`, or says which names there are.
template <typename Policy, std::size_t N>
bool SetNamed(const char* flag, const std::pair<const char*, Policy> (&table)[N], const char* value,
              void (*set)(Policy)) {
  Policy policy;
  if (ParseNamed(table, value, &policy)) {
    set(policy);
    return true;
  }
  std::string names;
  for (const auto& [name, unused] : table) names += names.empty() ? name : std::string(", ") + name;
  std::fprintf(stderr, "norm_bench: unknown %s %s (%s)\n", flag, value, names.c_str());
  return false;
}

// Sets the switch `flag` names from "on" or "off", or says that it takes those.
bool SetOnOff(const char* flag, const char* value, void (*set)(bool)) {
  const std::string enabled = value;
  if (enabled != "on" && enabled != "off") {
    std::fprintf(stderr, "norm_bench: %s takes on or off, not %s\n", flag, value);
    return false;
  }
  set(enabled == "on");
  return true;
}

}  // namespace

const char* AffineName(Affine affine) {
  return affine == Affine::kFull ? "full" : affine == Affine::kGammaOnly ? "gamma" : "none";
}

int ParseBenchOptions(int argc, char** argv, BenchOptions* options) {
  namespace detail = kernels::detail;
  for (int i = 1; i < argc; ++i) {
    const char* flag = argv[i];
    const bool has_value = i + 1 < argc;
    const auto is = [&](const char* name) { return std::strcmp(flag, name) == 0; };
    if (is("--quick")) {
      options->quick = true;
    } else if (is("--forward-only")) {
      options->forward_only = true;
    } else if (is("--residual")) {
      options->residual = true;
    } else if (is("--backward-only")) {
      options->backward_only = true;
    } else if (is("--backward-dx-only")) {
      options->backward_only = options->backward_dx_only = true;
    } else if (is("--help")) {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (!has_value) {
      std::fprintf(stderr, "norm_bench: %s: unknown flag, or its value is missing\n%s", flag,
                   kUsage);
      return 2;
    } else if (const char* value = argv[++i]; is("--json")) {
      options->json = value;
    } else if (is("--iterations")) {
      options->iterations = std::atoi(value);
      if (options->iterations < 1) {
        std::fprintf(stderr, "norm_bench: --iterations must be at least 1, not %s\n", value);
        return 2;
      }
    } else if (is("--hidden")) {
      options->only_hidden = std::atoll(value);
      if (options->only_hidden < 1) {
        std::fprintf(stderr, "norm_bench: --hidden must be at least 1, not %s\n", value);
        return 2;
      }
    } else if (is("--dtype")) {
      options->only_dtype = value;
      if (options->only_dtype != "bf16" && options->only_dtype != "fp32" &&
          options->only_dtype != "fp16") {
        std::fprintf(stderr, "norm_bench: --dtype takes bf16, fp32 or fp16, not %s\n", value);
        return 2;
      }
    } else if (is("--elements")) {
      options->large_elements = std::atoll(value);
      if (options->large_elements < (int64_t{1} << 20)) {
        std::fprintf(stderr, "norm_bench: --elements must be at least 1048576\n");
        return 2;
      }
    } else if (is("--affine")) {
      const std::string affine = value;
      if (affine == "full") {
        options->affine = Affine::kFull;
      } else if (affine == "gamma") {
        options->affine = Affine::kGammaOnly;
      } else if (affine == "none") {
        options->affine = Affine::kNone;
      } else {
        std::fprintf(stderr, "norm_bench: --affine takes full, gamma or none, not %s\n", value);
        return 2;
      }
    } else if (is("--backward-realign")) {
      if (!SetOnOff(flag, value, detail::SetBackwardRealignEnabled)) return 2;
    } else if (is("--ring")) {
      if (!SetNamed(flag, kRingPolicies, value, detail::SetRingPolicy)) return 2;
    } else if (is("--realign")) {
      if (!SetNamed(flag, kRealignPolicies, value, detail::SetRealignPolicy)) return 2;
    } else if (is("--param_staging")) {
      if (!SetNamed(flag, kParamStagings, value, detail::SetParamStaging)) return 2;
    } else if (is("--column-reduce")) {
      if (!SetNamed(flag, kColumnReduceForms, value, detail::SetColumnReduceForm)) return 2;
    } else if (is("--discard-partials")) {
      if (!SetOnOff(flag, value, detail::SetDiscardPartials)) return 2;
    } else {
      std::fprintf(stderr, "norm_bench: unknown flag %s\n%s", flag, kUsage);
      return 2;
    }
  }
  return -1;
}

}  // namespace normsvc::bench
