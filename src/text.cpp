// Reading and splitting kernel text (text.hpp).
#include "text.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "corral/fd.hpp"

namespace corral::detail {

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  while (true) {
    auto pos = s.find(sep);
    out.push_back(s.substr(0, pos));
    if (pos == std::string_view::npos) return out;
    s.remove_prefix(pos + 1);
  }
}

Expected<std::string> read_to_end(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return Error::from_errno(errno, "open " + path);
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error::from_errno(errno, "read " + path);
    if (n == 0) return out;
    out.append(buf, static_cast<std::size_t>(n));
  }
}

}  // namespace corral::detail
