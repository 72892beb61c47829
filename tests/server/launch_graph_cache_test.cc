// The GPU executor's cache of replayable rounds, without a GPU: when a key
// is captured, what is replayed, what is evicted and destroyed (each handle
// exactly once), and that the round key tells apart any two segment lists
// that differ in one field.
#include "server/launch_graph_cache.h"

#include <map>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "test_support.h"

namespace normsvc::server::testing {
namespace {

// Handles are distinct addresses in `storage`; destroyed ones are counted.
class Handles {
 public:
  LaunchGraphCache::Handle Make() { return &storage_.at(next_++); }
  LaunchGraphCache::Destroy Destroyer() {
    return [this](LaunchGraphCache::Handle h) { ++destroyed_[h]; };
  }
  int DestroyedTimes(LaunchGraphCache::Handle h) const {
    auto it = destroyed_.find(h);
    return it == destroyed_.end() ? 0 : it->second;
  }
  int Destroyed() const {
    int n = 0;
    for (const auto& [h, times] : destroyed_) n += times;
    return n;
  }

 private:
  std::vector<char> storage_ = std::vector<char>(64);
  int next_ = 0;
  std::map<LaunchGraphCache::Handle, int> destroyed_;
};

TEST(LaunchGraphCacheTest, CapturesOnTheSecondSightingAndReplaysAfter) {
  Handles handles;
  LaunchGraphCache cache(4, 2, handles.Destroyer());
  bool capture = true;
  EXPECT_EQ(cache.Lookup("a", &capture), nullptr);
  EXPECT_FALSE(capture) << "a layout seen once is not captured";
  EXPECT_EQ(cache.Lookup("a", &capture), nullptr);
  EXPECT_TRUE(capture);
  const LaunchGraphCache::Handle a = handles.Make();
  cache.Insert("a", a);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(cache.Lookup("a", &capture), a);
    EXPECT_FALSE(capture);
  }
  EXPECT_EQ(cache.Lookup("b", &capture), nullptr);
  EXPECT_FALSE(capture);
  EXPECT_EQ(cache.graphs(), 1);
  EXPECT_EQ(handles.Destroyed(), 0);
}

TEST(LaunchGraphCacheTest, EvictsTheLeastRecentlyUsedAndDestroysEachGraphOnce) {
  Handles handles;
  std::vector<LaunchGraphCache::Handle> made;
  {
    LaunchGraphCache cache(3, 1, handles.Destroyer());
    bool capture = false;
    for (const char* key : {"a", "b", "c"}) {
      EXPECT_EQ(cache.Lookup(key, &capture), nullptr);
      ASSERT_TRUE(capture) << key;
      made.push_back(handles.Make());
      cache.Insert(key, made.back());
    }
    EXPECT_EQ(cache.Lookup("a", &capture), made[0]);  // "b" is now the oldest
    EXPECT_EQ(cache.Lookup("d", &capture), nullptr);  // evicts "b"
    EXPECT_EQ(handles.DestroyedTimes(made[1]), 1);
    EXPECT_EQ(handles.Destroyed(), 1);
    EXPECT_EQ(cache.Lookup("c", &capture), made[2]);
    EXPECT_EQ(cache.Lookup("a", &capture), made[0]);
    // "b" was evicted: counted again from its first sighting, it takes the
    // place of the least recently used key, "d" (which holds no graph).
    EXPECT_EQ(cache.Lookup("b", &capture), nullptr);
    EXPECT_TRUE(capture);
    EXPECT_EQ(cache.graphs(), 2);  // "a" and "c"
    EXPECT_EQ(handles.DestroyedTimes(made[2]), 0);
    EXPECT_EQ(handles.Destroyed(), 1);
  }
  // The destructor destroys the graphs still held, "a" and "c".
  EXPECT_EQ(handles.DestroyedTimes(made[0]), 1);
  EXPECT_EQ(handles.DestroyedTimes(made[1]), 1);
  EXPECT_EQ(handles.DestroyedTimes(made[2]), 1);
  EXPECT_EQ(handles.Destroyed(), 3);
}

// Layouts seen once make way for each other, not for a captured graph, even
// an older one.
TEST(LaunchGraphCacheTest, KeysBeingCountedAreDroppedBeforeGraphs) {
  Handles handles;
  LaunchGraphCache cache(3, 2, handles.Destroyer());
  bool capture = false;
  cache.Lookup("steady", &capture);
  cache.Lookup("steady", &capture);
  ASSERT_TRUE(capture);
  const LaunchGraphCache::Handle steady = handles.Make();
  cache.Insert("steady", steady);
  for (const char* once : {"x", "y", "z", "w", "v"}) {
    EXPECT_EQ(cache.Lookup(once, &capture), nullptr);
    EXPECT_FALSE(capture) << once;
  }
  EXPECT_EQ(cache.Lookup("steady", &capture), steady);
  EXPECT_EQ(handles.Destroyed(), 0);
  // Kept now: "steady", "w" and "v". "z" was dropped, so seen again it
  // counts from one (and takes the place of "w", the older of the two).
  EXPECT_EQ(cache.Lookup("z", &capture), nullptr);
  EXPECT_FALSE(capture);
  EXPECT_EQ(cache.Lookup("v", &capture), nullptr);
  EXPECT_TRUE(capture) << "kept: its second sighting";
  EXPECT_EQ(cache.graphs(), 1);
}

TEST(LaunchGraphCacheTest, AKeyThatFailedToCaptureIsNotRetriedWhileKept) {
  Handles handles;
  LaunchGraphCache cache(4, 1, handles.Destroyer());
  bool capture = false;
  EXPECT_EQ(cache.Lookup("a", &capture), nullptr);
  ASSERT_TRUE(capture);
  cache.MarkUncapturable("a");
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(cache.Lookup("a", &capture), nullptr);
    EXPECT_FALSE(capture);
  }
  EXPECT_EQ(cache.graphs(), 0);
}

