#include "server/batch_worker.h"

#include "server/log.h"

namespace normsvc::server {

void RunBatch(Batcher& batcher, Executor& executor, const DeviceMetrics& metrics, Batch batch,
              int slot) {
  metrics.batch_rows->Observe(static_cast<double>(batch.rows));
  metrics.batch_requests->Observe(static_cast<double>(batch.tasks.size()));
  metrics.batches_in_flight->Increment();
  BatchResult result = executor.Run(batch, slot);
  metrics.batches_in_flight->Decrement();

  if (result.h2d_seconds) metrics.batch_h2d_seconds->Observe(*result.h2d_seconds);
  if (result.d2h_seconds) metrics.batch_d2h_seconds->Observe(*result.d2h_seconds);
  if (result.kernel_seconds) {
    metrics.batch_kernel_seconds->Observe(*result.kernel_seconds);
    if (*result.kernel_seconds > 0 && result.kernel_bytes > 0) {
      metrics.kernel_bandwidth->Observe(static_cast<double>(result.kernel_bytes) /
                                        *result.kernel_seconds);
    }
  }
  if (result.kernel_bytes > 0)
    metrics.processed_bytes->Increment(static_cast<double>(result.kernel_bytes));

  if (result.statuses.size() != batch.tasks.size()) {
    Log(LogLevel::kError, executor.device().label, ": executor returned ", result.statuses.size(),
        " statuses for ", batch.tasks.size(), " tasks");
    result.statuses.assign(batch.tasks.size(),
                           absl::InternalError("executor returned a malformed result"));
  }
  for (size_t i = 0; i < batch.tasks.size(); ++i) {
    batcher.Finish(std::move(batch.tasks[i]), result.statuses[i]);
  }
}

BatchWorker::BatchWorker(Batcher& batcher, Executor& executor, const DeviceMetrics& metrics)
    : batcher_(batcher), executor_(executor), metrics_(metrics) {}

BatchWorker::~BatchWorker() { Join(); }

void BatchWorker::Start() {
  for (int slot = 0; slot < executor_.slots(); ++slot) {
    threads_.emplace_back([this, slot] {
      while (std::optional<Batch> batch = batcher_.WaitForBatch()) {
        RunBatch(batcher_, executor_, metrics_, *std::move(batch), slot);
      }
    });
  }
}

void BatchWorker::Join() {
  for (std::thread& thread : threads_) {
    if (thread.joinable()) thread.join();
  }
  threads_.clear();
}

}  // namespace normsvc::server
