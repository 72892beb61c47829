// The bytes of one tensor as gRPC received them: consecutive pieces of its
// receive buffers, in order, not copied. A message arrives in HTTP/2 frames
// of at most 16 KiB (and in whatever the socket reads returned), so a tensor
// of 16 KiB or more nearly always spans two pieces or more; copying the
// pieces into one string would cost a copy of every request byte and an
// allocation per tensor. Whoever holds the buffers (ReceivedNormalizeRequest)
// keeps the pieces valid.
//
// gRPC-free and CUDA-free: tasks carry it to the executors.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/container/inlined_vector.h"

namespace normsvc::server {

class ReceivedBytes {
 public:
  struct Piece {
    const char* data;
    std::size_t size;
  };

  void Clear();
  // Appends `size` bytes at `data`; empty pieces are not kept.
  void Append(const char* data, std::size_t size);

  int64_t size() const { return size_; }
  const absl::InlinedVector<Piece, 2>& pieces() const { return pieces_; }
  // The first byte, or null when empty: the tensor's address when
  // contiguous(), else only where its bytes begin.
  const char* first() const { return pieces_.empty() ? nullptr : pieces_.front().data; }
  // Whether the bytes lie in one piece (or there are none).
  bool contiguous() const { return pieces_.size() <= 1; }
  // Whether the kernels may read the bytes in place: one piece that starts
  // on an `alignment` boundary (a power of two).
  bool ReadableInPlace(std::size_t alignment) const;

  // Copies bytes [offset, offset + count) to `to`. The range must lie in
  // [0, size()).
  void CopyTo(int64_t offset, int64_t count, void* to) const;

 private:
  absl::InlinedVector<Piece, 2> pieces_;
  int64_t size_ = 0;
};

}  // namespace normsvc::server
