// Tasks and sinks for tests that drive the batcher and the executor pool
// without gRPC: a sink that records how its task ended, a forward task of a
// given row count (16 input, 16 output and 32 staging bytes a row), and a
// worker's WaitForBatch on a thread of its own.
#pragma once

#include <cstdint>
#include <future>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "server/batcher.h"
#include "server/task.h"

namespace normsvc::server::testing {

// Records how its task ended; reports itself cancelled when told to.
class RecordingSink final : public TaskSink {
 public:
  bool IsCancelled() const override { return cancelled; }
  void OnTaskDone(const absl::Status& status) override {
    ++calls;
    result = status;
  }
  // The last status's code; kUnknown before any.
  absl::StatusCode code() const { return result ? result->code() : absl::StatusCode::kUnknown; }

  bool cancelled = false;
  int calls = 0;
  std::optional<absl::Status> result;
};

inline std::unique_ptr<Task> MakeForwardTask(int64_t rows, TaskSink* sink) {
  auto task = std::make_unique<Task>();
  task->kind = TaskKind::kForward;
  task->rows = rows;
  task->hidden = 4;
  task->input_bytes = rows * 16;
  task->output_bytes = rows * 16;
  task->staging_bytes = rows * 32;
  task->sink = sink;
  return task;
}

// Batcher::WaitForBatch on another thread; the rows of the batch it
// returned (its tasks finished OK), or -1 when it returned none (closed).
inline std::future<int64_t> WaitForBatchOnThread(Batcher& batcher) {
  return std::async(std::launch::async, [&batcher] {
    std::optional<Batch> batch = batcher.WaitForBatch();
    if (!batch) return int64_t{-1};
    const int64_t rows = batch->rows;
    for (auto& task : batch->tasks) batcher.Finish(std::move(task), absl::OkStatus());
    return rows;
  });
}

}  // namespace normsvc::server::testing
