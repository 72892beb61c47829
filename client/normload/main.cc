// normload: load generator for normsvc (and for the echo baseline). See kUsage.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "channel_flags.h"
#include "engine.h"
#include "normsvc/client/client.h"
#include "plot.h"
#include "process_tuning.h"
#include "report.h"
#include "workload.h"

namespace normsvc::normload {
namespace {

constexpr char kUsage[] = R"(normload: load generator for normsvc and its gRPC echo baseline.

usage: normload [flags]

load:
  --concurrency N         closed loop: N requests in flight (default 64)
  --rate R                open loop instead: Poisson arrivals at R requests/s;
                          latency counts from each request's scheduled time
  --max_in_flight N       open loop: cap on requests in flight (default 4096)
  --sender_threads N      open loop: threads scheduling arrivals (default 2)
  --channels M            gRPC channels, each with its own connection (default 4);
                          a comma-separated --target spreads them over servers
  --streams_per_channel S NormalizeStream calls per channel for transport=stream kinds (default 1)
  --warmup_s S            warm-up before measuring (default 2)
  --duration_s S          measurement (default 10)
  --deadline_ms MS        deadline of each unary call (default 10000)
requests:
  --mix SPEC              request kinds, ';'-separated (default "op=layernorm,dtype=fp32,rows=1,hidden=4096")
                          keys: method=forward|backward op=layernorm|rmsnorm dtype=fp32|fp16|bf16
                          rows=R hidden=H params=none|inline|registered param_dtype=fp32|same
                          residual=0|1 stats=0|1 out_dtype=fp32|fp16|bf16 eps=E
                          transport=unary|stream weight=W
  --scenario FILE         the same, one kind per line ('#' comments)
  --variants K            distinct random payloads per kind (default 4)
  --seed N                random seed (default: time)
  --verify                check every response against the CPU reference
                          (against the input itself for the echo server)
  --echo                  the target is the echo server (normsvc_echo); also
                          detected from GetServerInfo's backend "echo"
output:
  --json FILE             results as JSON ("-" = stdout); schema in client/normload/report.h
  --quiet                 no progress line each second
sweep:
  --sweep concurrency=1,4,16,64 | rate=1000,5000,20000
                          one run per value (each with warm-up and duration)
  --csv FILE              sweep results as CSV
  --plot FILE.png         p99 latency against throughput (gnuplot, or matplotlib via
                          $NORMSVC_PLOT_PYTHON / python3)
%s
exit codes: 0 success; 1 setup failed (server unreachable, parameters not
registered, output not written); 2 usage error; 3 responses failed verification.
)";

struct Flags {
  EngineOptions engine;
  int channels = 4;
  int variants = 4;
  std::string mix;
  std::string scenario;
  bool force_echo = false;
  std::string json_path;
  std::string sweep;
  std::string csv_path;
  std::string plot_path;
};

int Usage(const absl::Status& status) {
  std::fprintf(stderr, "normload: %s (see normload --help)\n",
               std::string(status.message()).c_str());
  return 2;
}

absl::Status ReadFlags(cli::Args& args, Flags* flags) {
  auto get_int = [&](const char* name, int64_t fallback, auto* into) -> absl::Status {
    absl::StatusOr<int64_t> value = args.GetInt(name, fallback);
    if (!value.ok()) return value.status();
    *into = static_cast<std::remove_pointer_t<decltype(into)>>(*value);
    return absl::OkStatus();
  };
  auto get_double = [&](const char* name, double fallback, double* into) -> absl::Status {
    absl::StatusOr<double> value = args.GetDouble(name, fallback);
    if (!value.ok()) return value.status();
    *into = *value;
    return absl::OkStatus();
  };
  EngineOptions& e = flags->engine;
  for (absl::Status status :
       {get_int("concurrency", 64, &e.concurrency),
        get_int("max_in_flight", 4096, &e.max_in_flight),
        get_int("sender_threads", 2, &e.sender_threads), get_int("channels", 4, &flags->channels),
        get_int("streams_per_channel", 1, &e.streams_per_channel),
        get_int("deadline_ms", 10000, &e.deadline_ms), get_int("variants", 4, &flags->variants),
        get_int("seed", static_cast<int64_t>(std::time(nullptr)), &e.seed),
        get_double("warmup_s", 2, &e.warmup_s), get_double("duration_s", 10, &e.duration_s)}) {
    if (!status.ok()) return status;
  }
  if (args.Has("rate")) {
    e.mode = LoopMode::kOpen;
    if (absl::Status status = get_double("rate", 0, &e.rate); !status.ok()) return status;
    if (!(e.rate > 0)) return absl::InvalidArgumentError("--rate must be > 0");
  }
  absl::StatusOr<bool> verify = args.GetBool("verify", false);
  absl::StatusOr<bool> echo = args.GetBool("echo", false);
  absl::StatusOr<bool> quiet = args.GetBool("quiet", false);
  for (const auto* value : {&verify, &echo, &quiet}) {
    if (!value->ok()) return value->status();
  }
  e.verify = *verify;
  flags->force_echo = *echo;
  e.progress = !*quiet;
  flags->mix = args.GetString("mix");
  flags->scenario = args.GetString("scenario");
  flags->json_path = args.GetString("json");
  flags->sweep = args.GetString("sweep");
  flags->csv_path = args.GetString("csv");
  flags->plot_path = args.GetString("plot");
  if (e.concurrency < 1 || e.max_in_flight < 1 || flags->channels < 1 || flags->variants < 1 ||
      e.streams_per_channel < 1 || e.sender_threads < 1) {
    return absl::InvalidArgumentError("counts must be >= 1");
  }
  if (!(e.duration_s > 0) || e.warmup_s < 0) return absl::InvalidArgumentError("bad duration");
  if (!flags->mix.empty() && !flags->scenario.empty()) {
    return absl::InvalidArgumentError("give --mix or --scenario, not both");
  }
  return absl::OkStatus();
}

bool WriteFile(const std::string& path, const std::string& text) {
  if (path == "-") {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    return true;
  }
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) std::fprintf(stderr, "normload: cannot write %s\n", path.c_str());
  return static_cast<bool>(out);
}

