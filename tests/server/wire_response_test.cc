// WireResponse (the hand-encoded Normalize reply) against protobuf's own
// serializer.
#include "server/wire_response.h"

#include <cstring>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "server/tensor_codec.h"
#include "test_support.h"

namespace normsvc::server::testing {
namespace {

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return bytes;
}

// Whether `buffer` holds exactly the bytes protobuf's serializer writes for
// `expected`.
::testing::AssertionResult EncodesAs(const grpc::ByteBuffer& buffer,
                                     const google::protobuf::Message& expected) {
  const std::string encoded = Flatten(buffer);
  std::string reference;
  if (!expected.SerializeToString(&reference)) {
    return ::testing::AssertionFailure() << "the expected message does not serialize";
  }
  if (encoded.size() != reference.size()) {
    return ::testing::AssertionFailure()
           << encoded.size() << " bytes encoded, protobuf writes " << reference.size();
  }
  if (encoded != reference) return ::testing::AssertionFailure() << "the bytes differ";
  return ::testing::AssertionSuccess();
}

std::string RandomBytes(std::mt19937_64& rng, std::size_t n) {
  std::string bytes(n, '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  return bytes;
}

// Sizes that cover an empty tensor, bytes a slice could hold inline (up to
// 23), one- to three-byte length varints and a large payload.
std::size_t RandomSize(std::mt19937_64& rng) {
  static constexpr std::size_t kSizes[] = {0, 1, 4, 23, 24, 127, 128, 16383, 16384, 262144 + 12};
  return kSizes[rng() % std::size(kSizes)];
}

TEST(WireResponseTest, EncodesExactlyWhatProtobufSerializes) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  constexpr kernels::DType kDTypes[] = {kernels::DType::kF32, kernels::DType::kF16,
                                        kernels::DType::kBF16};
  for (int trial = 0; trial < 200; ++trial) {
    SCOPED_TRACE(trial);
    WireResponse wire;
    v1::NormalizeResponse expected;
    // Request ids 0 (not written), small and the largest.
    const uint64_t id = trial % 3 == 0 ? 0 : (trial % 3 == 1 ? rng() % 300 : ~uint64_t{0} - trial);
    wire.set_request_id(id);
    expected.set_request_id(id);
    google::protobuf::RepeatedField<int64_t> shape;
    const int full_rank = 1 + static_cast<int>(rng() % 4);
    for (int d = 0; d < full_rank; ++d) {
      // Dimensions of one- to six-byte varints, zero included.
      static constexpr int64_t kDims[] = {0, 1, 3, 127, 128, 4096, int64_t{1} << 40};
      shape.Add(kDims[rng() % std::size(kDims)]);
    }
    std::vector<std::pair<void*, std::string>> writes;
    for (const int field :
         {v1::NormalizeResponse::kOutputFieldNumber, v1::NormalizeResponse::kResidualSumFieldNumber,
          v1::NormalizeResponse::kMeanFieldNumber, v1::NormalizeResponse::kRstdFieldNumber}) {
      if (field != v1::NormalizeResponse::kOutputFieldNumber && rng() % 2 == 0) continue;
      const kernels::DType dtype = kDTypes[rng() % 3];
      const int rank = field >= v1::NormalizeResponse::kMeanFieldNumber ? full_rank - 1 : full_rank;
      const std::size_t bytes = RandomSize(rng);
      void* where = wire.AllocateTensor(field, dtype, shape, rank, bytes);
      ASSERT_EQ(where == nullptr, bytes == 0);
      std::string data = RandomBytes(rng, bytes);
      if (bytes > 0) writes.emplace_back(where, data);
      v1::Tensor* tensor =
          field == v1::NormalizeResponse::kOutputFieldNumber ? expected.mutable_output()
          : field == v1::NormalizeResponse::kResidualSumFieldNumber
              ? expected.mutable_residual_sum()
          : field == v1::NormalizeResponse::kMeanFieldNumber ? expected.mutable_mean()
                                                             : expected.mutable_rstd();
      tensor->set_dtype(ToProtoDType(dtype));
      for (int d = 0; d < rank; ++d) tensor->add_shape(shape.Get(d));
      tensor->set_data(std::move(data));
    }
    const grpc::ByteBuffer buffer = wire.TakeBuffer();
    // Written after the buffer was taken, as the executor does: the buffer
    // shares the memory.
    for (const auto& [where, data] : writes) std::memcpy(where, data.data(), data.size());
    ASSERT_TRUE(EncodesAs(buffer, expected));
    v1::NormalizeResponse parsed;
    ASSERT_TRUE(parsed.ParseFromString(Flatten(buffer)));
    EXPECT_EQ(parsed.request_id(), id);
    EXPECT_EQ(parsed.output().data(), expected.output().data());
  }
}

// NormalizeStream's success replies: the encoded NormalizeResponse wrapped
// with the stream's request id, byte for byte what protobuf serializes.
TEST(WireResponseTest, StreamReplyWrapsTheResponseAsProtobufWould) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  google::protobuf::RepeatedField<int64_t> shape;
  for (int trial = 0; trial < 60; ++trial) {
    SCOPED_TRACE(trial);
    const uint64_t id = trial % 3 == 0 ? 0 : (trial % 3 == 1 ? rng() % 300 : ~uint64_t{0} - trial);
    const std::size_t bytes = RandomSize(rng);
    shape.Clear();
    shape.Add(static_cast<int64_t>(bytes / 4));
    WireResponse wire;
    wire.set_request_id(id);
    v1::NormalizeStreamResponse expected;
    expected.set_request_id(id);
    expected.mutable_response()->set_request_id(id);
    // Trials without a tensor wrap a response of the request id alone (or
    // of nothing: an empty message).
    void* where = nullptr;
    std::string data;
    if (trial % 4 != 3) {
      where = wire.AllocateTensor(v1::NormalizeResponse::kOutputFieldNumber, kernels::DType::kF32,
                                  shape, 1, bytes);
      data = RandomBytes(rng, bytes);
      v1::Tensor* output = expected.mutable_response()->mutable_output();
      output->set_dtype(ToProtoDType(kernels::DType::kF32));
      output->add_shape(shape.Get(0));
      output->set_data(data);
    }
    const grpc::ByteBuffer response = wire.TakeBuffer();
    grpc::ByteBuffer reply;
    ASSERT_TRUE(WrapStreamResponse(id, response, &reply));
    // The executor writes after the reply exists: the slices are shared.
    if (where != nullptr) std::memcpy(where, data.data(), data.size());
    ASSERT_TRUE(EncodesAs(reply, expected));
    v1::NormalizeStreamResponse parsed;
    ASSERT_TRUE(parsed.ParseFromString(Flatten(reply)));
    EXPECT_EQ(parsed.request_id(), id);
    ASSERT_TRUE(parsed.has_response());
    EXPECT_EQ(parsed.response().output().data(), data);
  }
}

}  // namespace
}  // namespace normsvc::server::testing
