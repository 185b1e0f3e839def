// The mount table reader (mountinfo.hpp). Parent side.
#include "mountinfo.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "corral/fd.hpp"
#include "text.hpp"

namespace corral::detail {
namespace {

std::string unescape_mount_path(std::string_view s) {
  auto octal = [&](std::size_t i, char max) { return i < s.size() && s[i] >= '0' && s[i] <= max; };
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && octal(i + 1, '3') && octal(i + 2, '7') && octal(i + 3, '7')) {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace

std::vector<MountInfoEntry> parse_mountinfo(std::string_view text) {
  std::vector<MountInfoEntry> out;
  for (auto line : split(text, '\n')) {
    // id parent major:minor root mount-point options [optional...] - fstype source super-options
    auto f = split(line, ' ');
    std::size_t dash = 6;
    while (dash < f.size() && f[dash] != "-") ++dash;
    if (dash + 3 >= f.size()) continue;  // no separator, or not the three fields after it
    MountInfoEntry m;
    m.id = std::string(f[0]);
    m.dev = std::string(f[2]);
    m.root = unescape_mount_path(f[3]);
    m.mount_point = unescape_mount_path(f[4]);
    m.mount_options = std::string(f[5]);
    m.fstype = std::string(f[dash + 1]);
    m.source = unescape_mount_path(f[dash + 2]);
    for (auto opt : split(f[dash + 3], ',')) m.super_options.emplace_back(opt);
    out.push_back(std::move(m));
  }
  return out;
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

bool mount_point_under(std::string_view mount_point, std::string_view dir) noexcept {
  if (dir == "/") return !mount_point.empty() && mount_point[0] == '/';
  if (mount_point.size() < dir.size() || mount_point.compare(0, dir.size(), dir) != 0) return false;
  return mount_point.size() == dir.size() || mount_point[dir.size()] == '/';
}

}  // namespace corral::detail
