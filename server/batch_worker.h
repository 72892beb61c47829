// Drives one executor: executor.slots() threads, each asking the batcher
// for a batch whenever its slot is free (so with max_queue_delay 0 a batch
// launches as soon as a slot frees up, holding whatever queued meanwhile),
// running it, and finishing its tasks. These are the only threads that
// call Executor::Run; RPC handlers never wait on them.
#pragma once

#include <thread>
#include <vector>

#include "server/batcher.h"
#include "server/executor.h"
#include "server/metrics.h"

namespace normsvc::server {

// Runs `batch` on `slot`, records the batch metrics and finishes every
// task through the batcher. The worker threads' loop body; tests call it
// directly with a fake executor.
void RunBatch(Batcher& batcher, Executor& executor, const DeviceMetrics& metrics, Batch batch,
              int slot);

class BatchWorker {
 public:
  BatchWorker(Batcher& batcher, Executor& executor, const DeviceMetrics& metrics);
  ~BatchWorker();  // Join()

  void Start();
  // Returns once the batcher is closed and empty and every slot is idle.
  void Join();

 private:
  Batcher& batcher_;
  Executor& executor_;
  const DeviceMetrics& metrics_;
  std::vector<std::thread> threads_;
};

}  // namespace normsvc::server
