// The reference kernels' fan-out over threads, without exceptions leaving
// it: the kernels' API returns Status, and a thrown std::system_error (no
// thread could be started: a container's pid limit, RLIMIT_NPROC) or
// std::bad_alloc would otherwise end the process, from a worker thread
// through std::terminate.
#pragma once

#include <atomic>
#include <new>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "normsvc/kernels/types.h"

namespace normsvc::kernels::detail {

struct StartStdThread {
  template <typename Fn>
  std::thread operator()(Fn&& fn) const {
    return std::thread(std::forward<Fn>(fn));
  }
};

// Runs body(t) once for every t in [0, tasks): task 0 on the calling
// thread, each other task on a thread of its own made by `start_thread`.
// Tasks that no thread could be made for run on the calling thread after
// task 0: each task writes only its own part of the result, so where a
// task runs changes no bit, and a call never fails for want of threads.
// A task that runs out of memory (std::bad_alloc) ends early and the others
// still run; the call then returns kResourceExhausted.
template <typename Body, typename StartThread = StartStdThread>
Status RunTasks(int tasks, const Body& body, const StartThread& start_thread = {}) {
  std::atomic<bool> out_of_memory{false};
  const auto run = [&body, &out_of_memory](int t) noexcept {
    try {
      body(t);
    } catch (const std::bad_alloc&) {
      out_of_memory.store(true, std::memory_order_relaxed);
    }
  };
  std::vector<std::thread> workers;
  int started = 1;  // tasks [1, started) have threads
  try {
    workers.reserve(tasks > 1 ? tasks - 1 : 0);
    for (; started < tasks; ++started) {
      const int t = started;
      workers.push_back(start_thread([&run, t] { run(t); }));
    }
  } catch (const std::system_error&) {
  } catch (const std::bad_alloc&) {
  }
  if (tasks > 0) run(0);
  for (int t = started; t < tasks; ++t) run(t);
  for (std::thread& worker : workers) worker.join();
  if (out_of_memory.load(std::memory_order_relaxed)) {
    return Status(Code::kResourceExhausted, "the reference kernels ran out of memory");
  }
  return Status::Ok();
}

}  // namespace normsvc::kernels::detail
