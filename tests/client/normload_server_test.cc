// normload against CPU-backend normsvc servers started on loopback: the open
// loop's window, exit codes, registered sets on several targets, streams the
// server closes, flags checked before any call, and JSON on stdout.
#include <chrono>
#include <cmath>
#include <sstream>

#include "normsvc/client/channel.h"
#include "normsvc/client/client.h"
#include "normsvc_server.h"
#include "tool_runner.h"

namespace normsvc::testing {
namespace {

const std::string kOk = "code=\"OK\"";

// Names of the parameter sets a server holds (fails the test when it does
// not answer).
std::vector<std::string> ParameterSets(const std::string& target) {
  client::ChannelOptions options;
  options.target = target;
  client::NormalizerClient client(*client::MakeChannel(options));
  absl::StatusOr<v1::ListParametersResponse> list =
      client.ListParameters({.timeout = absl::Seconds(10), .wait_for_ready = true});
  EXPECT_TRUE(list.ok()) << list.status();
  std::vector<std::string> names;
  if (list.ok()) {
    for (const auto& set : list->parameter_sets()) names.push_back(set.name());
  }
  return names;
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// An offered rate far beyond what the server answers: sending stops when the
// window closes, the arrivals left are reported as not sent, the warm-up's
// backlog sent late counts in the window, and the rate is what came back
// over the time it took.
TEST(NormloadServerTest, OpenLoopStopsSendingAtTheWindowsEnd) {
  TempDir dir;
  NormsvcServer server(dir, "normsvc");
  ASSERT_TRUE(server.ready()) << server.Log();
  const double before = server.RequestsTotal({"method=\"Normalize\"", kOk});
  constexpr double kRate = 5000, kWarmup = 0.5, kDuration = 1.5;
  const auto start = std::chrono::steady_clock::now();
  const CommandResult run =
      RunCommand({kNormload, "--target=" + server.target(), "--rate=5000", "--max_in_flight=8",
                  "--channels=2", "--warmup_s=0.5", "--duration_s=1.5", "--quiet",
                  "--json=" + dir.File("open.json"), "--mix=rows=64,hidden=4096"},
                 std::chrono::seconds(60));
  const double wall = Seconds(start);
  ASSERT_EQ(run.exit_code, 0) << run.err << run.out;
  // 10000 arrivals of 1 MiB each cannot all be sent: the run ends with its
  // window, plus start-up and the answers to at most 8 requests in flight
  // (generous for the sanitizer builds; sending them all took over 40 s).
  EXPECT_LT(wall, kWarmup + kDuration + 12) << run.out;
  const google::protobuf::Struct json = ParseJson(ReadFile(dir.File("open.json")));
  const double ok = Number(json, {"measured", "ok"});
  const double total = Number(json, {"totals", "ok"});
  const double not_sent = Number(json, {"open_loop", "not_sent"});
  const double seconds = Number(json, {"measured", "seconds"});
  EXPECT_GT(not_sent, 0) << run.out;
  // Every arrival was either sent (and answered) or counted as not sent:
  // a Poisson count of mean 10000 (sd 100).
  EXPECT_NEAR(total + not_sent, kRate * (kWarmup + kDuration), 500) << run.out;
  EXPECT_EQ(server.RequestsTotal({"method=\"Normalize\"", kOk}) - before, total);
  // The server answers at about the same rate throughout, so the window
  // (3/4 of the run) holds well over 0.4 of the answers, although all its
  // own arrivals went unsent behind the warm-up's.
  EXPECT_GT(ok, 0.4 * total) << run.out;
  EXPECT_GE(seconds, kDuration);
  EXPECT_LT(seconds, wall);
  EXPECT_NEAR(Number(json, {"measured", "req_per_s"}), ok / seconds, 1e-3 * ok / seconds);
  EXPECT_LT(Number(json, {"measured", "req_per_s"}), kRate / 2);
  EXPECT_NE(run.out.find("not sent"), std::string::npos) << run.out;
}

// Failed requests fail the run (exit 4) unless --max_error_rate allows them;
// --verify with nothing verified fails it (exit 3); the first error names
// its code.
TEST(NormloadServerTest, ExitCodeSaysWhenRequestsFailed) {
  TempDir dir;
  NormsvcServer server(dir, "normsvc", {"--max_hidden_size=64"});
  ASSERT_TRUE(server.ready()) << server.Log();
  // A warm-up (the first requests set up the channels, slow under a
  // sanitizer) and a second of measurement: enough requests that "about
  // half fail" holds (a run of two requests, seen under ThreadSanitizer,
  // failed both a quarter of the time).
  auto load = [&](std::vector<std::string> extra) {
    std::vector<std::string> argv = {kNormload,
                                     "--target=" + server.target(),
                                     "--concurrency=2",
                                     "--warmup_s=0.3",
                                     "--duration_s=1",
                                     "--quiet",
                                     "--json=" + dir.File("run.json")};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return RunCommand(argv);
  };
  CommandResult run = load({"--mix=rows=1,hidden=128;rows=1,hidden=64"});
  EXPECT_EQ(run.exit_code, 4) << run.err << run.out;
  EXPECT_NE(run.err.find("requests failed"), std::string::npos) << run.err;
  google::protobuf::Struct json = ParseJson(ReadFile(dir.File("run.json")));
  const double errors = Number(json, {"totals", "errors"});
  const double ok = Number(json, {"totals", "ok"});
  EXPECT_GT(errors, 0);
  EXPECT_GT(ok, 0);
  EXPECT_GE(errors + ok, 20) << "too few requests for the error rates below to be meaningful";
  EXPECT_EQ(Field(json, "first_error").string_value().rfind("INVALID_ARGUMENT: ", 0), 0u)
      << Field(json, "first_error").string_value();
  // About half the requests fail: a 0.9 rate tolerates that, 0.1 does not.
  run = load({"--mix=rows=1,hidden=128;rows=1,hidden=64", "--max_error_rate=0.9"});
  EXPECT_EQ(run.exit_code, 0) << run.err << run.out;
  run = load({"--mix=rows=1,hidden=128;rows=1,hidden=64", "--max_error_rate=0.1"});
  EXPECT_EQ(run.exit_code, 4) << run.err << run.out;
  // Every request fails: nothing to verify.
  run = load({"--mix=rows=1,hidden=128", "--max_error_rate=1", "--verify"});
  EXPECT_EQ(run.exit_code, 3) << run.err << run.out;
  EXPECT_NE(run.err.find("no response was verified"), std::string::npos) << run.err;
  run = load({"--max_error_rate=1.5"});
  EXPECT_EQ(run.exit_code, 2) << run.err;
}

// With two targets, registered parameter sets are on both servers during the
// run (every request answered and verified) and on neither after it.
TEST(NormloadServerTest, RegisteredSetsReachEveryTarget) {
  TempDir dir;
  NormsvcServer a(dir, "a"), b(dir, "b");
  ASSERT_TRUE(a.ready()) << a.Log();
  ASSERT_TRUE(b.ready()) << b.Log();
  const CommandResult run = RunCommand(
      {kNormload, "--target=" + a.target() + "," + b.target(), "--channels=2", "--concurrency=4",
       "--warmup_s=0", "--duration_s=0.5", "--quiet", "--verify", "--json=" + dir.File("two.json"),
       "--mix=op=rmsnorm,rows=2,hidden=128,params=registered;"
       "op=layernorm,rows=1,hidden=64,params=registered"});
  EXPECT_EQ(run.exit_code, 0) << run.err << run.out;
  const google::protobuf::Struct json = ParseJson(ReadFile(dir.File("two.json")));
  EXPECT_EQ(Number(json, {"totals", "errors"}), 0) << Field(json, "first_error").string_value();
  const double on_a = a.RequestsTotal({"method=\"Normalize\"", kOk});
  const double on_b = b.RequestsTotal({"method=\"Normalize\"", kOk});
  EXPECT_GT(on_a, 0);
  EXPECT_GT(on_b, 0);
  EXPECT_EQ(on_a + on_b, Number(json, {"totals", "ok"}));
  EXPECT_TRUE(ParameterSets(a.target()).empty());
  EXPECT_TRUE(ParameterSets(b.target()).empty());

  // A target listed twice weights the load; its sets are registered once.
  const CommandResult twice =
      RunCommand({kNormload, "--target=" + a.target() + "," + a.target() + "," + b.target(),
                  "--channels=3", "--concurrency=3", "--warmup_s=0", "--duration_s=0.3", "--quiet",
                  "--mix=op=rmsnorm,rows=1,hidden=32,params=registered"});
  EXPECT_EQ(twice.exit_code, 0) << twice.err << twice.out;
  EXPECT_TRUE(ParameterSets(a.target()).empty());
}

// A server that closes connections after 500 ms: normload opens a new stream
// and keeps the load going for the whole window (requests cut off with a
// connection count as errors, within the allowed rate).
TEST(NormloadServerTest, StreamsTheServerClosesAreReopened) {
  TempDir dir;
  NormsvcServer server(dir, "normsvc",
                       {"--max_connection_age_ms=500", "--max_connection_age_grace_ms=100"});
  ASSERT_TRUE(server.ready()) << server.Log();
  const CommandResult run =
      RunCommand({kNormload, "--target=" + server.target(), "--concurrency=4", "--channels=1",
                  "--warmup_s=0", "--duration_s=2.5", "--max_error_rate=0.2",
                  "--json=" + dir.File("stream.json"), "--mix=rows=2,hidden=256,transport=stream"});
  EXPECT_EQ(run.exit_code, 0) << run.err << run.out;
  const google::protobuf::Struct json = ParseJson(ReadFile(dir.File("stream.json")));
  EXPECT_GE(Number(json, {"streams", "reopened"}), 2) << run.out;
  EXPECT_EQ(Number(json, {"streams", "lost"}), 0);
  // Every answer normload counted, the server counted; an answer the server
  // sent as the connection closed may not have arrived (an error here).
  const double server_ok = server.RequestsTotal({"method=\"NormalizeStream\"", kOk});
  const double client_ok = Number(json, {"totals", "by_method", "NormalizeStream", "ok"});
  EXPECT_GE(server_ok, client_ok);
  EXPECT_LE(server_ok - client_ok, Number(json, {"totals", "errors"}));
  EXPECT_GT(client_ok, 0);
  // Answers kept coming in the window's last second (progress lines).
  double last_rate = -1;
  std::istringstream lines(run.err);
  std::string line;
  while (std::getline(lines, line)) {
    double at = 0, rate = 0;
    char phase[16] = {};
    if (std::sscanf(line.c_str(), "[ %lfs] %15s %lf req/s", &at, phase, &rate) == 3 &&
        std::string(phase) == "measure") {
      last_rate = rate;
    }
  }
  EXPECT_GT(last_rate, 0) << run.err;
}

// Streams retired by age (--stream_rotate_ms) are answered to the end before
// the server's grace period after its maximum connection age runs out: no
// request in flight is cut off, so the run has no error at all (a stream
// kept open would be cut off at about 0.9 s with requests in flight).
TEST(NormloadServerTest, StreamsRetiredByAgeLoseNothingToConnectionAge) {
  TempDir dir;
  NormsvcServer server(dir, "normsvc",
                       {"--max_connection_age_ms=300", "--max_connection_age_grace_ms=600"});
  ASSERT_TRUE(server.ready()) << server.Log();
  const CommandResult run =
      RunCommand({kNormload, "--target=" + server.target(), "--concurrency=4", "--channels=1",
                  "--warmup_s=0", "--duration_s=2", "--stream_rotate_ms=150", "--max_error_rate=0",
                  "--json=" + dir.File("rotate.json"), "--mix=rows=2,hidden=256,transport=stream"});
  EXPECT_EQ(run.exit_code, 0) << run.err << run.out;
  const google::protobuf::Struct json = ParseJson(ReadFile(dir.File("rotate.json")));
  EXPECT_EQ(Number(json, {"totals", "errors"}), 0) << run.out;
  EXPECT_GE(Number(json, {"streams", "rotated"}), 5) << run.out;
  EXPECT_EQ(Number(json, {"streams", "lost"}), 0);
  const double client_ok = Number(json, {"totals", "by_method", "NormalizeStream", "ok"});
  EXPECT_GT(client_ok, 0);
  EXPECT_EQ(server.RequestsTotal({"method=\"NormalizeStream\"", kOk}), client_ok);
}

// Flags are checked before normload connects (no server on the target), and
// a run whose parameter sets cannot all be registered leaves none behind.
TEST(NormloadServerTest, FlagsAreCheckedFirstAndSetsAreAlwaysDeleted) {
  const std::string nowhere = "--target=127.0.0.1:" + std::to_string(PickFreePort());
  for (std::vector<std::string> flags : {std::vector<std::string>{"--sweep=concurrency=x"},
                                         {"--sweep=concurrency=1.5"},
                                         {"--sweep=rate="},
                                         {"--plot=p.png"},
                                         {"--csv=p.csv"},
                                         {"--stream_rotate_ms=-1"},
                                         {"--retries=5"}}) {  // normctl's, not normload's
    flags.insert(flags.begin(), {kNormload, nowhere, "--mix=params=registered"});
    const auto start = std::chrono::steady_clock::now();
    const CommandResult run = RunCommand(flags, std::chrono::seconds(30));
    EXPECT_EQ(run.exit_code, 2) << flags.back() << ": " << run.err;
    if (flags.back() == "--retries=5") {
      EXPECT_NE(run.err.find("retries"), std::string::npos) << run.err;
    }
    EXPECT_LT(Seconds(start), 10.0) << flags.back();  // no connection attempt, even in ASan
  }
  TempDir dir;
  NormsvcServer server(dir, "normsvc", {"--max_parameter_sets=1"});
  ASSERT_TRUE(server.ready()) << server.Log();
  const CommandResult run = RunCommand(
      {kNormload, "--target=" + server.target(), "--warmup_s=0", "--duration_s=0.2", "--quiet",
       "--mix=rows=1,hidden=64,params=registered;op=rmsnorm,rows=1,"
       "hidden=32,params=registered"});
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_NE(run.err.find("RESOURCE_EXHAUSTED"), std::string::npos) << run.err;
  EXPECT_TRUE(ParameterSets(server.target()).empty());
}

// --json - puts the JSON alone on stdout; the text report goes to stderr.
TEST(NormloadServerTest, JsonOnStdoutStandsAlone) {
  TempDir dir;
  NormsvcServer server(dir, "normsvc");
  ASSERT_TRUE(server.ready()) << server.Log();
  const CommandResult run =
      RunCommand({kNormload, "--target=" + server.target(), "--concurrency=2", "--warmup_s=0",
                  "--duration_s=0.3", "--quiet", "--json=-", "--mix=rows=1,hidden=64"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const google::protobuf::Struct json = ParseJson(run.out);
  EXPECT_EQ(Field(json, "schema").string_value(), "normload/v1") << run.out;
  EXPECT_EQ(Number(json, {"totals", "ok"}), server.RequestsTotal({"method=\"Normalize\"", kOk}));
  EXPECT_NE(run.err.find("throughput"), std::string::npos) << run.err;
}

}  // namespace
}  // namespace normsvc::testing
