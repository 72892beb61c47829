// Flags and NORMSVC_* environment variables (the flag table in README.md), and the
// host facts automatic values are resolved by (usable CPUs).
#include "server/options.h"

#include <algorithm>
#include <limits>
#include <map>
#include <thread>

#include "server/build_info.h"
#include "server/usable_cpus.h"

#include <gtest/gtest.h>

namespace normsvc::server {
namespace {

EnvLookup Env(std::map<std::string, std::string> values) {
  return [values](const std::string& name) -> std::optional<std::string> {
    auto it = values.find(name);
    if (it == values.end()) return std::nullopt;
    return it->second;
  };
}

TEST(OptionsTest, DefaultsAreTheDocumentedOnes) {
  absl::StatusOr<CommandLine> parsed = ParseCommandLine({}, Env({}));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const ServerOptions& o = parsed->options;
  EXPECT_EQ(o.grpc_address, "0.0.0.0:50051");
  EXPECT_EQ(o.metrics_address, "0.0.0.0:9464");
  EXPECT_EQ(o.backend, Backend::kAuto);
  EXPECT_TRUE(o.devices.empty());
  EXPECT_EQ(o.max_batch_rows, 8192);
  EXPECT_EQ(o.max_batch_bytes, 67108864);
  EXPECT_EQ(o.max_queue_delay_us, 0);
  EXPECT_EQ(o.max_queue_size, 4096);
  EXPECT_EQ(o.max_queued_bytes, 1073741824);
  EXPECT_EQ(o.max_hidden_size, 262144);
  EXPECT_EQ(o.max_request_rows, 1048576);
  EXPECT_EQ(o.max_request_bytes, 268435456);
  EXPECT_EQ(o.max_receive_message_bytes, 671088640);
  // No request the other defaults admit is refused by gRPC's message limit.
  EXPECT_GE(o.max_receive_message_bytes, LargestRequestMessageBytes(o));
  EXPECT_EQ(o.max_parameter_sets, 1024);
  EXPECT_EQ(o.max_parameter_bytes, 1073741824);
  EXPECT_EQ(o.batches_in_flight, 2);
  EXPECT_EQ(o.overlap_min_bytes, 0);
  EXPECT_EQ(o.idle_spin_us, -1);
  EXPECT_EQ(o.staging_buffer_bytes, 134217728);
  EXPECT_EQ(o.keepalive_time_ms, 30000);
  EXPECT_EQ(o.keepalive_timeout_ms, 10000);
  EXPECT_EQ(o.max_connection_age_ms, 0);
  EXPECT_EQ(o.max_connection_age_grace_ms, 30000);
  EXPECT_EQ(o.drain_timeout_s, 30);
  EXPECT_EQ(o.memory_release_interval_s, 10);
  EXPECT_EQ(o.log_level, "info");
}

TEST(OptionsTest, EnvironmentSetsFlagsAndTheCommandLineWins) {
  absl::StatusOr<CommandLine> parsed = ParseCommandLine(
      {"--max_batch_rows=512", "--devices", "0,2", "--backend=cpu", "--reply_threads=0"},
      Env({{"NORMSVC_MAX_BATCH_ROWS", "64"},
           {"NORMSVC_GPU_WAIT", "block"},
           {"NORMSVC_MAX_QUEUE_DELAY_US", "250"},
           {"NORMSVC_METRICS_ADDRESS", ""},
           {"NORMSVC_BACKEND", "cuda"}}));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->options.max_batch_rows, 512);      // flag over env
  EXPECT_EQ(parsed->options.max_queue_delay_us, 250);  // env
  EXPECT_EQ(parsed->options.metrics_address, "");      // env may switch metrics off
  EXPECT_EQ(parsed->options.backend, Backend::kCpu);
  EXPECT_EQ(parsed->options.devices, (std::vector<int>{0, 2}));
  EXPECT_EQ(parsed->options.gpu_wait, GpuWait::kBlock);
  EXPECT_EQ(parsed->options.reply_threads, 0);
}

// A bad environment value cannot hide --help or --version, and a flag given
// on the command line does not read its variable at all.
TEST(OptionsTest, CommandLineIsReadBeforeTheEnvironment) {
  const EnvLookup bad = Env({{"NORMSVC_BACKEND", "gpu"}, {"NORMSVC_MAX_BATCH_ROWS", "abc"}});
  absl::StatusOr<CommandLine> help = ParseCommandLine({"--help"}, bad);
  ASSERT_TRUE(help.ok()) << help.status();
  EXPECT_EQ(help->action, CommandLine::Action::kHelp);
  absl::StatusOr<CommandLine> version = ParseCommandLine({"--version"}, bad);
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_EQ(version->action, CommandLine::Action::kVersion);

  absl::StatusOr<CommandLine> parsed =
      ParseCommandLine({"--max_batch_rows=10", "--backend", "cpu"}, bad);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->options.max_batch_rows, 10);
  EXPECT_EQ(parsed->options.backend, Backend::kCpu);

