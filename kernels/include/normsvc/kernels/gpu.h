// GPU launchers. Only available when the project is built with CUDA
// (NORMSVC_HAVE_CUDA). Every function checks every CUDA call and returns a
// Status; none throws and none synchronizes the stream unless stated.
#pragma once

#include <cuda_runtime.h>

#include "normsvc/kernels/types.h"

namespace normsvc::kernels {

// Device memory a multi-segment launch needs for its segment table.
// The caller owns it and may reuse it once the launch has finished on the
// stream.
std::size_t ForwardWorkspaceBytes(int segment_count);

// Normalizes all segments (pointers are device pointers). Segments are grouped
// by launch configuration, which depends only on (hidden, dtypes, op and
// optional parts), never on row counts: a row's output bits do not depend on
// what else is in the launch. Segments of one configuration go in one kernel
// launch. `host_staging`, if not null, is host memory of at least
// ForwardWorkspaceBytes(count) that receives the table. When it is pinned
// and 16-byte aligned, the table is read from it on the device: in place
// (pinned memory is mapped into the device's address space) when the
// segments average at most two rows, else through a copy to the workspace
// on the stream; either way it must stay untouched until the launches have
// finished on the stream, also when this returns an error (the launches
// enqueued before it still read it). Otherwise, or with no staging, the
// table is copied to the workspace on the stream (from pageable memory:
// synchronous with the host, not capturable in a CUDA graph). A table exists only when two or more
// segments share a plan; the workspace is checked then: its size, and its 16-byte alignment (as
// cudaMalloc's allocations are; the kernels read the table's 8-byte fields in place). It is
// required even when the table is read in place, so that a call's validity does not depend on the
// memory's kind. Segments whose
// pointers are 16-byte aligned and whose row pitches are multiples of 16
// bytes use 16-byte accesses (same results either way).
Status LaunchForward(const ForwardSegment* segments, int count, void* device_workspace,
                     std::size_t workspace_bytes, void* host_staging, cudaStream_t stream);

// LaunchForward in two steps, for callers that upload the segment table
// together with their own inputs (one host-to-device copy for both).
// WriteForwardTable writes into `host_table` (at least
// ForwardWorkspaceBytes(count) bytes) the table image that LaunchForward
// would upload to `device_workspace`, and sets *table_bytes to its size (0
// when no two segments share a plan: nothing to upload). The caller copies
// those bytes to `device_workspace` on the stream, then calls
// LaunchForwardWithUploadedTable with the same segments and workspace,
// which launches exactly what LaunchForward would.
Status WriteForwardTable(const ForwardSegment* segments, int count, void* device_workspace,
                         std::size_t workspace_bytes, void* host_table, std::size_t* table_bytes);
Status LaunchForwardWithUploadedTable(const ForwardSegment* segments, int count,
                                      void* device_workspace, std::size_t workspace_bytes,
                                      cudaStream_t stream);

// One segment without a segment table: the segment travels as a kernel
// parameter, so there is no workspace, no upload and no table read (the
// small-batch path). Same plan, hence the same result bits, as the segment
// inside LaunchForward.
Status LaunchForwardSegment(const ForwardSegment& segment, cudaStream_t stream);

// Device memory LaunchBackward needs for its dgamma/dbeta partials: enough
// for any launch of at most `rows` rows of `hidden` elements, whatever the
// dtypes and alignment. Non-decreasing in `rows`, so a workspace sized for
// the most rows a caller launches serves all its launches of that hidden size.
std::size_t BackwardWorkspaceBytes(int64_t rows, int64_t hidden);

// Backward of one tensor. dgamma/dbeta are reduced in two deterministic
// stages (per-block fp32 partials, then a column reduction): no atomics.
// The workspace (needed when dgamma or dbeta is requested) is 16-byte
// aligned, as cudaMalloc's allocations are: the partials are written and
// read as 16-byte words. A smaller or misaligned one is an invalid argument.
// Its contents after the launch are unspecified: the column reduction drops
// the partials it has added from the L2 without writing them back.
Status LaunchBackward(const BackwardArgs& args, void* device_workspace, std::size_t workspace_bytes,
                      cudaStream_t stream);

}  // namespace normsvc::kernels
