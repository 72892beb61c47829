// Defines NORMSVC_SANITIZER_ALLOCATOR when this translation unit is built
// with AddressSanitizer or ThreadSanitizer, whose allocators replace glibc's
// (heap statistics come from them; malloc_trim has nothing to return).
#pragma once

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define NORMSVC_SANITIZER_ALLOCATOR 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define NORMSVC_SANITIZER_ALLOCATOR 1
#endif
