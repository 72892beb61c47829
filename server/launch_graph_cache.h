// Replayable launch sequences (CUDA graphs) of a GPU executor's slot, keyed
// by the bytes that determine a forward round's GPU work.
//
// Why: a small batch's round is three dependent operations (H2D copy,
// launch, D2H copy) and four timing events, issued by seven runtime calls
// whose host time the device waits on; replaying the same operations as one
// graph takes one call (kernels/bench/round_trip_bench: 1x4096 fp32 on the
// H200, p50 35.8 us a round trip with the calls against 26.6 us replayed).
// A round's operations are a pure function of its key: the staging offsets
// and sizes, and every field of every segment the launcher reads (device
// pointers into the slot's buffers or to registered parameters, shapes,
// dtypes, op, epsilon). The inputs' values are not part of it: the copies
// read whatever the pinned buffer holds when the graph runs.
//
// Not in the key: the launcher's process-wide policies (the ring and
// parameter-staging policies of kernels/src), which only the kernel tests
// and benchmarks change, never the server.
//
// Policy: a key is captured once it has been seen `sightings_to_capture`
// times (a layout that repeats: steady traffic of one shape), so one-off
// layouts cost no capture; at most `capacity` keys (captured or counted)
// are kept; when full, the least recently used key without a graph is
// dropped, else the least recently used one (its graph destroyed). A key
// whose capture failed is remembered as such and not retried while it is
// kept.
// Off by default (--cuda_graph_cache=0): at the service level on the H200
// host the saved calls were within the noise of two A/B runs
// (server/README.md), while traffic of more layouts than the cache holds
// would pay a capture and an instantiation for keys evicted before reuse.
//
// CUDA-free: handles are opaque, destroyed through the callback given. Not
// thread-safe: one per slot, used by the thread that holds the slot.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "normsvc/kernels/types.h"

namespace normsvc::server {

class LaunchGraphCache {
 public:
  using Handle = void*;
  using Destroy = std::function<void(Handle)>;

  LaunchGraphCache(int capacity, int sightings_to_capture, Destroy destroy);
  ~LaunchGraphCache();
  LaunchGraphCache(const LaunchGraphCache&) = delete;
  LaunchGraphCache& operator=(const LaunchGraphCache&) = delete;

  // The graph of `key`, or null. On null, `capture` says whether the caller
  // should capture it now (and then call Insert or MarkUncapturable).
  Handle Lookup(std::string_view key, bool* capture);
  void Insert(std::string_view key, Handle handle);
  void MarkUncapturable(std::string_view key);

  int graphs() const;  // keys with a graph

 private:
  struct Entry {
    uint64_t hash = 0;
    std::string key;
    Handle handle = nullptr;
    int sightings = 0;  // -1: capture failed, never retried
    uint64_t last_use = 0;
  };
  Entry* Find(std::string_view key, uint64_t hash);
  Entry& Add(std::string_view key, uint64_t hash);

  const int capacity_;
  const int sightings_to_capture_;
  const Destroy destroy_;
  std::vector<Entry> entries_;
  uint64_t clock_ = 0;
};

// The key of a forward round: the staging layout's sizes and every field of
// every segment, in order (no padding bytes).
std::string ForwardRoundKey(std::span<const kernels::ForwardSegment> segments,
                            std::size_t table_bytes, std::size_t input_bytes,
                            std::size_t total_bytes);

}  // namespace normsvc::server
