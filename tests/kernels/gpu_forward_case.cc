#include "gpu_forward_case.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <sstream>

#include "normsvc/kernels/float16.h"
#include "normsvc/kernels/gpu.h"
#include "normsvc/kernels/reference.h"

namespace normsvc::kernels::testing {
namespace {

std::size_t Bytes(DType dtype, int64_t elements) {
  return static_cast<std::size_t>(elements) * DTypeSize(dtype);
}

double RoundTo(DType dtype, double value) {
  uint32_t scratch = 0;
  StoreFromDouble(&scratch, dtype, 0, value);
  return LoadAsFloat(&scratch, dtype, 0);
}

const char* Name(DType d) { return DTypeName(d); }

// Bytes after the last row of each output buffer, which must keep the poison
// (a kernel that wrote past a row's end would change them).
constexpr std::size_t kGuardBytes = 32;

}  // namespace

std::string Describe(const ForwardSpec& s) {
  std::ostringstream o;
  o << NormOpName(s.op) << " x=" << Name(s.x_dtype) << " out=" << Name(s.out_dtype)
    << " params=" << Name(s.param_dtype) << " rows=" << s.rows << " H=" << s.hidden
    << " x_pad=" << s.x_pad << " out_pad=" << s.out_pad << " offset=" << s.offset
    << (s.gamma ? " gamma" : "") << (s.beta ? " beta" : "") << (s.residual ? " residual" : "")
    << (s.residual_out ? " residual_out" : "") << (s.stats ? " stats" : "");
  if (s.epsilon != 1e-5f) o << " eps=" << s.epsilon;
  return o.str();
}

ForwardCase::ForwardCase(const ForwardSpec& spec, std::mt19937_64& rng) : spec_(spec) {
  if (spec_.op == NormOp::kRmsNorm) spec_.beta = false;
  const ForwardSpec& s = spec_;
  const int64_t stride = s.hidden + s.x_pad;
  // Row 0 starts `offset` elements into the buffer: a one-row tensor of
  // offset + stride elements, viewed from element `offset`.
  x_ = HostTensor(s.x_dtype, s.rows, s.hidden, stride);
  x_.FillNormal(rng, s.x_mean, s.x_stddev);
  if (s.residual) {
    residual_ = HostTensor(s.x_dtype, s.rows, s.hidden, stride);
    residual_.FillNormal(rng, 0.0, 1.0);
  }
  if (s.gamma) {
    gamma_ = HostTensor(s.param_dtype, 1, s.hidden, s.hidden);
    gamma_.FillNormal(rng, 1.0, 0.5);
  }
  if (s.beta) {
    beta_ = HostTensor(s.param_dtype, 1, s.hidden, s.hidden);
    beta_.FillNormal(rng, 0.0, 0.5);
  }
}

void ForwardCase::Upload() {
  const ForwardSpec& s = spec_;
  const int64_t stride = s.hidden + s.x_pad;
  const std::size_t offset_bytes = Bytes(s.x_dtype, s.offset);
  auto upload_activation = [&](const HostTensor& t) {
    DeviceBuffer buffer(offset_bytes + t.bytes.size());
    std::vector<uint8_t> host(offset_bytes + t.bytes.size(), 0x11);
    std::memcpy(host.data() + offset_bytes, t.bytes.data(), t.bytes.size());
    buffer.Upload(host.data(), host.size());
    return buffer;
  };
  x_dev_ = upload_activation(x_);
  if (s.residual) residual_dev_ = upload_activation(residual_);
  if (s.residual_out) {
    residual_out_dev_ =
        DeviceBuffer(offset_bytes + Bytes(s.x_dtype, s.rows * stride) + kGuardBytes);
  }
  if (s.gamma) gamma_dev_ = gamma_.ToDevice();
  if (s.beta) beta_dev_ = beta_.ToDevice();
  out_dev_ =
      DeviceBuffer(Bytes(s.out_dtype, s.offset + s.rows * (s.hidden + s.out_pad)) + kGuardBytes);
  if (s.stats) {
    if (s.op == NormOp::kLayerNorm) {
      mean_dev_ = DeviceBuffer(Bytes(DType::kF32, s.rows) + kGuardBytes);
    }
    rstd_dev_ = DeviceBuffer(Bytes(DType::kF32, s.rows) + kGuardBytes);
  }
  PoisonOutputs(poison_);
}

void ForwardCase::PoisonOutputs(uint8_t value) {
  poison_ = value;
  for (const DeviceBuffer* b : {&residual_out_dev_, &out_dev_, &mean_dev_, &rstd_dev_}) {
    b->Poison(value);
  }
}

ForwardSegment ForwardCase::Segment() const {
  const ForwardSpec& s = spec_;
  auto at = [&](const DeviceBuffer& b, DType dtype) -> char* {
    return b.get() == nullptr ? nullptr : static_cast<char*>(b.get()) + Bytes(dtype, s.offset);
  };
  ForwardSegment seg;
  seg.op = s.op;
  seg.rows = s.rows;
  seg.hidden = s.hidden;
  seg.epsilon = s.epsilon;
  seg.x_dtype = s.x_dtype;
  seg.out_dtype = s.out_dtype;
  seg.param_dtype = s.param_dtype;
  seg.x = at(x_dev_, s.x_dtype);
  seg.x_row_stride = s.hidden + s.x_pad;
  seg.residual = at(residual_dev_, s.x_dtype);
  seg.residual_row_stride = s.hidden + s.x_pad;
  seg.residual_out = at(residual_out_dev_, s.x_dtype);
  seg.residual_out_row_stride = s.hidden + s.x_pad;
  seg.gamma = gamma_dev_.get();
  seg.beta = beta_dev_.get();
  seg.out = at(out_dev_, s.out_dtype);
  seg.out_row_stride = s.hidden + s.out_pad;
  seg.mean = static_cast<float*>(mean_dev_.get());
  seg.rstd = static_cast<float*>(rstd_dev_.get());
  return seg;
}

std::vector<uint8_t> ForwardCase::OutputBytes() const {
  // From row 0 on: the `offset` elements before it are not part of the tensor.
  std::vector<uint8_t> all;
  const std::pair<const DeviceBuffer*, std::size_t> parts[] = {
      {&out_dev_, Bytes(spec_.out_dtype, spec_.offset)},
      {&residual_out_dev_, Bytes(spec_.x_dtype, spec_.offset)},
      {&mean_dev_, 0},
      {&rstd_dev_, 0}};
  for (const auto& [buffer, skip] : parts) {
    const std::vector<uint8_t> part = buffer->Download();
    if (part.size() > skip) all.insert(all.end(), part.begin() + skip, part.end());
  }
  return all;
}

std::vector<uint8_t> ForwardCase::DenseOutputBytes() const {
  const ForwardSpec& s = spec_;
  std::vector<uint8_t> all;
  const auto add_rows = [&](const DeviceBuffer& buffer, DType dtype, int64_t stride) {
    const std::vector<uint8_t> bytes = buffer.Download();
    if (bytes.empty()) return;
    const std::size_t row_bytes = Bytes(dtype, s.hidden);
    for (int64_t r = 0; r < s.rows; ++r) {
      const auto begin =
          bytes.begin() + static_cast<std::ptrdiff_t>(Bytes(dtype, s.offset + r * stride));
      all.insert(all.end(), begin, begin + static_cast<std::ptrdiff_t>(row_bytes));
    }
  };
  add_rows(out_dev_, s.out_dtype, s.hidden + s.out_pad);
  add_rows(residual_out_dev_, s.x_dtype, s.hidden + s.x_pad);
  for (const DeviceBuffer* stats : {&mean_dev_, &rstd_dev_}) {
    const std::vector<uint8_t> bytes = stats->Download();
    all.insert(all.end(), bytes.begin(), bytes.end());
  }
  return all;
}

double ForwardCase::Check(const std::string& label) const {
  const ForwardSpec& s = spec_;
  const int64_t h = s.hidden;
  const int64_t out_stride = h + s.out_pad;
  const int64_t x_stride = h + s.x_pad;
  const std::vector<uint8_t> out_bytes = out_dev_.Download();
  const std::vector<uint8_t> res_bytes = residual_out_dev_.Download();
  const std::vector<uint8_t> mean_bytes = mean_dev_.Download();
  const std::vector<uint8_t> rstd_bytes = rstd_dev_.Download();
  const uint8_t* out = out_bytes.data() + Bytes(s.out_dtype, s.offset);
  const uint8_t* res_out = s.residual_out ? res_bytes.data() + Bytes(s.x_dtype, s.offset) : nullptr;
  // Outside the rows: the elements before row 0 and the guard after the
  // last row keep the poison.
  const auto outside_rows_kept = [&](const std::vector<uint8_t>& bytes, DType dtype,
                                     int64_t stride) {
    const std::size_t head = Bytes(dtype, s.offset);
    const std::size_t tail = head + Bytes(dtype, s.rows * stride);
    for (std::size_t b = 0; b < bytes.size(); ++b) {
      if ((b < head || b >= tail) && bytes[b] != poison_) return false;
    }
    return true;
  };
  bool outside_ok = outside_rows_kept(out_bytes, s.out_dtype, out_stride);
  if (s.residual_out) outside_ok = outside_ok && outside_rows_kept(res_bytes, s.x_dtype, x_stride);
  // The statistics' guards, after their `rows` floats.
  for (const std::vector<uint8_t>* stats : {&mean_bytes, &rstd_bytes}) {
    for (std::size_t b = Bytes(DType::kF32, s.rows); b < stats->size(); ++b) {
      outside_ok = outside_ok && (*stats)[b] == poison_;
    }
  }
  const std::vector<double> gamma = s.gamma ? gamma_.Row(0) : std::vector<double>();
  const std::vector<double> beta = s.beta ? beta_.Row(0) : std::vector<double>();

  std::mutex mutex;
  std::vector<std::string> messages;
  std::atomic<int64_t> failures{0};
  double max_ratio = 0.0;
  auto fail = [&](int64_t row, int64_t col, const std::string& what) {
    ++failures;
    std::lock_guard<std::mutex> lock(mutex);
    if (messages.size() < 5) {
      messages.push_back("row " + std::to_string(row) + " col " + std::to_string(col) + ": " +
                         what);
    }
  };
  ParallelFor(s.rows, [&](int64_t begin, int64_t end) {
    double local_max = 0.0;
    std::vector<double> v(h);
    for (int64_t r = begin; r < end; ++r) {
      for (int64_t c = 0; c < h; ++c) {
        v[c] = s.residual ? RoundTo(s.x_dtype, x_.At(r, c) + residual_.At(r, c)) : x_.At(r, c);
      }
      const RowResult ref =
          ReferenceForwardRow(s.op, v.data(), nullptr, gamma.empty() ? nullptr : gamma.data(),
                              beta.empty() ? nullptr : beta.data(), h, s.epsilon);
      double scale = 0.0;
      for (double y : ref.y) scale = std::isfinite(y) ? std::max(scale, std::fabs(y)) : scale;
      for (int64_t c = 0; c < out_stride; ++c) {
        const int64_t index = r * out_stride + c;
        if (c >= h) {  // padding must keep the poison
          for (std::size_t b = 0; b < DTypeSize(s.out_dtype); ++b) {
            if (out[index * DTypeSize(s.out_dtype) + b] != poison_)
              fail(r, c, "padding overwritten");
          }
          continue;
        }
        double ratio = 0.0;
        std::string why;
        if (!WithinTolerance(s.out_dtype, LoadAsFloat(out, s.out_dtype, index), ref.y[c], scale,
                             &ratio, &why)) {
          fail(r, c, "out " + why);
        }
        local_max = std::max(local_max, ratio);
      }
      if (res_out != nullptr) {
        for (int64_t c = h; c < x_stride; ++c) {  // padding must keep the poison
          for (std::size_t b = 0; b < DTypeSize(s.x_dtype); ++b) {
            if (res_out[(r * x_stride + c) * DTypeSize(s.x_dtype) + b] != poison_) {
              fail(r, c, "residual_out padding overwritten");
            }
          }
        }
        for (int64_t c = 0; c < h; ++c) {
          const double got = LoadAsFloat(res_out, s.x_dtype, r * x_stride + c);
          if (!(got == v[c] || (std::isnan(got) && std::isnan(v[c])))) {
            fail(r, c, "residual_out " + std::to_string(got) + " != " + std::to_string(v[c]));
          }
        }
      }
      if (!rstd_bytes.empty()) {
        const double rstd = LoadAsFloat(rstd_bytes.data(), DType::kF32, r);
        const bool ok =
            std::isnan(ref.rstd) ? std::isnan(rstd) : std::fabs(rstd - ref.rstd) <= 1e-5 * ref.rstd;
        if (!ok) fail(r, -1, "rstd " + std::to_string(rstd) + " ref " + std::to_string(ref.rstd));
      }
      if (!mean_bytes.empty()) {
        const double mean = LoadAsFloat(mean_bytes.data(), DType::kF32, r);
        const bool ok =
            !std::isfinite(ref.mean) || !std::isfinite(ref.rstd)
                ? !std::isfinite(mean)
                : std::fabs(mean - ref.mean) <= 1e-6 * std::fabs(ref.mean) + 1e-5 / ref.rstd;
        if (!ok) fail(r, -1, "mean " + std::to_string(mean) + " ref " + std::to_string(ref.mean));
      }
    }
    std::lock_guard<std::mutex> lock(mutex);
    max_ratio = std::max(max_ratio, local_max);
  });
  if (!outside_ok) {
    ADD_FAILURE() << label << " [" << Describe(s)
                  << "]: bytes before row 0 or after the last row (of out, residual_out, mean or "
                     "rstd) were written";
  }
  if (failures > 0) {
    std::ostringstream o;
    o << label << " [" << Describe(s) << "]: " << failures << " mismatches";
    for (const std::string& m : messages) o << "\n  " << m;
    ADD_FAILURE() << o.str();
  }
  return max_ratio;
}

void AddAlignedAndMisalignedPair(ForwardSpec spec, std::mt19937_64& rng,
                                 std::vector<std::unique_ptr<ForwardCase>>& cases) {
  const std::mt19937_64 stream = rng;
  for (int64_t offset : {0, 1}) {
    spec.offset = offset;
    std::mt19937_64 copy = stream;
    cases.push_back(std::make_unique<ForwardCase>(spec, copy));
    cases.back()->Upload();
    rng = copy;
  }
}

std::vector<uint8_t> RunAlone(ForwardCase& c) {
  c.PoisonOutputs();
  const Status st = LaunchForwardSegment(c.Segment(), nullptr);
  EXPECT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return c.OutputBytes();
}

void CheckMixedLaunchBothWays(const std::vector<ForwardSegment>& segments,
                              const std::vector<std::unique_ptr<ForwardCase>>& cases,
                              const std::vector<std::vector<uint8_t>>& alone, const char* tag) {
  const int count = static_cast<int>(segments.size());
  DeviceBuffer workspace(ForwardWorkspaceBytes(count));
  void* pinned = nullptr;
  CUDA_ASSERT_OK(cudaMallocHost(&pinned, workspace.bytes()));
  const std::unique_ptr<void, cudaError_t (*)(void*)> pinned_owner(pinned, cudaFreeHost);
  for (void* staging : {static_cast<void*>(nullptr), pinned}) {
    const std::string how = staging == nullptr ? "mixed launch" : "mixed launch, pinned staging";
    for (auto& c : cases) c->PoisonOutputs();
    workspace.Poison(0xA5);
    const Status st =
        LaunchForward(segments.data(), count, workspace.get(), workspace.bytes(), staging, nullptr);
    CUDA_ASSERT_OK(cudaDeviceSynchronize());
    ASSERT_TRUE(st.ok()) << st.message();
    double worst = 0.0;
    for (std::size_t i = 0; i < cases.size(); ++i) {
      EXPECT_EQ(cases[i]->OutputBytes(), alone[i]) << how << ": " << Describe(cases[i]->spec());
      worst = std::max(worst, cases[i]->Check(how));
    }
    std::printf("[ %-8s ] %s: %zu tensors, max err/tol %.3f\n", tag, how.c_str(), cases.size(),
                worst);
  }
}

}  // namespace normsvc::kernels::testing
