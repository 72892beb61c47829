// norm_bench's command line:
//
//   norm_bench [--json PATH] [--iterations N] [--quick] [--forward-only]
//              [--backward-only] [--backward-dx-only] [--hidden H]
//              [--dtype bf16|fp32|fp16] [--ring off|two-block-clusters|every-plan]
//              [--param_staging off|one-wave|multi-warp-rows|every-launch] [--realign shift|staged]
//              [--backward-realign on|off] [--elements N] [--affine full|gamma|none]
//              [--residual] [--column-reduce auto|narrow|wide]
//              [--discard-partials on|off]
//
// --elements sets the large shapes' size: rows = ceil(N / H), N >= 2^20 (default 2^24, the
// issue's floor of 16M elements; 2^26 is the 64M elements of a bf16 16384 x 4096 tensor).
// --ring sets which one-segment launches take the ring kernel (kernels/src/ring_policy.h;
// default two-block-clusters); --param_staging which ones stage gamma/beta in shared memory
// (kernels/src/param_staging.h; default multi-warp-rows); --realign which kernel serves one-segment
// realigned forward launches without a residual (kernels/src/realign_policy.h; default
// staged); --backward-realign whether backward rows of H not a multiple of the vector width
// take BackwardRealignKernel (default on) or the strided plan's kernel; --column-reduce which
// kernels reduce the backward's partials (kernels/src/column_reduce.h; default auto);
// --discard-partials whether they drop the added partials from the L2 (default on). The JSON
// records every one of them.
// --affine narrows the forward shapes' parameters (a diagnostic: what LayerNorm's beta, or any
// affine, costs): full (default) passes gamma and, for LayerNorm, beta, as torch.nn.LayerNorm
// has them; gamma passes gamma only; none neither. The bytes counted follow.
// --residual gives the forward shapes a residual (the fused pre-norm add: x + residual
// normalized, the sum written out; kind forward_residual): the bytes counted are x and the
// residual read, out and the sum written, and the copy moves half of them.
// --backward-only, --hidden and --dtype narrow the large shapes to the cases named (for
// profiling one kernel; fp16 runs only when --dtype names it); the small-batch and multi-segment
// cases run only when neither
// --hidden nor --backward-only is given. --backward-dx-only is --backward-only without
// dgamma/dbeta: the row pass alone, no partials and no column reduction (kind backward_dx),
// so that the cost of the second stage shows as the difference.
#pragma once

#include <cstdint>
#include <string>

namespace normsvc::bench {

// The forward shapes' affine parameters (--affine).
enum class Affine { kFull, kGammaOnly, kNone };
const char* AffineName(Affine affine);

struct BenchOptions {
  const char* json = nullptr;     // --json: where the records go (none: table only)
  int iterations = 30;            // launches timed a large shape
  bool quick = false;             // H in {1024, 2049, 4096} only
  bool forward_only = false;      // skip the backward shapes
  bool backward_only = false;     // skip the forward shapes
  bool backward_dx_only = false;  // backward without dgamma/dbeta (diagnostic)
  int64_t only_hidden = 0;        // 0: every H of the set
  std::string only_dtype;         // empty: bf16 and fp32; "fp16" runs fp16 alone
  int64_t large_elements = int64_t{1} << 24;
  Affine affine = Affine::kFull;
  bool residual = false;  // forward shapes with a residual and its sum written
};

// Reads the flags into `options` and sets the process-wide kernel policies
// they name (--ring, --param_staging, --realign, --backward-realign,
// --column-reduce, --discard-partials) as it goes. Returns -1 when the benchmark should run,
// else the exit code: 0 after --help's usage, 2 after a message on stderr
// for a flag it does not know or a bad value.
int ParseBenchOptions(int argc, char** argv, BenchOptions* options);

}  // namespace normsvc::bench
