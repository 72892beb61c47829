// How the CPU reference's backward splits its rows: each chunk of rows sums
// its own dgamma/dbeta partials in row order, and the partials are then
// added in chunk order. The split follows the shape alone, never the thread
// count or the host, so dgamma and dbeta have the same bits on every machine
// and for every ReferenceOptions::max_threads; threads only share the chunks
// out.
#pragma once

#include <algorithm>
#include <cstdint>

namespace normsvc::kernels::detail {

// Rows of one backward chunk (the last may have fewer): about 2^16 elements
// a chunk, at most 64 chunks, and at most 2^22 partial doubles (32 MiB) a
// call. At least 1.
inline int64_t BackwardChunkRows(int64_t rows, int64_t hidden) {
  constexpr int64_t kElementsPerChunk = int64_t{1} << 16;
  constexpr int64_t kMaxChunks = 64;
  constexpr int64_t kMaxPartialDoubles = int64_t{1} << 22;
  if (rows <= 0) return 1;
  const int64_t by_size = std::max<int64_t>(1, rows * hidden / kElementsPerChunk);
  const int64_t by_memory = std::max<int64_t>(1, kMaxPartialDoubles / std::max<int64_t>(1, hidden));
  const int64_t chunks = std::min({by_size, kMaxChunks, by_memory, rows});
  return (rows + chunks - 1) / chunks;
}

}  // namespace normsvc::kernels::detail
