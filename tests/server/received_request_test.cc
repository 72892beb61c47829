// ParseReceivedNormalizeRequest against protobuf's own parser: random
// requests (every field present or not, unknown fields at every level),
// requests merged by concatenation, cut into random slices as gRPC's frames
// cut them, truncated and corrupted; that the tensors' data stays in the
// received slices; and the CPU executor on requests whose tensors arrived
// split over slices and misaligned.
#include "server/received_request.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "received_request_testing.h"
#include "server/cpu_executor.h"
#include "server/parameter_store.h"
#include "server/task_builder.h"
#include "test_support.h"

namespace normsvc::server::testing {
namespace {

// A request with every field present or absent at random (not necessarily
// one validation accepts: the parser must agree with protobuf on any).
v1::NormalizeRequest RandomRequest(std::mt19937_64& rng) {
  v1::NormalizeRequest request;
  if (rng() % 2) request.set_request_id(rng());
  if (rng() % 4) request.set_op(static_cast<v1::NormOp>(rng() % 4));
  if (rng() % 8) RandomTensorField(rng, request.mutable_input(), 70000);
  if (rng() % 2) request.set_epsilon(static_cast<float>(rng() % 1000) * 1e-6f);
  RandomParameters(rng, &request, /*beta_one_in=*/2);
  if (rng() % 4 == 0 && request.has_parameters())
    AddUnknownFields(rng, request.mutable_parameters());
  if (rng() % 3 == 0) RandomTensorField(rng, request.mutable_residual(), 70000);
  if (rng() % 2) request.set_return_residual_sum(true);
  if (rng() % 2) request.set_return_statistics(true);
  if (rng() % 3 == 0) request.set_output_dtype(static_cast<v1::DType>(rng() % 4));
  if (rng() % 3 == 0) AddUnknownFields(rng, &request);
  return request;
}

// The parsed request with the received data put back into the message.
v1::NormalizeRequest Reassembled(const ReceivedNormalizeRequest& received) {
  v1::NormalizeRequest message = received.message;
  auto put_back = [](bool present, const ReceivedBytes& bytes, v1::Tensor* tensor) {
    EXPECT_TRUE(tensor->data().empty()) << "the parser copied a tensor's data";
    if (present) {
      tensor->set_data(Flatten(bytes));
    } else {
      EXPECT_EQ(bytes.size(), 0) << "data of an absent tensor";
    }
  };
  put_back(message.has_input(), received.input, message.mutable_input());
  put_back(message.has_residual(), received.residual, message.mutable_residual());
  const bool inline_parameters = message.parameters().has_inline_();
  v1::Parameters::Inline* parameters =
      inline_parameters ? message.mutable_parameters()->mutable_inline_() : nullptr;
  v1::Parameters::Inline unused;
  if (parameters == nullptr) parameters = &unused;
  put_back(inline_parameters && parameters->has_gamma(), received.gamma,
           parameters->mutable_gamma());
  put_back(inline_parameters && parameters->has_beta(), received.beta, parameters->mutable_beta());
  // Tensors absent before the put-back stay absent.
  if (!received.message.has_input()) message.clear_input();
  if (!received.message.has_residual()) message.clear_residual();
  if (inline_parameters) {
    if (!received.message.parameters().inline_().has_gamma()) parameters->clear_gamma();
    if (!received.message.parameters().inline_().has_beta()) parameters->clear_beta();
  }
  return message;
}

// Parses `bytes` both ways, sliced at random; they must agree on whether
// the bytes are a request and, when they are, on every field.
void ExpectSameAsProtobuf(std::mt19937_64& rng, const std::string& bytes) {
  v1::NormalizeRequest expected;
  const bool protobuf_parsed = expected.ParseFromString(bytes);
  grpc::ByteBuffer buffer = RandomlySliced(rng, bytes);
  ReceivedNormalizeRequest received;
  const absl::Status status = ParseReceivedNormalizeRequest(&buffer, &received);
  EXPECT_FALSE(buffer.Valid());  // taken over
  ASSERT_EQ(status.ok(), protobuf_parsed) << status;
  if (!protobuf_parsed) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find("not a valid normsvc.v1.NormalizeRequest"), std::string::npos)
        << status.message();
    return;
  }
  const v1::NormalizeRequest reassembled = Reassembled(received);
  EXPECT_EQ(reassembled.SerializeAsString(), expected.SerializeAsString())
      << "parsed:   " << reassembled.ShortDebugString().substr(0, 400)
      << "\nprotobuf: " << expected.ShortDebugString().substr(0, 400);
}

