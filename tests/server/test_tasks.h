// Tasks and sinks for tests that drive the batcher and the executor pool
// without gRPC: a sink that records how its task ended, and a forward task
// of a given row count (16 input, 16 output and 32 staging bytes a row).
#pragma once

#include <memory>
#include <optional>

#include "absl/status/status.h"
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

}  // namespace normsvc::server::testing
