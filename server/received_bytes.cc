#include "server/received_bytes.h"

#include <algorithm>
#include <cstring>

namespace normsvc::server {

void ReceivedBytes::Clear() {
  pieces_.clear();
  size_ = 0;
}

void ReceivedBytes::Append(const char* data, std::size_t size) {
  if (size == 0) return;
  // Adjacent memory (pieces of one receive buffer) joins the last piece.
  if (!pieces_.empty() && pieces_.back().data + pieces_.back().size == data) {
    pieces_.back().size += size;
  } else {
    pieces_.push_back({data, size});
  }
  size_ += static_cast<int64_t>(size);
}

bool ReceivedBytes::ReadableInPlace(std::size_t alignment) const {
  if (pieces_.size() > 1) return false;
  return pieces_.empty() || reinterpret_cast<std::uintptr_t>(pieces_.front().data) % alignment == 0;
}

void ReceivedBytes::CopyTo(int64_t offset, int64_t count, void* to) const {
  char* out = static_cast<char*>(to);
  std::size_t skip = static_cast<std::size_t>(offset);
  std::size_t left = static_cast<std::size_t>(count);
  for (const Piece& piece : pieces_) {
    if (left == 0) return;
    if (skip >= piece.size) {
      skip -= piece.size;
      continue;
    }
    const std::size_t n = std::min(piece.size - skip, left);
    std::memcpy(out, piece.data + skip, n);
    out += n;
    left -= n;
    skip = 0;
  }
}

}  // namespace normsvc::server
