// The GPU executor on its own: batches of mixed requests against the
// oracle, a full batch of one configuration (its segment table in the
// inputs' copy; spinning and sleeping waits), row-chunked requests larger
// than the staging buffer, registered
// parameters in device memory, requests whose tensors stayed in the
// received bytes (split over slices, misaligned), two slots at once, and an injected CUDA
// error that fails one batch while the executor keeps serving. Skips, with
// the reason, where no GPU is visible.
#include <algorithm>
#include <deque>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "server/gpu_backend.h"
#include "server/parameter_store.h"
#include "server/received_request.h"
#include "server/task_builder.h"
#include "server/validation.h"
#include "test_support.h"

namespace normsvc::server::testing {
namespace {

class NullSink final : public TaskSink {
 public:
  bool IsCancelled() const override { return false; }
  void OnTaskDone(const absl::Status&) override {}
};

// Requests and responses that outlive the batch that points into them.
struct Prepared {
  std::deque<ForwardRequest> forward;  // stable addresses: tasks view their bytes
  std::deque<ReceivedNormalizeRequest> received;
  std::vector<std::unique_ptr<v1::NormalizeResponse>> responses;
  Batch batch;
};

class GpuExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (VisibleGpuCount() == 0) {
      GTEST_SKIP() << (GpuBackendCompiled() ? "no GPU visible" : "this build has no CUDA backend")
                   << ": the GPU executor tests run on the GPU machine";
    }
    GpuExecutorOptions options;
    options.device = 0;
    options.slots = 2;
    options.staging_bytes = 4 << 20;  // small, so larger requests run in row chunks
    options.max_batch_tasks = 256;
    absl::StatusOr<std::unique_ptr<Executor>> executor = CreateGpuExecutor(options);
    ASSERT_TRUE(executor.ok()) << executor.status();
    executor_ = *std::move(executor);
    store_ = std::make_unique<ParameterStore>(ParameterLimits{},
                                              std::vector<Executor*>{executor_.get()});
  }

  // `slice_bytes` > 0: the request arrives as the unary call receives it,
  // serialized and cut into slices of that many bytes (the last shorter),
  // its tensors left there (received_request.h).
  void Add(Prepared& p, ForwardRequest made_in, std::size_t slice_bytes = 0) {
    p.forward.push_back(std::move(made_in));
    const ForwardRequest& made = p.forward.back();
    const v1::NormalizeRequest* message = &made.request;
    absl::StatusOr<ForwardPlan> plan;
    if (slice_bytes > 0) {
      const std::string bytes = made.request.SerializeAsString();
      std::vector<grpc::Slice> slices;
      for (std::size_t at = 0; at < bytes.size(); at += slice_bytes) {
        slices.emplace_back(bytes.data() + at, std::min(slice_bytes, bytes.size() - at));
      }
      grpc::ByteBuffer buffer(slices.data(), slices.size());
      ReceivedNormalizeRequest& received = p.received.emplace_back();
      ASSERT_TRUE(ParseReceivedNormalizeRequest(&buffer, &received).ok());
      message = &received.message;
      plan = ValidateNormalize(received.message, received.tensor_data(), limits_, *store_);
    } else {
      plan = ValidateNormalize(made.request, limits_, *store_);
    }
    ASSERT_TRUE(plan.ok()) << plan.status();
    p.responses.push_back(std::make_unique<v1::NormalizeResponse>());
    p.responses.back()->set_request_id(made.request.request_id());
    std::unique_ptr<Task> task =
        BuildForwardTask(*plan, *message, p.responses.back().get(), absl::InfiniteFuture(), &sink_);
    // Poison the outputs: a result must come from the run.
    PoisonOutputs(*p.responses.back());
    p.batch.rows += task->rows;
    p.batch.input_bytes += task->input_bytes;
    p.batch.output_bytes += task->output_bytes;
    p.batch.staging_bytes += task->staging_bytes;
    p.batch.tasks.push_back(std::move(task));
  }
  static void PoisonOutputs(v1::NormalizeResponse& response) {
    for (v1::Tensor* t : {response.mutable_output(), response.mutable_residual_sum(),
                          response.mutable_mean(), response.mutable_rstd()}) {
      std::fill(t->mutable_data()->begin(), t->mutable_data()->end(), '\x7f');
    }
  }
  void ExpectAllCorrect(const Prepared& p, const BatchResult& result) {
    ASSERT_EQ(result.statuses.size(), p.forward.size());
    for (size_t i = 0; i < p.forward.size(); ++i) {
      ASSERT_TRUE(result.statuses[i].ok()) << result.statuses[i];
      EXPECT_TRUE(CheckForward(p.forward[i].request, p.forward[i].gamma, p.forward[i].beta,
                               *p.responses[i]))
          << p.forward[i].request.ShortDebugString().substr(0, 200);
    }
  }
  Prepared MixedBatch(std::mt19937_64& rng, int tasks, std::size_t slice_bytes = 0) {
    Prepared p;
    for (int i = 0; i < tasks; ++i) {
      ForwardCase c;
      c.op = i % 2 ? NormOp::kRmsNorm : NormOp::kLayerNorm;
      c.dtype = static_cast<DType>(i % 3);
      const int64_t hidden[] = {1, 7, 64, 100, 1024, 4096, 8192};
      c.shape = {1 + i % 4, hidden[i % 7]};
      c.residual = i % 3 == 0;
      c.return_residual_sum = c.residual;
      c.return_statistics = i % 4 == 1;
      c.inline_gamma = i % 2 == 0;
      c.inline_beta = c.op == NormOp::kLayerNorm && i % 4 == 0;
      if (i % 5 == 0) c.output_dtype = DType::kF32;
      Add(p, MakeForwardRequest(rng, c, i), slice_bytes);
    }
    return p;
  }