  // A variable whose flag is not on the command line is still read, and checked.
  absl::StatusOr<CommandLine> env_only = ParseCommandLine({"--backend=cpu"}, bad);
  ASSERT_FALSE(env_only.ok());
  EXPECT_NE(env_only.status().message().find("NORMSVC_MAX_BATCH_ROWS"), absl::string_view::npos)
      << env_only.status().message();
}

TEST(OptionsTest, HelpListsEveryFlagWithItsEnvironmentVariableAndDefault) {
  absl::StatusOr<CommandLine> parsed = ParseCommandLine({"--help"}, Env({}));
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->action, CommandLine::Action::kHelp);
  for (const char* flag : {"grpc_address",
                           "metrics_address",
                           "backend",
                           "devices",
                           "max_batch_rows",
                           "max_batch_bytes",
                           "max_queue_delay_us",
                           "max_queue_size",
                           "max_queued_bytes",
                           "max_hidden_size",
                           "max_request_rows",
                           "max_request_bytes",
                           "max_receive_message_bytes",
                           "max_parameter_sets",
                           "max_parameter_bytes",
                           "batches_in_flight",
                           "overlap_min_bytes",
                           "idle_spin_us",
                           "reply_threads",
                           "gpu_wait",
                           "staging_buffer_bytes",
                           "keepalive_time_ms",
                           "keepalive_timeout_ms",
                           "max_connection_age_ms",
                           "max_connection_age_grace_ms",
                           "drain_timeout_s",
                           "batch_timeout_s",
                           "memory_release_interval_s",
                           "log_level"}) {
    std::string env = std::string("NORMSVC_") + flag;
    for (char& ch : env) ch = static_cast<char>(std::toupper(ch));
    EXPECT_NE(parsed->text.find(std::string("--") + flag + " (env " + env + ", default"),
              std::string::npos)
        << flag;
  }
  EXPECT_NE(parsed->text.find("default \"8192\""), std::string::npos);
  EXPECT_EQ(ParseCommandLine({"--version"}, Env({}))->action, CommandLine::Action::kVersion);
}

TEST(OptionsTest, BadValuesAreErrorsNamingTheFlagOrVariable) {
  struct Case {
    std::vector<std::string> args;
    std::map<std::string, std::string> env;
    const char* message;
  };
  const Case cases[] = {
      {{"--max_batch_rows=lots"}, {}, "--max_batch_rows: 'lots' is not an integer"},
      {{}, {{"NORMSVC_MAX_QUEUE_SIZE", "x"}}, "NORMSVC_MAX_QUEUE_SIZE: --max_queue_size"},
      {{"--nonsense=1"}, {}, "unknown flag --nonsense"},
      {{"--backend=gpu"}, {}, "--backend: 'gpu' is not one of auto, cuda, cpu"},
      {{"--devices=0,x"}, {}, "--devices:"},
      {{"--max_receive_message_bytes=1000"}, {}, "--max_receive_message_bytes must be >= 67108864"},
      {{"--max_batch_rows=0"}, {}, "--max_batch_rows must be >= 1"},
      {{"--memory_release_interval_s=-1"}, {}, "--memory_release_interval_s must be >= 0"},
      {{"--reply_threads=-2"}, {}, "--reply_threads must be >= -1"},
      {{"--gpu_wait=poll"}, {}, "--gpu_wait: 'poll' is not one of auto, spin, block"},
      {{"--reply_threads=257"}, {}, "--reply_threads must be <= 256"},
      {{"--idle_spin_us=-2"}, {}, "--idle_spin_us must be >= -1"},
      {{"--overlap_min_bytes=-1"}, {}, "--overlap_min_bytes must be >= 0"},
      {{"--batch_timeout_s=-2"}, {}, "--batch_timeout_s must be >= -1"},
      {{"--max_hidden_size=2000000"}, {}, "--max_hidden_size must be <= 1048576"},
      {{"--log_level=loud"}, {}, "--log_level: 'loud'"},
      {{"--drain_timeout_s"}, {}, "--drain_timeout_s needs a value"},
      {{"stray"}, {}, "unexpected argument 'stray'"},
      {{"--devices=0,1,0"}, {}, "--devices: device 0 is listed twice"},
      {{"--max_request_rows=9223372036854775807"}, {}, "must fit in 64 bits"},
      {{"--max_request_rows=8796093022208", "--max_hidden_size=262144"}, {}, "must fit in 64 bits"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<CommandLine> parsed = ParseCommandLine(c.args, Env(c.env));
    ASSERT_FALSE(parsed.ok()) << c.message;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find(c.message), absl::string_view::npos)
        << parsed.status().message();
  }
}

// -1 resolves by the CPUs the process may use; other values stay.
TEST(OptionsTest, AutomaticIdleSpinNeedsEightUsableCpus) {
  EXPECT_EQ(ResolveIdleSpinUs(-1, 1), 0);
  EXPECT_EQ(ResolveIdleSpinUs(-1, 2), 0);
  EXPECT_EQ(ResolveIdleSpinUs(-1, kAutoIdleSpinMinCpus - 1), 0);
  EXPECT_EQ(ResolveIdleSpinUs(-1, kAutoIdleSpinMinCpus), kAutoIdleSpinUs);
  EXPECT_EQ(ResolveIdleSpinUs(-1, 128), kAutoIdleSpinUs);
  EXPECT_EQ(ResolveIdleSpinUs(0, 128), 0);
  EXPECT_EQ(ResolveIdleSpinUs(123, 1), 123);
}

