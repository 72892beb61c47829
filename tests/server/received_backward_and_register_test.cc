// ParseReceivedBackwardRequest and ParseReceivedRegisterRequest against
// protobuf's own parser (random, merged, truncated and corrupted requests
// cut into random slices), the data left in gRPC's slices until
// CopyDataIntoMessage puts it where protobuf would, and
// CheckNormalizeBackward and CheckRegisterParameters, on the received
// pieces, agreeing with the validation of the parsed message for valid and
// invalid requests alike.
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "received_request_testing.h"
#include "server/cpu_executor.h"
#include "server/parameter_store.h"
#include "server/received_request.h"
#include "server/task_builder.h"
#include "server/validation.h"
#include "test_support.h"

namespace normsvc::server::testing {
namespace {

// A request with every field present or absent at random (not necessarily
// one validation accepts: the parser must agree with protobuf on any).
v1::NormalizeBackwardRequest RandomBackwardRequest(std::mt19937_64& rng) {
  v1::NormalizeBackwardRequest request;
  if (rng() % 2) request.set_request_id(rng());
  if (rng() % 4) request.set_op(static_cast<v1::NormOp>(rng() % 4));
  if (rng() % 8) RandomTensorField(rng, request.mutable_input(), 70000);
  if (rng() % 8) RandomTensorField(rng, request.mutable_grad_output(), 70000);
  if (rng() % 2) request.set_epsilon(static_cast<float>(rng() % 1000) * 1e-6f);
  RandomParameters(rng, &request, /*beta_one_in=*/3);
  if (rng() % 3 == 0) RandomTensorField(rng, request.mutable_mean(), 4000);
  if (rng() % 3 == 0) RandomTensorField(rng, request.mutable_rstd(), 4000);
  if (rng() % 3 == 0) AddUnknownFields(rng, &request);
  return request;
}

// The data fields of a request's tensors, and the pieces the parser keeps
// for them.
std::vector<const v1::Tensor*> Tensors(const v1::NormalizeBackwardRequest& m) {
  return {&m.input(),
          &m.grad_output(),
          &m.mean(),
          &m.rstd(),
          &m.parameters().inline_().gamma(),
          &m.parameters().inline_().beta()};
}
std::vector<const v1::Tensor*> Tensors(const v1::RegisterParametersRequest& m) {
  return {&m.gamma(), &m.beta()};
}
std::vector<const ReceivedBytes*> Pieces(const ReceivedBackwardRequest& r) {
  return {&r.input, &r.grad_output, &r.mean, &r.rstd, &r.gamma, &r.beta};
}
std::vector<const ReceivedBytes*> Pieces(const ReceivedRegisterRequest& r) {
  return {&r.gamma, &r.beta};
}
absl::Status Parse(grpc::ByteBuffer* bytes, ReceivedBackwardRequest* request) {
  return ParseReceivedBackwardRequest(bytes, request);
}
absl::Status Parse(grpc::ByteBuffer* bytes, ReceivedRegisterRequest* request) {
  return ParseReceivedRegisterRequest(bytes, request);
}

// Parses `bytes` both ways, sliced at random; they must agree on whether
// the bytes are a request and, once the data is copied into the message,
// on every field. Before that the message holds no tensor data.
template <typename Received>
void ExpectSameAsProtobuf(std::mt19937_64& rng, const std::string& bytes) {
  Received received;
  decltype(received.message) expected;
  const bool protobuf_parsed = expected.ParseFromString(bytes);
  grpc::ByteBuffer buffer = RandomlySliced(rng, bytes);
  const absl::Status status = Parse(&buffer, &received);
  EXPECT_FALSE(buffer.Valid());  // taken over
  ASSERT_EQ(status.ok(), protobuf_parsed) << status;
  if (!protobuf_parsed) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find("not a valid " + expected.GetTypeName()), std::string::npos)
        << status.message();
    return;
  }
  for (const v1::Tensor* tensor : Tensors(received.message)) {
    EXPECT_TRUE(tensor->data().empty()) << "the parser copied a tensor's data";
  }
  received.CopyDataIntoMessage();
  EXPECT_TRUE(received.buffers.empty());
  for (const ReceivedBytes* data : Pieces(received)) EXPECT_EQ(data->size(), 0);
  EXPECT_EQ(received.message.SerializeAsString(), expected.SerializeAsString())
      << "parsed:   " << received.message.ShortDebugString().substr(0, 400)
      << "\nprotobuf: " << expected.ShortDebugString().substr(0, 400);
}

