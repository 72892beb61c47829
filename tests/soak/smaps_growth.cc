#include "smaps_growth.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "absl/strings/str_format.h"

namespace normsvc::soak {
namespace {

struct Mapping {
  int64_t size_kib = 0;
  int64_t rss_kib = 0;
  std::string name;
};

// Mappings by start address; false when the file cannot be read.
bool ReadSmaps(const std::string& path, std::map<uint64_t, Mapping>* mappings) {
  std::ifstream in(path);
  if (!in) return false;
  Mapping* current = nullptr;
  for (std::string line; std::getline(in, line);) {
    uint64_t start = 0;
    uint64_t end = 0;
    char dash = 0;
    std::istringstream fields(line);
    // A mapping's header: "start-end perms offset dev inode [name]".
    if (line.find('-') != std::string::npos && std::isxdigit(static_cast<unsigned char>(line[0])) &&
        (fields >> std::hex >> start >> dash >> end) && dash == '-' && end > start) {
      std::string perms, offset, device, inode, name;
      fields >> std::dec >> perms >> offset >> device >> inode;
      std::getline(fields >> std::ws, name);
      current = &(*mappings)[start];
      current->size_kib = static_cast<int64_t>((end - start) / 1024);
      current->name = name.empty() ? "[anon]" : name;
      continue;
    }
    if (current != nullptr && line.rfind("Rss:", 0) == 0) {
      std::istringstream value(line.substr(4));
      value >> current->rss_kib;
    }
  }
  return true;
}

}  // namespace

std::string SmapsGrowth(const std::string& before_path, const std::string& after_path, int min_kib,
                        int max_lines) {
  std::map<uint64_t, Mapping> before;
  std::map<uint64_t, Mapping> after;
  if (!ReadSmaps(before_path, &before) || !ReadSmaps(after_path, &after)) return "";
  struct Growth {
    int64_t kib;
    uint64_t start;
    int64_t was_kib;
    const Mapping* now;
  };
  std::vector<Growth> grown;
  for (const auto& [start, mapping] : after) {
    const auto it = before.find(start);
    const int64_t was = it == before.end() ? 0 : it->second.rss_kib;
    if (mapping.rss_kib - was >= min_kib) {
      grown.push_back({mapping.rss_kib - was, start, was, &mapping});
    }
  }
  std::sort(grown.begin(), grown.end(),
            [](const Growth& a, const Growth& b) { return a.kib > b.kib; });
  std::string text;
  for (std::size_t i = 0; i < grown.size() && i < static_cast<std::size_t>(max_lines); ++i) {
    const Growth& g = grown[i];
    text += absl::StrFormat("  %+8d KiB  %012x  resident %d -> %d KiB of %d KiB  %s\n", g.kib,
                            g.start, g.was_kib, g.now->rss_kib, g.now->size_kib, g.now->name);
  }
  if (grown.size() > static_cast<std::size_t>(max_lines)) {
    text += absl::StrFormat("  [%d more]\n", grown.size() - max_lines);
  }
  return text;
}

}  // namespace normsvc::soak
