#include "server/parameter_store.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace normsvc::server {

namespace {

// `*copy` = bytes uploaded to `executor`, or left empty for absent bytes.
absl::Status UploadIfPresent(Executor& executor, absl::string_view bytes, DeviceBuffer* copy) {
  if (bytes.empty()) return absl::OkStatus();
  absl::StatusOr<DeviceBuffer> uploaded = executor.Upload(bytes.data(), bytes.size());
  if (!uploaded.ok()) return uploaded.status();
  *copy = *std::move(uploaded);
  return absl::OkStatus();
}

}  // namespace

ParameterSet::~ParameterSet() {
  if (live_bytes_ != nullptr) live_bytes_->fetch_sub(bytes, std::memory_order_acq_rel);
}

ParameterStore::ParameterStore(ParameterLimits limits, std::vector<Executor*> executors,
                               RunElsewhere free_elsewhere)
    : limits_(limits),
      executors_(std::move(executors)),
      free_elsewhere_(std::move(free_elsewhere)) {}

absl::StatusOr<std::shared_ptr<const ParameterSet>> ParameterStore::Register(
    const std::string& name, int64_t hidden, kernels::DType dtype, absl::string_view gamma,
    absl::string_view beta, bool replace) {
  if (gamma.empty() && beta.empty()) {
    return absl::InvalidArgumentError("gamma, beta: a parameter set needs at least one of them");
  }
  absl::MutexLock registering(&register_mutex_);
  const int64_t bytes = static_cast<int64_t>(gamma.size() + beta.size());
  {
    absl::MutexLock lock(&mutex_);
    auto it = sets_.find(name);
    const bool exists = it != sets_.end();
    if (exists && !replace) {
      return absl::AlreadyExistsError(absl::StrCat("name: a parameter set named '", name,
                                                   "' exists (set replace to overwrite it)"));
    }
    const int64_t count_after = static_cast<int64_t>(sets_.size()) + (exists ? 0 : 1);
    if (count_after > limits_.max_sets) {
      return absl::ResourceExhaustedError(
          absl::StrCat("name: ", limits_.max_sets,
                       " parameter sets are registered, the limit (--max_parameter_sets)"));
    }
    // The limit bounds the memory the sets hold, not only the published
    // ones: a set replaced or deleted while tasks still use it stays until
    // the last of them ends. A set being replaced that nothing else holds
    // is freed as this one is published (a request that finds it between
    // this check and the publication holds it a little longer: the limit
    // can be passed by that one set's bytes for that request's time).
    const int64_t live = live_bytes();
    const int64_t freed_by_replacing =
        exists && it->second.use_count() == 1 ? it->second->bytes : 0;
    const int64_t bytes_after = live - freed_by_replacing + bytes;
    if (bytes_after > limits_.max_bytes) {
      const int64_t retired = live - total_bytes_;
      return absl::ResourceExhaustedError(absl::StrCat(
          "gamma, beta: registering ", bytes, " bytes would exceed the ", limits_.max_bytes,
          " bytes of --max_parameter_bytes (", live, " in use",
          retired > 0 ? absl::StrCat(", of which ", retired,
                                     " by replaced or deleted sets that queued requests still use")
                      : "",
          ")"));
    }
  }
  std::shared_ptr<ParameterSet> set(new ParameterSet, [free = free_elsewhere_](ParameterSet* p) {
    if (!free || !free([p] { delete p; })) delete p;
  });
  set->name = name;
  set->hidden = hidden;
  set->dtype = dtype;
  set->has_gamma = !gamma.empty();
  set->has_beta = !beta.empty();
  set->bytes = bytes;
  // An executor out of service (an unrecoverable device error or a hung
  // device; it never returns) gets no more tasks, so it gets no copy: one
  // failed device must not fail every registration on the others, and an
  // upload to a hung one would block this thread for good.
  int copies = 0;
  for (Executor* executor : executors_) {
    DeviceBuffer gamma_copy, beta_copy;
    if (executor->in_service()) {
      absl::Status status = UploadIfPresent(*executor, gamma, &gamma_copy);
      if (status.ok()) status = UploadIfPresent(*executor, beta, &beta_copy);
      if (!status.ok() && executor->in_service()) return status;
      if (status.ok()) {
        ++copies;
      } else {
        gamma_copy = beta_copy = nullptr;
      }
    }
    set->gamma_device_.push_back(std::move(gamma_copy));
    set->beta_device_.push_back(std::move(beta_copy));
  }
  if (copies == 0) {
    return absl::UnavailableError(
        "no executor in service to hold the parameter set: every device failed with an "
        "unrecoverable error or a batch past --batch_timeout_s (see the server log)");
  }
  set->live_bytes_ = live_bytes_;
  live_bytes_->fetch_add(bytes, std::memory_order_acq_rel);
  std::shared_ptr<const ParameterSet> published = std::move(set);
  std::shared_ptr<const ParameterSet> replaced;
  {
    absl::MutexLock lock(&mutex_);
    auto [it, inserted] = sets_.try_emplace(name, published);
    if (!inserted) {
      total_bytes_ -= it->second->bytes;
      replaced = std::move(it->second);
      it->second = published;
    }
    total_bytes_ += bytes;
  }
  // `replaced` is released here, outside the lock: freeing device memory may
  // synchronize with the device.
  return published;
}

absl::Status ParameterStore::Delete(const std::string& name) {
  absl::MutexLock registering(&register_mutex_);
  std::shared_ptr<const ParameterSet> removed;
  {
    absl::MutexLock lock(&mutex_);
    auto it = sets_.find(name);
    if (it == sets_.end()) {
      return absl::NotFoundError(absl::StrCat("name: no parameter set named '", name, "'"));
    }
    removed = std::move(it->second);
    total_bytes_ -= removed->bytes;
    sets_.erase(it);
  }
  return absl::OkStatus();
}

std::shared_ptr<const ParameterSet> ParameterStore::Find(absl::string_view name) const {
  absl::ReaderMutexLock lock(&mutex_);
  auto it = sets_.find(name);
  return it == sets_.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<const ParameterSet>> ParameterStore::List() const {
  std::vector<std::shared_ptr<const ParameterSet>> sets;
  {
    absl::ReaderMutexLock lock(&mutex_);
    sets.reserve(sets_.size());
    for (const auto& [name, set] : sets_) sets.push_back(set);
  }
  std::sort(sets.begin(), sets.end(),
            [](const auto& a, const auto& b) { return a->name < b->name; });
  return sets;
}

int64_t ParameterStore::total_bytes() const {
  absl::ReaderMutexLock lock(&mutex_);
  return total_bytes_;
}

}  // namespace normsvc::server
