#include "bench_report.h"

#include <cstdio>

#include "column_reduce.h"
#include "kernel_registry.h"
#include "policy_names.h"
#include "realign_policy.h"

namespace normsvc::bench {

void PrintTable(const std::vector<Record>& records) {
  std::printf("%-25s %-10s %-5s %6s %6s %-26s %9s %8s %9s %8s %6s\n", "kind", "op", "dtype", "rows",
              "H", "plan", "us", "GB/s", "copy us", "copy", "ratio");
  for (const Record& r : records) {
    std::printf("%-25s %-10s %-5s %6lld %6lld %-26s %9.2f %8.0f %9.2f %8.0f %6.3f\n",
                r.kind.c_str(), r.op.c_str(), r.dtype.c_str(), static_cast<long long>(r.rows),
                static_cast<long long>(r.hidden), r.plan.c_str(), r.micros, r.Gbps(), r.copy_micros,
                r.CopyGbps(), r.copy_micros / r.micros);
  }
}

void WriteJson(const char* path, const std::vector<Record>& records, const cudaDeviceProp& prop,
               const LargeShapeSettings& settings) {
  FILE* f = std::fopen(path, "w");
  if (f == nullptr) {
    std::perror(path);
    return;
  }
  std::fprintf(f,
               "{\"device\": \"%s\", \"sm_count\": %d, \"l2_bytes\": %d, \"ring\": \"%s\", "
               "\"param_staging\": \"%s\", \"realign\": \"%s\", \"backward_realign\": \"%s\", "
               "\"column_reduce\": \"%s\", \"discard_partials\": \"%s\", "
               "\"large_elements\": %lld, \"affine\": \"%s\", "
               "\"residual\": %s, \"records\": [\n",
               prop.name, prop.multiProcessorCount, prop.l2CacheSize,
               RingPolicyName(kernels::detail::GetRingPolicy()),
               ParamStagingName(kernels::detail::GetParamStaging()),
               NameOf(kRealignPolicies, kernels::detail::GetRealignPolicy()),
               kernels::detail::BackwardRealignEnabled() ? "on" : "off",
               NameOf(kColumnReduceForms, kernels::detail::GetColumnReduceForm()),
               kernels::detail::GetDiscardPartials() ? "on" : "off",
               static_cast<long long>(settings.elements), AffineName(settings.affine),
               settings.residual ? "true" : "false");
  for (std::size_t i = 0; i < records.size(); ++i) {
    const Record& r = records[i];
    std::fprintf(f,
                 "  {\"kind\": \"%s\", \"op\": \"%s\", \"dtype\": \"%s\", \"rows\": %lld, "
                 "\"hidden\": %lld, \"plan\": \"%s\", \"micros\": %.3f, \"bytes\": %.0f, "
                 "\"gbps\": %.1f, \"copy_micros\": %.3f, \"copy_gbps\": %.1f, "
                 "\"ratio_to_copy\": %.4f}%s\n",
                 r.kind.c_str(), r.op.c_str(), r.dtype.c_str(), static_cast<long long>(r.rows),
                 static_cast<long long>(r.hidden), r.plan.c_str(), r.micros, r.bytes, r.Gbps(),
                 r.copy_micros, r.CopyGbps(), r.copy_micros / r.micros,
                 i + 1 < records.size() ? "," : "");
  }
  std::fprintf(f, "]}\n");
  std::fclose(f);
}

}  // namespace normsvc::bench