TEST(ReceivedRequestTest, AgreesWithProtobufOnRandomRequests) {
  std::mt19937_64 rng(TestSeed() + 70);
  for (int i = 0; i < 400; ++i) {
    ExpectSameAsProtobuf(rng, RandomRequest(rng).SerializeAsString());
    if (HasFatalFailure()) return;
  }
}

// Concatenated messages parse as one, merged: the last scalar and the last
// data win, shapes append, and name and inline parameters (one oneof)
// replace each other in wire order.
TEST(ReceivedRequestTest, AgreesWithProtobufOnMergedRequests) {
  std::mt19937_64 rng(TestSeed() + 71);
  for (int i = 0; i < 300; ++i) {
    std::string bytes;
    const int parts = 2 + static_cast<int>(rng() % 3);
    for (int p = 0; p < parts; ++p) bytes += RandomRequest(rng).SerializeAsString();
    ExpectSameAsProtobuf(rng, bytes);
    if (HasFatalFailure()) return;
  }
  // The oneof both ways, explicitly.
  v1::NormalizeRequest named, inlined;
  named.mutable_parameters()->set_name("g");
  v1::Tensor* gamma = inlined.mutable_parameters()->mutable_inline_()->mutable_gamma();
  gamma->set_dtype(v1::FP32);
  gamma->add_shape(2);
  gamma->set_data(RandomBytes(rng, 8));
  ExpectSameAsProtobuf(rng, inlined.SerializeAsString() + named.SerializeAsString());
  ExpectSameAsProtobuf(rng, named.SerializeAsString() + inlined.SerializeAsString());
}

TEST(ReceivedRequestTest, AgreesWithProtobufOnTruncatedAndCorruptedBytes) {
  std::mt19937_64 rng(TestSeed() + 72);
  int refused = 0;
  for (int i = 0; i < 600; ++i) {
    std::string bytes = RandomRequest(rng).SerializeAsString();
    if (bytes.empty()) continue;
    if (i % 2 == 0) {
      bytes.resize(rng() % bytes.size());  // truncated
    } else {
      const int flips = 1 + static_cast<int>(rng() % 3);
      for (int f = 0; f < flips; ++f) {
        // Corrupt the first bytes mostly: tags and lengths, not tensor data.
        const std::size_t at = rng() % std::min<std::size_t>(bytes.size(), 64);
        bytes[at] = static_cast<char>(rng());
      }
    }
    v1::NormalizeRequest probe;
    refused += probe.ParseFromString(bytes) ? 0 : 1;
    ExpectSameAsProtobuf(rng, bytes);
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(refused, 100);  // the bad bytes were bad often enough to test refusals
  // Hand-made cases, refused and accepted alike.
  for (const std::string& bytes :
       {std::string("\x0f\x01", 2), std::string("\x12\x7f\x08", 3), std::string("\x1a\x05\x1a", 3),
        std::string("\x2a\x03\x12\x01", 4), std::string("\x00", 1), std::string("\x0c", 1),
        // A five-byte tag with bits past the 32nd (protobuf drops them).
        std::string("\x10\x01\xb8\xbe\xbe\xbe\x41\x01", 8)}) {
    ExpectSameAsProtobuf(rng, bytes);
  }
}

// protobuf lets messages and groups nest 100 levels below the request; the
// parser refuses exactly where protobuf does, at every level it parses
// itself: the request (0), input (1), parameters.inline.gamma (3).
TEST(ReceivedRequestTest, AgreesWithProtobufOnDeeplyNestedGroups) {
  std::mt19937_64 rng(TestSeed() + 76);
  int refused = 0;
  for (int groups = 95; groups <= 101; ++groups) {
    const std::string nested = NestedGroups(groups);
    const std::string in_gamma = LengthDelimited(5, LengthDelimited(2, LengthDelimited(1, nested)));
    for (const std::string& bytes : {nested, LengthDelimited(3, nested), in_gamma}) {
      v1::NormalizeRequest probe;
      refused += probe.ParseFromString(bytes) ? 0 : 1;
      ExpectSameAsProtobuf(rng, bytes);
    }
  }
  EXPECT_EQ(refused, 1 + 2 + 4);  // over 100 levels: 101; 100 and 101; 98 to 101
}

// A tensor with no data (zero rows) is present all the same: validation
// gives the plan protobuf's path gives, its residual included.
TEST(ReceivedRequestTest, EmptyTensorsAreStillPresent) {
  std::mt19937_64 rng(TestSeed() + 77);
  ParameterStore store(ParameterLimits{}, {});
  ForwardCase c;
  c.shape = {0, 64};
  c.residual = c.return_residual_sum = true;
  const ForwardRequest made = MakeForwardRequest(rng, c, 1);
  absl::StatusOr<ForwardPlan> expected = ValidateNormalize(made.request, RequestLimits{}, store);
  ASSERT_TRUE(expected.ok()) << expected.status();
  grpc::ByteBuffer buffer = RandomlySliced(rng, made.request.SerializeAsString());
  ReceivedNormalizeRequest received;
  ASSERT_TRUE(ParseReceivedNormalizeRequest(&buffer, &received).ok());
  absl::StatusOr<ForwardPlan> plan =
      ValidateNormalize(received.message, received.tensor_data(), RequestLimits{}, store);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->input.rows, 0);
  EXPECT_NE(plan->input.data, nullptr);
  EXPECT_NE(plan->residual, nullptr);
  EXPECT_TRUE(plan->return_residual_sum);
}

