// Groups below groups (a session's: pid 1's leaf, the exec groups): the
// walk of a subtree, its kill and bottom-up removal, and the probe as seen
// from inside a group. Parent side.
#include <dirent.h>
#include <unistd.h>

#include "cgroup_backend.hpp"

namespace corral {

namespace detail {

std::vector<std::string> cgroup_subtree(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    std::vector<std::string> children;
    while (struct dirent* e = ::readdir(d))
      if (e->d_type == DT_DIR && e->d_name[0] != '.') children.push_back(dir + "/" + e->d_name);
    ::closedir(d);
    for (const auto& c : children)
      for (auto& below : cgroup_subtree(c)) out.push_back(std::move(below));
    out.push_back(dir);
  }
  return out;
}

Status remove_group(std::string_view who, const std::string& dir, int timeout_ms) {
  const long long deadline = now_ms() + timeout_ms;
  while (::rmdir(dir.c_str()) < 0) {
    const int err = errno;
    if (err == ENOENT) return {};
    if (err != EBUSY || now_ms() >= deadline) return Error::from_errno(err, std::string(who) + ": rmdir " + dir);
    sleep_ms(2);
  }
  return {};
}

}  // namespace detail

CgroupProbe probe_below(const CgroupProbe& host, const std::vector<std::string>& group_dirs) {
  CgroupProbe probe = host;
  if (probe.backend == CgroupVersion::v2) {
    probe.v2_own_dir = group_dirs.empty() ? std::string() : group_dirs.front();
    probe.v2_own_is_root = false;
    probe.v2_writable = !probe.v2_own_dir.empty();
    return probe;
  }
  for (auto& hier : probe.v1) {
    hier.writable = false;
    for (const auto& d : group_dirs)
      if (d.rfind(hier.mount_point + "/", 0) == 0) {
        hier.own_dir = d;
        hier.writable = true;
      }
  }
  return probe;
}

Status kill_and_remove_cgroup_tree(const std::string& dir, int timeout_ms) {
  const std::string who = detail::file_exists(dir + "/cgroup.kill") || detail::file_exists(dir + "/cgroup.type")
                              ? "cgroup v2"
                              : "cgroup v1";
  if (!detail::file_exists(dir)) return {};
  Status first;
  // v2: one write kills the whole subtree, forks in flight included; the
  // loop below then only waits for the exits (and is the whole kill on v1).
  if (detail::file_exists(dir + "/cgroup.kill"))
    if (Status s = detail::write_text(who, dir + "/cgroup.kill", "1"); !s && s.error().code() != ENOENT)
      first = std::move(s);
  const std::vector<std::string> tree = detail::cgroup_subtree(dir);
  if (Status s = detail::kill_until_empty(who, tree, timeout_ms); !s && first) first = std::move(s);
  for (const auto& d : tree)
    if (Status s = detail::remove_group(who, d, timeout_ms); !s) {
      if (first) first = std::move(s);
      break;
    }
  return first;
}

}  // namespace corral
