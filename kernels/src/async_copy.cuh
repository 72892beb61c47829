// Asynchronous copies (16, 8 or 4 bytes) from global to shared memory
// (cp.async, sm_80 and later): the data goes to shared memory without
// passing through registers, so a thread can keep many copies in flight.
//
// Contract: source and destination aligned to the copy's size. A thread's copies form
// groups (CommitAsyncCopies closes one); WaitAsyncCopies<N>() returns once at
// most N of the calling thread's groups are still pending. Other threads see
// the data only after a barrier that follows their own wait.
#pragma once

#include <cstdint>

namespace normsvc::kernels::detail {

__device__ __forceinline__ void CopyAsync16(void* shared_destination, const void* global_source) {
  const uint32_t destination = static_cast<uint32_t>(__cvta_generic_to_shared(shared_destination));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(destination), "l"(global_source)
               : "memory");
}

// 8- and 4-byte asynchronous copies: source and destination aligned to
// their size.
__device__ __forceinline__ void CopyAsync8(void* shared_destination, const void* global_source) {
  const uint32_t destination = static_cast<uint32_t>(__cvta_generic_to_shared(shared_destination));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(destination), "l"(global_source)
               : "memory");
}

__device__ __forceinline__ void CopyAsync4(void* shared_destination, const void* global_source) {
  const uint32_t destination = static_cast<uint32_t>(__cvta_generic_to_shared(shared_destination));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(destination), "l"(global_source)
               : "memory");
}

__device__ __forceinline__ void CommitAsyncCopies() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}

template <int N>
__device__ __forceinline__ void WaitAsyncCopies() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

}  // namespace normsvc::kernels::detail