TEST(ReceivedRequestTest, NoBytesAreTheRequestOfAllDefaults) {
  ReceivedNormalizeRequest received;
  received.message.set_request_id(5);
  grpc::ByteBuffer nothing;
  ASSERT_TRUE(ParseReceivedNormalizeRequest(&nothing, &received).ok());
  EXPECT_EQ(received.message.request_id(), 0u);
  EXPECT_FALSE(received.message.has_input());
}

// The data stays where gRPC received it: every piece lies in one of the
// slices the request holds.
TEST(ReceivedRequestTest, TensorsStayInTheReceivedSlices) {
  std::mt19937_64 rng(TestSeed() + 73);
  v1::NormalizeRequest request;
  request.mutable_input()->set_dtype(v1::FP32);
  request.mutable_input()->add_shape(1);
  request.mutable_input()->add_shape(4096);
  request.mutable_input()->set_data(RandomBytes(rng, 16384));
  request.mutable_parameters()->mutable_inline_()->mutable_gamma()->set_data(
      RandomBytes(rng, 16384));
  const std::string bytes = request.SerializeAsString();
  for (int i = 0; i < 50; ++i) {
    grpc::ByteBuffer buffer = RandomlySliced(rng, bytes);
    ReceivedNormalizeRequest received;
    ASSERT_TRUE(ParseReceivedNormalizeRequest(&buffer, &received).ok());
    // The request's references to gRPC's slices (a slice of a few bytes
    // holds them inline, in the slice object itself).
    const std::vector<grpc::Slice>& slices = received.buffers.slices();
    for (const ReceivedBytes* tensor : {&received.input, &received.gamma}) {
      ASSERT_EQ(tensor->size(), 16384);
      for (const ReceivedBytes::Piece& piece : tensor->pieces()) {
        const bool inside = std::any_of(slices.begin(), slices.end(), [&](const grpc::Slice& s) {
          const char* begin = reinterpret_cast<const char*>(s.begin());
          return piece.data >= begin && piece.data + piece.size <= begin + s.size();
        });
        EXPECT_TRUE(inside) << "a piece outside the received slices: the data was copied";
      }
    }
    EXPECT_EQ(Flatten(received.input), request.input().data());
    EXPECT_EQ(Flatten(received.gamma), request.parameters().inline_().gamma().data());
  }
}

TEST(ReceivedRequestTest, CopyToReadsAnyRangeAcrossPieces) {
  std::mt19937_64 rng(TestSeed() + 74);
  const std::string whole = RandomBytes(rng, 1000);
  std::vector<std::string> parts = {whole.substr(0, 1), whole.substr(1, 500), whole.substr(501, 0),
                                    whole.substr(501, 499)};
  ReceivedBytes bytes;
  for (const std::string& part : parts) bytes.Append(part.data(), part.size());
  ASSERT_EQ(bytes.size(), 1000);
  EXPECT_FALSE(bytes.contiguous());
  EXPECT_FALSE(bytes.ReadableInPlace(1));
  for (int i = 0; i < 200; ++i) {
    const int64_t offset = static_cast<int64_t>(rng() % 1000);
    const int64_t count = static_cast<int64_t>(rng() % (1000 - offset + 1));
    std::string out(static_cast<std::size_t>(count) + 2, '\x5a');
    bytes.CopyTo(offset, count, out.data() + 1);
    EXPECT_EQ(out.substr(1, count), whole.substr(offset, count));
    EXPECT_EQ(out.front(), '\x5a');
    EXPECT_EQ(out.back(), '\x5a');  // nothing written past the range
  }
  // Adjacent memory joins one piece.
  ReceivedBytes joined;
  joined.Append(whole.data(), 10);
  joined.Append(whole.data() + 10, 20);
  EXPECT_TRUE(joined.contiguous());
  EXPECT_EQ(joined.first(), whole.data());
}

