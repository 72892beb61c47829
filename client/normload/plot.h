// PNG plot of a sweep's CSV: throughput (req/s) against p99 latency, one
// point per sweep value. Uses gnuplot when it is on PATH, else Python with
// matplotlib ($NORMSVC_PLOT_PYTHON, default python3).
#pragma once

#include <string>

#include "absl/status/status.h"

namespace normsvc::normload {

absl::Status PlotSweep(const std::string& csv_path, const std::string& png_path,
                       const std::string& title);

}  // namespace normsvc::normload