int Main(int argc, char** argv) {
  cli::TuneProcessForLoad();
  absl::StatusOr<cli::Args> parsed =
      cli::Args::Parse(argc, argv, 1, {"verify", "echo", "quiet", "tls", "help"});
  if (!parsed.ok()) return Usage(parsed.status());
  cli::Args& args = *parsed;
  if (args.Has("help") || !args.positional().empty()) {
    std::printf(kUsage, cli::kChannelFlagsHelp);
    return args.Has("help") ? 0 : 2;
  }
  Flags flags;
  if (absl::Status status = ReadFlags(args, &flags); !status.ok()) return Usage(status);
  absl::StatusOr<client::ChannelOptions> channel_options = cli::ChannelOptionsFromArgs(args);
  if (!channel_options.ok()) return Usage(channel_options.status());
  if (absl::Status status = args.CheckAllUsed(); !status.ok()) return Usage(status);

  absl::StatusOr<std::vector<RequestKind>> kinds =
      !flags.scenario.empty()
          ? ReadScenarioFile(flags.scenario)
          : ParseMix(flags.mix.empty() ? "op=layernorm,dtype=fp32,rows=1,hidden=4096" : flags.mix);
  if (!kinds.ok()) return Usage(kinds.status());

  // Channels, each with its own connection, spread over the targets.
  const std::vector<std::string> targets =
      absl::StrSplit(channel_options->target, ',', absl::SkipEmpty());
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int i = 0; i < flags.channels; ++i) {
    client::ChannelOptions options = *channel_options;
    options.target = targets[i % targets.size()];
    options.dedicated_connection = true;
    options.retry_max_attempts = 1;  // a load generator counts failures instead of hiding them
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = client::MakeChannel(options);
    if (!channel.ok()) return Usage(channel.status());
    channels.push_back(*channel);
  }

  // What is on the other end.
  client::NormalizerClient probe(channels[0]);
  client::CallOptions probe_options{.timeout = absl::Seconds(10), .wait_for_ready = true};
  absl::StatusOr<v1::GetServerInfoResponse> info = probe.GetServerInfo(probe_options);
  RunDescription description;
  description.target = channel_options->target;
  description.channels = flags.channels;
  if (info.ok()) {
    description.server_backend = info->backend();
    description.server_version = info->version();
  } else if (info.status().code() != absl::StatusCode::kUnimplemented) {
    std::fprintf(stderr, "normload: GetServerInfo on %s: %s\n", targets[0].c_str(),
                 info.status().ToString().c_str());
    return 1;
  }
  flags.engine.echo = flags.force_echo || description.server_backend == "echo";

  WorkloadOptions workload;
  workload.variants = flags.variants;
  workload.verify = flags.engine.verify;
  workload.echo = flags.engine.echo;
  workload.seed = flags.engine.seed;
  workload.name_prefix = absl::StrCat("normload-", getpid());
  absl::StatusOr<std::vector<PreparedKind>> prepared = PrepareWorkload(*kinds, workload);
  if (!prepared.ok()) return Usage(prepared.status());
  description.kinds = &*prepared;
  std::vector<std::string> registered;
  if (!flags.engine.echo) {
    for (const PreparedKind& kind : *prepared) {
      if (kind.registered_name.empty()) continue;
      absl::StatusOr<v1::RegisterParametersResponse> response =
          probe.RegisterParameters(kind.registration, probe_options);
      if (!response.ok()) {
        std::fprintf(stderr, "normload: RegisterParameters %s: %s\n", kind.registered_name.c_str(),
                     response.status().ToString().c_str());
        return 1;
      }
      registered.push_back(kind.registered_name);
    }
  }

  // One run, or a sweep of runs.
  std::string swept;
  std::vector<double> values;
  if (!flags.sweep.empty()) {
    std::vector<std::string> parts = absl::StrSplit(flags.sweep, absl::MaxSplits('=', 1));
    if (parts.size() != 2 || (parts[0] != "concurrency" && parts[0] != "rate")) {
      return Usage(absl::InvalidArgumentError("--sweep wants concurrency=V,V,... or rate=V,V,..."));
    }
    swept = parts[0];
    for (absl::string_view text : absl::StrSplit(parts[1], ',', absl::SkipEmpty())) {
      double value = 0;
      if (!absl::SimpleAtod(text, &value) || !(value > 0)) {
        return Usage(absl::InvalidArgumentError("bad --sweep value"));
      }
      values.push_back(value);
    }
  }
  int exit_code = 0;
  std::vector<std::string> runs_json;
  std::string csv = swept.empty() ? "" : SweepCsvHeader(swept);
  const size_t run_count = swept.empty() ? 1 : values.size();
  for (size_t i = 0; i < run_count; ++i) {
    description.engine = flags.engine;
    if (swept == "concurrency") {
      description.engine.mode = LoopMode::kClosed;
      description.engine.concurrency = static_cast<int>(values[i]);
    } else if (swept == "rate") {
      description.engine.mode = LoopMode::kOpen;
      description.engine.rate = values[i];
    }
    if (!swept.empty())
      std::fprintf(stderr, "normload: sweep point %s=%g\n", swept.c_str(), values[i]);
    const RunResult result = RunLoad(description.engine, *prepared, channels);
    PrintReport(stdout, description, result);
    std::fflush(stdout);
    runs_json.push_back(RunToJson(description, result));
    if (!swept.empty()) csv += SweepCsvRow(values[i], result);
    if (result.measured.verify_failures + result.warmup.verify_failures > 0) exit_code = 3;
  }

  for (const std::string& name : registered) {
    if (absl::Status status = probe.DeleteParameters(name, probe_options); !status.ok()) {
      std::fprintf(stderr, "normload: DeleteParameters %s: %s\n", name.c_str(),
                   status.ToString().c_str());
    }
  }
  if (!flags.json_path.empty()) {
    const std::string json =
        swept.empty() ? runs_json[0] + "\n"
                      : absl::StrCat("{\"schema\": \"normload-sweep/v1\", \"sweep\": \"", swept,
                                     "\", \"points\": [", absl::StrJoin(runs_json, ",\n"), "]}\n");
    if (!WriteFile(flags.json_path, json) && exit_code == 0) exit_code = 1;
  }
  if (!swept.empty() && !flags.csv_path.empty() && !WriteFile(flags.csv_path, csv) &&
      exit_code == 0) {
    exit_code = 1;
  }
  if (!flags.plot_path.empty()) {
    std::string csv_path = flags.csv_path;
    if (swept.empty()) {
      std::fprintf(stderr, "normload: --plot needs --sweep\n");
      return exit_code == 0 ? 2 : exit_code;
    }
    if (csv_path.empty() || csv_path == "-") {
      csv_path = flags.plot_path + ".csv";
      WriteFile(csv_path, csv);
    }
    absl::Status plotted =
        PlotSweep(csv_path, flags.plot_path,
                  absl::StrCat("normload sweep over ", swept, ": ", description.target));
    if (!plotted.ok()) {
      std::fprintf(stderr, "normload: %s\n", std::string(plotted.message()).c_str());
      if (exit_code == 0) exit_code = 1;
    } else {
      std::fprintf(stderr, "normload: wrote %s\n", flags.plot_path.c_str());
    }
  }
  return exit_code;
}

}  // namespace
}  // namespace normsvc::normload

int main(int argc, char** argv) { return normsvc::normload::Main(argc, argv); }
