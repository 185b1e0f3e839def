// Our own command line, marked: what a sandboxed program must not read of
// the process that started it (container and session tests).
#pragma once

#include <cstring>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "support.hpp"

namespace corral_test {

// While this lives, our own /proc/self/cmdline begins with `mark`: it is
// written over the start of our argv strings (arg_start..arg_end of
// /proc/self/stat, fields 48 and 49), which is what the kernel shows of
// them, and put back at the end. ok() is false when our argv is shorter
// (a Criterion worker's is "boxfort-worker": 14 bytes).
class CmdlineMark {
 public:
  explicit CmdlineMark(std::string_view mark) {
    std::string stat = read_file("/proc/self/stat");
    std::istringstream in(stat.substr(stat.rfind(')') + 2));
    std::vector<std::string> f;  // f[0] is field 3
    for (std::string w; in >> w;) f.push_back(w);
    if (f.size() < 47) return;
    start_ = reinterpret_cast<char*>(std::stoull(f[48 - 3]));
    const std::size_t room = std::stoull(f[49 - 3]) - std::stoull(f[48 - 3]);
    if (room <= mark.size()) return;
    saved_.assign(start_, mark.size());
    std::memcpy(start_, mark.data(), mark.size());
  }
  ~CmdlineMark() {
    if (!saved_.empty()) std::memcpy(start_, saved_.data(), saved_.size());
  }
  CmdlineMark(const CmdlineMark&) = delete;
  CmdlineMark& operator=(const CmdlineMark&) = delete;
  bool ok() const { return !saved_.empty(); }

 private:
  char* start_ = nullptr;
  std::string saved_;
};

}  // namespace corral_test
