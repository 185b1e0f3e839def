// The mount table reader (mountinfo.hpp). Parent side.
#include "mountinfo.hpp"

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

std::vector<MountInfoEntry> parse_mountinfo(std::string_view text, bool (*keep_fstype)(std::string_view)) {
  std::vector<MountInfoEntry> out;
  for (auto line : split(text, '\n')) {
    if (keep_fstype) {
      // Paths are escaped (a space is \040), so " - " is only the separator.
      auto sep = line.find(" - ");
      if (sep == std::string_view::npos) continue;
      auto fstype = line.substr(sep + 3);
      fstype = fstype.substr(0, fstype.find(' '));
      if (!keep_fstype(fstype)) continue;
    }
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

bool mount_point_under(std::string_view mount_point, std::string_view dir) noexcept {
  if (dir == "/") return !mount_point.empty() && mount_point[0] == '/';
  if (mount_point.size() < dir.size() || mount_point.compare(0, dir.size(), dir) != 0) return false;
  return mount_point.size() == dir.size() || mount_point[dir.size()] == '/';
}

}  // namespace corral::detail