TEST(OptionsTest, LargestRequestMessageBytesCountsBothTensorsStatisticsAndParameters) {
  ServerOptions o;
  o.max_request_bytes = 100 << 20;
  o.max_request_rows = 100000;
  o.max_hidden_size = 4096;
  // Backward: x and dy, 8 bytes of statistics a row, an fp32 gamma, framing.
  EXPECT_EQ(LargestRequestMessageBytes(o), (200 << 20) + 800000 + 4 * 4096 + (64 << 10));
  o.max_request_rows = 1;  // then a forward request's fp32 gamma and beta weigh more
  EXPECT_EQ(LargestRequestMessageBytes(o), (200 << 20) + 8 * 4096 + (64 << 10));
  o.max_request_bytes = std::numeric_limits<int64_t>::max();  // saturates, no overflow
  EXPECT_EQ(LargestRequestMessageBytes(o), std::numeric_limits<int64_t>::max());
}

TEST(OptionsTest, GrpcMemoryQuotaIsTheBudgetAndOneMessageUnlessSet) {
  ServerOptions o;
  o.max_queued_bytes = 32 << 20;
  o.max_receive_message_bytes = 64 << 20;
  EXPECT_EQ(o.grpc_memory_quota_bytes, -1);  // auto by default
  EXPECT_EQ(GrpcMemoryQuotaBytes(o), 96 << 20);
  o.max_queued_bytes = std::numeric_limits<int64_t>::max();  // saturates, no overflow
  EXPECT_EQ(GrpcMemoryQuotaBytes(o), std::numeric_limits<int64_t>::max());
  o.grpc_memory_quota_bytes = 12345;
  EXPECT_EQ(GrpcMemoryQuotaBytes(o), 12345);
  o.grpc_memory_quota_bytes = 0;  // none
  EXPECT_EQ(GrpcMemoryQuotaBytes(o), 0);
  o.grpc_memory_quota_bytes = -2;
  const absl::Status refused = ValidateOptions(o);
  EXPECT_NE(refused.message().find("--grpc_memory_quota_bytes must be >= -1"), std::string::npos)
      << refused;
}

TEST(OptionsTest, CgroupCpuLimitsAreReadAsWholeCpus) {
  EXPECT_EQ(CpusFromCgroupV2("max 100000\n"), std::nullopt);
  EXPECT_EQ(CpusFromCgroupV2("200000 100000\n"), 2);
  EXPECT_EQ(CpusFromCgroupV2("150000 100000"), 1);  // 1.5 CPUs keep one thread busy
  EXPECT_EQ(CpusFromCgroupV2("750000 100000"), 7);
  EXPECT_EQ(CpusFromCgroupV2("50000 100000"), 1);  // never below one
  EXPECT_EQ(CpusFromCgroupV2("1600000 100000"), 16);
  EXPECT_EQ(CpusFromCgroupV2("17592186044415 1000"), 2147483647);  // saturates
  EXPECT_EQ(CpusFromCgroupV2(""), std::nullopt);                   // no such file
  EXPECT_EQ(CpusFromCgroupV2("nonsense"), std::nullopt);
  EXPECT_EQ(CpusFromCgroupV1("-1\n", "100000\n"), std::nullopt);
  EXPECT_EQ(CpusFromCgroupV1("400000\n", "100000\n"), 4);
  EXPECT_EQ(CpusFromCgroupV1("", ""), std::nullopt);
  EXPECT_EQ(CgroupPathAndParents("/kubepods/pod1/c2"),
            (std::vector<std::string>{"/kubepods/pod1/c2", "/kubepods/pod1", "/kubepods", "/"}));
  EXPECT_EQ(CgroupPathAndParents("/a/"), (std::vector<std::string>{"/a", "/"}));
  EXPECT_EQ(CgroupPathAndParents("/"), (std::vector<std::string>{"/"}));
  EXPECT_EQ(CgroupPathAndParents(""), (std::vector<std::string>{"/"}));
  const int usable = UsableCpus();
  EXPECT_GE(usable, 1);
  EXPECT_LE(usable, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
}

// The build writes the commit at every build (server/git_commit.cmake); the
// tests always build inside the checkout, so it is known.
TEST(BuildInfoTest, GitCommitIsTheCheckoutsShortHash) {
  const std::string commit = GitCommit();
  const std::string hash = commit.substr(0, commit.find('-'));
  EXPECT_EQ(hash.size(), 12u) << commit;
  EXPECT_EQ(hash.find_first_not_of("0123456789abcdef"), std::string::npos) << commit;
  EXPECT_TRUE(commit.size() == 12 || commit.substr(12) == "-dirty") << commit;
}

}  // namespace
}  // namespace normsvc::server
