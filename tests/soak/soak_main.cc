// normsvc_soak: starts a CPU-backend normsvc on loopback, measures its
// capacity with a closed loop, then drives it at a multiple of that
// capacity (open loop) for a bounded time with cancellations, deadlines
// that expire in the queue, malformed and oversized requests, and stream
// clients that disconnect mid-stream. Prints a table, writes a JSON report,
// and exits 0 only when every check holds (README.md in this folder).
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "normsvc/client/channel.h"
#include "normsvc/client/client.h"
#include "server/sanitizer_allocator.h"
#include "server_under_test.h"
#include "smaps_growth.h"
#include "soak_report.h"
#include "stream_load.h"
#include "unary_load.h"

namespace normsvc::soak {
namespace {

#ifdef NORMSVC_SANITIZER_ALLOCATOR
constexpr bool kHeapReleaseBuild = false;  // the server's allocator is the sanitizer's
#else
constexpr bool kHeapReleaseBuild = true;
#endif

// Malloc settings under which freed memory goes back to the system: fixed
// 128 KiB mmap and trim thresholds, two arenas (server/README.md).
constexpr const char* kReleasingMallocTunables =
    "glibc.malloc.mmap_threshold=131072:glibc.malloc.arena_max=2";

struct Flags {
  std::string server = NORMSVC_SERVER_PATH;
  double duration_s = 60;  // open loop, warm-up included
  double warmup_s = -1;    // the least warm-up; default: min(60, duration / 4)
  double capacity_s = 5;
  int capacity_concurrency = 32;
  double overload = 2.0;
  int channels = 4;
  int stream_clients = 4;
  // Short enough that the overload fills it whatever the machine: the open
  // loop's senders reach only about two thirds of their rate on two shared
  // cores, and with 256 the queue stayed under its limit in some runs.
  int max_queue_size = 64;
  double huge_every_s = 4;       // during the warm-up; 0: no huge requests
  int max_open_calls = 2048;     // unary calls the open loop keeps open at most
  double max_open_mib = 160;     // request bytes (MiB) it keeps open at most
  int server_malloc_arenas = 2;  // MALLOC_ARENA_MAX of the server; 0: glibc's default
  // GLIBC_TUNABLES of the server ("": the server's own malloc settings).
  std::string server_malloc_tunables = kReleasingMallocTunables;
  double max_heap_growth_mib = 1;  // negative: report only
  // Negative: report only (the default: README.md, "Memory readings").
  double max_rss_growth = -1;
  double progress_s = 10;  // a progress line this often; 0: none
  uint64_t seed = 0;       // 0: random
  std::string json = "soak_report.json";
  std::string server_log = "soak_server.log";
  // When set, the server's /proc/<pid>/smaps at each memory reading goes to
  // <prefix>.warm and <prefix>.end (which mappings grew).
  std::string smaps_prefix;
};

constexpr const char* kUsage =
    "usage: normsvc_soak [--duration_s=60] [--warmup_s=min(60, duration_s/4)] [--capacity_s=5]\n"
    "  [--capacity_concurrency=32] [--overload=2] [--channels=4] [--stream_clients=4]\n"
    "  [--max_queue_size=64] [--huge_every_s=4 (0: none)]\n"
    "  [--max_open_calls=2048] [--max_open_mib=160]\n"
    "  [--server_malloc_arenas=2 (0: glibc's default)]\n"
    "  [--server_malloc_tunables=glibc.malloc.mmap_threshold=131072:glibc.malloc.arena_max=2\n"
    "   (\"\": the server's own malloc settings)]\n"
    "  [--max_heap_growth_mib=1] [--max_rss_growth=-1] (negative: report only)\n"
    "  [--progress_s=10 (0: none)] [--seed=N]\n"
    "  [--json=soak_report.json] [--server_log=soak_server.log] [--server=PATH]\n"
    "  [--smaps_prefix=PATH (the server's smaps at each memory reading: PATH.warm, PATH.end)]\n";

bool ParseFlags(int argc, char** argv, Flags* flags) {
  std::map<std::string, std::string> values;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    const size_t eq = arg.find('=');
    if (arg.rfind("--", 0) != 0 || eq == std::string::npos) return false;
    values[arg.substr(2, eq - 2)] = arg.substr(eq + 1);
  }
  bool ok = true;
  const auto number = [&](const char* name, auto* out) {
    auto it = values.find(name);
    if (it == values.end()) return;
    double value = 0;
    ok = ok && absl::SimpleAtod(it->second, &value);
    *out = static_cast<std::remove_pointer_t<decltype(out)>>(value);
    values.erase(it);
  };
  const auto text = [&](const char* name, std::string* out) {
    if (auto it = values.find(name); it != values.end()) {
      *out = it->second;
      values.erase(it);
    }
  };
  number("duration_s", &flags->duration_s);
  number("warmup_s", &flags->warmup_s);
  number("capacity_s", &flags->capacity_s);
  number("capacity_concurrency", &flags->capacity_concurrency);
  number("overload", &flags->overload);
  number("channels", &flags->channels);
  number("stream_clients", &flags->stream_clients);
  number("max_queue_size", &flags->max_queue_size);
  number("huge_every_s", &flags->huge_every_s);
  number("max_open_calls", &flags->max_open_calls);
  number("max_open_mib", &flags->max_open_mib);
  number("server_malloc_arenas", &flags->server_malloc_arenas);
  number("max_heap_growth_mib", &flags->max_heap_growth_mib);
  number("max_rss_growth", &flags->max_rss_growth);
  text("server_malloc_tunables", &flags->server_malloc_tunables);
  number("progress_s", &flags->progress_s);
  number("seed", &flags->seed);
  text("json", &flags->json);
  text("server_log", &flags->server_log);
  text("server", &flags->server);
  text("smaps_prefix", &flags->smaps_prefix);
  if (flags->warmup_s < 0) flags->warmup_s = std::min(60.0, flags->duration_s / 4);
  return ok && values.empty() && flags->duration_s > flags->warmup_s && flags->channels > 0 &&
         flags->overload > 0 && flags->capacity_concurrency > 0;
}

using Millis = std::chrono::milliseconds;
Millis ToMillis(double seconds) { return Millis(static_cast<int64_t>(seconds * 1000)); }

// Waits (at most 10 s) until the server has nothing queued or running.
bool WaitServerIdle(const ServerUnderTest& server, std::string* detail) {
  const auto give_up = Clock::now() + std::chrono::seconds(10);
  double pending = -1, in_flight = -1;
  do {
    const std::string metrics = server.Metrics();
    pending = SumSeries(metrics, "normsvc_pending_requests");
    in_flight = SumSeries(metrics, "normsvc_batches_in_flight");
    if (pending == 0 && in_flight == 0) return true;
    std::this_thread::sleep_for(Millis(100));
  } while (Clock::now() < give_up);
  *detail =
      absl::StrCat("normsvc_pending_requests ", pending, ", normsvc_batches_in_flight ", in_flight);
  return false;
}

// One line of progress: seconds into the load, what was sent and answered
// so far, and the server's resident memory.
void PrintProgress(double at, bool warming, const Tally& tally, int64_t server_rss) {
  std::printf(
      "[%5.0f s] %s sent %llu, OK %llu, RESOURCE_EXHAUSTED %llu, wrong %llu, "
      "server VmRSS %.1f MiB\n",
      at, warming ? "warm-up " : "overload", static_cast<unsigned long long>(tally.total_sent()),
      static_cast<unsigned long long>(tally.total_code(0)),
      static_cast<unsigned long long>(
          tally.total_code(static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED))),
      static_cast<unsigned long long>(tally.wrong()), server_rss / 1048576.0);
  std::fflush(stdout);
}

