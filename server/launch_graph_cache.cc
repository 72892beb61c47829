#include "server/launch_graph_cache.h"

#include <algorithm>
#include <cstring>

#include "absl/hash/hash.h"

namespace normsvc::server {
namespace {

template <typename T>
void Append(std::string* key, const T& value) {
  key->append(reinterpret_cast<const char*>(&value), sizeof(value));
}

}  // namespace

LaunchGraphCache::LaunchGraphCache(int capacity, int sightings_to_capture, Destroy destroy)
    : capacity_(std::max(1, capacity)),
      sightings_to_capture_(std::max(1, sightings_to_capture)),
      destroy_(std::move(destroy)) {
  entries_.reserve(static_cast<std::size_t>(capacity_));
}

LaunchGraphCache::~LaunchGraphCache() {
  for (Entry& e : entries_) {
    if (e.handle != nullptr) destroy_(e.handle);
  }
}

LaunchGraphCache::Entry* LaunchGraphCache::Find(std::string_view key, uint64_t hash) {
  for (Entry& e : entries_) {
    if (e.hash == hash && e.key == key) return &e;
  }
  return nullptr;
}

LaunchGraphCache::Entry& LaunchGraphCache::Add(std::string_view key, uint64_t hash) {
  if (static_cast<int>(entries_.size()) == capacity_) {
    // Keys still being counted go first, so that layouts seen once (a
    // batcher makes many) do not push out the graphs of those that repeat.
    auto older = [](const Entry& a, const Entry& b) {
      const bool a_graph = a.handle != nullptr;
      const bool b_graph = b.handle != nullptr;
      return a_graph != b_graph ? b_graph : a.last_use < b.last_use;
    };
    auto oldest = std::min_element(entries_.begin(), entries_.end(), older);
    if (oldest->handle != nullptr) destroy_(oldest->handle);
    *oldest = Entry{};
    oldest->hash = hash;
    oldest->key.assign(key);
    return *oldest;
  }
  entries_.push_back(Entry{});
  entries_.back().hash = hash;
  entries_.back().key.assign(key);
  return entries_.back();
}

LaunchGraphCache::Handle LaunchGraphCache::Lookup(std::string_view key, bool* capture) {
  *capture = false;
  const uint64_t hash = absl::HashOf(key);
  Entry* e = Find(key, hash);
  if (e == nullptr) e = &Add(key, hash);
  e->last_use = ++clock_;
  if (e->handle != nullptr) return e->handle;
  if (e->sightings >= 0 && ++e->sightings >= sightings_to_capture_) *capture = true;
  return nullptr;
}

void LaunchGraphCache::Insert(std::string_view key, Handle handle) {
  const uint64_t hash = absl::HashOf(key);
  Entry* e = Find(key, hash);
  if (e == nullptr) e = &Add(key, hash);
  if (e->handle != nullptr && e->handle != handle) destroy_(e->handle);
  e->handle = handle;
  e->last_use = ++clock_;
}

void LaunchGraphCache::MarkUncapturable(std::string_view key) {
  const uint64_t hash = absl::HashOf(key);
  Entry* e = Find(key, hash);
  if (e == nullptr) e = &Add(key, hash);
  if (e->handle != nullptr) destroy_(e->handle);
  e->handle = nullptr;
  e->sightings = -1;
}

int LaunchGraphCache::graphs() const {
  return static_cast<int>(std::count_if(entries_.begin(), entries_.end(),
                                        [](const Entry& e) { return e.handle != nullptr; }));
}

// A field added to ForwardSegment must be added to the key below.
static_assert(sizeof(kernels::ForwardSegment) == 128, "ForwardRoundKey covers every field");

std::string ForwardRoundKey(std::span<const kernels::ForwardSegment> segments,
                            std::size_t table_bytes, std::size_t input_bytes,
                            std::size_t total_bytes) {
  std::string key;
  key.reserve(3 * sizeof(std::size_t) + segments.size() * 136);
  Append(&key, table_bytes);
  Append(&key, input_bytes);
  Append(&key, total_bytes);
  for (const kernels::ForwardSegment& s : segments) {
    Append(&key, static_cast<uint8_t>(s.op));
    Append(&key, static_cast<uint8_t>(s.x_dtype));
    Append(&key, static_cast<uint8_t>(s.out_dtype));
    Append(&key, static_cast<uint8_t>(s.param_dtype));
    Append(&key, s.rows);
    Append(&key, s.hidden);
    Append(&key, s.epsilon);
    Append(&key, s.x);
    Append(&key, s.x_row_stride);
    Append(&key, s.residual);
    Append(&key, s.residual_row_stride);
    Append(&key, s.residual_out);
    Append(&key, s.residual_out_row_stride);
    Append(&key, s.gamma);
    Append(&key, s.beta);
    Append(&key, s.out);
    Append(&key, s.out_row_stride);
    Append(&key, s.mean);
    Append(&key, s.rstd);
  }
  return key;
}

}  // namespace normsvc::server
