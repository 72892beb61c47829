#include "server/received_request.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <type_traits>

#include "absl/strings/str_cat.h"

namespace normsvc::server {
namespace {

// Protobuf's wire types.
enum WireType : uint32_t {
  kVarint = 0,
  kFixed64 = 1,
  kLengthDelimited = 2,
  kStartGroup = 3,
  kEndGroup = 4,
  kFixed32 = 5,
};
// protobuf's default recursion limit: messages and groups nest at most 100
// levels below the request (the request is level 0, its input level 1).
constexpr int kMaxNesting = 100;
constexpr int kRequestLevel = 0;
constexpr int kTensorLevel = 1;        // input, residual
constexpr int kParametersLevel = 1;    // parameters
constexpr int kInlineLevel = 2;        // parameters.inline
constexpr int kInlineTensorLevel = 3;  // parameters.inline.gamma, .beta

constexpr uint32_t MakeTag(int field, WireType wire_type) {
  return (static_cast<uint32_t>(field) << 3) | wire_type;
}

// Reads a message held in gRPC's slices, in order, across slice boundaries.
class Cursor {
 public:
  explicit Cursor(const std::vector<grpc::Slice>& slices) : slices_(slices) {
    for (const grpc::Slice& slice : slices_) end_ += static_cast<int64_t>(slice.size());
    SkipExhausted();
  }

  int64_t position() const { return position_; }
  int64_t end() const { return end_; }

  // At most `max_bytes` bytes (10: any 64-bit value); bits beyond the 64th
  // are dropped, as protobuf drops them.
  bool ReadVarint(uint64_t* value, int max_bytes = 10) {
    uint64_t result = 0;
    for (int shift = 0; shift < 7 * max_bytes; shift += 7) {
      if (position_ >= end_) return false;
      const uint8_t byte = slices_[index_].begin()[offset_];
      Advance(1);
      if (shift < 64) result |= uint64_t{byte & 0x7fu} << shift;
      if ((byte & 0x80u) == 0) {
        *value = result;
        return true;
      }
    }
    return false;
  }

  // The next `count` bytes: appended to `out` as pieces, not copied.
  bool ReadPieces(int64_t count, ReceivedBytes* out) {
    return Take(count, [out](const char* data, std::size_t n) { out->Append(data, n); });
  }
  // The next `count` bytes: copied to the end of `out`.
  bool CopyBytes(int64_t count, std::string* out) {
    return Take(count, [out](const char* data, std::size_t n) { out->append(data, n); });
  }

 private:
  template <typename Sink>
  bool Take(int64_t count, Sink sink) {
    if (count < 0 || count > end_ - position_) return false;
    while (count > 0) {
      const grpc::Slice& slice = slices_[index_];
      const std::size_t n = std::min(slice.size() - offset_, static_cast<std::size_t>(count));
      sink(reinterpret_cast<const char*>(slice.begin()) + offset_, n);
      Advance(n);
      count -= static_cast<int64_t>(n);
    }
    return true;
  }
  // `n` bytes of the current slice.
  void Advance(std::size_t n) {
    offset_ += n;
    position_ += static_cast<int64_t>(n);
    SkipExhausted();
  }
  void SkipExhausted() {
    while (index_ < slices_.size() && offset_ >= slices_[index_].size()) {
      ++index_;
      offset_ = 0;
    }
  }

