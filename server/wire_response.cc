#include "server/wire_response.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpc/slice.h>

#include "server/tensor_codec.h"

namespace normsvc::server {
namespace {

using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedOutputStream;

void AppendVarint(uint64_t value, std::string& out) {
  uint8_t bytes[10];
  const uint8_t* end = CodedOutputStream::WriteVarint64ToArray(value, bytes);
  out.append(reinterpret_cast<const char*>(bytes), static_cast<std::size_t>(end - bytes));
}

void AppendTag(int field, WireFormatLite::WireType wire_type, std::string& out) {
  AppendVarint(WireFormatLite::MakeTag(field, wire_type), out);
}

}  // namespace

void WireResponse::WriteRequestIdOnce() {
  if (request_id_written_) return;
  request_id_written_ = true;
  if (request_id_ == 0) return;  // the proto3 default is not written
  AppendTag(v1::NormalizeResponse::kRequestIdFieldNumber, WireFormatLite::WIRETYPE_VARINT,
            pending_);
  AppendVarint(request_id_, pending_);
}

void* WireResponse::AllocateTensor(int field, kernels::DType dtype,
                                   const google::protobuf::RepeatedField<int64_t>& shape, int rank,
                                   std::size_t bytes) {
  WriteRequestIdOnce();
  // Tensor { DType dtype = 1; repeated int64 shape = 2 (packed); bytes data = 3; }
  std::string head;
  const v1::DType proto_dtype = ToProtoDType(dtype);
  if (proto_dtype != 0) {
    AppendTag(v1::Tensor::kDtypeFieldNumber, WireFormatLite::WIRETYPE_VARINT, head);
    AppendVarint(static_cast<uint64_t>(proto_dtype), head);
  }
  if (rank > 0) {
    std::size_t packed = 0;
    for (int i = 0; i < rank; ++i)
      packed += CodedOutputStream::VarintSize64(static_cast<uint64_t>(shape.Get(i)));
    AppendTag(v1::Tensor::kShapeFieldNumber, WireFormatLite::WIRETYPE_LENGTH_DELIMITED, head);
    AppendVarint(packed, head);
    for (int i = 0; i < rank; ++i) AppendVarint(static_cast<uint64_t>(shape.Get(i)), head);
  }
  if (bytes > 0) {
    AppendTag(v1::Tensor::kDataFieldNumber, WireFormatLite::WIRETYPE_LENGTH_DELIMITED, head);
    AppendVarint(bytes, head);
  }
  AppendTag(field, WireFormatLite::WIRETYPE_LENGTH_DELIMITED, pending_);
  AppendVarint(head.size() + bytes, pending_);
  pending_ += head;
  if (bytes == 0) return nullptr;
  slices_.emplace_back(pending_.data(), pending_.size());
  pending_.clear();
  // Always reference-counted heap memory: a small slice would hold its bytes
  // inline, in the slice object, which is copied into the ByteBuffer. The
  // slice owns no other memory, so writing its bytes is ours to do.
  slices_.emplace_back(grpc_slice_malloc_large(bytes), grpc::Slice::STEAL_REF);
  return const_cast<uint8_t*>(slices_.back().begin());
}

grpc::ByteBuffer WireResponse::TakeBuffer() {
  WriteRequestIdOnce();
  if (!pending_.empty()) {
    slices_.emplace_back(pending_.data(), pending_.size());
    pending_.clear();
  }
  grpc::ByteBuffer buffer(slices_.data(), slices_.size());
  slices_.clear();
  return buffer;
}

bool WrapStreamResponse(uint64_t request_id, const grpc::ByteBuffer& response,
                        grpc::ByteBuffer* reply) {
  std::vector<grpc::Slice> slices;
  std::string head;
  if (request_id != 0) {
    AppendTag(v1::NormalizeStreamResponse::kRequestIdFieldNumber, WireFormatLite::WIRETYPE_VARINT,
              head);
    AppendVarint(request_id, head);
  }
  AppendTag(v1::NormalizeStreamResponse::kResponseFieldNumber,
            WireFormatLite::WIRETYPE_LENGTH_DELIMITED, head);
  AppendVarint(response.Length(), head);
  slices.emplace_back(head.data(), head.size());
  if (response.Length() > 0) {
    // Shares the response's slices (reference counts), copies no bytes.
    std::vector<grpc::Slice> body;
    if (!response.Dump(&body).ok()) return false;
    slices.insert(slices.end(), body.begin(), body.end());
  }
  *reply = grpc::ByteBuffer(slices.data(), slices.size());
  return true;
}

}  // namespace normsvc::server
