// normload: load generator for normsvc (and for the echo baseline). See kUsage.
#include <unistd.h>

#include <algorithm>
#include <cmath>
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
                          latency counts from each request's scheduled time;
                          sending stops when the window closes, and arrivals
                          never sent (all slots busy) are reported as not sent
  --max_in_flight N       open loop: cap on requests in flight (default 4096)
  --sender_threads N      open loop: threads scheduling arrivals (default 2)
  --channels M            gRPC channels, each with its own connection (default 4);
                          a comma-separated --target spreads them over servers
  --streams_per_channel S NormalizeStream calls per channel for transport=stream kinds (default 1);
                          a stream the server ends is reopened (not after 3 in a
                          row that answered nothing)
  --stream_rotate_ms MS   a stream this old takes no more requests: a new call takes
                          them, the old one is answered to the end and closed, so a
                          server's max connection age with a longer grace period
                          cuts off nothing in flight (default 10000; 0 = never)
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
  --max_error_rate F      failed requests tolerated, as a fraction of all sent
                          (default 0: any failed request fails the run)
  --echo                  the target is the echo server (normsvc_echo); also
                          detected from GetServerInfo's backend "echo"
output:
  --json FILE             results as JSON ("-" = stdout, and the text report goes
                          to stderr); schema in client/normload/report.h
  --quiet                 no progress line each second
sweep:
  --sweep concurrency=1,4,16,64 | rate=1000,5000,20000
                          one run per value (each with warm-up and duration)
  --csv FILE              sweep results as CSV (needs --sweep)
  --plot FILE.png         p99 latency against throughput (gnuplot, or matplotlib via
                          $NORMSVC_PLOT_PYTHON / python3; needs --sweep)
%s
With several comma-separated --target values, params=registered sets are
registered on (and deleted from) every target that gets a channel.

exit codes: 0 success; 1 setup failed (server unreachable, parameters not
registered, output not written); 2 usage error; 3 --verify: a response failed
verification or none was verified; 4 requests failed beyond --max_error_rate,
requests were abandoned after the deadline, or a stream ended and could not be
reopened.
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
  double max_error_rate = 0;
  std::string swept;           // "", "concurrency" or "rate"
  std::vector<double> values;  // of the swept setting
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
        get_int("stream_rotate_ms", 10000, &e.stream_rotate_ms),
        get_int("deadline_ms", 10000, &e.deadline_ms), get_int("variants", 4, &flags->variants),
        get_int("seed", static_cast<int64_t>(std::time(nullptr)), &e.seed),
        get_double("warmup_s", 2, &e.warmup_s), get_double("duration_s", 10, &e.duration_s),
        get_double("max_error_rate", 0, &flags->max_error_rate)}) {
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
  if (e.stream_rotate_ms < 0) return absl::InvalidArgumentError("--stream_rotate_ms must be >= 0");
  if (!(e.duration_s > 0) || e.warmup_s < 0) return absl::InvalidArgumentError("bad duration");
  if (!flags->mix.empty() && !flags->scenario.empty()) {
    return absl::InvalidArgumentError("give --mix or --scenario, not both");
  }
  if (!(flags->max_error_rate >= 0 && flags->max_error_rate <= 1)) {
    return absl::InvalidArgumentError("--max_error_rate must be in [0, 1]");
  }
  if (flags->sweep.empty()) {
    if (!flags->csv_path.empty()) return absl::InvalidArgumentError("--csv needs --sweep");
    if (!flags->plot_path.empty()) return absl::InvalidArgumentError("--plot needs --sweep");
    return absl::OkStatus();
  }
  std::vector<std::string> parts = absl::StrSplit(flags->sweep, absl::MaxSplits('=', 1));
  if (parts.size() != 2 || (parts[0] != "concurrency" && parts[0] != "rate")) {
    return absl::InvalidArgumentError("--sweep wants concurrency=V,V,... or rate=V,V,...");
  }
  flags->swept = parts[0];
  for (absl::string_view text : absl::StrSplit(parts[1], ',', absl::SkipEmpty())) {
    double value = 0;
    if (!absl::SimpleAtod(text, &value) || !(value > 0) ||
        (flags->swept == "concurrency" && (value != std::floor(value) || value > 1e6))) {
      return absl::InvalidArgumentError(absl::StrCat("bad --sweep value '", text, "'"));
    }
    flags->values.push_back(value);
  }
  if (flags->values.empty()) return absl::InvalidArgumentError("--sweep has no values");
  return absl::OkStatus();
}

