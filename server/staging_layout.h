// Where each tensor of a batch goes in an executor's staging buffer (pinned
// host memory, mirrored by a device buffer of the same size). Inputs of all
// tasks come first, so one host-to-device copy moves them; outputs follow,
// so one device-to-host copy brings them back. Every tensor starts on a
// kStagingAlignment boundary, so vector loads in the kernels stay aligned
// and a batch's footprint is the sum of its tasks' footprints.
//
// CUDA-free: the GPU executor uses it, tests check it without a GPU.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "server/task.h"

namespace normsvc::server {

inline constexpr int64_t kStagingAlignment = 256;

constexpr int64_t AlignStaging(int64_t bytes) {
  return (bytes + kStagingAlignment - 1) / kStagingAlignment * kStagingAlignment;
}

// Rows [row_begin, row_begin + rows) of one task.
struct TaskSlice {
  const Task* task = nullptr;
  int64_t row_begin = 0;
  int64_t rows = 0;
};

// Byte offsets into the staging buffer; -1 where the tensor is absent.
struct StagingOffsets {
  // Inputs.
  int64_t x = -1, residual = -1, dy = -1, gamma = -1, beta = -1, saved_mean = -1, saved_rstd = -1;
  // Outputs.
  int64_t out = -1, residual_out = -1, mean = -1, rstd = -1, dgamma = -1, dbeta = -1;
};

struct StagingPlan {
  std::vector<StagingOffsets> slices;  // in slice order
  int64_t input_bytes = 0;             // inputs occupy [0, input_bytes)
  int64_t total_bytes = 0;             // outputs occupy [input_bytes, total_bytes)
};

// Footprint of `rows` rows of `task` (inline parameters counted once).
int64_t SliceStagingBytes(const Task& task, int64_t rows);
inline int64_t TaskStagingBytes(const Task& task) { return SliceStagingBytes(task, task.rows); }
// Most rows of `task` whose footprint fits in `capacity`; 0 if not even one.
int64_t MaxRowsInStaging(const Task& task, int64_t capacity);
// The largest footprint one row of `hidden` elements can have in any
// request the edge accepts: every tensor fp32 and every optional input and
// output present, forward (x, residual, inline gamma and beta in; out,
// residual sum, mean, rstd out) or backward (x, dy, inline gamma, saved
// mean and rstd in; dx, dgamma, dbeta out). A staging buffer smaller than
// this could never run such a request, so the server refuses to start with
// one (Server::CreateExecutors).
int64_t LargestRowStagingBytes(int64_t hidden);

StagingPlan PlanStaging(std::span<const TaskSlice> slices);

}  // namespace normsvc::server