  RequestLimits limits_;
  NullSink sink_;
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<ParameterStore> store_;
};

TEST_F(GpuExecutorTest, MixedForwardBatchMatchesTheOracle) {
  std::mt19937_64 rng(TestSeed() + 40);
  Prepared p = MixedBatch(rng, 30);
  ASSERT_LE(p.batch.staging_bytes, executor_->max_batch_staging_bytes());  // one round
  const BatchResult result = executor_->Run(p.batch, 0);
  ExpectAllCorrect(p, result);
  ASSERT_TRUE(result.kernel_seconds && result.h2d_seconds && result.d2h_seconds);
  EXPECT_GT(*result.kernel_seconds, 0);
  EXPECT_EQ(result.kernel_bytes, p.batch.input_bytes + p.batch.output_bytes);
}

// With timed_batch_interval 3 the executor times batches 0 and 3 of six;
// every batch is computed and checked alike, timed or not.
TEST_F(GpuExecutorTest, OneBatchInTheIntervalIsTimedAndEveryBatchIsCorrect) {
  GpuExecutorOptions options;
  options.device = 0;
  options.slots = 1;
  options.staging_bytes = 4 << 20;
  options.max_batch_tasks = 256;
  options.timed_batch_interval = 3;
  absl::StatusOr<std::unique_ptr<Executor>> sampled = CreateGpuExecutor(options);
  ASSERT_TRUE(sampled.ok()) << sampled.status();
  std::mt19937_64 rng(TestSeed() + 47);
  for (int run = 0; run < 6; ++run) {
    SCOPED_TRACE(run);
    Prepared p = MixedBatch(rng, 8);
    const BatchResult result = (*sampled)->Run(p.batch, 0);
    ExpectAllCorrect(p, result);
    EXPECT_EQ(result.kernel_bytes, p.batch.input_bytes + p.batch.output_bytes);
    if (run % 3 == 0) {
      ASSERT_TRUE(result.h2d_seconds && result.kernel_seconds && result.d2h_seconds);
      EXPECT_GT(*result.kernel_seconds, 0);
      EXPECT_FALSE(result.stages_untimed);
    } else {
      EXPECT_FALSE(result.h2d_seconds || result.kernel_seconds || result.d2h_seconds);
      EXPECT_TRUE(result.stages_untimed);
    }
  }
}

