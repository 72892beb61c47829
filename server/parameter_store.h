// Named gamma/beta sets, uploaded once and kept resident on every executor's
// device. Registered sets are immutable; replacing one publishes a new set
// while tasks already holding the old one finish with it.
//
// Thread safety: Find and List may be called from RPC handlers (a reader
// lock held for a map lookup). Register and Delete upload to or free device
// memory and so run on the control thread, never in a handler; so does the
// freeing of a set whose last holder was a request (free_elsewhere).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>
#include "absl/strings/string_view.h"

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "normsvc/kernels/types.h"
#include "server/executor.h"

namespace normsvc::server {

class ParameterSet {
 public:
  ParameterSet() = default;
  ParameterSet(const ParameterSet&) = delete;
  ParameterSet& operator=(const ParameterSet&) = delete;
  // Gives its bytes back to the store's count of live sets.
  ~ParameterSet();

  std::string name;
  int64_t hidden = 0;
  kernels::DType dtype = kernels::DType::kF32;
  bool has_gamma = false;
  bool has_beta = false;
  int64_t bytes = 0;  // gamma + beta, host bytes (each device holds a copy)

  // Pointers valid for the executor at `executor_index`; null if absent, or
  // when that executor was out of service at registration (it runs no
  // tasks).
  const void* gamma(int executor_index) const { return gamma_device_[executor_index].get(); }
  const void* beta(int executor_index) const { return beta_device_[executor_index].get(); }

 private:
  friend class ParameterStore;
  // The store's count of bytes of live sets (published, or replaced or
  // deleted but still held by a task); null until published.
  std::shared_ptr<std::atomic<int64_t>> live_bytes_;
  std::vector<DeviceBuffer> gamma_device_;
  std::vector<DeviceBuffer> beta_device_;
};

struct ParameterLimits {
  int64_t max_sets = 1024;
  int64_t max_bytes = int64_t{1} << 30;
};

// Hands `job` to another thread and returns true, or returns false (then
// the caller runs it itself).
using RunElsewhere = std::function<bool(std::function<void()> job)>;

class ParameterStore {
 public:
  // `executors` are indexed as in Task execution (executor index = position).
  // A set is freed where its last holder lets go of it: a replaced or
  // deleted set that a request still holds, for instance, in the RPC handler
  // that refuses that request. Freeing device memory waits for the device,
  // so the store frees every set through `free_elsewhere` (the server's
  // control thread), and in the releasing thread only when that is null or
  // refuses the job (full, or stopped).
  ParameterStore(ParameterLimits limits, std::vector<Executor*> executors,
                 RunElsewhere free_elsewhere = nullptr);

  // Uploads to every executor in service (Executor::in_service) and
  // publishes the set. gamma/beta may be empty views (absent) but not both.
  // ALREADY_EXISTS unless `replace`; RESOURCE_EXHAUSTED beyond the limits; an
  // in-service executor's upload error as it is; UNAVAILABLE when none is in
  // service. Blocking.
  absl::StatusOr<std::shared_ptr<const ParameterSet>> Register(const std::string& name,
                                                               int64_t hidden, kernels::DType dtype,
                                                               absl::string_view gamma,
                                                               absl::string_view beta,
                                                               bool replace);
  // NOT_FOUND if absent. Device memory is freed once no task holds the set.
  absl::Status Delete(const std::string& name);

  std::shared_ptr<const ParameterSet> Find(absl::string_view name) const;
  std::vector<std::shared_ptr<const ParameterSet>> List() const;  // sorted by name
  // Bytes of the published sets.
  int64_t total_bytes() const;
  // Bytes of every set still in memory: the published ones and those
  // replaced or deleted while a task still holds them. --max_parameter_bytes
  // bounds this.
  int64_t live_bytes() const { return live_bytes_->load(std::memory_order_acquire); }
  const ParameterLimits& limits() const { return limits_; }

 private:
  const ParameterLimits limits_;
  const std::vector<Executor*> executors_;
  const RunElsewhere free_elsewhere_;
  absl::Mutex register_mutex_;  // serializes Register/Delete (limits, uploads)
  mutable absl::Mutex mutex_;   // guards the map
  absl::flat_hash_map<std::string, std::shared_ptr<const ParameterSet>> sets_
      ABSL_GUARDED_BY(mutex_);
  int64_t total_bytes_ ABSL_GUARDED_BY(mutex_) = 0;
  const std::shared_ptr<std::atomic<int64_t>> live_bytes_ =
      std::make_shared<std::atomic<int64_t>>(0);
};

}  // namespace normsvc::server