// The server's live heap allocations from its metrics; -1 when absent.
int64_t HeapAllocatedBytes(const ServerUnderTest& server) {
  return static_cast<int64_t>(SumSeries(server.Metrics(), "normsvc_heap_allocated_bytes"));
}

// The same once it has settled: the server frees a closed connection's
// state shortly after the client closes it. Two readings 200 ms apart
// within 64 KiB of each other, or the last reading after 10 s.
int64_t SettledHeapBytes(const ServerUnderTest& server) {
  const auto give_up = Clock::now() + std::chrono::seconds(10);
  int64_t before = HeapAllocatedBytes(server);
  while (Clock::now() < give_up) {
    std::this_thread::sleep_for(Millis(200));
    const int64_t now = HeapAllocatedBytes(server);
    if (before >= 0 && now >= 0 && std::abs(now - before) <= (64 << 10)) return now;
    before = now;
  }
  return before;
}

// Client connections to the server: `count` channels, each its own HTTP/2
// connection, and a stub on each.
struct Connections {
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<v1::Normalizer::Stub>> owned_stubs;
  std::vector<v1::Normalizer::Stub*> stubs;
};

Connections Connect(const std::string& target, int count) {
  Connections connections;
  for (int i = 0; i < count; ++i) {
    client::ChannelOptions options;
    options.target = target;
    options.retry_max_attempts = 1;  // every refusal must reach the tally
    options.dedicated_connection = true;
    connections.channels.push_back(*client::MakeChannel(options));
    connections.owned_stubs.push_back(v1::Normalizer::NewStub(connections.channels.back()));
    connections.stubs.push_back(connections.owned_stubs.back().get());
  }
  return connections;
}