kernels::ForwardSegment RandomSegment(std::mt19937_64& rng) {
  auto pointer = [&rng] { return reinterpret_cast<void*>((rng() & 0xffffff) * 256 + 256); };
  kernels::ForwardSegment s;
  s.op = rng() & 1 ? kernels::NormOp::kLayerNorm : kernels::NormOp::kRmsNorm;
  s.x_dtype = static_cast<kernels::DType>(rng() % 3);
  s.out_dtype = static_cast<kernels::DType>(rng() % 3);
  s.param_dtype = static_cast<kernels::DType>(rng() % 3);
  s.rows = 1 + static_cast<int64_t>(rng() % 1000);
  s.hidden = 1 + static_cast<int64_t>(rng() % 65536);
  s.epsilon = 1e-6f * static_cast<float>(1 + rng() % 100);
  s.x = pointer();
  s.x_row_stride = s.hidden + static_cast<int64_t>(rng() % 8);
  s.residual = pointer();
  s.residual_row_stride = s.hidden + static_cast<int64_t>(rng() % 8);
  s.residual_out = pointer();
  s.residual_out_row_stride = s.hidden + static_cast<int64_t>(rng() % 8);
  s.gamma = pointer();
  s.beta = pointer();
  s.out = pointer();
  s.out_row_stride = s.hidden + static_cast<int64_t>(rng() % 8);
  s.mean = static_cast<float*>(pointer());
  s.rstd = static_cast<float*>(pointer());
  return s;
}

// Every field of every segment, and each staging size, changes the key; the
// same inputs give the same key.
TEST(LaunchGraphCacheTest, RoundKeysDifferInAnyFieldOfAnySegment) {
  std::mt19937_64 rng(TestSeed() + 7);
  using Mutation = void (*)(kernels::ForwardSegment&);
  const std::vector<Mutation> mutations = {
      [](kernels::ForwardSegment& s) {
        s.op = s.op == kernels::NormOp::kLayerNorm ? kernels::NormOp::kRmsNorm
                                                   : kernels::NormOp::kLayerNorm;
      },
      [](kernels::ForwardSegment& s) {
        s.x_dtype = static_cast<kernels::DType>((static_cast<int>(s.x_dtype) + 1) % 3);
      },
      [](kernels::ForwardSegment& s) {
        s.out_dtype = static_cast<kernels::DType>((static_cast<int>(s.out_dtype) + 1) % 3);
      },
      [](kernels::ForwardSegment& s) {
        s.param_dtype = static_cast<kernels::DType>((static_cast<int>(s.param_dtype) + 1) % 3);
      },
      [](kernels::ForwardSegment& s) { ++s.rows; },
      [](kernels::ForwardSegment& s) { ++s.hidden; },
      [](kernels::ForwardSegment& s) { s.epsilon *= 2; },
      [](kernels::ForwardSegment& s) { s.x = static_cast<const char*>(s.x) + 16; },
      [](kernels::ForwardSegment& s) { ++s.x_row_stride; },
      [](kernels::ForwardSegment& s) { s.residual = nullptr; },
      [](kernels::ForwardSegment& s) { ++s.residual_row_stride; },
      [](kernels::ForwardSegment& s) { s.residual_out = nullptr; },
      [](kernels::ForwardSegment& s) { ++s.residual_out_row_stride; },
      [](kernels::ForwardSegment& s) { s.gamma = static_cast<const char*>(s.gamma) + 256; },
      [](kernels::ForwardSegment& s) { s.beta = nullptr; },
      [](kernels::ForwardSegment& s) { s.out = static_cast<char*>(s.out) + 16; },
      [](kernels::ForwardSegment& s) { ++s.out_row_stride; },
      [](kernels::ForwardSegment& s) { s.mean = nullptr; },
      [](kernels::ForwardSegment& s) { s.rstd = nullptr; },
  };
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<kernels::ForwardSegment> segments;
    for (int i = 0, n = 1 + static_cast<int>(rng() % 5); i < n; ++i) {
      segments.push_back(RandomSegment(rng));
    }
    const std::string key = ForwardRoundKey(segments, 256, 4096, 8192);
    EXPECT_EQ(key,
              ForwardRoundKey(std::vector<kernels::ForwardSegment>(segments), 256, 4096, 8192));
    EXPECT_NE(key, ForwardRoundKey(segments, 0, 4096, 8192));
    EXPECT_NE(key, ForwardRoundKey(segments, 256, 4112, 8192));
    EXPECT_NE(key, ForwardRoundKey(segments, 256, 4096, 8208));
    EXPECT_NE(key,
              ForwardRoundKey(std::span(segments).first(segments.size() - 1), 256, 4096, 8192));
    for (std::size_t m = 0; m < mutations.size(); ++m) {
      std::vector<kernels::ForwardSegment> changed = segments;
      const std::size_t which = rng() % changed.size();
      mutations[m](changed[which]);
      EXPECT_NE(key, ForwardRoundKey(changed, 256, 4096, 8192))
          << "field " << m << " of segment " << which;
    }
  }
}

}  // namespace
}  // namespace normsvc::server::testing