// max_batch_tasks requests of one configuration: one launch through the
// segment table, which travels in the inputs' copy. First with the queue
// empty behind the batch (the thread spins on the GPU), then with requests
// queued (it sleeps on the end event).
TEST_F(GpuExecutorTest, ManyTasksOfOnePlanShareOneLaunchAndOneCopy) {
  std::mt19937_64 rng(TestSeed() + 45);
  for (bool more_queued : {false, true}) {
    SCOPED_TRACE(more_queued);
    Prepared p;
    for (int i = 0; i < 256; ++i) {
      ForwardCase c;
      c.dtype = DType::kBF16;
      c.shape = {1 + i % 2, 1024};
      c.inline_gamma = true;
      Add(p, MakeForwardRequest(rng, c, i));
    }
    p.batch.more_queued = more_queued;
    ASSERT_LE(p.batch.staging_bytes, executor_->max_batch_staging_bytes());  // one round
    ExpectAllCorrect(p, executor_->Run(p.batch, more_queued ? 1 : 0));
  }
}

TEST_F(GpuExecutorTest, RequestsLargerThanTheStagingBufferRunInRowChunks) {
  std::mt19937_64 rng(TestSeed() + 41);
  ForwardCase c;
  c.shape = {300, 4096};  // 9.4 MiB in, as much out: several rounds of 4 MiB
  c.residual = c.return_residual_sum = c.return_statistics = true;
  c.inline_gamma = c.inline_beta = true;
  Prepared p;
  Add(p, MakeForwardRequest(rng, c, 1));
  ASSERT_GT(p.batch.staging_bytes, executor_->max_batch_staging_bytes());
  ExpectAllCorrect(p, executor_->Run(p.batch, 1));

  // Backward: dgamma/dbeta summed over the chunks.
  v1::NormalizeBackwardRequest request;
  request.set_op(v1::LAYER_NORM);
  *request.mutable_input() = ToProto(RandomTensor(rng, DType::kF32, {200, 2048}));
  *request.mutable_grad_output() = ToProto(RandomTensor(rng, DType::kF32, {200, 2048}, 0.0, 1.0));
  HostTensor gamma = RandomTensor(rng, DType::kF32, {2048}, 1.0, 0.25);
  *request.mutable_parameters()->mutable_inline_()->mutable_gamma() = ToProto(gamma);
  absl::StatusOr<BackwardPlan> plan = ValidateNormalizeBackward(request, limits_, *store_);
  ASSERT_TRUE(plan.ok());
  v1::NormalizeBackwardResponse response;
  Batch batch;
  batch.tasks.push_back(
      BuildBackwardTask(*plan, request, &response, absl::InfiniteFuture(), &sink_));
  batch.staging_bytes = batch.tasks[0]->staging_bytes;
  ASSERT_GT(batch.staging_bytes, executor_->max_batch_staging_bytes());
  const BatchResult result = executor_->Run(batch, 0);
  ASSERT_TRUE(result.statuses.at(0).ok()) << result.statuses[0];
  EXPECT_TRUE(CheckBackward(request, gamma.values, response));
}

// The unary call's requests: tensors split over slices (a prime slice size,
// so they are misaligned too), copied piecewise into staging; one batch of
// mixed requests, then one request larger than staging, in row chunks.
TEST_F(GpuExecutorTest, TensorsReceivedInPiecesMatchTheOracle) {
  std::mt19937_64 rng(TestSeed() + 43);
  Prepared p = MixedBatch(rng, 30, /*slice_bytes=*/4099);
  int split = 0;
  for (const auto& task : p.batch.tasks) {
    split += task->received.x != nullptr && !task->received.x->contiguous() ? 1 : 0;
  }
  EXPECT_GT(split, 3);
  ExpectAllCorrect(p, executor_->Run(p.batch, 0));

  ForwardCase c;
  c.shape = {300, 4096};
  c.residual = c.return_residual_sum = c.return_statistics = true;
  c.inline_gamma = c.inline_beta = true;
  Prepared large;
  Add(large, MakeForwardRequest(rng, c, 1), /*slice_bytes=*/16381);
  ASSERT_GT(large.batch.staging_bytes, executor_->max_batch_staging_bytes());
  ExpectAllCorrect(large, executor_->Run(large.batch, 1));
}

