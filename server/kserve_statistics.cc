#include "server/kserve_statistics.h"

#include <algorithm>

namespace normsvc::server {
namespace {

// Per-batch-size entries kept per model; sizes beyond are counted in the
// totals only, so a client sending many distinct row counts cannot grow
// the server's memory without bound.
constexpr size_t kMaxBatchSizes = 256;

// Entries kept before the first sweep of models that are gone
// (KserveStatistics::Record).
constexpr size_t kMinSweepModels = 64;

// Wall-clock instants may step backwards; a negative interval counts as 0.
absl::Duration NonNegative(absl::Duration d) { return std::max(d, absl::ZeroDuration()); }

uint64_t Nanos(absl::Duration d) {
  return static_cast<uint64_t>(absl::ToInt64Nanoseconds(NonNegative(d)));
}

// A batch's run split into its copies and the rest; the three add up to
// the run's wall time (stage timings clipped to it). A batch whose stages
// were not timed is split in the given shares (those of its model's last
// timed batch).
struct RunSplit {
  absl::Duration h2d, infer, d2h;
};

RunSplit SplitRun(const BatchExecution& execution, double h2d_share, double d2h_share) {
  const absl::Duration run = NonNegative(execution.finished_at - execution.started_at);
  RunSplit split;
  if (execution.stages_untimed) {
    split.h2d = run * h2d_share;
    split.d2h = std::min(run * d2h_share, run - split.h2d);
  } else {
    auto stage = [](const std::optional<double>& seconds, absl::Duration limit) {
      if (!seconds || !(*seconds > 0)) return absl::ZeroDuration();
      return std::min(absl::Seconds(*seconds), limit);
    };
    split.h2d = stage(execution.h2d_seconds, run);
    split.d2h = stage(execution.d2h_seconds, run - split.h2d);
  }
  split.infer = run - split.h2d - split.d2h;
  return split;
}

}  // namespace

bool KserveStatistics::RecentExecutions::Add(uint64_t id) {
  if (std::find(ids.begin(), ids.end(), id) != ids.end()) return false;
  ids[next] = id;
  next = (next + 1) % ids.size();
  return true;
}

KserveStatistics::Model& KserveStatistics::EntryOf(const std::string& model,
                                                   const ModelExists& model_exists) {
  if (const auto found = models_.find(model); found != models_.end()) return found->second;
  if (models_.size() >= std::max(sweep_at_, kMinSweepModels)) {
    for (auto it = models_.begin(); it != models_.end();) {
      // flat_hash_map's erase(iterator) leaves the other iterators valid.
      if (model_exists(it->first)) {
        ++it;
      } else {
        models_.erase(it++);
      }
    }
    sweep_at_ = 2 * models_.size();
  }
  return models_[model];
}

size_t KserveStatistics::ModelCount() const {
  absl::MutexLock lock(&mutex_);
  return models_.size();
}

void KserveStatistics::Record(const std::string& model, const KserveInferTiming& timing,
                              const ModelExists& model_exists) {
  auto add = [](Duration& d, absl::Duration value) {
    ++d.count;
    d.ns += Nanos(value);
  };
  const absl::Duration total = timing.replied - timing.received;
  absl::MutexLock lock(&mutex_);
  Model& m = EntryOf(model, model_exists);
  m.last_inference_ms = static_cast<uint64_t>(absl::ToUnixMillis(timing.replied));
  if (!timing.ok) {
    add(m.fail, total);
    return;
  }
  add(m.success, total);
  m.inference_count += static_cast<uint64_t>(timing.rows);
  const absl::Duration handler = timing.accepted - timing.received;
  const absl::Duration reply = timing.replied - timing.completed;
  if (!timing.execution) {
    add(m.queue, absl::ZeroDuration());
    add(m.input, handler);
    add(m.infer, absl::ZeroDuration());
    add(m.output, reply);
    return;
  }
  const BatchExecution& execution = *timing.execution;
  const RunSplit split = SplitRun(execution, m.h2d_share, m.d2h_share);
  const absl::Duration run = split.h2d + split.infer + split.d2h;  // the run's wall time
  if (execution.h2d_seconds && run > absl::ZeroDuration()) {       // a timed batch with copies
    m.h2d_share = absl::FDivDuration(split.h2d, run);
    m.d2h_share = absl::FDivDuration(split.d2h, run);
  }
  add(m.queue, execution.started_at - timing.accepted);
  add(m.input, NonNegative(handler) + split.h2d);
  add(m.infer, split.infer);
  add(m.output, split.d2h + NonNegative(reply));
  // The batch's own figures, once per batch (the first of its requests).
  if (!m.recent.Add(execution.id)) return;
  ++m.execution_count;
  auto it = m.batch.find(execution.rows);
  if (it == m.batch.end() && m.batch.size() < kMaxBatchSizes) {
    it = m.batch.emplace(execution.rows, BatchSize{}).first;
  }
  if (it != m.batch.end()) {
    add(it->second.input, split.h2d);
    add(it->second.infer, split.infer);
    add(it->second.output, split.d2h);
  }
}

void KserveStatistics::Fill(const std::string& model, inference::ModelStatistics* out) const {
  auto put = [](const Duration& d, inference::StatisticDuration* p) {
    p->set_count(d.count);
    p->set_ns(d.ns);
  };
  out->set_name(model);
  out->set_version("1");
  absl::MutexLock lock(&mutex_);
  const auto found = models_.find(model);
  if (found == models_.end()) return;
  const Model& m = found->second;
  out->set_last_inference(m.last_inference_ms);
  out->set_inference_count(m.inference_count);
  out->set_execution_count(m.execution_count);
  auto* stats = out->mutable_inference_stats();
  put(m.success, stats->mutable_success());
  put(m.fail, stats->mutable_fail());
  put(m.queue, stats->mutable_queue());
  put(m.input, stats->mutable_compute_input());
  put(m.infer, stats->mutable_compute_infer());
  put(m.output, stats->mutable_compute_output());
  for (const auto& [size, batch] : m.batch) {
    auto* b = out->add_batch_stats();
    b->set_batch_size(static_cast<uint64_t>(size));
    put(batch.input, b->mutable_compute_input());
    put(batch.infer, b->mutable_compute_infer());
    put(batch.output, b->mutable_compute_output());
  }
}

}  // namespace normsvc::server
