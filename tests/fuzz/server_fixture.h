// The server-side state the request fuzzers validate against (fuzz_requests
// for normsvc.v1, fuzz_kserve for the open inference protocol), and how
// their seed corpora are written and their targets initialized.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "google/protobuf/message.h"
#include "google/protobuf/stubs/logging.h"
#include "server/cpu_executor.h"
#include "server/parameter_store.h"
#include "server/validation.h"

namespace normsvc::fuzz {

struct ServerFixture {
  server::RequestLimits small_limits;    // "beyond the limit" reachable with small inputs
  server::RequestLimits default_limits;  // what the server runs with unless configured
  std::unique_ptr<server::CpuExecutor> executor;
  std::unique_ptr<server::ParameterStore> store;
};

// Built once. Registered sets requests may name (and the KServe models
// layernorm.<set> / rmsnorm.<set>): "ln" (FP32 gamma+beta, H=8), "rms" (BF16
// gamma, H=16), "half" (FP16 gamma+beta, H=4).
inline ServerFixture& GetServerFixture() {
  static ServerFixture* fixture = [] {
    auto* f = new ServerFixture;
    f->small_limits.max_hidden_size = 4096;
    f->small_limits.max_request_rows = 4096;
    f->small_limits.max_request_bytes = int64_t{1} << 20;
    f->executor = std::make_unique<server::CpuExecutor>(server::CpuExecutorOptions{0, 1, 1});
    f->store = std::make_unique<server::ParameterStore>(
        server::ParameterLimits{}, std::vector<server::Executor*>{f->executor.get()});
    struct Set {
      const char* name;
      int64_t hidden;
      kernels::DType dtype;
      bool beta;
    };
    for (const Set& set :
         {Set{"ln", 8, kernels::DType::kF32, true}, Set{"rms", 16, kernels::DType::kBF16, false},
          Set{"half", 4, kernels::DType::kF16, true}}) {
      const auto bytes = static_cast<size_t>(set.hidden) * kernels::DTypeSize(set.dtype);
      const std::string gamma(bytes, '\x3c');
      const std::string beta = set.beta ? std::string(bytes, '\x01') : std::string();
      if (!f->store->Register(set.name, set.hidden, set.dtype, gamma, beta, false).ok()) {
        std::abort();
      }
    }
    return f;
  }();
  return *fixture;
}

// A seed: the selector byte the target reads first, then the message.
inline void WriteSeed(const std::string& dir, const std::string& name, char selector,
                      const google::protobuf::Message& message) {
  std::ofstream out(dir + "/" + name, std::ios::binary | std::ios::trunc);
  out << selector << message.SerializeAsString();
  if (!out) std::abort();
}

// LLVMFuzzerInitialize of the request fuzzers: with NORMSVC_FUZZ_WRITE_SEEDS
// set, writes the seed corpus there and exits; otherwise builds the fixture.
inline void InitializeRequestFuzzer(void (*write_seeds)(const std::string& dir)) {
  if (const char* dir = std::getenv("NORMSVC_FUZZ_WRITE_SEEDS")) {
    write_seeds(dir);
    std::exit(0);
  }
  // Parsing logs every string field with invalid UTF-8 (the request is then
  // rejected); at fuzzing rates that is only noise.
  google::protobuf::SetLogHandler(nullptr);
  GetServerFixture();
}

}  // namespace normsvc::fuzz
