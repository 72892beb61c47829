#include "plot.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace normsvc::normload {
namespace {

constexpr char kGnuplotScript[] = R"gp(set datafile separator ','
set terminal pngcairo size 900,600
set output '@PNG@'
set title '@TITLE@'
set xlabel 'throughput (requests/s)'
set ylabel 'p99 latency (ms)'
set grid
set key off
plot '@CSV@' using 2:7 every ::1 with linespoints pt 7, '' using 2:7:1 every ::1 with labels offset 1,1
)gp";

constexpr char kPythonScript[] = R"py(import csv, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
rows = list(csv.DictReader(open(sys.argv[1])))
key = list(rows[0].keys())[0]
x = [float(r["req_per_s"]) for r in rows]
y = [float(r["p99_ms"]) for r in rows]
fig, ax = plt.subplots(figsize=(9, 6))
ax.plot(x, y, "o-")
for r, xi, yi in zip(rows, x, y):
    ax.annotate(f"{key}={r[key]}", (xi, yi), textcoords="offset points", xytext=(4, 4), fontsize=8)
ax.set_xlabel("throughput (requests/s)")
ax.set_ylabel("p99 latency (ms)")
ax.set_title(sys.argv[3])
ax.grid(True)
fig.savefig(sys.argv[2], dpi=100)
)py";

bool OnPath(const char* program) {
  const std::string command = absl::StrCat("command -v ", program, " >/dev/null 2>&1");
  return std::system(command.c_str()) == 0;
}

std::string ShellQuote(const std::string& text) {
  return absl::StrCat("'", absl::StrReplaceAll(text, {{"'", "'\\''"}}), "'");
}

}  // namespace

absl::Status PlotSweep(const std::string& csv_path, const std::string& png_path,
                       const std::string& title) {
  const std::string script_path = png_path + ".plot-script";
  std::string command;
  if (OnPath("gnuplot")) {
    std::ofstream(script_path) << absl::StrReplaceAll(
        kGnuplotScript, {{"@PNG@", png_path}, {"@CSV@", csv_path}, {"@TITLE@", title}});
    command = absl::StrCat("gnuplot ", ShellQuote(script_path));
  } else {
    const char* python = std::getenv("NORMSVC_PLOT_PYTHON");
    std::ofstream(script_path) << kPythonScript;
    command = absl::StrCat(python != nullptr && python[0] != '\0' ? python : "python3", " ",
                           ShellQuote(script_path), " ", ShellQuote(csv_path), " ",
                           ShellQuote(png_path), " ", ShellQuote(title));
  }
  const int status = std::system(command.c_str());
  std::remove(script_path.c_str());
  if (status != 0) {
    return absl::UnavailableError(
        absl::StrCat("plotting failed (", command,
                     "); install gnuplot, or matplotlib for $NORMSVC_PLOT_PYTHON / python3"));
  }
  return absl::OkStatus();
}

}  // namespace normsvc::normload