TEST_F(GpuExecutorTest, RegisteredParametersAreReadFromDeviceMemory) {
  std::mt19937_64 rng(TestSeed() + 42);
  HostTensor gamma = RandomTensor(rng, DType::kF16, {768}, 1.0, 0.25);
  HostTensor beta = RandomTensor(rng, DType::kF16, {768}, 0.0, 0.5);
  ASSERT_TRUE(store_->Register("ln", 768, DType::kF16, gamma.bytes, beta.bytes, false).ok());
  ForwardCase c;
  c.dtype = DType::kF16;
  c.shape = {5, 768};
  ForwardRequest made = MakeForwardRequest(rng, c, 3);
  made.request.mutable_parameters()->set_name("ln");
  made.gamma = gamma.values;
  made.beta = beta.values;
  Prepared p;
  Add(p, std::move(made));
  ExpectAllCorrect(p, executor_->Run(p.batch, 0));
}

TEST_F(GpuExecutorTest, TwoSlotsRunBatchesConcurrently) {
  std::vector<std::thread> threads;
  for (int slot = 0; slot < 2; ++slot) {
    threads.emplace_back([&, slot] {
      std::mt19937_64 rng(TestSeed() + 43 + slot);
      for (int round = 0; round < 10; ++round) {
        Prepared p = MixedBatch(rng, 12);
        ExpectAllCorrect(p, executor_->Run(p.batch, slot));
      }
    });
  }
  for (auto& thread : threads) thread.join();
}

TEST_F(GpuExecutorTest, InjectedCudaErrorFailsOneBatchAndTheExecutorKeepsServing) {
  std::mt19937_64 rng(TestSeed() + 44);
  ASSERT_TRUE(InjectGpuFaultForNextBatch(*executor_).ok());
  Prepared failed = MixedBatch(rng, 5);
  const BatchResult result = executor_->Run(failed.batch, 0);
  ASSERT_EQ(result.statuses.size(), 5u);
  for (const absl::Status& status : result.statuses) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
    EXPECT_NE(status.message().find("cuda:0"), absl::string_view::npos) << status;
  }
  EXPECT_TRUE(executor_->healthy());
  for (int slot = 0; slot < 2; ++slot) {
    Prepared p = MixedBatch(rng, 8);
    ExpectAllCorrect(p, executor_->Run(p.batch, slot));
  }
}

// Taken out of service (as the stuck-batch watch does for a hung device):
// no more uploads, and memory uploaded before is left alone when its set is
// dropped (freeing would wait for the device).
TEST_F(GpuExecutorTest, AnExecutorTakenOutOfServiceRefusesUploadsAndFreesNothing) {
  std::mt19937_64 rng(TestSeed() + 45);
  HostTensor gamma = RandomTensor(rng, DType::kF32, {256}, 1.0, 0.25);
  absl::StatusOr<DeviceBuffer> held = executor_->Upload(gamma.bytes.data(), gamma.bytes.size());
  ASSERT_TRUE(held.ok()) << held.status();
  executor_->TakeOutOfService();
  EXPECT_FALSE(executor_->in_service());
  EXPECT_TRUE(executor_->healthy());  // the device reported no error itself
  absl::StatusOr<DeviceBuffer> refused = executor_->Upload(gamma.bytes.data(), gamma.bytes.size());
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();
  EXPECT_NE(refused.status().message().find("cuda:0"), std::string::npos) << refused.status();
  held->reset();  // the deleter returns without cudaFree; nothing to observe but no hang
}

