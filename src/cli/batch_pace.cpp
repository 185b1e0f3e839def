// The batch's pace (batch_pace.hpp): CPUs, the default parallelism, the
// job count of a regular file.
#include "batch_pace.hpp"

#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

namespace corral::cli {

std::size_t usable_cpus() {
  cpu_set_t set;
  long cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : sysconf(_SC_NPROCESSORS_ONLN);
  return static_cast<std::size_t>(cpus > 0 ? cpus : 1);
}

std::size_t default_parallel() { return usable_cpus() * 4; }

bool blank(const std::string& line) { return line.find_first_not_of(" \t\r") == std::string::npos; }

std::optional<std::size_t> count_jobs(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  std::size_t jobs = 0;
  bool content = false;
  char buf[64 * 1024];
  off_t off = lseek(fd, 0, SEEK_CUR);
  for (ssize_t n; (n = pread(fd, buf, sizeof buf, off)) > 0; off += n) {
    for (ssize_t i = 0; i < n; ++i) {
      char c = buf[i];
      if (c == '\n') {
        jobs += content;
        content = false;
      } else if (c != ' ' && c != '\t' && c != '\r') {
        content = true;
      }
    }
  }
  return jobs + content;
}

}  // namespace corral::cli
