// Per-model statistics for ModelStatistics, in the protocol's terms.
//
// A request's way through the server, as KserveInference observes it:
//   received   the handler starts (decode, validate, build the task)
//   accepted   the task goes to the batcher
//   started    its batch's Executor::Run begins   (BatchExecution)
//   finished   its batch's Executor::Run returns  (BatchExecution)
//   completed  the task's sink is told (OnTaskDone)
//   replied    the reply message is built
// Per successful request (inference_stats; every count is the number of
// successful requests):
//   success         replied - received
//   queue           started - accepted: the wait in the batcher, and for a
//                   free batch slot
//   compute_input   accepted - received (decode and validation in the
//                   handler) plus the batch's host-to-device copy
//   compute_infer   the batch's run without its copies (the kernels)
//   compute_output  the batch's device-to-host copy plus reply assembly
//                   (replied - completed)
// The four are disjoint intervals, so queue + compute <= success; the rest
// (finished -> completed: the hand-off to the reply threads) is overhead.
// Every request of a batch is charged the whole batch's copy and kernel
// times, as the protocol's reference server does. The GPU executor times
// the copies on one batch in --timed_batch_interval; the run of a batch it
// did not time is split in the copy shares of the model's last timed batch. A request with no rows
// runs nothing: queue and compute_infer count it with 0 ns.
//   fail            replied - received of failed requests (no other stage)
//   inference_count rows inferred (INPUT's batch dimension, summed)
//   execution_count batch runs (device launches) that carried at least one
//                   successful request of the model; a launch may also carry
//                   other models' and normsvc.v1 requests
//   batch_stats     per execution, keyed by the launch's rows (all of its
//                   requests): count = executions, compute_input = the
//                   host-to-device copy, compute_infer = the run without
//                   copies, compute_output = the device-to-host copy (the
//                   CPU executor has no copies: 0 ns)
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "inference/grpc_service.pb.h"
#include "server/task.h"

namespace normsvc::server {

struct KserveInferTiming {
  bool ok = false;
  int64_t rows = 0;
  absl::Time received;
  absl::Time accepted;   // validation done; the task goes to the batcher
  absl::Time completed;  // the outcome is known (OnTaskDone, or at once)
  absl::Time replied;
  // The batch that ran the request; absent when nothing ran.
  std::optional<BatchExecution> execution;
};

class KserveStatistics {
 public:
  // Whether a model (by name) still exists: the service's resolution of it.
  using ModelExists = std::function<bool(const std::string&)>;

  // Adds one request's figures to `model`'s. Entries outlive the models they
  // count (a set deleted, or replaced under another name), so when a new
  // model's entry would take the map past twice the models found live at
  // the last sweep (and past kMinSweepModels), `model_exists` is asked,
  // under the statistics' lock, about every entry, and those of models that
  // are gone are dropped: a client that registers, uses and deletes sets
  // under ever new names keeps the map bounded by about twice the models
  // that exist.
  void Record(const std::string& model, const KserveInferTiming& timing,
              const ModelExists& model_exists);
  // Models with an entry (tests).
  size_t ModelCount() const;
  // Statistics of `model`, zeros if it has not run yet.
  void Fill(const std::string& model, inference::ModelStatistics* out) const;

 private:
  struct Duration {
    uint64_t count = 0;
    uint64_t ns = 0;
  };
  struct BatchSize {
    Duration input, infer, output;
  };
  // Batch ids this model has counted lately. A batch's requests finish
  // within a short window (on its worker and the reply threads), far fewer
  // than this many batches apart, so an id seen again is found here.
  struct RecentExecutions {
    std::array<uint64_t, 128> ids{};
    size_t next = 0;
    // True the first time `id` is seen (and remembers it).
    bool Add(uint64_t id);
  };
  struct Model {
    uint64_t last_inference_ms = 0;
    uint64_t inference_count = 0;
    uint64_t execution_count = 0;
    Duration success, fail, queue, input, infer, output;
    std::map<int64_t, BatchSize> batch;  // distinct sizes are bounded (.cc)
    RecentExecutions recent;
    // The copies' shares of the run of this model's last batch whose stages
    // were timed: the split of the batches that were not
    // (BatchExecution::stages_untimed).
    double h2d_share = 0, d2h_share = 0;
  };
  // The entry of `model`, created if absent (after a sweep when due).
  Model& EntryOf(const std::string& model, const ModelExists& model_exists)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  mutable absl::Mutex mutex_;
  absl::flat_hash_map<std::string, Model> models_ ABSL_GUARDED_BY(mutex_);
  size_t sweep_at_ ABSL_GUARDED_BY(mutex_) = 0;
};

}  // namespace normsvc::server
