# Included after project() by the tsan preset (CMAKE_PROJECT_INCLUDE).
#
# ThreadSanitizer only sees synchronization in instrumented code or in the
# pthread functions it intercepts. The system Abseil is not built with
# -fsanitize=thread, so absl::Mutex and absl::CondVar (atomics and futexes
# inside libabsl_synchronization) are invisible to it, and every field that
# normsvc guards with an absl::Mutex would be reported as a data race.
# normsvc_tsan_absl_sync (tsan_absl_sync.cc) interposes the absl::Mutex and
# absl::CondVar entry points that normsvc and gRPC call and reports each lock,
# unlock and wait to ThreadSanitizer before calling Abseil's function. Every
# target defined after this file links it first, ahead of Abseil. Races in
# normsvc code are then reported for what they are, and mutexes taken by
# gRPC order normsvc's accesses made on gRPC's threads.
find_package(absl CONFIG REQUIRED)

# Mangled names depend on Abseil's inline namespace (e.g. debian3).
file(STRINGS "${absl_DIR}/../../../../include/absl/base/options.h" normsvc_absl_ns
     REGEX "^#define ABSL_OPTION_INLINE_NAMESPACE_NAME ")
if(NOT normsvc_absl_ns)
  find_path(normsvc_absl_include absl/base/options.h REQUIRED)
  file(STRINGS "${normsvc_absl_include}/absl/base/options.h" normsvc_absl_ns
       REGEX "^#define ABSL_OPTION_INLINE_NAMESPACE_NAME ")
endif()
string(REGEX REPLACE ".* ([A-Za-z0-9_]+)$" "\\1" normsvc_absl_ns "${normsvc_absl_ns}")
string(LENGTH "${normsvc_absl_ns}" normsvc_absl_ns_length)
set(normsvc_absl_prefix "_ZN4absl${normsvc_absl_ns_length}${normsvc_absl_ns}")
set(normsvc_absl_sync_symbols
    NORMSVC_MUTEX_LOCK=${normsvc_absl_prefix}5Mutex4LockEv
    NORMSVC_MUTEX_UNLOCK=${normsvc_absl_prefix}5Mutex6UnlockEv
    NORMSVC_MUTEX_TRY_LOCK=${normsvc_absl_prefix}5Mutex7TryLockEv
    NORMSVC_MUTEX_READER_LOCK=${normsvc_absl_prefix}5Mutex10ReaderLockEv
    NORMSVC_MUTEX_READER_UNLOCK=${normsvc_absl_prefix}5Mutex12ReaderUnlockEv
    NORMSVC_CONDVAR_WAIT=${normsvc_absl_prefix}7CondVar4WaitEPNS0_5MutexE
    NORMSVC_CONDVAR_WAIT_WITH_DEADLINE=${normsvc_absl_prefix}7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE
    NORMSVC_CONDVAR_WAIT_WITH_TIMEOUT=${normsvc_absl_prefix}7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE)

add_library(normsvc_tsan_absl_sync SHARED "${CMAKE_CURRENT_LIST_DIR}/tsan_absl_sync.cc")
target_link_libraries(normsvc_tsan_absl_sync PRIVATE absl::synchronization absl::time
                                                     ${CMAKE_DL_LIBS})
target_compile_features(normsvc_tsan_absl_sync PRIVATE cxx_std_17)
foreach(definition IN LISTS normsvc_absl_sync_symbols)
  string(REGEX REPLACE "^([A-Z_]+)=(.*)$" "\\1=\"\\2\"" quoted "${definition}")
  target_compile_definitions(normsvc_tsan_absl_sync PRIVATE "${quoted}")
endforeach()
link_libraries(normsvc_tsan_absl_sync)