TEST(ReceivedBackwardRequestTest, AgreesWithProtobufOnRandomAndMergedRequests) {
  std::mt19937_64 rng(TestSeed() + 80);
  for (int i = 0; i < 400; ++i) {
    std::string bytes;
    const int parts = i % 2 == 0 ? 1 : 2 + static_cast<int>(rng() % 3);
    for (int p = 0; p < parts; ++p) bytes += RandomBackwardRequest(rng).SerializeAsString();
    ExpectSameAsProtobuf<ReceivedBackwardRequest>(rng, bytes);
    if (HasFatalFailure()) return;
  }
}

TEST(ReceivedBackwardRequestTest, AgreesWithProtobufOnTruncatedAndCorruptedBytes) {
  std::mt19937_64 rng(TestSeed() + 81);
  int refused = 0;
  for (int i = 0; i < 600; ++i) {
    std::string bytes = RandomBackwardRequest(rng).SerializeAsString();
    if (bytes.empty()) continue;
    if (i % 2 == 0) {
      bytes.resize(rng() % bytes.size());
    } else {
      const int flips = 1 + static_cast<int>(rng() % 3);
      for (int f = 0; f < flips; ++f) {
        const std::size_t at = rng() % std::min<std::size_t>(bytes.size(), 64);
        bytes[at] = static_cast<char>(rng());
      }
    }
    v1::NormalizeBackwardRequest probe;
    refused += probe.ParseFromString(bytes) ? 0 : 1;
    ExpectSameAsProtobuf<ReceivedBackwardRequest>(rng, bytes);
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(refused, 100);  // the bad bytes were bad often enough to test refusals
}

// A tensor of `dtype` and `shape` with random data of `bytes` bytes (the
// size its shape needs unless the case gets it wrong on purpose).
v1::Tensor MakeTensor(std::mt19937_64& rng, v1::DType dtype, const std::vector<int64_t>& shape,
                      std::size_t bytes) {
  v1::Tensor tensor;
  tensor.set_dtype(dtype);
  for (int64_t dim : shape) tensor.add_shape(dim);
  tensor.set_data(RandomBytes(rng, bytes));
  return tensor;
}

std::size_t DTypeBytes(v1::DType dtype) { return dtype == v1::FP32 ? 4 : 2; }

// A backward request that validation accepts, then one mistake or none:
// the data of one tensor a few bytes off, a wrong dtype or shape, saved
// statistics RMS_NORM or LAYER_NORM refuse, an unknown or mismatched
// parameter set, a bad epsilon, or a missing tensor.
v1::NormalizeBackwardRequest NearlyValidBackwardRequest(std::mt19937_64& rng) {
  const v1::DType dtypes[] = {v1::FP32, v1::FP16, v1::BF16};
  const v1::DType dtype = dtypes[rng() % 3];
  const int64_t rows = static_cast<int64_t>(rng() % 5);  // 0 rows too
  const int64_t hidden_sizes[] = {1, 7, 64, 128, 1000};
  const int64_t hidden = hidden_sizes[rng() % 5];
  const std::size_t x_bytes = static_cast<std::size_t>(rows * hidden) * DTypeBytes(dtype);
  v1::NormalizeBackwardRequest r;
  r.set_request_id(rng());
  r.set_op(rng() % 2 ? v1::LAYER_NORM : v1::RMS_NORM);
  *r.mutable_input() = MakeTensor(rng, dtype, {rows, hidden}, x_bytes);
  *r.mutable_grad_output() = MakeTensor(rng, dtype, {rows, hidden}, x_bytes);
  if (rng() % 2) r.set_epsilon(1e-5f);
  if (rng() % 2) {
    *r.mutable_rstd() = MakeTensor(rng, v1::FP32, {rows}, static_cast<std::size_t>(rows) * 4);
    if (r.op() == v1::LAYER_NORM) {
      *r.mutable_mean() = MakeTensor(rng, v1::FP32, {rows}, static_cast<std::size_t>(rows) * 4);
    }
  }
  switch (rng() % 3) {
    case 0:
      break;
    case 1:
      r.mutable_parameters()->set_name(hidden == 128 ? "h128" : "absent");
      break;
    default: {
      const v1::DType gamma_dtype = rng() % 2 ? v1::FP32 : dtype;
      *r.mutable_parameters()->mutable_inline_()->mutable_gamma() = MakeTensor(
          rng, gamma_dtype, {hidden}, static_cast<std::size_t>(hidden) * DTypeBytes(gamma_dtype));
      if (rng() % 3 == 0) {  // ignored by the backward
        *r.mutable_parameters()->mutable_inline_()->mutable_beta() =
            MakeTensor(rng, gamma_dtype, {hidden + 1}, 3);
      }
    }
  }
  switch (rng() % 16) {  // 9 mistakes of 16
    case 0:
      r.mutable_input()->mutable_data()->push_back('\x01');
      break;
    case 1:
      r.mutable_grad_output()->mutable_data()->append(2, '\x02');
      break;
    case 2:
      if (r.has_rstd()) r.mutable_rstd()->mutable_data()->append(4, '\x03');
      break;
    case 3:
      if (r.parameters().has_inline_()) {
        r.mutable_parameters()->mutable_inline_()->mutable_gamma()->mutable_data()->append(2,
                                                                                           '\x04');
      }
      break;
    case 4:
      r.mutable_grad_output()->set_dtype(dtype == v1::FP32 ? v1::FP16 : v1::FP32);
      break;
    case 5:
      r.mutable_grad_output()->set_shape(0, rows + 1);
      break;
    case 6:
      *r.mutable_mean() = MakeTensor(rng, v1::FP32, {rows}, static_cast<std::size_t>(rows) * 4);
      break;
    case 7:
      r.set_epsilon(-1.0f);
      break;
    case 8:
      r.clear_grad_output();
      break;
    default:
      break;  // valid
  }
  return r;
}

// Validates `bytes` as protobuf parses them (into `parsed`, validated by
// `validate` into `expected`, whose views point into `parsed`) and checks
// them as the call parses them, sliced at random, into `received`
// (`check`): both must give the same status, code and message. Where it is
// OK, `received` is ready for CopyDataIntoMessage. A failed assertion here
// is fatal to the calling test (HasFatalFailure).
template <typename Received, typename Message, typename Plan, typename Validate, typename Check>
void CheckBothWays(std::mt19937_64& rng, const std::string& bytes, Validate validate, Check check,
                   Message* parsed, absl::StatusOr<Plan>* expected, Received* received) {
  ASSERT_TRUE(parsed->ParseFromString(bytes));
  *expected = validate(*parsed);
  grpc::ByteBuffer buffer = RandomlySliced(rng, bytes);
  ASSERT_TRUE(Parse(&buffer, received).ok());
  ASSERT_EQ(check(*received), expected->status()) << parsed->ShortDebugString().substr(0, 300);
}

// The received pieces' check gives the status the parsed message's
// validation gives, code and message, on every request; on the valid ones
// the plan made after CopyDataIntoMessage is the parsed message's plan,
// reading the same bytes.
TEST(ReceivedBackwardRequestTest, CheckAgreesWithValidationOfTheParsedMessage) {
  std::mt19937_64 rng(TestSeed() + 82);
  CpuExecutor executor(CpuExecutorOptions{});  // holds the registered set
  ParameterStore store(ParameterLimits{}, {&executor});
  const std::string gamma = RandomBytes(rng, 128 * 4);
  const auto registered = store.Register("h128", 128, kernels::DType::kF32, gamma, "", false);
  ASSERT_TRUE(registered.ok()) << registered.status();
  RequestLimits limits;
  limits.max_hidden_size = 512;  // H = 1000 is refused
  int valid = 0, invalid = 0;
  for (int i = 0; i < 600; ++i) {
    std::string bytes = NearlyValidBackwardRequest(rng).SerializeAsString();
    // Now and then a second request merged into the first: repeated
    // tensors, shapes appended, name and inline parameters replacing each
    // other.
    if (i % 5 == 0) bytes += NearlyValidBackwardRequest(rng).SerializeAsString();
    v1::NormalizeBackwardRequest parsed;
    absl::StatusOr<BackwardPlan> expected;
    ReceivedBackwardRequest received;
    CheckBothWays(
        rng, bytes,
        [&](const v1::NormalizeBackwardRequest& m) {
          return ValidateNormalizeBackward(m, limits, store);
        },
        [&](const ReceivedBackwardRequest& r) {
          return CheckNormalizeBackward(r.message, r.tensor_data(), limits, store).status();
        },
        &parsed, &expected, &received);
    if (HasFatalFailure()) return;
    if (!expected.ok()) {
      ++invalid;
      continue;
    }
    ++valid;
    // The memory the call reserves from the checked plan, before the copy,
    // is what the task built from the final plan pins.
    const absl::StatusOr<BackwardPlan> checked =
        CheckNormalizeBackward(received.message, received.tensor_data(), limits, store);
    ASSERT_TRUE(checked.ok()) << checked.status();
    const BackwardTaskBytes reserved = BackwardTaskBytesOf(*checked);
    received.CopyDataIntoMessage();
    const absl::StatusOr<BackwardPlan> plan =
        ValidateNormalizeBackward(received.message, limits, store);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(reserved.input, BackwardTaskBytesOf(*plan).input);
    EXPECT_EQ(reserved.output, BackwardTaskBytesOf(*plan).output);
    EXPECT_EQ(plan->op, expected->op);
    EXPECT_EQ(plan->epsilon, expected->epsilon);
    EXPECT_EQ(plan->input.rows, expected->input.rows);
    EXPECT_EQ(plan->input.hidden, expected->input.hidden);
    EXPECT_EQ(plan->input.dtype, expected->input.dtype);
    EXPECT_EQ(plan->input.bytes, expected->input.bytes);
    EXPECT_EQ(plan->parameters.dtype, expected->parameters.dtype);
    EXPECT_EQ(plan->parameters.set, expected->parameters.set);
    EXPECT_EQ(plan->parameters.inline_bytes, expected->parameters.inline_bytes);
    const std::size_t x_bytes = static_cast<std::size_t>(plan->input.bytes);
    const std::size_t stat_bytes = static_cast<std::size_t>(plan->input.rows) * 4;
    EXPECT_EQ(std::memcmp(plan->input.data, expected->input.data, x_bytes), 0);
    EXPECT_EQ(std::memcmp(plan->grad_output, expected->grad_output, x_bytes), 0);
    ASSERT_EQ(plan->mean == nullptr, expected->mean == nullptr);
    ASSERT_EQ(plan->rstd == nullptr, expected->rstd == nullptr);
    if (plan->mean != nullptr) {
      EXPECT_EQ(std::memcmp(plan->mean, expected->mean, stat_bytes), 0);
    }
    if (plan->rstd != nullptr) {
      EXPECT_EQ(std::memcmp(plan->rstd, expected->rstd, stat_bytes), 0);
    }
    ASSERT_EQ(plan->parameters.gamma == nullptr, expected->parameters.gamma == nullptr);
    if (plan->parameters.gamma != nullptr) {
      EXPECT_EQ(std::memcmp(plan->parameters.gamma, expected->parameters.gamma,
                            static_cast<std::size_t>(plan->parameters.inline_bytes)),
                0);
    }
  }
  // Both kinds came often enough to test.
  EXPECT_GT(valid, 80);
  EXPECT_GT(invalid, 150);
}

v1::RegisterParametersRequest RandomRegisterRequest(std::mt19937_64& rng) {
  v1::RegisterParametersRequest request;
  if (rng() % 4) request.set_name("set-" + std::to_string(rng() % 100));
  if (rng() % 4) RandomTensorField(rng, request.mutable_gamma(), 20000);
  if (rng() % 2) RandomTensorField(rng, request.mutable_beta(), 20000);
  if (rng() % 2) request.set_replace(true);
  if (rng() % 3 == 0) AddUnknownFields(rng, &request);
  return request;
}

TEST(ReceivedRegisterRequestTest, AgreesWithProtobufOnRandomMergedAndDamagedRequests) {
  std::mt19937_64 rng(TestSeed() + 83);
  int refused = 0;
  for (int i = 0; i < 600; ++i) {
    std::string bytes;
    const int parts = i % 3 == 0 ? 2 + static_cast<int>(rng() % 2) : 1;
    for (int p = 0; p < parts; ++p) bytes += RandomRegisterRequest(rng).SerializeAsString();
    if (i % 3 == 1 && !bytes.empty()) bytes.resize(rng() % bytes.size());  // truncated
    if (i % 3 == 2 && !bytes.empty()) {  // corrupted tags and lengths
      bytes[rng() % std::min<std::size_t>(bytes.size(), 32)] = static_cast<char>(rng());
    }
    v1::RegisterParametersRequest probe;
    refused += probe.ParseFromString(bytes) ? 0 : 1;
    ExpectSameAsProtobuf<ReceivedRegisterRequest>(rng, bytes);
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(refused, 50);
}

// A registration validation accepts, then one mistake or none.
v1::RegisterParametersRequest NearlyValidRegisterRequest(std::mt19937_64& rng) {
  const v1::DType dtypes[] = {v1::FP32, v1::FP16, v1::BF16};
  const v1::DType dtype = dtypes[rng() % 3];
  const int64_t hidden_sizes[] = {1, 7, 64, 1000};
  const int64_t hidden = hidden_sizes[rng() % 4];
  const std::size_t bytes = static_cast<std::size_t>(hidden) * DTypeBytes(dtype);
  v1::RegisterParametersRequest r;
  r.set_name("set-" + std::to_string(rng() % 10));
  const int which = static_cast<int>(rng() % 3);  // gamma, beta or both
  if (which != 1) *r.mutable_gamma() = MakeTensor(rng, dtype, {hidden}, bytes);
  if (which != 0) *r.mutable_beta() = MakeTensor(rng, dtype, {hidden}, bytes);
  v1::Tensor* first = r.has_gamma() ? r.mutable_gamma() : r.mutable_beta();
  switch (rng() % 10) {  // 6 mistakes of 10
    case 0:
      first->mutable_data()->push_back('\x01');
      break;
    case 1:
      first->mutable_data()->resize(bytes / 2);
      break;
    case 2:
      if (r.has_beta()) r.mutable_beta()->mutable_data()->append(2, '\x02');
      break;
    case 3:
      first->set_shape(0, hidden + 1);
      break;
    case 4:
      r.set_name("bad name");
      break;
    case 5:
      if (r.has_gamma() && r.has_beta())
        r.mutable_beta()->set_dtype(v1::FP32 == dtype ? v1::BF16 : v1::FP32);
      break;
    default:
      break;  // valid
  }
  return r;
}

TEST(ReceivedRegisterRequestTest, CheckAgreesWithValidationOfTheParsedMessage) {
  std::mt19937_64 rng(TestSeed() + 84);
  RequestLimits limits;
  limits.max_hidden_size = 512;  // H = 1000 is refused
  int valid = 0, invalid = 0;
  for (int i = 0; i < 400; ++i) {
    std::string bytes = NearlyValidRegisterRequest(rng).SerializeAsString();
    if (i % 5 == 0) bytes += NearlyValidRegisterRequest(rng).SerializeAsString();  // merged
    v1::RegisterParametersRequest parsed;
    absl::StatusOr<RegisterPlan> expected;
    ReceivedRegisterRequest received;
    CheckBothWays(
        rng, bytes,
        [&](const v1::RegisterParametersRequest& m) {
          return ValidateRegisterParameters(m, limits);
        },
        [&](const ReceivedRegisterRequest& r) {
          return CheckRegisterParameters(r.message, r.tensor_data(), limits);
        },
        &parsed, &expected, &received);
    if (HasFatalFailure()) return;
    if (!expected.ok()) {
      ++invalid;
      continue;
    }
    ++valid;
    received.CopyDataIntoMessage();
    const absl::StatusOr<RegisterPlan> plan = ValidateRegisterParameters(received.message, limits);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->name, expected->name);
    EXPECT_EQ(plan->hidden, expected->hidden);
    EXPECT_EQ(plan->dtype, expected->dtype);
    EXPECT_EQ(plan->gamma, expected->gamma);  // the bytes
    EXPECT_EQ(plan->beta, expected->beta);
  }
  EXPECT_GT(valid, 60);
  EXPECT_GT(invalid, 100);
}

// protobuf lets messages and groups nest 100 levels below the request; both
// parsers refuse exactly where protobuf does, at every level they parse
// themselves: the request (0), a tensor (1) and, for the backward,
// parameters.inline.gamma (3).
TEST(ReceivedBackwardRequestTest, AgreesWithProtobufOnDeeplyNestedGroups) {
  std::mt19937_64 rng(TestSeed() + 85);
  for (int groups = 95; groups <= 101; ++groups) {
    const std::string nested = NestedGroups(groups);
    for (const std::string& bytes :
         {nested, LengthDelimited(4, nested), LengthDelimited(8, nested),
          LengthDelimited(6, LengthDelimited(2, LengthDelimited(1, nested)))}) {
      ExpectSameAsProtobuf<ReceivedBackwardRequest>(rng, bytes);
    }
    for (const std::string& bytes :
         {nested, LengthDelimited(2, nested), LengthDelimited(3, nested)}) {
      ExpectSameAsProtobuf<ReceivedRegisterRequest>(rng, bytes);
    }
  }
}

// No bytes are the request of all defaults; a tensor with no data is
// present all the same, and stays so through the copy.
TEST(ReceivedBackwardRequestTest, NoBytesAndEmptyTensors) {
  std::mt19937_64 rng(TestSeed() + 86);
  ReceivedBackwardRequest backward;
  backward.message.set_request_id(5);
  grpc::ByteBuffer nothing;
  ASSERT_TRUE(ParseReceivedBackwardRequest(&nothing, &backward).ok());
  EXPECT_EQ(backward.message.request_id(), 0u);
  ReceivedRegisterRequest registration;
  registration.message.set_name("x");
  ASSERT_TRUE(ParseReceivedRegisterRequest(&nothing, &registration).ok());
  EXPECT_TRUE(registration.message.name().empty());

  v1::NormalizeBackwardRequest request;
  request.set_op(v1::LAYER_NORM);
  *request.mutable_input() = MakeTensor(rng, v1::FP32, {0, 64}, 0);
  *request.mutable_grad_output() = MakeTensor(rng, v1::FP32, {0, 64}, 0);
  *request.mutable_mean() = MakeTensor(rng, v1::FP32, {0}, 0);
  *request.mutable_rstd() = MakeTensor(rng, v1::FP32, {0}, 0);
  grpc::ByteBuffer buffer = RandomlySliced(rng, request.SerializeAsString());
  ASSERT_TRUE(ParseReceivedBackwardRequest(&buffer, &backward).ok());
  ParameterStore store(ParameterLimits{}, {});
  EXPECT_TRUE(
      CheckNormalizeBackward(backward.message, backward.tensor_data(), RequestLimits{}, store)
          .ok());
  backward.CopyDataIntoMessage();
  const absl::StatusOr<BackwardPlan> plan =
      ValidateNormalizeBackward(backward.message, RequestLimits{}, store);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->input.rows, 0);
  EXPECT_NE(plan->mean, nullptr);
  EXPECT_NE(plan->rstd, nullptr);
  EXPECT_FALSE(backward.message.has_parameters());
}

}  // namespace
}  // namespace normsvc::server::testing
