// libFuzzer target: untrusted bytes -> the client library's .npy reader.
//
// Each input is parsed in memory (ParseNpy) and, through a scratch file, by
// ReadNpyFile; the two must agree. What parses must describe its data
// exactly (shape x dtype size = data bytes) and survive a round trip through
// SerializeNpy. With -malloc_limit_mb a header that claims a huge array
// without holding it fails the run: sizes must be checked before allocation.
//
// Seed corpus: NORMSVC_FUZZ_WRITE_SEEDS=<dir> ./fuzz_npy writes valid .npy
// files of every dtype into <dir> and exits.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_contract.h"
#include "normsvc/client/npy.h"

namespace {

using normsvc::client::NpyArray;
using normsvc::client::NpyDType;
using normsvc::fuzz::Require;

bool SameArray(const NpyArray& a, const NpyArray& b) {
  return a.dtype == b.dtype && a.shape == b.shape && a.data == b.data;
}

const std::string& ScratchPath() {
  static const std::string path =
      std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") + "/fuzz_npy." +
      std::to_string(getpid()) + ".npy";
  return path;
}

void CheckParsed(const NpyArray& array) {
  int64_t count = 1;
  for (int64_t dim : array.shape) {
    Require(dim >= 0, "negative dimension");
    count *= dim;
  }
  Require(
      count * normsvc::client::NpyDTypeSize(array.dtype) == static_cast<int64_t>(array.data.size()),
      "data size does not match shape and dtype");
  absl::StatusOr<std::string> bytes = normsvc::client::SerializeNpy(array);
  Require(bytes.ok(), "a parsed array does not serialize");
  absl::StatusOr<NpyArray> again = normsvc::client::ParseNpy(*bytes);
  Require(again.ok(), "a serialized array does not parse");
  // bfloat16 read from '<V2' is written as '<u2': same dtype, same bytes.
  Require(SameArray(array, *again), "round trip changed the array");
}

void WriteSeed(const std::string& dir, const std::string& name, const NpyArray& array) {
  absl::StatusOr<std::string> bytes = normsvc::client::SerializeNpy(array);
  if (!bytes.ok()) std::abort();
  std::ofstream out(dir + "/" + name, std::ios::binary | std::ios::trunc);
  out << *bytes;
  if (!out) std::abort();
}

NpyArray Array(NpyDType dtype, std::vector<int64_t> shape) {
  NpyArray array;
  array.dtype = dtype;
  int64_t count = 1;
  for (int64_t dim : shape) count *= dim;
  array.shape = std::move(shape);
  array.data.resize(static_cast<size_t>(count * normsvc::client::NpyDTypeSize(dtype)));
  for (size_t i = 0; i < array.data.size(); ++i) array.data[i] = static_cast<char>(i * 37 + 11);
  return array;
}

void WriteSeeds(const std::string& dir) {
  WriteSeed(dir, "f32_2x3", Array(NpyDType::kFloat32, {2, 3}));
  WriteSeed(dir, "f16_4", Array(NpyDType::kFloat16, {4}));
  WriteSeed(dir, "bf16_2x2x2", Array(NpyDType::kBFloat16, {2, 2, 2}));
  WriteSeed(dir, "f64_3x1", Array(NpyDType::kFloat64, {3, 1}));
  WriteSeed(dir, "f32_scalar", Array(NpyDType::kFloat32, {}));
  WriteSeed(dir, "f32_0x5", Array(NpyDType::kFloat32, {0, 5}));
  // What np.save writes for ml_dtypes.bfloat16, and a format 2.0 preamble.
  std::string v2 = "\x93NUMPY\x02";
  v2 += '\0';
  std::string header = "{'descr': '|V2', 'fortran_order': False, 'shape': (2,), }";
  header.append((64 - (12 + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  for (int i = 0; i < 4; ++i) v2 += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  v2 += header + std::string("\x80\x3f\x00\x40", 4);
  std::ofstream(dir + "/bf16_v2_void", std::ios::binary | std::ios::trunc) << v2;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("NORMSVC_FUZZ_WRITE_SEEDS")) {
    WriteSeeds(dir);
    std::exit(0);
  }
  ScratchPath();  // constructed before the handler below is registered
  std::atexit([] { std::remove(ScratchPath().c_str()); });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<NpyArray> parsed = normsvc::client::ParseNpy(bytes);
  if (parsed.ok()) CheckParsed(*parsed);

  {
    std::ofstream out(ScratchPath(), std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  absl::StatusOr<NpyArray> read = normsvc::client::ReadNpyFile(ScratchPath());
  Require(read.ok() == parsed.ok(), "ParseNpy and ReadNpyFile disagree on success");
  if (read.ok())
    Require(SameArray(*parsed, *read), "ParseNpy and ReadNpyFile read different arrays");
  return 0;
}
