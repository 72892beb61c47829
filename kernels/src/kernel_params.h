// Parameter blocks passed by value to the kernels, and the device-side
// segment table that a multi-segment forward launch reads. Plain structs,
// shared by host (launchers) and device (kernels) code.
#pragma once

#include <cstdint>

#include "segment_index.h"

namespace normsvc::kernels::detail {

// One forward segment as the kernels see it. Strides are in elements.
struct DeviceSegment {
  const void* x;
  const void* residual;
  void* residual_out;
  const void* gamma;
  const void* beta;
  void* out;
  float* mean;
  float* rstd;
  int64_t x_stride;
  int64_t residual_stride;
  int64_t residual_out_stride;
  int64_t out_stride;
  int64_t first_row;  // this segment's row 0, counted over the rows of its launch
  int32_t hidden;
  float epsilon;
  uint8_t op;           // NormOp
  uint8_t out_dtype;    // DType
  uint8_t param_dtype;  // DType
  uint8_t vectorized;   // 1: every pointer and row pitch allows 16-byte accesses
  uint32_t reserved;
};

// How threads map onto rows (see launch_plan.h).
struct RowShape {
  int32_t row_threads;
  int32_t groups;
  int32_t cluster;
};

struct ForwardParams {
  // Segments sorted by first_row, that column alone, and the row -> segment
  // index over it (segment_index.h: buckets of 2^bucket_shift rows). When
  // segment_count == 1 none of them is read: `single` holds the segment.
  const DeviceSegment* table;
  const int64_t* first_rows;
  const SegmentBucket* buckets;
  int32_t segment_count;
  int32_t bucket_shift;
  // 1: every segment has 2^bucket_shift rows, so a row's segment is
  // row >> bucket_shift and the buckets are not read.
  uint8_t buckets_identity;
  uint8_t op;  // NormOp of every segment (segments of one launch share it)
  RowShape shape;
  int64_t total_rows;
  // ceil(total_rows / shape.groups): the row groups (a block's or a
  // cluster's rows at one iteration), computed on the host so that no kernel
  // divides 64-bit integers.
  int64_t row_groups;
  DeviceSegment single;
};

struct BackwardParams {
  const void* x;
  const void* dy;
  const void* gamma;
  const float* mean;
  const float* rstd;
  void* dx;
  float* dgamma_partial;  // [units][hidden], null when dgamma is not wanted
  float* dbeta_partial;   // [units][hidden], null when dbeta is not wanted
  int64_t x_stride;
  int64_t dy_stride;
  int64_t dx_stride;
  int64_t rows;
  int64_t rows_per_unit;
  int32_t hidden;
  float epsilon;
  RowShape shape;
  uint8_t op;
  uint8_t param_dtype;
  uint8_t vectorized;
  // BackwardRealignKernel only (launch_plan.h, PlanRealignedBackwardUnits):
  // row r starts (first_shift + r * shift_step) % W elements past a 16-byte
  // boundary in x, dy and dx alike; unit u takes rows_per_unit rows of the
  // offset class u / units_per_class (rows class, class + period, ...).
  int32_t realign_first_shift;
  int32_t realign_shift_step;
  int32_t realign_period;
  int64_t units_per_class;
};

}  // namespace normsvc::kernels::detail
