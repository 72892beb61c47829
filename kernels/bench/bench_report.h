// norm_bench's results: one Record a case, printed as the table and written
// as JSON together with the run's settings (the kernel policies in force and
// the large shapes' parameters).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "bench_options.h"

namespace normsvc::bench {

struct Record {
  std::string kind;  // forward(_residual), backward, small_batch, multi_segment, ...
  std::string op, dtype, plan;
  int64_t rows = 0, hidden = 0;
  double micros = 0, bytes = 0, copy_micros = 0;
  double Gbps() const { return bytes / micros / 1e3; }
  double CopyGbps() const { return bytes / copy_micros / 1e3; }
};

// What the large shapes were run with (--elements, --affine, --residual).
struct LargeShapeSettings {
  int64_t elements = 0;
  Affine affine = Affine::kFull;
  bool residual = false;
};

// The table on stdout: one line a record, its time, GB/s and ratio to copy.
void PrintTable(const std::vector<Record>& records);

// The JSON file at `path`: the device, the process-wide kernel policies as
// they are now, `settings`, and every record. Says so on stderr when the file
// cannot be written.
void WriteJson(const char* path, const std::vector<Record>& records, const cudaDeviceProp& prop,
               const LargeShapeSettings& settings);

}  // namespace normsvc::bench
