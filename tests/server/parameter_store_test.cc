// ParameterStore::Register across executors: a set gets a copy on every
// healthy executor, an executor out of service gets none (and does not fail
// the registration), a healthy executor's upload error fails it, and with
// no healthy executor it is UNAVAILABLE. And --max_parameter_bytes counts
// the sets still in memory, replaced or deleted ones that requests hold
// included.
#include "server/parameter_store.h"

#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace normsvc::server {
namespace {

// Uploads to host memory, or fails like a device with an error; healthy()
// as the test sets it.
class HostUploadExecutor final : public Executor {
 public:
  const DeviceDescription& device() const override { return device_; }
  int slots() const override { return 1; }
  int64_t max_batch_staging_bytes() const override { return 0; }
  BatchResult Run(const Batch&, int) override { return {}; }
  absl::StatusOr<DeviceBuffer> Upload(const void* host, std::size_t bytes) override {
    ++uploads;
    if (fail_uploads) {
      if (unhealthy_on_failure) healthy_flag = false;
      return absl::InternalError("cuda:9: cudaMalloc: an illegal memory access");
    }
    void* copy = std::malloc(bytes);
    std::memcpy(copy, host, bytes);
    return DeviceBuffer(copy, [frees = frees](void* p) {
      std::free(p);
      ++*frees;
    });
  }
  bool healthy() const override { return healthy_flag; }

  bool fail_uploads = false;
  bool unhealthy_on_failure = false;
  bool healthy_flag = true;
  int uploads = 0;
  // Buffers freed so far (shared with their deleters, which may outlive
  // nothing here but need not know that).
  std::shared_ptr<int> frees = std::make_shared<int>(0);

 private:
  DeviceDescription device_;
};

std::string RandomFloats(int count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(0.5f, 1.5f);
  std::string bytes(count * sizeof(float), '\0');
  for (int i = 0; i < count; ++i) {
    const float v = dist(rng);
    std::memcpy(bytes.data() + i * sizeof(float), &v, sizeof(float));
  }
  return bytes;
}

class ParameterStoreTest : public ::testing::Test {
 protected:
  HostUploadExecutor executors_[3];
  ParameterStore store_{ParameterLimits{}, {&executors_[0], &executors_[1], &executors_[2]}};
  const std::string gamma_ = RandomFloats(64, std::random_device{}());
  const std::string beta_ = RandomFloats(64, std::random_device{}());

  absl::StatusOr<std::shared_ptr<const ParameterSet>> Register(const std::string& name) {
    return store_.Register(name, 64, kernels::DType::kF32, gamma_, beta_, /*replace=*/false);
  }
};

TEST_F(ParameterStoreTest, AnExecutorOutOfServiceGetsNoCopyAndDoesNotFailTheRegistration) {
  executors_[1].healthy_flag = false;
  executors_[1].fail_uploads = true;  // as a device with a sticky error would
  absl::StatusOr<std::shared_ptr<const ParameterSet>> set = Register("ln0");
  ASSERT_TRUE(set.ok()) << set.status();
  for (int i : {0, 2}) {
    ASSERT_NE((*set)->gamma(i), nullptr) << i;
    ASSERT_NE((*set)->beta(i), nullptr) << i;
    EXPECT_EQ(std::memcmp((*set)->gamma(i), gamma_.data(), gamma_.size()), 0) << i;
    EXPECT_EQ(std::memcmp((*set)->beta(i), beta_.data(), beta_.size()), 0) << i;
  }
  EXPECT_EQ((*set)->gamma(1), nullptr);
  EXPECT_EQ((*set)->beta(1), nullptr);
  EXPECT_EQ(executors_[1].uploads, 0);  // not even tried
  EXPECT_EQ(store_.Find("ln0"), *set);
}

TEST_F(ParameterStoreTest, AnExecutorThatGoesOutOfServiceWhileUploadingIsSkipped) {
  // Its upload hits the unrecoverable error that takes it out of service.
  executors_[2].fail_uploads = true;
  executors_[2].unhealthy_on_failure = true;
  absl::StatusOr<std::shared_ptr<const ParameterSet>> set = Register("ln1");
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_NE((*set)->gamma(0), nullptr);
  EXPECT_NE((*set)->gamma(1), nullptr);
  EXPECT_EQ((*set)->gamma(2), nullptr);
  EXPECT_EQ((*set)->beta(2), nullptr);
}

TEST_F(ParameterStoreTest, AHealthyExecutorsUploadErrorFailsTheRegistration) {
  executors_[2].fail_uploads = true;  // and it stays in service
  absl::StatusOr<std::shared_ptr<const ParameterSet>> refused = Register("ln1");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInternal) << refused.status();
  EXPECT_NE(refused.status().message().find("cuda:9"), std::string::npos);
  EXPECT_EQ(store_.Find("ln1"), nullptr);
  EXPECT_TRUE(store_.List().empty());
}

// An executor the stuck-batch watch took out of service (its device looks
// hung) stays healthy() by its own account, yet gets no upload: one would
// block the control thread on the hung device for good.
TEST_F(ParameterStoreTest, AnExecutorTakenOutOfServiceGetsNoUpload) {
  executors_[0].TakeOutOfService();
  absl::StatusOr<std::shared_ptr<const ParameterSet>> set = Register("hung0");
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(executors_[0].uploads, 0);
  EXPECT_EQ((*set)->gamma(0), nullptr);
  EXPECT_EQ((*set)->beta(0), nullptr);
  for (int i : {1, 2}) {
    ASSERT_NE((*set)->gamma(i), nullptr) << i;
    EXPECT_EQ(std::memcmp((*set)->gamma(i), gamma_.data(), gamma_.size()), 0) << i;
    EXPECT_EQ(executors_[i].uploads, 2) << i;  // gamma and beta
  }

  executors_[1].TakeOutOfService();
  executors_[2].TakeOutOfService();
  absl::StatusOr<std::shared_ptr<const ParameterSet>> refused = Register("hung1");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();
  EXPECT_NE(refused.status().message().find("--batch_timeout_s"), std::string::npos)
      << refused.status();
  EXPECT_EQ(executors_[1].uploads, 2);  // only the first registration's
  EXPECT_EQ(executors_[2].uploads, 2);
  EXPECT_EQ(store_.Find("hung1"), nullptr);
}

