// NumPy .npy files (format versions 1.0, 2.0 and 3.0): the tensor exchange
// format of normctl and the tests.
//
// Supported element types (little-endian, C order only):
//   '<f4' float32, '<f2' float16, '<f8' float64 (read only; normctl converts
//   it to fp32), and bfloat16 stored as its raw 16-bit patterns: written as
//   '<u2' (what np.save writes for uint16), read from '<u2' or from '<V2' /
//   '|V2' (what np.save writes for ml_dtypes.bfloat16). In NumPy:
//     bits = np.load("y.npy")                                  # uint16
//     y = (bits.astype(np.uint32) << 16).view(np.float32)      # exact
//     np.save("x.npy", (x.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16))
//   (the last line truncates; round to nearest even for exact bf16 values).
//
// The reader is written for untrusted input: every size is checked against
// the actual byte count before anything is allocated, and no malformed
// input crashes it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace normsvc::client {

enum class NpyDType { kFloat32, kFloat16, kBFloat16, kFloat64 };

// Element size in bytes.
int64_t NpyDTypeSize(NpyDType dtype);
// "float32", "float16", "bfloat16 (as uint16)", "float64".
std::string_view NpyDTypeName(NpyDType dtype);

struct NpyArray {
  NpyDType dtype = NpyDType::kFloat32;
  std::vector<int64_t> shape;  // empty for a 0-d array
  std::string data;            // little-endian, C order
};

struct NpyReadOptions {
  // Largest data section accepted (the array's bytes).
  int64_t max_data_bytes = int64_t{1} << 32;
  // Largest header accepted (NumPy itself writes < 4 KiB headers).
  int64_t max_header_bytes = 65536;
  // Most dimensions accepted.
  int max_dims = 32;
};

// Parses a whole .npy file held in memory.
absl::StatusOr<NpyArray> ParseNpy(std::string_view bytes, const NpyReadOptions& options = {});
// Reads a .npy file; the data section is allocated only after the header
// has been checked against the file's size.
absl::StatusOr<NpyArray> ReadNpyFile(const std::string& path, const NpyReadOptions& options = {});

// The .npy bytes (format 1.0, or 2.0 when the header needs it) of `array`.
// Fails when data.size() does not match shape and dtype.
absl::StatusOr<std::string> SerializeNpy(const NpyArray& array);
absl::Status WriteNpyFile(const std::string& path, const NpyArray& array);

}  // namespace normsvc::client
