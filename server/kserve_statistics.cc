#include "server/kserve_statistics.h"

namespace normsvc::server {
namespace {

// Per-batch-size entries kept per model; sizes beyond are counted in the
// totals only, so a client sending many distinct row counts cannot grow
// the server's memory without bound.
constexpr size_t kMaxBatchSizes = 256;

uint64_t Nanos(absl::Duration d) { return static_cast<uint64_t>(absl::ToInt64Nanoseconds(d)); }

}  // namespace

void KserveStatistics::Record(const std::string& model, const KserveInferTiming& timing) {
  auto add = [](Duration& d, absl::Duration value) {
    ++d.count;
    d.ns += Nanos(value);
  };
  absl::MutexLock lock(&mutex_);
  Model& m = models_[model];
  m.last_inference_ms = static_cast<uint64_t>(absl::ToUnixMillis(timing.finished_at));
  if (!timing.ok) {
    add(m.fail, timing.total);
    return;
  }
  add(m.success, timing.total);
  add(m.queue, timing.infer);
  add(m.input, timing.input);
  add(m.infer, timing.infer);
  add(m.output, timing.output);
  m.inference_count += static_cast<uint64_t>(timing.rows);
  ++m.execution_count;
  auto it = m.batch.find(timing.rows);
  if (it == m.batch.end() && m.batch.size() < kMaxBatchSizes) {
    it = m.batch.emplace(timing.rows, BatchSize{}).first;
  }
  if (it != m.batch.end()) {
    add(it->second.input, timing.input);
    add(it->second.infer, timing.infer);
    add(it->second.output, timing.output);
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