TEST_F(ParameterStoreTest, NoHealthyExecutorIsUnavailable) {
  for (HostUploadExecutor& executor : executors_) executor.healthy_flag = false;
  absl::StatusOr<std::shared_ptr<const ParameterSet>> set = Register("ln2");
  ASSERT_FALSE(set.ok());
  EXPECT_EQ(set.status().code(), absl::StatusCode::kUnavailable) << set.status();
  EXPECT_EQ(store_.Find("ln2"), nullptr);
}

// --max_parameter_bytes bounds the sets in memory: a set replaced or deleted
// while a queued request still holds it counts until that request lets go.
TEST(ParameterStoreLimitTest, SetsStillHeldAfterReplaceOrDeleteCountAgainstTheLimit) {
  HostUploadExecutor executor;
  constexpr int64_t kSetBytes = 2 * 256 * sizeof(float);  // gamma and beta of H = 256
  ParameterStore store(ParameterLimits{16, 3 * kSetBytes}, {&executor});
  uint64_t seed = std::random_device{}();
  auto register_set = [&](const std::string& name, bool replace) {
    const std::string gamma = RandomFloats(256, ++seed);
    const std::string beta = RandomFloats(256, ++seed);
    return store.Register(name, 256, kernels::DType::kF32, gamma, beta, replace);
  };
  ASSERT_TRUE(register_set("a", false).ok());
  ASSERT_TRUE(register_set("b", false).ok());
  EXPECT_EQ(store.live_bytes(), 2 * kSetBytes);

  // Nothing holds "a": replacing it needs no room beyond its own, again and again.
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(register_set("a", true).ok()) << i;
  EXPECT_EQ(store.live_bytes(), 2 * kSetBytes);

  // A request holds "a" (as a queued task does) while it is replaced: the
  // old copy stays in memory and counts.
  std::shared_ptr<const ParameterSet> held = store.Find("a");
  ASSERT_NE(held, nullptr);
  ASSERT_TRUE(register_set("a", true).ok());
  EXPECT_EQ(store.total_bytes(), 2 * kSetBytes);
  EXPECT_EQ(store.live_bytes(), 3 * kSetBytes);
  absl::StatusOr<std::shared_ptr<const ParameterSet>> refused = register_set("c", false);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_NE(refused.status().message().find("still use"), std::string::npos) << refused.status();

  // Deleting "b" while it is held frees nothing yet either.
  std::shared_ptr<const ParameterSet> held_b = store.Find("b");
  ASSERT_TRUE(store.Delete("b").ok());
  EXPECT_EQ(store.live_bytes(), 3 * kSetBytes);
  EXPECT_EQ(register_set("c", false).status().code(), absl::StatusCode::kResourceExhausted);

  // The requests end: their copies go, and the room comes back.
  held.reset();
  held_b.reset();
  EXPECT_EQ(store.live_bytes(), kSetBytes);
  ASSERT_TRUE(register_set("c", false).ok());
  ASSERT_TRUE(register_set("d", false).ok());
  EXPECT_EQ(store.live_bytes(), 3 * kSetBytes);
}

// A set freed by whoever held it last (an RPC handler refusing a request,
// say) is freed on the thread the store hands it to, never in that holder:
// freeing device memory waits for the device. When that thread refuses the
// job (stopped, full), the holder frees it itself.
TEST(ParameterStoreReleaseTest, TheLastHolderHandsTheFreeingToAnotherThread) {
  HostUploadExecutor executor;
  std::vector<std::function<void()>> handed;
  bool accept = true;
  ParameterStore store(ParameterLimits{}, {&executor}, [&](std::function<void()> job) {
    if (!accept) return false;
    handed.push_back(std::move(job));
    return true;
  });
  const std::string gamma = RandomFloats(64, std::random_device{}());
  ASSERT_TRUE(store.Register("a", 64, kernels::DType::kF32, gamma, "", false).ok());
  std::shared_ptr<const ParameterSet> held = store.Find("a");
  ASSERT_NE(held, nullptr);
  ASSERT_TRUE(store.Delete("a").ok());
  EXPECT_TRUE(handed.empty());  // the request still holds it
  held.reset();                 // the request ends here, in "its handler"
  EXPECT_EQ(*executor.frees, 0);
  ASSERT_EQ(handed.size(), 1u);
  EXPECT_EQ(store.live_bytes(), 64 * 4);  // counted until actually freed
  handed.front()();                       // the other thread's turn
  EXPECT_EQ(*executor.frees, 1);
  EXPECT_EQ(store.live_bytes(), 0);

  accept = false;
  ASSERT_TRUE(store.Register("b", 64, kernels::DType::kF32, gamma, "", false).ok());
  ASSERT_TRUE(store.Delete("b").ok());  // nothing else holds it: freed here
  EXPECT_EQ(*executor.frees, 2);
  EXPECT_EQ(handed.size(), 1u);
}

}  // namespace
}  // namespace normsvc::server