// A parameter set the device has no memory for is RESOURCE_EXHAUSTED (the
// client can free sets and retry), not INTERNAL, and the executor serves on:
// uploads and batches after it work.
TEST_F(GpuExecutorTest, AnUploadPastTheDevicesMemoryIsResourceExhaustedAndServingGoesOn) {
  std::mt19937_64 rng(TestSeed() + 46);
  HostTensor gamma = RandomTensor(rng, DType::kF32, {256}, 1.0, 0.25);
  // cudaMalloc fails before any byte is read: the host buffer may be small.
  const std::size_t past_memory = std::size_t{1} << 46;  // 64 TiB
  absl::StatusOr<DeviceBuffer> refused = executor_->Upload(gamma.bytes.data(), past_memory);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_NE(refused.status().message().find("cuda:0"), std::string::npos) << refused.status();
  EXPECT_TRUE(executor_->in_service());
  EXPECT_TRUE(executor_->healthy());
  absl::StatusOr<DeviceBuffer> held = executor_->Upload(gamma.bytes.data(), gamma.bytes.size());
  ASSERT_TRUE(held.ok()) << held.status();
  Prepared p = MixedBatch(rng, 6);
  ExpectAllCorrect(p, executor_->Run(p.batch, 0));
}

TEST_F(GpuExecutorTest, EachSlotHoldsTheBackwardWorkspaceFromStart) {
  const DeviceDescription& d = executor_->device();
  const GpuExecutorOptions defaults;
  EXPECT_EQ(d.backward_workspace_bytes,
            BackwardWorkspaceBound(4 << 20, defaults.max_hidden, defaults.max_request_rows));
  EXPECT_GT(d.backward_workspace_bytes, 0);
  // Two slots, each its staging buffer, its segment table and its workspace.
  EXPECT_GT(d.device_buffer_bytes, 2 * ((int64_t{4} << 20) + d.backward_workspace_bytes));
}

// Every chunk of a backward request the edge's limits allow fits the bound:
// H up to max_hidden, rows up to what one chunk of x, dy and dx (2 bytes an
// element or more) can hold in the staging buffer. Host code: runs without
// a GPU wherever the GPU backend is built.
TEST(GpuBackendTest, BackwardWorkspaceBoundHoldsEveryChunkTheLimitsAllow) {
  if (!GpuBackendCompiled()) GTEST_SKIP() << "this build has no CUDA backend";
  constexpr int64_t kStaging = int64_t{4} << 20;
  constexpr int64_t kMaxHidden = 65536;
  const int64_t bound = BackwardWorkspaceBound(kStaging, kMaxHidden, int64_t{1} << 20);
  std::mt19937_64 rng(TestSeed() + 41);
  std::vector<int64_t> sizes = {1, 2, 5, 64, 257, 768, 2049, 4096, 8191, 32768, 65535, 65536};
  for (int i = 0; i < 400; ++i) sizes.push_back(1 + static_cast<int64_t>(rng() % kMaxHidden));
  for (int64_t hidden : sizes) {
    const int64_t most_rows = kStaging / (6 * hidden);
    ASSERT_GT(most_rows, 0);
    for (int64_t rows : {int64_t{1}, most_rows, 1 + static_cast<int64_t>(rng() % most_rows)}) {
      ASSERT_LE(BackwardChunkWorkspaceBytes(rows, hidden), bound)
          << "H " << hidden << " rows " << rows;
    }
  }
  // Not far above what the chunks need: a unit is at most a row, plus the
  // offset classes (at most 8), two rows of H floats each.
  EXPECT_LE(bound, 8 * (kStaging / 6 + 8 * kMaxHidden) + 256);
  // Requests of one row: one unit, dgamma's and dbeta's partials of the
  // longest row.
  EXPECT_EQ(BackwardWorkspaceBound(kStaging, kMaxHidden, 1), 2 * kMaxHidden * 4);
}

TEST(GpuBackendTest, FaultInjectionNeedsAGpuExecutor) {
  class NotGpu final : public Executor {
   public:
    const DeviceDescription& device() const override { return device_; }
    int slots() const override { return 1; }
    int64_t max_batch_staging_bytes() const override { return 0; }
    BatchResult Run(const Batch&, int) override { return {}; }
    absl::StatusOr<DeviceBuffer> Upload(const void*, std::size_t) override { return nullptr; }
    bool healthy() const override { return true; }
    DeviceDescription device_;
  } executor;
  EXPECT_EQ(InjectGpuFaultForNextBatch(executor).code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace normsvc::server::testing