// Registered parameter sets, deleted from every server they went to when
// this goes out of scope (every exit path once registration began).
class Registrations {
 public:
  Registrations(std::vector<std::shared_ptr<grpc::Channel>> channels,
                std::vector<std::string> targets, client::CallOptions options)
      : targets_(std::move(targets)), options_(options) {
    for (auto& channel : channels) clients_.emplace_back(std::move(channel));
  }
  ~Registrations() {
    for (const auto& [server, name] : registered_) {
      absl::Status status = clients_[server].DeleteParameters(name, options_);
      if (!status.ok()) {
        std::fprintf(stderr, "normload: DeleteParameters %s on %s: %s\n", name.c_str(),
                     targets_[server].c_str(), status.ToString().c_str());
      }
    }
  }
  // Registers the kinds' sets on every server; false (after printing why)
  // when one refused.
  bool Register(const std::vector<PreparedKind>& kinds) {
    for (const PreparedKind& kind : kinds) {
      if (kind.registered_name.empty()) continue;
      for (size_t server = 0; server < clients_.size(); ++server) {
        absl::StatusOr<v1::RegisterParametersResponse> response =
            clients_[server].RegisterParameters(kind.registration, options_);
        if (!response.ok()) {
          std::fprintf(stderr, "normload: RegisterParameters %s on %s: %s\n",
                       kind.registered_name.c_str(), targets_[server].c_str(),
                       response.status().ToString().c_str());
          return false;
        }
        registered_.emplace_back(server, kind.registered_name);
      }
    }
    return true;
  }

 private:
  std::vector<client::NormalizerClient> clients_;
  std::vector<std::string> targets_;
  client::CallOptions options_;
  std::vector<std::pair<size_t, std::string>> registered_;
};

// The exit code a finished run earns (kUsage's "exit codes").
int RunExitCode(const Flags& flags, const RunResult& result) {
  const PhaseResult& m = result.measured;
  const PhaseResult& w = result.warmup;
  if (flags.engine.verify) {
    if (m.verify_failures + w.verify_failures > 0) return 3;
    if (m.verified + w.verified == 0) {
      std::fprintf(stderr, "normload: --verify: no response was verified\n");
      return 3;
    }
  }
  const uint64_t errors = m.errors + w.errors;
  const uint64_t sent = errors + m.ok + w.ok;
  if (errors > 0 &&
      static_cast<double>(errors) > flags.max_error_rate * static_cast<double>(sent)) {
    std::fprintf(stderr, "normload: %llu of %llu requests failed (--max_error_rate %g)\n",
                 static_cast<unsigned long long>(errors), static_cast<unsigned long long>(sent),
                 flags.max_error_rate);
    return 4;
  }
  if (result.abandoned > 0) {
    std::fprintf(stderr, "normload: %llu requests abandoned\n",
                 static_cast<unsigned long long>(result.abandoned));
    return 4;
  }
  if (result.streams_lost > 0) {
    std::fprintf(stderr, "normload: %llu stream(s) ended and could not be reopened\n",
                 static_cast<unsigned long long>(result.streams_lost));
    return 4;
  }
  return 0;
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
  absl::StatusOr<client::ChannelOptions> channel_options =
      cli::ChannelOptionsFromArgs(args, /*read_retries=*/false);
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
  // One channel to each distinct target that has one (channel i goes to
  // target i % targets): parameter sets must be on every server the load
  // reaches, once (a target listed twice weights the load, not the sets).
  std::vector<std::shared_ptr<grpc::Channel>> per_target;
  std::vector<std::string> distinct_targets;
  for (size_t i = 0; i < std::min(channels.size(), targets.size()); ++i) {
    if (std::find(distinct_targets.begin(), distinct_targets.end(), targets[i]) !=
        distinct_targets.end()) {
      continue;
    }
    distinct_targets.push_back(targets[i]);
    per_target.push_back(channels[i]);
  }
  Registrations registrations(per_target, distinct_targets, probe_options);
  if (!flags.engine.echo && !registrations.Register(*prepared)) return 1;

  // One run, or a sweep of runs.
  const std::string& swept = flags.swept;
  const std::vector<double>& values = flags.values;
  // With the JSON on stdout, the text report goes to stderr.
  std::FILE* report = flags.json_path == "-" ? stderr : stdout;
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
    PrintReport(report, description, result);
    std::fflush(report);
    runs_json.push_back(RunToJson(description, result));
    if (!swept.empty()) csv += SweepCsvRow(values[i], result);
    const int run_exit = RunExitCode(flags, result);
    if (run_exit == 3 || (run_exit != 0 && exit_code == 0)) exit_code = run_exit;
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
