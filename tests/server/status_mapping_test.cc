#include "server/status_mapping.h"

#include <string>

#include <gtest/gtest.h>

namespace normsvc::server {
namespace {

TEST(StatusMappingTest, CodesAndShortMessagesPassUnchanged) {
  const grpc::Status status = ToGrpcStatus(absl::NotFoundError("parameters.name 'w': no such set"));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(status.error_message(), "parameters.name 'w': no such set");
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_EQ(ToGrpcStatus(absl::Status(static_cast<absl::StatusCode>(99), "x")).error_code(),
            grpc::StatusCode::UNKNOWN);
}

// A message that echoes a long client string is cut to a size that fits the
// client's header limit, on a character boundary, and says what was cut.
TEST(StatusMappingTest, LongMessagesAreCutOnACharacterBoundary) {
  // 'é' is two bytes in UTF-8. After the 17-byte prefix every character
  // starts at an odd offset, so a cut at the (even) limit would split one.
  const std::string name = [] {
    std::string s;
    for (int i = 0; i < 20000; ++i) s += "\xC3\xA9";
    return s;
  }();
  const std::string message = "parameters.name '" + name + "': no such set";
  const grpc::Status status = ToGrpcStatus(absl::NotFoundError(message));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  const std::string& got = status.error_message();
  ASSERT_LT(got.size(), kMaxStatusMessageBytes + 64);
  const size_t kept = got.find("... (");
  ASSERT_NE(kept, std::string::npos) << got;
  EXPECT_EQ(kept, kMaxStatusMessageBytes - 1);
  EXPECT_EQ(got.substr(0, kept), message.substr(0, kept));
  // The kept part ends on a whole character: its last byte is not a lead byte.
  EXPECT_NE(static_cast<unsigned char>(got[kept - 1]) & 0xC0, 0xC0);
  EXPECT_EQ(got.substr(kept), "... (" + std::to_string(message.size() - kept) + " more bytes)");
}

}  // namespace
}  // namespace normsvc::server