// End to end without gRPC's transport: requests sliced at odd offsets
// (tensors split and misaligned), validated and run on the CPU executor,
// against the double-precision oracle, outputs poisoned first.
TEST(ReceivedRequestTest, CpuExecutorRunsTensorsReceivedInPieces) {
  std::mt19937_64 rng(TestSeed() + 75);
  ParameterStore store(ParameterLimits{}, {});
  CpuExecutorOptions options;
  options.threads_per_batch = 2;
  CpuExecutor executor(options);
  std::vector<ForwardRequest> made;
  std::vector<std::unique_ptr<ReceivedNormalizeRequest>> received;
  std::vector<std::unique_ptr<v1::NormalizeResponse>> responses;
  Batch batch;
  int split_tensors = 0;
  for (int i = 0; i < 24; ++i) {
    ForwardCase c;
    c.op = i % 2 ? NormOp::kRmsNorm : NormOp::kLayerNorm;
    c.dtype = static_cast<DType>(i % 3);
    const int64_t hidden[] = {1, 5, 64, 2049, 4096};
    c.shape = {1 + i % 3, hidden[i % 5]};
    c.residual = i % 3 == 0;
    c.return_residual_sum = c.residual;
    c.return_statistics = i % 4 == 1;
    c.inline_gamma = i % 4 != 3;
    c.inline_beta = c.op == NormOp::kLayerNorm && i % 2 == 0;
    if (i % 5 == 0) c.param_dtype = DType::kF32;
    made.push_back(MakeForwardRequest(rng, c, static_cast<uint64_t>(i) + 1));
  }
  for (const ForwardRequest& m : made) {
    grpc::ByteBuffer buffer = RandomlySliced(rng, m.request.SerializeAsString());
    received.push_back(std::make_unique<ReceivedNormalizeRequest>());
    ASSERT_TRUE(ParseReceivedNormalizeRequest(&buffer, received.back().get()).ok());
    const ReceivedNormalizeRequest& r = *received.back();
    for (const ReceivedBytes* t : {&r.input, &r.residual, &r.gamma, &r.beta}) {
      split_tensors += t->ReadableInPlace(16) ? 0 : 1;
    }
    absl::StatusOr<ForwardPlan> plan =
        ValidateNormalize(r.message, r.tensor_data(), RequestLimits{}, store);
    ASSERT_TRUE(plan.ok()) << plan.status();
    responses.push_back(std::make_unique<v1::NormalizeResponse>());
    responses.back()->set_request_id(r.message.request_id());
    std::unique_ptr<Task> task =
        BuildForwardTask(*plan, r.message, responses.back().get(), absl::InfiniteFuture(), nullptr);
    for (v1::Tensor* t :
         {responses.back()->mutable_output(), responses.back()->mutable_residual_sum(),
          responses.back()->mutable_mean(), responses.back()->mutable_rstd()}) {
      std::fill(t->mutable_data()->begin(), t->mutable_data()->end(), '\x7f');
    }
    batch.rows += task->rows;
    batch.input_bytes += task->input_bytes;
    batch.output_bytes += task->output_bytes;
    batch.tasks.push_back(std::move(task));
  }
  EXPECT_GT(split_tensors, 10);  // the gathering path ran
  const BatchResult result = executor.Run(batch, 0);
  ASSERT_EQ(result.statuses.size(), made.size());
  for (std::size_t i = 0; i < made.size(); ++i) {
    ASSERT_TRUE(result.statuses[i].ok()) << result.statuses[i];
    EXPECT_TRUE(CheckForward(made[i].request, made[i].gamma, made[i].beta, *responses[i]))
        << "request " << i;
  }
}

}  // namespace
}  // namespace normsvc::server::testing
