// Which mappings of a process grew between two copies of its
// /proc/<pid>/smaps: what a failed resident-memory check prints, so that a
// CI log says whether the growth was a malloc arena, the main heap, a thread
// stack or something new.
#pragma once

#include <string>

namespace normsvc::soak {

// Mappings (by start address) whose resident size grew by at least
// `min_kib` KiB from `before_path` to `after_path`, new ones included,
// largest growth first, at most `max_lines`; one line each: the growth, the
// resident sizes, the mapping's size and name ("[anon]" for none). Empty
// when neither file can be read.
std::string SmapsGrowth(const std::string& before_path, const std::string& after_path, int min_kib,
                        int max_lines);

}  // namespace normsvc::soak
