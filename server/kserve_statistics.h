// Per-model statistics for ModelStatistics (the protocol's names):
//   inference_count  rows inferred (the batch dimension of INPUT, summed)
//   execution_count  requests executed (each is one task; the server's
//                    batcher groups tasks further into device launches,
//                    which the Prometheus metrics count)
//   success / fail   requests and their end-to-end handler-to-reply time
//   queue            from scheduling to the task's completion: the wait in
//                    the batcher and the batch's run (a task does not see
//                    when its batch starts, so both are counted here)
//   compute_input    decoding and validation in the handler
//   compute_infer    the same interval as queue (see above)
//   compute_output   building the reply
//   batch_stats      the same durations per request row count
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "inference/grpc_service.pb.h"

namespace normsvc::server {

struct KserveInferTiming {
  bool ok = false;
  int64_t rows = 0;
  absl::Duration total;
  absl::Duration input;   // handler: decode, validate, build the task
  absl::Duration infer;   // scheduled -> completed
  absl::Duration output;  // reply assembly
  absl::Time finished_at;
};

class KserveStatistics {
 public:
  void Record(const std::string& model, const KserveInferTiming& timing);
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
  struct Model {
    uint64_t last_inference_ms = 0;
    uint64_t inference_count = 0;
    uint64_t execution_count = 0;
    Duration success, fail, queue, input, infer, output;
    std::map<int64_t, BatchSize> batch;  // distinct sizes are bounded below
  };
  mutable absl::Mutex mutex_;
  absl::flat_hash_map<std::string, Model> models_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace normsvc::server