  const std::vector<grpc::Slice>& slices_;
  std::size_t index_ = 0;
  std::size_t offset_ = 0;
  int64_t position_ = 0;
  int64_t end_ = 0;
};

void AppendVarint(uint64_t value, std::string* out) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

// Tags and lengths are 32-bit varints: at most 5 bytes, as protobuf reads them.
constexpr int kMaxVarint32Bytes = 5;

// A field's tag, within the enclosing message (ending at `limit`).
bool ReadTag(Cursor& cursor, int64_t limit, uint32_t* tag) {
  uint64_t value = 0;
  if (!cursor.ReadVarint(&value, kMaxVarint32Bytes) || cursor.position() > limit) return false;
  // Bits past the 32nd are dropped, as protobuf drops them.
  *tag = static_cast<uint32_t>(value);
  return (*tag >> 3) != 0;
}

// A length-delimited field's length, which must fit the enclosing message.
bool ReadLength(Cursor& cursor, int64_t limit, int64_t* length) {
  uint64_t value = 0;
  if (!cursor.ReadVarint(&value, kMaxVarint32Bytes) || cursor.position() > limit) return false;
  if (value > static_cast<uint64_t>(limit - cursor.position())) return false;
  *length = static_cast<int64_t>(value);
  return true;
}

// Copies the field whose tag was just read, tag and value, to `out`, for
// protobuf to parse: the fields this parser leaves to it. `level`: the
// nesting level of the message the field belongs to, so that unknown
// groups nest no deeper than protobuf lets them.
bool CopyField(Cursor& cursor, int64_t limit, uint32_t tag, std::string* out, int level) {
  AppendVarint(tag, out);
  switch (tag & 7) {
    case kVarint: {
      uint64_t value = 0;
      if (!cursor.ReadVarint(&value)) return false;
      AppendVarint(value, out);
      break;
    }
    case kFixed64:
      if (!cursor.CopyBytes(8, out)) return false;
      break;
    case kFixed32:
      if (!cursor.CopyBytes(4, out)) return false;
      break;
    case kLengthDelimited: {
      int64_t length = 0;
      if (!ReadLength(cursor, limit, &length)) return false;
      AppendVarint(static_cast<uint64_t>(length), out);
      if (!cursor.CopyBytes(length, out)) return false;
      break;
    }
    case kStartGroup:
      if (level + 1 > kMaxNesting) return false;
      while (true) {
        uint32_t inner = 0;
        if (!ReadTag(cursor, limit, &inner)) return false;
        if ((inner & 7) == kEndGroup) {
          if ((inner >> 3) != (tag >> 3)) return false;
          AppendVarint(inner, out);
          break;
        }
        if (!CopyField(cursor, limit, inner, out, level + 1)) return false;
      }
      break;
    default:  // an end group without its start, or wire types 6 and 7
      return false;
  }
  return cursor.position() <= limit;
}

// Merges what protobuf parses into `message` (as its parser merges a field
// met again: the last scalar wins, repeated fields append).
template <typename Message>
bool MergeCopied(std::string* copied, Message* message) {
  const bool ok = copied->empty() || message->MergeFromString(*copied);
  copied->clear();
  return ok;
}

bool ParseTensor(Cursor& cursor, int64_t limit, int level, v1::Tensor* tensor,
                 ReceivedBytes* data) {
  std::string copied;
  while (cursor.position() < limit) {
    uint32_t tag = 0;
    if (!ReadTag(cursor, limit, &tag)) return false;
    if (tag == MakeTag(v1::Tensor::kDataFieldNumber, kLengthDelimited)) {
      int64_t length = 0;
      if (!ReadLength(cursor, limit, &length)) return false;
      data->Clear();  // the last occurrence wins
      if (!cursor.ReadPieces(length, data)) return false;
    } else if (!CopyField(cursor, limit, tag, &copied, level)) {
      return false;
    }
  }
  return cursor.position() == limit && MergeCopied(&copied, tensor);
}

// Where the data of parameters.inline.{gamma,beta} goes.
struct InlineData {
  ReceivedBytes* gamma;
  ReceivedBytes* beta;
};

bool ParseInline(Cursor& cursor, int64_t limit, v1::Parameters::Inline* parameters,
                 const InlineData& data) {
  std::string copied;
  while (cursor.position() < limit) {
    uint32_t tag = 0;
    if (!ReadTag(cursor, limit, &tag)) return false;
    const bool gamma = tag == MakeTag(v1::Parameters::Inline::kGammaFieldNumber, kLengthDelimited);
    const bool beta = tag == MakeTag(v1::Parameters::Inline::kBetaFieldNumber, kLengthDelimited);
    if (gamma || beta) {
      int64_t length = 0;
      if (!ReadLength(cursor, limit, &length)) return false;
      const int64_t end = cursor.position() + length;
      const bool ok = gamma ? ParseTensor(cursor, end, kInlineTensorLevel,
                                          parameters->mutable_gamma(), data.gamma)
                            : ParseTensor(cursor, end, kInlineTensorLevel,
                                          parameters->mutable_beta(), data.beta);
      if (!ok) return false;
    } else if (!CopyField(cursor, limit, tag, &copied, kInlineLevel)) {
      return false;
    }
  }
  return cursor.position() == limit && MergeCopied(&copied, parameters);
}

bool ParseParameters(Cursor& cursor, int64_t limit, v1::Parameters* parameters,
                     const InlineData& data) {
  // `name` and `inline` are one oneof: the one met last wins, so what
  // protobuf parses is merged before each `inline`, in wire order.
  std::string copied;
  auto merge = [&] {
    const bool ok = MergeCopied(&copied, parameters);
    if (!parameters->has_inline_()) {  // a name replaced the inline tensors
      data.gamma->Clear();
      data.beta->Clear();
    }
    return ok;
  };
  while (cursor.position() < limit) {
    uint32_t tag = 0;
    if (!ReadTag(cursor, limit, &tag)) return false;
    if (tag == MakeTag(v1::Parameters::kInlineFieldNumber, kLengthDelimited)) {
      int64_t length = 0;
      if (!merge() || !ReadLength(cursor, limit, &length)) return false;
      if (!ParseInline(cursor, cursor.position() + length, parameters->mutable_inline_(), data)) {
        return false;
      }
    } else if (!CopyField(cursor, limit, tag, &copied, kParametersLevel)) {
      return false;
    }
  }
  return cursor.position() == limit && merge();
}

// Whether Message has a `parameters` field.
template <typename Message, typename = void>
struct HasParameters : std::false_type {};
template <typename Message>
struct HasParameters<Message, std::void_t<decltype(Message::kParametersFieldNumber)>>
    : std::true_type {};

// A tensor field of the request whose data the parser keeps as pieces.
template <typename Message>
struct TensorField {
  int number;
  v1::Tensor* (Message::*mutable_tensor)();
  ReceivedBytes* data;
};

// The request's `parameters` field, whose inline tensors' data the parser
// keeps as pieces.
template <typename Message>
struct ParametersField {
  v1::Parameters* (Message::*mutable_parameters)();
  InlineData data;
};

// The request's fields: `tensors` and `parameters` (when set; field
// Message::kParametersFieldNumber) parsed here, the rest by protobuf.
template <typename Message>
bool ParseRequest(Cursor& cursor, Message* message,
                  std::initializer_list<TensorField<Message>> tensors,
                  std::optional<ParametersField<Message>> parameters) {
  std::string copied;  // no field left to protobuf touches the tensors
  const int64_t limit = cursor.end();
  while (cursor.position() < limit) {
    uint32_t tag = 0;
    if (!ReadTag(cursor, limit, &tag)) return false;
    const int field = static_cast<int>(tag >> 3);
    const TensorField<Message>* tensor = nullptr;
    for (const TensorField<Message>& candidate : tensors) {
      if (candidate.number == field) tensor = &candidate;
    }
    bool is_parameters = false;
    if constexpr (HasParameters<Message>::value) {
      is_parameters = parameters && field == Message::kParametersFieldNumber;
    }
    if ((tag & 7) != kLengthDelimited || (tensor == nullptr && !is_parameters)) {
      if (!CopyField(cursor, limit, tag, &copied, kRequestLevel)) return false;
      continue;
    }
    int64_t length = 0;
    if (!ReadLength(cursor, limit, &length)) return false;
    const int64_t end = cursor.position() + length;
    const bool ok =
        tensor != nullptr
            ? ParseTensor(cursor, end, kTensorLevel, (message->*(tensor->mutable_tensor))(),
                          tensor->data)
            : ParseParameters(cursor, end, (message->*(parameters->mutable_parameters))(),
                              parameters->data);
    if (!ok) return false;
  }
  return MergeCopied(&copied, message);
}

// Takes `bytes` over into `buffers` and parses them with `parse`; on failure
// `reset` empties the request and the status names `type`.
template <typename Parse, typename Reset>
absl::Status ParseReceived(grpc::ByteBuffer* bytes, ReceivedBuffers* buffers, const char* type,
                           Parse parse, Reset reset) {
  reset();
  if (!bytes->Valid()) return absl::OkStatus();  // no payload: the message of all defaults
  bool parsed = buffers->Take(bytes);
  if (parsed) {
    Cursor cursor(buffers->slices());
    parsed = parse(cursor);
  }
  if (!parsed) {
    reset();
    return absl::InvalidArgumentError(
        absl::StrCat("request: the message is not a valid normsvc.v1.", type));
  }
  return absl::OkStatus();
}

}  // namespace

bool ReceivedBuffers::Take(grpc::ByteBuffer* bytes) {
  Clear();
  held_.Swap(bytes);
  // Dump takes references to the slices; nothing is copied.
  return held_.Dump(&slices_).ok();
}

absl::Status ParseReceivedNormalizeRequest(grpc::ByteBuffer* bytes,
                                           ReceivedNormalizeRequest* request) {
  auto reset = [request] {
    request->message.Clear();
    for (ReceivedBytes* data :
         {&request->input, &request->residual, &request->gamma, &request->beta}) {
      data->Clear();
    }
    request->buffers.Clear();
  };
  auto parse = [request](Cursor& cursor) {
    using M = v1::NormalizeRequest;
    return ParseRequest<M>(cursor, &request->message,
                           {{M::kInputFieldNumber, &M::mutable_input, &request->input},
                            {M::kResidualFieldNumber, &M::mutable_residual, &request->residual}},
                           {{&M::mutable_parameters, {&request->gamma, &request->beta}}});
  };
  return ParseReceived(bytes, &request->buffers, "NormalizeRequest", parse, reset);
}

absl::Status ParseReceivedBackwardRequest(grpc::ByteBuffer* bytes,
                                          ReceivedBackwardRequest* request) {
  auto reset = [request] {
    request->message.Clear();
    for (ReceivedBytes* data : {&request->input, &request->grad_output, &request->mean,
                                &request->rstd, &request->gamma, &request->beta}) {
      data->Clear();
    }
    request->buffers.Clear();
  };
  auto parse = [request](Cursor& cursor) {
    using M = v1::NormalizeBackwardRequest;
    return ParseRequest<M>(
        cursor, &request->message,
        {{M::kInputFieldNumber, &M::mutable_input, &request->input},
         {M::kGradOutputFieldNumber, &M::mutable_grad_output, &request->grad_output},
         {M::kMeanFieldNumber, &M::mutable_mean, &request->mean},
         {M::kRstdFieldNumber, &M::mutable_rstd, &request->rstd}},
        {{&M::mutable_parameters, {&request->gamma, &request->beta}}});
  };
  return ParseReceived(bytes, &request->buffers, "NormalizeBackwardRequest", parse, reset);
}

absl::Status ParseReceivedRegisterRequest(grpc::ByteBuffer* bytes,
                                          ReceivedRegisterRequest* request) {
  auto reset = [request] {
    request->message.Clear();
    request->gamma.Clear();
    request->beta.Clear();
    request->buffers.Clear();
  };
  auto parse = [request](Cursor& cursor) {
    using M = v1::RegisterParametersRequest;
    return ParseRequest<M>(cursor, &request->message,
                           {{M::kGammaFieldNumber, &M::mutable_gamma, &request->gamma},
                            {M::kBetaFieldNumber, &M::mutable_beta, &request->beta}},
                           std::nullopt);
  };
  return ParseReceived(bytes, &request->buffers, "RegisterParametersRequest", parse, reset);
}

namespace {

// Copies the received bytes into `tensor`'s data field (null: the tensor is
// absent, and so are its bytes) and drops the pieces.
void CopyIntoData(ReceivedBytes* bytes, v1::Tensor* tensor) {
  if (tensor != nullptr) {
    std::string* data = tensor->mutable_data();
    data->clear();
    data->reserve(static_cast<std::size_t>(bytes->size()));  // appended without a fill first
    for (const ReceivedBytes::Piece& piece : bytes->pieces()) data->append(piece.data, piece.size);
  }
  bytes->Clear();
}

}  // namespace

void ReceivedBackwardRequest::CopyDataIntoMessage() {
  v1::NormalizeBackwardRequest& m = message;
  CopyIntoData(&input, m.has_input() ? m.mutable_input() : nullptr);
  CopyIntoData(&grad_output, m.has_grad_output() ? m.mutable_grad_output() : nullptr);
  CopyIntoData(&mean, m.has_mean() ? m.mutable_mean() : nullptr);
  CopyIntoData(&rstd, m.has_rstd() ? m.mutable_rstd() : nullptr);
  v1::Parameters::Inline* parameters =
      m.parameters().has_inline_() ? m.mutable_parameters()->mutable_inline_() : nullptr;
  CopyIntoData(&gamma, parameters != nullptr && parameters->has_gamma()
                           ? parameters->mutable_gamma()
                           : nullptr);
  CopyIntoData(&beta, parameters != nullptr && parameters->has_beta() ? parameters->mutable_beta()
                                                                      : nullptr);
  buffers.Clear();
}

void ReceivedRegisterRequest::CopyDataIntoMessage() {
  CopyIntoData(&gamma, message.has_gamma() ? message.mutable_gamma() : nullptr);
  CopyIntoData(&beta, message.has_beta() ? message.mutable_beta() : nullptr);
  buffers.Clear();
}

}  // namespace normsvc::server
