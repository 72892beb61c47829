// Helpers of the received-request parser tests: random bytes, tensors and
// unknown fields, and messages cut into slices as gRPC's frames cut them.
#pragma once

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include <google/protobuf/message.h>
#include <google/protobuf/unknown_field_set.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include "normsvc/v1/normalizer.pb.h"
#include "server/received_bytes.h"

namespace normsvc::server::testing {

inline std::string RandomBytes(std::mt19937_64& rng, std::size_t n) {
  std::string bytes(n, '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  return bytes;
}

// Unknown fields of every wire type, a group among them, on `message`.
inline void AddUnknownFields(std::mt19937_64& rng, google::protobuf::Message* message) {
  google::protobuf::UnknownFieldSet* unknown =
      message->GetReflection()->MutableUnknownFields(message);
  const int count = static_cast<int>(rng() % 4);
  for (int i = 0; i < count; ++i) {
    const int field = 100 + static_cast<int>(rng() % 1000);
    switch (rng() % 5) {
      case 0:
        unknown->AddVarint(field, rng());
        break;
      case 1:
        unknown->AddFixed32(field, static_cast<uint32_t>(rng()));
        break;
      case 2:
        unknown->AddFixed64(field, rng());
        break;
      case 3:
        unknown->AddLengthDelimited(field, RandomBytes(rng, rng() % 40));
        break;
      default:
        unknown->AddGroup(field)->AddVarint(field + 1, rng());
        break;
    }
  }
}

// A tensor with each field present or absent at random, its data shorter
// than `max_bytes`, sometimes with unknown fields.
inline void RandomTensorField(std::mt19937_64& rng, v1::Tensor* tensor, std::size_t max_bytes) {
  if (rng() % 4 != 0) tensor->set_dtype(static_cast<v1::DType>(rng() % 5));
  const int rank = static_cast<int>(rng() % 4);
  for (int i = 0; i < rank; ++i) tensor->add_shape(static_cast<int64_t>(rng() % 5000) - 10);
  if (rng() % 8 != 0) tensor->set_data(RandomBytes(rng, rng() % max_bytes));
  if (rng() % 3 == 0) AddUnknownFields(rng, tensor);
}

// A request's parameters at random: none, a name, or inline gamma and beta
// each present or absent (`beta_one_in`: beta in one request of that many).
template <typename Request>
void RandomParameters(std::mt19937_64& rng, Request* request, int beta_one_in) {
  switch (rng() % 4) {
    case 0:
      break;
    case 1:
      request->mutable_parameters()->set_name("set-" + std::to_string(rng() % 100));
      break;
    default: {
      v1::Parameters::Inline* parameters = request->mutable_parameters()->mutable_inline_();
      if (rng() % 4) RandomTensorField(rng, parameters->mutable_gamma(), 20000);
      if (rng() % beta_one_in == 0) RandomTensorField(rng, parameters->mutable_beta(), 20000);
      if (rng() % 4 == 0) AddUnknownFields(rng, parameters);
    }
  }
}

// `bytes` as gRPC may deliver them: cut at random points into separately
// allocated slices (some of a single byte, some empty).
inline grpc::ByteBuffer RandomlySliced(std::mt19937_64& rng, const std::string& bytes) {
  std::vector<std::size_t> cuts = {0, bytes.size()};
  const int extra = static_cast<int>(rng() % 8);
  for (int i = 0; i < extra; ++i) cuts.push_back(bytes.empty() ? 0 : rng() % (bytes.size() + 1));
  if (bytes.size() > 2 && rng() % 2) cuts.push_back(1);  // a one-byte slice
  std::sort(cuts.begin(), cuts.end());
  std::vector<grpc::Slice> slices;
  for (std::size_t i = 0; i + 1 < cuts.size(); ++i) {
    slices.emplace_back(bytes.data() + cuts[i], cuts[i + 1] - cuts[i]);  // a copy of its own
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

inline std::string Flatten(const ReceivedBytes& bytes) {
  std::string flat(static_cast<std::size_t>(bytes.size()), '\0');
  bytes.CopyTo(0, bytes.size(), flat.data());
  return flat;
}

// Hand-made wire bytes.
inline std::string Varint(uint64_t value) {
  std::string out;
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
  return out;
}

// Field `field` of wire type 2 holding `payload`.
inline std::string LengthDelimited(int field, const std::string& payload) {
  return Varint(static_cast<uint64_t>(field) << 3 | 2) + Varint(payload.size()) + payload;
}

// `count` unknown groups (field 100), each inside the one before.
inline std::string NestedGroups(int count) {
  std::string start = Varint(100 << 3 | 3), end = Varint(100 << 3 | 4), out;
  for (int i = 0; i < count; ++i) out += start;
  for (int i = 0; i < count; ++i) out += end;
  return out;
}

}  // namespace normsvc::server::testing
