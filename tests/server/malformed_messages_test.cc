// Messages that do not parse, sent to a running server: each is answered as
// an invalid argument, never taken for the end of a stream or an unknown
// method, and the server goes on serving. (ModelStreamInfer's case is in
// kserve_service_test.cc.)
#include <algorithm>

#include <gtest/gtest.h>

#include "server/metrics.h"
#include "test_support.h"

namespace normsvc::server::testing {
namespace {

class MalformedMessagesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = StartServer(TestServerOptions());
    ASSERT_NE(server_, nullptr);
    stub_ = Connect(server_->grpc_port());
  }
  void TearDown() override {
    if (server_) {
      EXPECT_TRUE(QueuedBytesReturnToZero(*server_));
      EXPECT_TRUE(server_->Stop());
    }
  }
  v1::NormalizeRequest Forward(uint64_t id) {
    v1::NormalizeRequest request;
    request.set_request_id(id);
    request.set_op(v1::RMS_NORM);
    *request.mutable_input() = ToProto(RandomTensor(rng_, DType::kF32, {3, 40}));
    return request;
  }
  // A request whose bytes do not parse on the server: proto3 string fields
  // must be UTF-8, which protobuf checks when parsing (the client's
  // serializer only logs it).
  v1::NormalizeRequest Malformed(uint64_t id) {
    v1::NormalizeRequest request = Forward(id);
    request.mutable_parameters()->set_name("caf\xE9");
    return request;
  }

  std::mt19937_64 rng_{TestSeed() + 907};
  std::unique_ptr<Server> server_;
  std::unique_ptr<v1::Normalizer::Stub> stub_;
};

// The requests before the malformed one are answered; the stream then ends
// INVALID_ARGUMENT naming the message, instead of OK with the rest dropped.
TEST_F(MalformedMessagesTest, StreamEndsInvalidArgumentAtTheMessageThatDoesNotParse) {
  const v1::NormalizeRequest first = Forward(11), second = Forward(12);
  auto context = ContextWithDeadline();
  auto stream = stub_->NormalizeStream(context.get());
  ASSERT_TRUE(stream->Write(first));
  ASSERT_TRUE(stream->Write(second));
  // Writes after the malformed message may or may not be accepted by the
  // transport; the server reads no further either way.
  stream->Write(Malformed(13));
  stream->Write(Forward(14));
  stream->WritesDone();
  v1::NormalizeStreamResponse reply;
  std::vector<uint64_t> answered;
  while (stream->Read(&reply)) {
    answered.push_back(reply.request_id());
    ASSERT_TRUE(reply.has_response()) << reply.error().message();
    EXPECT_TRUE(CheckForward(reply.request_id() == 11 ? first : second, {}, {}, reply.response()));
  }
  std::sort(answered.begin(), answered.end());
  EXPECT_EQ(answered, (std::vector<uint64_t>{11, 12}));
  const grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_NE(status.error_message().find("stream message 3 is not a valid NormalizeRequest"),
            std::string::npos)
      << status.error_message();

  // The server goes on: a new stream is served in full.
  auto next_context = ContextWithDeadline();
  auto next = stub_->NormalizeStream(next_context.get());
  const v1::NormalizeRequest third = Forward(15);
  ASSERT_TRUE(next->Write(third));
  ASSERT_TRUE(next->WritesDone());
  ASSERT_TRUE(next->Read(&reply));
  ASSERT_TRUE(reply.has_response()) << reply.error().message();
  EXPECT_TRUE(CheckForward(third, {}, {}, reply.response()));
  EXPECT_TRUE(next->Finish().ok());
}

// A stream whose first message does not parse: counted as one NormalizeStream
// request refused at the edge, its latency the time the parse took (not 0).
TEST_F(MalformedMessagesTest, AStreamMessageThatDoesNotParseIsCountedWithItsParseTime) {
  auto context = ContextWithDeadline();
  auto stream = stub_->NormalizeStream(context.get());
  stream->Write(Malformed(31));
  stream->WritesDone();
  v1::NormalizeStreamResponse reply;
  EXPECT_FALSE(stream->Read(&reply));
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  const prometheus::Registry& registry = *server_->metrics().registry();
  EXPECT_EQ(SeriesValue(registry, "normsvc_requests_total",
                        {{"method", "NormalizeStream"},
                         {"op", "none"},
                         {"dtype", "none"},
                         {"code", "INVALID_ARGUMENT"}}),
            std::optional<double>(1));
  const std::optional<double> seconds =
      HistogramSum(registry, "normsvc_request_duration_seconds", {{"method", "NormalizeStream"}});
  ASSERT_TRUE(seconds.has_value());
  EXPECT_GT(*seconds, 0.0);
  EXPECT_LT(*seconds, 5.0);
}

// A unary request whose bytes do not parse (a varint field cut short) is
// INVALID_ARGUMENT naming the message type on every method, where gRPC's
// typed handlers answer UNIMPLEMENTED with no message.
TEST_F(MalformedMessagesTest, UnaryRequestsThatDoNotParseAreInvalidArgumentOnEveryMethod) {
  const std::string truncated("\x08", 1);
  const std::pair<const char*, const char*> methods[] = {
      {"/normsvc.v1.Normalizer/Normalize", "normsvc.v1.NormalizeRequest"},
      {"/normsvc.v1.Normalizer/NormalizeBackward", "normsvc.v1.NormalizeBackwardRequest"},
      {"/normsvc.v1.Normalizer/RegisterParameters", "normsvc.v1.RegisterParametersRequest"},
      {"/normsvc.v1.Normalizer/DeleteParameters", "normsvc.v1.DeleteParametersRequest"},
      {"/normsvc.v1.Normalizer/ListParameters", "normsvc.v1.ListParametersRequest"},
      {"/normsvc.v1.Normalizer/GetServerInfo", "normsvc.v1.GetServerInfoRequest"},
      {"/inference.GRPCInferenceService/ModelInfer", "inference.ModelInferRequest"},
  };
  for (const auto& [method, type] : methods) {
    std::string reply;
    const grpc::Status status = RawUnaryCall(server_->grpc_port(), method, truncated, &reply);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << method << ": " << status.error_message();
    EXPECT_NE(status.error_message().find(type), std::string::npos)
        << method << ": " << status.error_message();
    EXPECT_TRUE(reply.empty()) << method;
    // Counted under its method, as any request refused at the edge.
    const std::string name = std::string(method).substr(std::string(method).rfind('/') + 1);
    EXPECT_EQ(
        SeriesValue(
            *server_->metrics().registry(), "normsvc_requests_total",
            {{"method", name}, {"op", "none"}, {"dtype", "none"}, {"code", "INVALID_ARGUMENT"}}),
        std::optional<double>(1))
        << method;
  }
  // The same methods still answer well-formed requests, with their bytes.
  v1::GetServerInfoResponse info;
  std::string reply;
  ASSERT_TRUE(
      RawUnaryCall(server_->grpc_port(), "/normsvc.v1.Normalizer/GetServerInfo", "", &reply).ok());
  ASSERT_TRUE(info.ParseFromString(reply));
  EXPECT_EQ(info.backend(), "cpu");
  const v1::NormalizeRequest request = Forward(21);
  v1::NormalizeResponse response;
  ASSERT_TRUE(stub_->Normalize(ContextWithDeadline().get(), request, &response).ok());
  EXPECT_TRUE(CheckForward(request, {}, {}, response));
}

}  // namespace
}  // namespace normsvc::server::testing