// glibc gives threads their own heap arenas (up to 8 per core) and keeps
// what is freed in each: as gRPC's thread pools grow, every new arena's
// high-water mark adds resident memory, in steps, for minutes. With a fixed
// number of arenas and malloc settings that give freed memory back
// (kReleasingMallocTunables), resident memory after a release measures what
// the server keeps (README.md).
std::vector<std::string> ServerEnvironment(const Flags& flags) {
  std::vector<std::string> environment;
  if (flags.server_malloc_arenas > 0) {
    environment.push_back(absl::StrCat("MALLOC_ARENA_MAX=", flags.server_malloc_arenas));
  }
  if (!flags.server_malloc_tunables.empty()) {
    environment.push_back("GLIBC_TUNABLES=" + flags.server_malloc_tunables);
  }
  return environment;
}

int Run(const Flags& flags) {
  SoakReport report;
  report.seed = flags.seed != 0 ? flags.seed : std::random_device{}() | 1;
  report.duration_s = flags.duration_s;
  report.stream_clients = flags.stream_clients;
  const SoakLimits limits;
  const Workload workload = BuildWorkload(report.seed, limits, 64);

  ServerUnderTest server(
      flags.server,
      {"--backend=cpu", absl::StrCat("--max_queue_size=", flags.max_queue_size),
       absl::StrCat("--max_hidden_size=", limits.max_hidden_size),
       absl::StrCat("--max_request_rows=", limits.max_request_rows),
       absl::StrCat("--max_request_bytes=", limits.max_request_bytes),
       absl::StrCat("--max_receive_message_bytes=", limits.max_receive_message_bytes),
       "--drain_timeout_s=30",
       // Releases only when the memory readings ask for one (SIGUSR1).
       "--memory_release_interval_s=0"},
      ServerEnvironment(flags), flags.server_log);
  if (!server.ready()) {
    std::fprintf(stderr, "normsvc_soak: the server did not start:\n%s\n", server.Log().c_str());
    return 2;
  }
  {
    client::NormalizerClient control(Connect(server.target(), 1).channels[0]);
    for (const ParameterSetSpec& set : workload.parameter_sets) {
      if (auto registered = control.RegisterParameters(set.request); !registered.ok()) {
        std::fprintf(stderr, "normsvc_soak: RegisterParameters: %s\n",
                     registered.status().ToString().c_str());
        return 2;
      }
    }
  }
  report.heap_start_bytes = SettledHeapBytes(server);
  report.rss_start_bytes = server.ResidentBytes();
  Connections connections = Connect(server.target(), flags.channels);

  Tally tally;
  std::string idle_detail;
  bool idle = true;
  bool released = true;  // every memory reading's release request was answered
  {
    UnaryLoad load(workload, connections.stubs, &tally, report.seed);
    report.capacity_rps =
        load.MeasureCapacity(flags.capacity_concurrency, ToMillis(flags.capacity_s));
    report.offered_rps = flags.overload * report.capacity_rps;
    std::printf("capacity %.0f req/s; open loop at %.0f req/s for %.0f s\n", report.capacity_rps,
                report.offered_rps, flags.duration_s);
    std::fflush(stdout);

    // Warm-up: at least --warmup_s, then until resident memory has not risen
    // by 1% for 10 s (freed heap stays resident, so the readings climb to the
    // high-water mark the load can reach), at most half of --duration_s.
    const Clock::time_point start = Clock::now();
    const double max_warmup_s = std::max(flags.warmup_s, flags.duration_s / 2);
    std::atomic<bool> sampling{true}, warming{true}, end_warmup{false};
    double next_progress_s = flags.progress_s;
    std::thread sampler([&] {
      while (sampling.load()) {
        const double at = std::chrono::duration<double>(Clock::now() - start).count();
        const int64_t rss = server.ResidentBytes();
        report.rss_trace.emplace_back(at, rss);
        if (flags.progress_s > 0 && at >= next_progress_s) {
          next_progress_s += flags.progress_s;
          PrintProgress(at, warming.load(), tally, rss);
        }
        report.rss_peak_bytes = std::max(report.rss_peak_bytes, rss);
        if (warming.load() && at >= flags.warmup_s) {
          int64_t before = -1, highest = 0;
          for (const auto& [t, bytes] : report.rss_trace) {
            if (t < at - 10) before = bytes;
            if (t >= at - 10) highest = std::max(highest, bytes);
          }
          if ((before > 0 && highest <= before * 1.01) || at >= max_warmup_s) end_warmup = true;
        }
        std::this_thread::sleep_for(Millis(500));
      }
    });
    // Overload until `stop` or `seconds`; returns when every call has its
    // final status. Huge requests for the first `huge_seconds`.
    uint64_t stream_seed = report.seed + 100;
    const auto overload = [&](double seconds, double huge_seconds, const std::atomic<bool>& stop) {
      const Clock::time_point until = Clock::now() + ToMillis(seconds);
      std::vector<std::thread> clients;
      for (int i = 0; i < flags.stream_clients; ++i) {
        clients.emplace_back([&, i, seed = stream_seed++] {
          RunStreamClient(workload, connections.stubs[i % connections.stubs.size()], &tally,
                          StreamClientOptions{}, seed, until, &stop);
        });
      }
      if (huge_seconds > 0 && flags.huge_every_s > 0) {
        clients.emplace_back([&, huge_until = Clock::now() + ToMillis(huge_seconds)] {
          SendHugeRequests(workload, connections.stubs[0], &tally, huge_until,
                           ToMillis(flags.huge_every_s));
        });
      }
      if (report.capacity_rps > 0) {
        load.RunOpenLoop(report.offered_rps, until, &stop, ArrivalMix{}, flags.max_open_calls,
                         static_cast<int64_t>(flags.max_open_mib * (1 << 20)));
      }
      for (std::thread& client : clients) client.join();
      tally.Lost(load.WaitAll(std::chrono::seconds(60)), "unary calls open 60 s after the load");
    };
    // The warm-up first holds the largest requests open, as many request
    // bytes as the open loop ever has open; then the overload. The 9 MiB and
    // 64 MiB messages go in its first part only: gRPC holds a whole message
    // before refusing it, so each leaves a high-water mark its own size.
    const double fill_s = std::min(5.0, flags.warmup_s / 3);
    load.HoldLargest(static_cast<int64_t>(flags.max_open_mib * (1 << 20)), ToMillis(fill_s));
    overload(max_warmup_s - fill_s, flags.warmup_s - fill_s, end_warmup);
    warming = false;
    report.warmup_s = std::chrono::duration<double>(Clock::now() - start).count();
    // Memory is read after the warm-up and at the end the same way: the
    // largest requests held open for 2 s (the heap's high-water mark for
    // what clients may have open), then the server idle and every client
    // connection closed: what is left then is what the server keeps, not
    // requests in flight nor what gRPC holds for a connection. Then the
    // clients connect anew.
    const auto read_memory = [&](int64_t* rss, int64_t* anon, int64_t* file, int64_t* heap,
                                 const char* reading) {
      load.HoldLargest(static_cast<int64_t>(flags.max_open_mib * (1 << 20)), Millis(2000));
      const bool now_idle = WaitServerIdle(server, &idle_detail);
      idle = idle && now_idle;
      load.ReplaceStubs({});
      connections = Connections{};
      *heap = SettledHeapBytes(server);
      // Resident memory once the server has given its freed memory back
      // (where its allocator can), read a fixed 3 s after the release both
      // times: what the process keeps, not its high-water mark.
      if (kHeapReleaseBuild) {
        released = server.ReleaseFreeHeap() && released;
        std::this_thread::sleep_for(std::chrono::seconds(3));
      }
      *rss = server.ResidentBytes();
      *anon = server.ResidentBytes("RssAnon");
      *file = server.ResidentBytes("RssFile");
      if (!flags.smaps_prefix.empty() &&
          !server.SaveSmaps(absl::StrCat(flags.smaps_prefix, ".", reading))) {
        std::fprintf(stderr, "normsvc_soak: could not write %s.%s\n", flags.smaps_prefix.c_str(),
                     reading);
      }
      connections = Connect(server.target(), flags.channels);
      load.ReplaceStubs(connections.stubs);
    };
    read_memory(&report.rss_warm_bytes, &report.rss_anon_warm_bytes, &report.rss_file_warm_bytes,
                &report.heap_warm_bytes, "warm");
    const std::atomic<bool> never{false};
    overload(std::max(1.0, flags.duration_s - report.warmup_s), 0, never);
    read_memory(&report.rss_end_bytes, &report.rss_anon_end_bytes, &report.rss_file_end_bytes,
                &report.heap_end_bytes, "end");
    sampling = false;
    sampler.join();
    report.achieved_rps = load.achieved_rate();
    report.late_arrivals = load.late_arrivals();
  }

  report.server_ok = SumSeries(server.Metrics(), "normsvc_requests_total", {"code=\"OK\""});
  report.server_exit_code = server.Stop(std::chrono::seconds(60));

  const auto check = [&](std::string name, bool passed, std::string detail = "") {
    report.checks.push_back({std::move(name), passed, std::move(detail)});
  };
  const uint64_t client_ok = tally.total_code(0);
  check("capacity measured", report.capacity_rps > 0);
  check("no wrong result", tally.wrong() == 0);
  check("every request got exactly one final status", tally.lost() == 0 && tally.duplicates() == 0);
  check("every status is one its request may get", tally.unexpected() == 0);
  check("no other failure (stream statuses, stalls)", tally.failures() == 0);
  check("the queue filled (RESOURCE_EXHAUSTED at once)",
        tally.count(kValid, grpc::StatusCode::RESOURCE_EXHAUSTED) > 0);
  check("deadlines expired while queued",
        tally.count(kShortDeadline, grpc::StatusCode::DEADLINE_EXCEEDED) > 0);
  check("cancellations reached the server",
        tally.count(kCancelled, grpc::StatusCode::CANCELLED) > 0);
  check("streams disconnected mid-stream", tally.streams_disconnected() > 0);
  check("the server is idle after the load", idle, idle_detail);
  if (kHeapReleaseBuild) {
    check("the server gave freed heap back when asked (SIGUSR1) before each memory reading",
          released, released ? "" : "normsvc_heap_releases_total did not grow within 5 s");
  }
  check("the server answered OK at least as often as clients saw OK",
        report.server_ok >= static_cast<double>(client_ok),
        absl::StrCat("server ", report.server_ok, ", clients ", client_ok));
  // The heap's live allocations say whether the server keeps what it should
  // not; resident memory also holds what the allocator keeps after the
  // peak, and so depends on how far the load ran ahead of the server. Idle
  // and without connections the server holds about 3 MiB, a few tens of KiB
  // more after each 100,000 requests while its thread pools and containers
  // reach their sizes: 1 MiB is 8 bytes kept per request of the overload.
  if (flags.max_heap_growth_mib >= 0) {
    const bool measured = report.heap_warm_bytes > 0 && report.heap_end_bytes > 0;
    const double grown_mib = (report.heap_end_bytes - report.heap_warm_bytes) / 1048576.0;
    check(absl::StrCat("heap allocations grew less than ", flags.max_heap_growth_mib,
                       " MiB after warm-up"),
          measured && grown_mib < flags.max_heap_growth_mib,
          measured ? absl::StrFormat("%+.3f MiB", grown_mib)
                   : "normsvc_heap_allocated_bytes missing from the server's metrics");
  }
  if (flags.max_rss_growth >= 0) {
    check(absl::StrCat("resident memory grew less than ", 100 * flags.max_rss_growth,
                       "% after warm-up"),
          report.rss_warm_bytes > 0 && RssGrowth(report) < flags.max_rss_growth,
          absl::StrCat(100 * RssGrowth(report), "%"));
  }
  check("SIGTERM: the server drained and exited 0", report.server_exit_code == 0,
        absl::StrCat("exit status ", report.server_exit_code));

  PrintReport(report, tally);
  if (!flags.json.empty() && !WriteJsonReport(flags.json, report, tally)) {
    std::fprintf(stderr, "normsvc_soak: could not write %s\n", flags.json.c_str());
    return 1;
  }
  if (flags.max_rss_growth >= 0 && !(RssGrowth(report) < flags.max_rss_growth) &&
      !flags.smaps_prefix.empty()) {
    constexpr int kShownGrowthKib = 256;
    constexpr int kShownMappings = 12;
    std::printf("mappings whose resident size grew by %d KiB or more after warm-up:\n%s",
                kShownGrowthKib,
                SmapsGrowth(flags.smaps_prefix + ".warm", flags.smaps_prefix + ".end",
                            kShownGrowthKib, kShownMappings)
                    .c_str());
  }
  if (!report.passed()) {
    // Last, so that a shortened test log still shows why the server failed
    // (a sanitizer stops it with its report).
    std::printf("server log: %s, an excerpt:\n%s", flags.server_log.c_str(),
                LogExcerpt(server.Log(), 80).c_str());
  }
  return report.passed() ? 0 : 1;
}

}  // namespace
}  // namespace normsvc::soak

int main(int argc, char** argv) {
  normsvc::soak::Flags flags;
  if (argc == 2 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h")) {
    std::fputs(normsvc::soak::kUsage, stdout);
    return 0;
  }
  if (!normsvc::soak::ParseFlags(argc, argv, &flags)) {
    std::fputs(normsvc::soak::kUsage, stderr);
    return 2;
  }
  return normsvc::soak::Run(flags);
}
