#include <random>
#include <string>

#include <gtest/gtest.h>

#include "normsvc/client/npy.h"
#include "normsvc/client/npy_tensor.h"
#include "normsvc/kernels/float16.h"

namespace normsvc::client {
namespace {

// A .npy file as NumPy 1.x writes it, header text given.
std::string NpyBytes(const std::string& header_dict, const std::string& data, int major = 1) {
  std::string header = header_dict;
  const size_t preamble = major == 1 ? 10 : 12;
  while ((preamble + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  if (major != 1) out += std::string(2, '\0');
  return out + header + data;
}

std::string RandomBytes(size_t count, std::mt19937& rng) {
  std::string bytes(count, '\0');
  for (char& byte : bytes) byte = static_cast<char>(rng());
  return bytes;
}

TEST(NpyTest, ParsesWhatNumpyWrites) {
  std::mt19937 rng(std::random_device{}());
  const std::string data = RandomBytes(3 * 5 * 4, rng);
  absl::StatusOr<NpyArray> array =
      ParseNpy(NpyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 5), }", data));
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_EQ(array->dtype, NpyDType::kFloat32);
  EXPECT_EQ(array->shape, (std::vector<int64_t>{3, 5}));
  EXPECT_EQ(array->data, data);
}

TEST(NpyTest, ReadsVersion2AndOtherDtypes) {
  std::mt19937 rng(std::random_device{}());
  const std::string data = RandomBytes(7 * 2, rng);
  for (const char* descr : {"<f2", "<u2", "|V2"}) {
    absl::StatusOr<NpyArray> array = ParseNpy(
        NpyBytes(std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (7,), }",
                 data, 2));
    ASSERT_TRUE(array.ok()) << descr << ": " << array.status();
    EXPECT_EQ(array->dtype, std::string(descr) == "<f2" ? NpyDType::kFloat16 : NpyDType::kBFloat16);
    EXPECT_EQ(array->shape, (std::vector<int64_t>{7}));
  }
}

TEST(NpyTest, SerializeParseRoundTrip) {
  std::mt19937 rng(std::random_device{}());
  for (const std::vector<int64_t>& shape :
       std::vector<std::vector<int64_t>>{{}, {1}, {4, 3}, {2, 3, 5}, {0, 7}}) {
    NpyArray array;
    array.dtype = NpyDType::kFloat16;
    array.shape = shape;
    int64_t count = 1;
    for (int64_t dim : shape) count *= dim;
    array.data = RandomBytes(static_cast<size_t>(count * 2), rng);
    absl::StatusOr<std::string> bytes = SerializeNpy(array);
    ASSERT_TRUE(bytes.ok());
    EXPECT_EQ(bytes->size() % 64, array.data.size() % 64);  // header padded to 64
    absl::StatusOr<NpyArray> back = ParseNpy(*bytes);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->shape, shape);
    EXPECT_EQ(back->data, array.data);
  }
}

TEST(NpyTest, RejectsMalformedHeadersWithoutAllocating) {
  const std::string four_bytes(4, '\x01');
  const std::vector<std::string> bad = {
      "", "\x93NUMP",
      NpyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
               four_bytes),  // short data
      NpyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }",
               four_bytes + "x"),  // long
      NpyBytes("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", four_bytes),
      NpyBytes("{'descr': '<i4', 'fortran_order': False, 'shape': (1,), }", four_bytes),
      NpyBytes("{'descr': '<f4', 'fortran_order': True, 'shape': (1, 1), }", four_bytes),
      NpyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1, -1), }", four_bytes),
      NpyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4), }",
               four_bytes),
      NpyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999, 99999999999), }",
               four_bytes),
      // 20 digits: overflows int64 while the digits are read.
      NpyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }",
               four_bytes),
      NpyBytes("{'descr': '<f4', 'fortran_order': False}", four_bytes),
      NpyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", four_bytes),
      NpyBytes("{'descr': '<f4, 'fortran_order': False, 'shape': (1,), }", four_bytes),
      NpyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1,", ""),
      std::string("\x93NUMPY\x01\x00\xff\xff", 10) + "{",  // header length past the end
      std::string("\x93NUMPY\x09\x00\x10\x00", 10) + std::string(16, ' '),  // unknown version
  };
  for (const std::string& bytes : bad) {
    EXPECT_FALSE(ParseNpy(bytes).ok()) << "accepted: " << bytes;
  }
  NpyReadOptions small;
  small.max_data_bytes = 8;
  EXPECT_FALSE(ParseNpy(NpyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }",
                                 std::string(12, '\0')),
                        small)
                   .ok());
}

TEST(NpyTest, RandomCorruptionsNeverCrash) {
  std::mt19937 rng(std::random_device{}());
  const std::string good =
      NpyBytes("{'descr': '<f2', 'fortran_order': False, 'shape': (3, 4), }", std::string(24, 'a'));
  int accepted = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    std::string bytes = good;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % bytes.size();
      switch (rng() % 3) {
        case 0:
          bytes[at] = static_cast<char>(rng());
          break;
        case 1:
          bytes.erase(at, 1 + rng() % 8);
          break;
        default:
          bytes.insert(at, 1, static_cast<char>(rng()));
      }
      if (bytes.empty()) bytes = "x";
    }
    absl::StatusOr<NpyArray> array = ParseNpy(bytes);
    if (array.ok()) {
      ++accepted;
      int64_t count = 1;
      for (int64_t dim : array->shape) count *= dim;
      EXPECT_EQ(static_cast<int64_t>(array->data.size()), count * NpyDTypeSize(array->dtype));
    }
  }
  EXPECT_LT(accepted, 20000);
}

TEST(NpyTest, ReadFileRefusesMissingFilesAndDirectories) {
  EXPECT_EQ(ReadNpyFile("/nonexistent/x.npy").status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(ReadNpyFile("/tmp").ok());
}

TEST(NpyTensorTest, ConvertsFloat64AndToBf16WithRounding) {
  NpyArray array;
  array.dtype = NpyDType::kFloat64;
  array.shape = {2, 2};
  const double values[4] = {1.0 + 1.0 / 256 + 1.0 / 1024, -3.25, 1e-3, 65504.0};
  array.data.assign(reinterpret_cast<const char*>(values), sizeof(values));
  absl::StatusOr<v1::Tensor> tensor = NpyToTensor(array, v1::BF16);
  ASSERT_TRUE(tensor.ok()) << tensor.status();
  ASSERT_EQ(tensor->data().size(), 8u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(kernels::LoadAsFloat(tensor->data().data(), kernels::DType::kBF16, i),
              kernels::Bf16BitsToFloat(kernels::FloatToBf16Bits(static_cast<float>(values[i]))));
  }
  absl::StatusOr<NpyArray> back = TensorToNpy(*tensor);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->dtype, NpyDType::kBFloat16);
  EXPECT_EQ(back->shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(back->data, tensor->data());
}

}  // namespace
}  // namespace normsvc::client
