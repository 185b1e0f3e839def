#include "output.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>

namespace corral::cli {

void write_all_fd(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    data.remove_prefix(static_cast<std::size_t>(n));
  }
}

void say(const char* fmt, ...) {
  char buf[4096];
  va_list ap;
  va_start(ap, fmt);
  int n = std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  std::string line = "corral: ";
  line.append(buf, static_cast<std::size_t>(n) < sizeof buf ? static_cast<std::size_t>(n) : sizeof buf - 1);
  line += '\n';
  write_all_fd(2, line);
}

int exit_code_for_error(int err) {
  return (err == EINVAL || err == ENOTSUP || err == ERANGE) ? 2 : 125;
}

}  // namespace corral::cli
