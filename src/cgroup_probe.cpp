// The cgroup probe: which hierarchies are mounted, where this process sits in
// each, what it may create there, and which backend create_run_cgroup uses.
// Reads /proc/self/cgroup, where each hierarchy is mounted (statmount, or
// /proc/self/mountinfo) and a few cgroupfs files; runs in the parent, once
// per supervisor.
#include <fcntl.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <map>

#include "cgroup_backend.hpp"
#include "mountinfo.hpp"

namespace corral {
namespace {

using detail::contains;
using detail::join;
using detail::split;

using MountEntry = detail::MountInfoEntry;
using detail::parse_mountinfo;

// /proc/self/cgroup: "0::/path" for v2, "4:memory:/path" or "2:cpu,cpuacct:/path" for v1.
struct SelfCgroups {
  std::optional<std::string> v2_path;
  std::map<std::string, std::string> v1_paths;  // controller -> path
  std::vector<std::string> v1_lines;            // each v1 line's controllers, "cpu,cpuacct"
};

SelfCgroups parse_self_cgroup(std::string_view text) {
  SelfCgroups out;
  for (auto line : split(text, '\n')) {
    auto c1 = line.find(':');
    if (c1 == std::string_view::npos) continue;
    auto c2 = line.find(':', c1 + 1);
    if (c2 == std::string_view::npos) continue;
    auto id = line.substr(0, c1);
    auto controllers = line.substr(c1 + 1, c2 - c1 - 1);
    std::string path(line.substr(c2 + 1));
    if (id == "0" && controllers.empty()) {
      out.v2_path = path;
    } else {
      for (auto c : split(controllers, ',')) out.v1_paths[std::string(c)] = path;
      out.v1_lines.emplace_back(controllers);
    }
  }
  return out;
}

// Directory of `path` (relative to the hierarchy root) through a mount whose
// root is `mount_root`; "" when the mount does not show it.
std::string dir_through_mount(const MountEntry& m, const std::string& path) {
  std::string rel;
  if (m.root == "/") {
    rel = path;
  } else if (path == m.root) {
    rel = "/";
  } else if (path.compare(0, m.root.size() + 1, m.root + "/") == 0) {
    rel = path.substr(m.root.size());
  } else {
    return "";
  }
  return rel == "/" ? m.mount_point : m.mount_point + rel;
}

// A v1 mount's hierarchy: its controllers and its name= (the superblock's
// options less rw/ro and the other key=value ones).
std::vector<std::string> v1_controllers(const MountEntry& m) {
  std::vector<std::string> out;
  for (const auto& opt : m.super_options)
    if (opt != "rw" && opt != "ro" && (opt.find('=') == std::string::npos || opt.rfind("name=", 0) == 0))
      out.push_back(opt);
  return out;
}

bool writable_dir(const std::string& dir) {
  return !dir.empty() && faccessat(AT_FDCWD, dir.c_str(), W_OK, AT_EACCESS) == 0;
}

// (major, minor) of a release string like "6.18.44-fc-v669".
std::pair<int, int> kernel_version(const std::string& release_in) {
  std::string release = release_in;
  if (release.empty()) {
    struct utsname u {};
    if (uname(&u) == 0) release = u.release;
  }
  int major = 0, minor = 0;
  auto parts = split(release, '.');
  if (parts.size() >= 2) {
    std::from_chars(parts[0].data(), parts[0].data() + parts[0].size(), major);
    std::from_chars(parts[1].data(), parts[1].data() + parts[1].size(), minor);
  }
  return {major, minor};
}

// Read to the 0 (not detail::read_text's early end, which holds for cgroup
// files only: a mountinfo line can be longer than half a page).
std::string read_or_empty(const std::string& path) {
  auto text = detail::read_to_end(path);
  return text ? std::move(*text) : std::string();
}

const char* const kV1Roles[] = {"memory", "pids", "cpuacct", "freezer", "devices"};
constexpr const char* kCgroupRoot = "/sys/fs/cgroup";

// The cgroup mounts, asked of the kernel at the places hosts mount them
// (systemd, Docker, Kubernetes): v2 at /sys/fs/cgroup or, beside v1, at
// /sys/fs/cgroup/unified; each v1 hierarchy at /sys/fs/cgroup/<its
// controllers as /proc/self/cgroup lists them> ("cpu,cpuacct";
// "name=systemd" at .../systemd). Two system calls a hierarchy, where
// reading /proc/self/mountinfo costs every mount of the host (a Kubernetes
// node's thousand: 1.7-2.4 ms a container run here). In the table's order,
// as parse_mountinfo gives it. nullopt: the kernel cannot tell (before
// 6.11), or a hierarchy we are in is not where looked: the whole table
// says where it is, or that it is not mounted.
std::optional<std::vector<MountEntry>> cgroup_mounts_at_usual_places(const SelfCgroups& self) {
  std::vector<MountEntry> out;
  auto mount_of = [&](const std::string& path, std::string_view fstype) -> std::optional<bool> {
    auto m = detail::mount_rooted_at(path);
    if (!m) return std::nullopt;
    if (!*m || (*m)->fstype != fstype) return false;
    out.push_back(std::move(**m));
    return true;
  };
  if (self.v2_path) {
    auto at_root = mount_of(kCgroupRoot, "cgroup2");
    if (!at_root) return std::nullopt;
    if (!*at_root) {
      auto beside = mount_of(std::string(kCgroupRoot) + "/unified", "cgroup2");
      if (!beside || !*beside) return std::nullopt;
    }
  }
  for (const auto& names : self.v1_lines) {
    std::string dir = names.rfind("name=", 0) == 0 ? names.substr(5) : names;
    if (dir.empty() || dir.find('/') != std::string::npos) return std::nullopt;
    auto found = mount_of(std::string(kCgroupRoot) + "/" + dir, "cgroup");
    if (!found || !*found) return std::nullopt;
    // The mount must carry the line's controllers, not another hierarchy's.
    const auto& opts = out.back().super_options;
    for (auto c : split(names, ','))
      if (std::find(opts.begin(), opts.end(), c) == opts.end()) return std::nullopt;
  }
  // The table's order (by the ids it prints), so the hierarchies are listed
  // the same either way.
  std::sort(out.begin(), out.end(),
            [](const MountEntry& a, const MountEntry& b) { return std::stoull(a.id) < std::stoull(b.id); });
  return out;
}

}  // namespace

std::string_view cgroup_version_name(CgroupVersion v) {
  switch (v) {
    case CgroupVersion::v1: return "v1";
    case CgroupVersion::v2: return "v2";
    default: return "none";
  }
}

// ---------------------------------------------------------------- probe

CgroupProbe probe_cgroups() { return probe_cgroups(CgroupProbeSources{}); }

CgroupProbe probe_cgroups(const CgroupProbeSources& sources) {
  CgroupProbe p;
  auto self = parse_self_cgroup(read_or_empty(sources.self_cgroup));
  std::optional<std::vector<MountEntry>> usual;
  // Only the process's own table can be asked of the kernel instead; a
  // test's file describes a host of its own.
  if (sources.mountinfo == CgroupProbeSources{}.mountinfo) usual = cgroup_mounts_at_usual_places(self);
  std::vector<MountEntry> mounts;
  if (usual) {
    mounts = std::move(*usual);
    p.mounts_from = "statmount";
  } else {
    const std::string table = read_or_empty(sources.mountinfo);
    mounts = parse_mountinfo(table, [](std::string_view fstype) { return fstype == "cgroup" || fstype == "cgroup2"; });
    p.mounts_from = "mountinfo";
    // The table lists mounts no path reaches: one under a subtree bound
    // over it, or under a tmpfs over it or over /sys/fs/cgroup. A directory
    // named through such a mount is another filesystem's, or none.
    std::vector<std::string> ids;
    for (const auto& m : mounts) ids.push_back(m.id);
    const std::vector<bool> hidden = detail::mounts_out_of_reach(table, ids);
    std::vector<MountEntry> reached;
    for (std::size_t i = 0; i < mounts.size(); ++i) {
      if (!hidden[i]) {
        reached.push_back(std::move(mounts[i]));
        continue;
      }
      const std::string what = mounts[i].fstype == "cgroup2" ? "cgroup2" : join(v1_controllers(mounts[i]), ",");
      p.hidden_mounts.push_back(what + " at " + mounts[i].mount_point);
    }
    mounts = std::move(reached);
  }
  auto [kmajor, kminor] = kernel_version(sources.kernel_release);
  auto kernel_at_least = [&](int ma, int mi) { return kmajor > ma || (kmajor == ma && kminor >= mi); };

  for (const auto& m : mounts) {
    if (m.fstype == "cgroup2") {
      if (p.v2_mounted && !p.v2_own_dir.empty()) continue;  // keep the first that shows us
      p.v2_mounted = true;
      p.v2_mount = m.mount_point;
      p.v2_own_dir = self.v2_path ? dir_through_mount(m, *self.v2_path) : "";
      p.v2_own_is_root = self.v2_path && *self.v2_path == "/";
    } else if (m.fstype == "cgroup") {
      CgroupV1Hierarchy h;
      h.controllers = v1_controllers(m);
      h.mount_point = m.mount_point;
      for (const auto& c : h.controllers) {
        auto it = self.v1_paths.find(c);
        if (it != self.v1_paths.end()) {
          h.own_dir = dir_through_mount(m, it->second);
          break;
        }
      }
      // A bind mount of a hierarchy we already have adds nothing.
      bool dup = std::any_of(p.v1.begin(), p.v1.end(), [&](const CgroupV1Hierarchy& o) {
        return o.controllers == h.controllers && !o.own_dir.empty();
      });
      if (!dup) p.v1.push_back(std::move(h));
    }
  }

  if (!p.v2_own_dir.empty()) {
    // What the runs can have is what the directory they go under offers:
    // our own cgroup, or its delegated parent when we are a member of our
    // own (detail::v2_run_base).
    const std::string base = detail::v2_run_base(p, CgroupSpec{});
    const bool base_is_root = base == p.v2_mount || (base == p.v2_own_dir && p.v2_own_is_root);
    p.v2_controllers = cgroupfs::word_list(read_or_empty(base + "/cgroup.controllers"));
    p.v2_writable = writable_dir(base);
    // cgroup.kill, cgroup.freeze and memory.peak exist only in non-root
    // cgroups; at the root, the kernel version has to answer.
    auto has_file = [&](const char* f, int ma, int mi) {
      return base_is_root ? kernel_at_least(ma, mi) : detail::file_exists(base + "/" + f);
    };
    p.v2_kill = has_file("cgroup.kill", 5, 14);
    p.v2_freeze = has_file("cgroup.freeze", 5, 2);
    p.v2_peak = contains(p.v2_controllers, "memory") && has_file("memory.peak", 5, 19);
  }

  int* roles[] = {&p.v1_memory, &p.v1_pids, &p.v1_cpuacct, &p.v1_freezer, &p.v1_devices};
  for (std::size_t r = 0; r < 5; ++r)
    for (std::size_t i = 0; i < p.v1.size(); ++i)
      if (*roles[r] < 0 && contains(p.v1[i].controllers, kV1Roles[r]) && !p.v1[i].own_dir.empty())
        *roles[r] = static_cast<int>(i);
  // Asked only of the hierarchies a run may join (a faccessat walks the
  // whole path; a host mounts a dozen hierarchies).
  for (int role : {p.v1_memory, p.v1_pids, p.v1_cpuacct, p.v1_freezer, p.v1_devices})
    if (role >= 0) p.v1[role].writable = writable_dir(p.v1[role].own_dir);
  if (p.v1_memory >= 0)
    p.v1_memsw = detail::file_exists(p.v1[p.v1_memory].own_dir + "/memory.memsw.limit_in_bytes");

  auto v1_usable = [&](int role) { return role >= 0 && p.v1[role].writable; };
  bool v2_usable = !p.v2_own_dir.empty() && p.v2_writable;
  bool v2_has_resources = contains(p.v2_controllers, "memory") || contains(p.v2_controllers, "pids");
  if (v2_usable && v2_has_resources) {
    p.backend = CgroupVersion::v2;
  } else if (v1_usable(p.v1_memory) || v1_usable(p.v1_pids)) {
    p.backend = CgroupVersion::v1;
  } else if (v2_usable) {
    p.backend = CgroupVersion::v2;  // group kill and CPU accounting, no ceilings
  } else {
    std::vector<std::string> why;
    if (!p.v2_mounted) why.push_back("no cgroup2 mount");
    else if (p.v2_own_dir.empty()) why.push_back("our v2 cgroup is outside " + p.v2_mount);
    else why.push_back(p.v2_own_dir + " is not writable (not root, not delegated)");
    if (p.v1_memory < 0 && p.v1_pids < 0) why.push_back("no v1 memory or pids hierarchy");
    else why.push_back("v1 memory/pids cgroups not writable");
    if (!p.hidden_mounts.empty()) why.push_back(p.hidden_note());
    p.why_none = join(why, "; ");
  }
  return p;
}

bool CgroupProbe::has(std::string_view controller) const {
  if (backend == CgroupVersion::v2) {
    if (controller == "cpu") return true;  // cpu.stat is core (kernel >= 4.15)
    if (controller == "freezer") return v2_freeze;
    if (controller == "devices") return true;  // a BPF device program, not a controller file
    return contains(v2_controllers, controller);
  }
  if (backend == CgroupVersion::v1) {
    int role = controller == "memory" ? v1_memory
               : controller == "pids" ? v1_pids
               : controller == "cpu"  ? v1_cpuacct
               : controller == "freezer" ? v1_freezer
               : controller == "devices" ? v1_devices
                                        : -1;
    return role >= 0 && v1[role].writable;
  }
  return false;
}

std::string CgroupProbe::hidden_note() const {
  return hidden_mounts.empty() ? "" : "out of reach under another mount: " + join(hidden_mounts, ", ");
}

std::string CgroupProbe::describe() const {
  std::string v2 = v2_mounted ? "v2 at " + v2_mount + ": " +
                                    (v2_controllers.empty() ? std::string("no controllers")
                                                            : join(v2_controllers, ",")) : "";
  if (backend == CgroupVersion::v1) {
    std::vector<std::string> names, where;
    int roles[] = {v1_memory, v1_pids, v1_cpuacct, v1_freezer};
    for (std::size_t r = 0; r < 4; ++r) {
      if (roles[r] < 0 || !v1[roles[r]].writable) continue;
      names.emplace_back(kV1Roles[r]);
      where.push_back(std::string(kV1Roles[r]) + " at " + v1[roles[r]].own_dir);
    }
    std::string out = "cgroup v1: " + join(names, ",") + " (" + join(where, ", ") + "); swap " +
                      (v1_memsw ? "capped (memsw)" : "not capped (no memsw)") + "; group kill: " +
                      (v1_freezer >= 0 ? "freezer" : "kill loop (no freezer)");
    if (v2_mounted) out += "; " + v2 + " only (unused)";
    return out;
  }
  if (backend == CgroupVersion::v2) {
    return "cgroup v2 at " + v2_own_dir + ": " +
           (v2_controllers.empty() ? std::string("no controllers") : join(v2_controllers, ",")) +
           "; group kill: " + (v2_kill ? "cgroup.kill" : v2_freeze ? "freeze+kill" : "kill loop") +
           "; memory.peak: " + (v2_peak ? "yes" : "no");
  }
  return "cgroup: none (" + why_none + ")";
}

}  // namespace corral
