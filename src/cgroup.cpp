// The cgroup mechanism's common part: probing the host, file formats, the
// shared file helpers, and RunCgroup's dispatch to the v1 / v2 backends
// (src/cgroup_v1.cpp, src/cgroup_v2.cpp). Everything here runs in the parent
// except join_cgroup_in_child.
#include "corral/cgroup.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <map>
#include <set>
#include <utility>

#include "cgroup_backend.hpp"
#include "corral/syscalls.hpp"

namespace corral {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n')) s.remove_suffix(1);
  return s;
}

std::optional<std::uint64_t> parse_u64(std::string_view s) {
  s = trim(s);
  std::uint64_t v = 0;
  if (s.empty()) return std::nullopt;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  while (true) {
    auto pos = s.find(sep);
    out.push_back(s.substr(0, pos));
    if (pos == std::string_view::npos) return out;
    s.remove_prefix(pos + 1);
  }
}

bool contains(const std::vector<std::string>& v, std::string_view x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

std::string join(const std::vector<std::string>& v, std::string_view sep) {
  std::string out;
  for (const auto& s : v) {
    if (!out.empty()) out += sep;
    out += s;
  }
  return out;
}

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape_mount_path(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '3' && s[i + 2] >= '0' && s[i + 2] <= '7' && s[i + 3] >= '0' &&
        s[i + 3] <= '7') {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

struct MountEntry {
  std::string root, mount_point, fstype;
  std::vector<std::string> super_options;
};

std::vector<MountEntry> parse_mountinfo(std::string_view text) {
  std::vector<MountEntry> out;
  for (auto line : split(text, '\n')) {
    auto fields = split(line, ' ');
    auto dash = std::find(fields.begin(), fields.end(), "-");
    if (fields.size() < 6 || dash == fields.end() || fields.end() - dash < 4) continue;
    MountEntry m;
    m.root = unescape_mount_path(fields[3]);
    m.mount_point = unescape_mount_path(fields[4]);
    m.fstype = std::string(dash[1]);
    for (auto opt : split(dash[3], ',')) m.super_options.emplace_back(opt);
    out.push_back(std::move(m));
  }
  return out;
}

// /proc/self/cgroup: "0::/path" for v2, "4:memory:/path" or "2:cpu,cpuacct:/path" for v1.
struct SelfCgroups {
  std::optional<std::string> v2_path;
  std::map<std::string, std::string> v1_paths;  // controller -> path
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

std::string read_or_empty(const std::string& path) {
  auto r = detail::read_text("cgroup", path);
  return r ? *r : std::string();
}

const char* const kV1Roles[] = {"memory", "pids", "cpuacct", "freezer"};

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
  auto mounts = parse_mountinfo(read_or_empty(sources.mountinfo));
  auto self = parse_self_cgroup(read_or_empty(sources.self_cgroup));
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
      for (const auto& opt : m.super_options)
        if (opt != "rw" && opt != "ro" && (opt.find('=') == std::string::npos || opt.rfind("name=", 0) == 0))
          h.controllers.push_back(opt);
      h.mount_point = m.mount_point;
      for (const auto& c : h.controllers) {
        auto it = self.v1_paths.find(c);
        if (it != self.v1_paths.end()) {
          h.own_dir = dir_through_mount(m, it->second);
          break;
        }
      }
      h.writable = writable_dir(h.own_dir);
      // A bind mount of a hierarchy we already have adds nothing.
      bool dup = std::any_of(p.v1.begin(), p.v1.end(), [&](const CgroupV1Hierarchy& o) {
        return o.controllers == h.controllers && !o.own_dir.empty();
      });
      if (!dup) p.v1.push_back(std::move(h));
    }
  }

  if (!p.v2_own_dir.empty()) {
    p.v2_controllers = cgroupfs::word_list(read_or_empty(p.v2_own_dir + "/cgroup.controllers"));
    p.v2_writable = writable_dir(p.v2_own_dir);
    // cgroup.kill, cgroup.freeze and memory.peak exist only in non-root
    // cgroups; at the root, the kernel version has to answer.
    auto has_file = [&](const char* f, int ma, int mi) {
      return p.v2_own_is_root ? kernel_at_least(ma, mi) : detail::file_exists(p.v2_own_dir + "/" + f);
    };
    p.v2_kill = has_file("cgroup.kill", 5, 14);
    p.v2_freeze = has_file("cgroup.freeze", 5, 2);
    p.v2_peak = contains(p.v2_controllers, "memory") && has_file("memory.peak", 5, 19);
  }

  int* roles[] = {&p.v1_memory, &p.v1_pids, &p.v1_cpuacct, &p.v1_freezer};
  for (std::size_t r = 0; r < 4; ++r)
    for (std::size_t i = 0; i < p.v1.size(); ++i)
      if (*roles[r] < 0 && contains(p.v1[i].controllers, kV1Roles[r]) && !p.v1[i].own_dir.empty())
        *roles[r] = static_cast<int>(i);
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
    p.why_none = join(why, "; ");
  }
  return p;
}

bool CgroupProbe::has(std::string_view controller) const {
  if (backend == CgroupVersion::v2) {
    if (controller == "cpu") return true;  // cpu.stat is core (kernel >= 4.15)
    if (controller == "freezer") return v2_freeze;
    return contains(v2_controllers, controller);
  }
  if (backend == CgroupVersion::v1) {
    int role = controller == "memory" ? v1_memory
               : controller == "pids" ? v1_pids
               : controller == "cpu"  ? v1_cpuacct
               : controller == "freezer" ? v1_freezer
                                        : -1;
    return role >= 0 && v1[role].writable;
  }
  return false;
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

// ---------------------------------------------------------------- file formats

namespace cgroupfs {

std::optional<std::uint64_t> keyed_value(std::string_view text, std::string_view key) {
  for (auto line : split(text, '\n')) {
    auto sp = line.find(' ');
    if (sp == std::string_view::npos || line.substr(0, sp) != key) continue;
    return parse_u64(line.substr(sp + 1));
  }
  return std::nullopt;
}

std::vector<std::string> word_list(std::string_view text) {
  std::vector<std::string> out;
  for (auto w : split(trim(text), ' '))
    if (!trim(w).empty()) out.emplace_back(trim(w));
  return out;
}

std::optional<std::uint64_t> single_value(std::string_view text) {
  if (trim(text) == "max") return UINT64_MAX;
  return parse_u64(text);
}

namespace {

// The text of dir/file, nullopt when dir is "" or the file is missing.
Expected<std::optional<std::string>> read_optional(std::string_view who, const std::string& dir,
                                                  const char* file) {
  if (dir.empty()) return std::optional<std::string>{};
  auto r = detail::read_text(who, dir + "/" + file);
  if (!r) {
    if (r.error().code() == ENOENT) return std::optional<std::string>{};
    return std::move(r).error();
  }
  return std::optional<std::string>(std::move(*r));
}

}  // namespace

Expected<CgroupStats> read_stats(CgroupVersion version, const StatDirs& dirs) {
  const bool v2 = version == CgroupVersion::v2;
  std::string who = v2 ? "cgroup v2" : "cgroup v1";
  CgroupStats st;
  Error failure;
  // Each reader fills one field; a read error or a file that does not parse
  // stops the whole answer with the file named.
  auto keyed = [&](const std::string& dir, const char* file, const char* key,
                   std::optional<std::uint64_t>& out, std::uint64_t scale = 1) {
    if (failure.code()) return;
    auto text = read_optional(who, dir, file);
    if (!text) return void(failure = std::move(text).error());
    if (!*text) return;
    if (auto v = keyed_value(**text, key)) out = *v * scale;
  };
  auto single = [&](const std::string& dir, const char* file, std::optional<std::uint64_t>& out) {
    if (failure.code()) return;
    auto text = read_optional(who, dir, file);
    if (!text) return void(failure = std::move(text).error());
    if (!*text) return;
    out = single_value(**text);
    if (!out) failure = Error(EINVAL, who + ": " + dir + "/" + file + ": not a number: '" +
                                          std::string(trim(**text)) + "'");
  };
  if (v2) {
    keyed(dirs.memory, "memory.events", "oom_kill", st.oom_kills);
    single(dirs.memory, "memory.peak", st.memory_peak_bytes);
    keyed(dirs.cpu, "cpu.stat", "usage_usec", st.cpu_usage_ns, 1000);
  } else {
    keyed(dirs.memory, "memory.oom_control", "oom_kill", st.oom_kills);
    single(dirs.memory, "memory.max_usage_in_bytes", st.memory_peak_bytes);
    single(dirs.cpu, "cpuacct.usage", st.cpu_usage_ns);
  }
  single(dirs.pids, "pids.current", st.pids_current);
  keyed(dirs.pids, "pids.events", "max", st.pids_limit_hits);
  if (failure.code()) return failure;
  return st;
}

}  // namespace cgroupfs

// ---------------------------------------------------------------- shared helpers

namespace detail {

Expected<std::string> read_text(std::string_view who, const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Error::from_errno(errno, std::string(who) + ": open " + path);
  UniqueFd owner(fd);
  std::string out;
  char buf[4096];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error::from_errno(errno, std::string(who) + ": read " + path);
    if (n == 0) return out;
    out.append(buf, static_cast<std::size_t>(n));
  }
}

Status write_text(std::string_view who, const std::string& path, std::string_view value) {
  auto fail = [&](int err) {
    return Error::from_errno(err, std::string(who) + ": write '" + std::string(value) + "' to " + path);
  };
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return fail(errno);
  // cgroupfs takes one value per write(2): never split it.
  ssize_t n;
  do n = ::write(fd.get(), value.data(), value.size());
  while (n < 0 && errno == EINTR);
  if (n < 0) return fail(errno);
  if (static_cast<std::size_t>(n) != value.size()) return fail(EIO);
  return {};
}

bool file_exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

Status make_dir(std::string_view who, const std::string& path, bool exist_ok) {
  if (::mkdir(path.c_str(), 0755) == 0 || (exist_ok && errno == EEXIST)) return {};
  return Error::from_errno(errno, std::string(who) + ": mkdir " + path);
}

Expected<std::vector<pid_t>> read_procs(std::string_view who, const std::string& dir) {
  std::vector<pid_t> pids;
  auto text = read_text(who, dir + "/cgroup.procs");
  if (!text) {
    if (text.error().code() == ENOENT) return pids;
    return std::move(text).error();
  }
  for (auto line : split(*text, '\n'))
    if (auto v = parse_u64(line)) pids.push_back(static_cast<pid_t>(*v));
  return pids;
}

Expected<int> kill_listed(std::string_view who, const std::vector<std::string>& dirs) {
  std::set<pid_t> all;
  for (const auto& d : dirs) {
    auto pids = read_procs(who, d);
    if (!pids) return std::move(pids).error();
    all.insert(pids->begin(), pids->end());
  }
  for (pid_t pid : all)
    if (pid > 0 && ::kill(pid, SIGKILL) < 0 && errno != ESRCH)
      return Error::from_errno(errno, std::string(who) + ": kill " + std::to_string(pid));
  return static_cast<int>(all.size());
}

void sleep_ms(int ms) {
  struct timespec ts {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
  }
}

long long now_ms() {
  struct timespec ts {};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

Status kill_until_empty(std::string_view who, const std::vector<std::string>& dirs, int timeout_ms) {
  const long long deadline = now_ms() + timeout_ms;
  int nap = 1;
  while (true) {
    auto listed = kill_listed(who, dirs);
    if (!listed) return std::move(listed).error();
    if (*listed == 0) return {};
    if (now_ms() >= deadline) {
      std::string survivors;
      for (const auto& d : dirs)
        if (auto pids = read_procs(who, d))
          for (pid_t p : *pids) survivors += " " + std::to_string(p);
      return Error(ETIMEDOUT, std::string(who) + ": processes still in the run cgroup after " +
                                  std::to_string(timeout_ms) + " ms:" + survivors);
    }
    // A killed task leaves cgroup.procs once it has exited; a few ms.
    sleep_ms(nap);
    nap = std::min(nap * 2, 10);
  }
}

std::vector<std::string> CgroupBackend::dirs() const {
  std::vector<std::string> out;
  for (const auto& p : placements) out.push_back(p.dir);
  return out;
}

Status CgroupBackend::add_process(pid_t pid) {
  if (removed) return Error(ENOENT, who() + ": run cgroup " + name + " was removed");
  std::string text = std::to_string(pid);
  for (std::size_t i = 0; i < procs_fds.size(); ++i) {
    ssize_t n;
    do n = ::write(procs_fds[i].get(), text.data(), text.size());
    while (n < 0 && errno == EINTR);
    if (n < 0)
      return Error::from_errno(errno, who() + ": write '" + text + "' to " + placements[i].dir +
                                          "/cgroup.procs");
  }
  return {};
}

Status CgroupBackend::remove() {
  if (removed) return {};
  Status first = kill_all();
  procs_fds.clear();
  bool all_gone = true;
  for (const auto& p : placements) {
    // EBUSY while the kernel still detaches tasks that were just killed.
    const long long deadline = now_ms() + 2000;
    int err = 0;
    while (::rmdir(p.dir.c_str()) < 0) {
      err = errno;
      if (err == ENOENT) break;
      if (err != EBUSY || now_ms() >= deadline) {
        all_gone = false;
        if (first) first = Error::from_errno(err, who() + ": rmdir " + p.dir);
        break;
      }
      sleep_ms(2);
    }
    // The parent group goes too when no other run uses it; a concurrent
    // create that loses it re-creates it (see create_v1/create_v2).
    std::string dir = p.parent;
    while (dir.size() > p.base.size() && ::rmdir(dir.c_str()) == 0) dir.erase(dir.rfind('/'));
  }
  removed = all_gone;
  return first;
}

Status validate_spec(const CgroupSpec& spec, std::string_view run_name) {
  auto clean = [](std::string_view s) {
    return std::all_of(s.begin(), s.end(), [](char c) {
      return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
             c == '.' || c == '-';
    });
  };
  if (run_name.size() > 64 || !clean(run_name) || run_name == "." || run_name == "..")
    return Error::invalid("cgroup: run name '" + std::string(run_name) +
                          "' must be at most 64 characters of A-Z a-z 0-9 _ . -");
  if (spec.parent.empty())
    return Error::invalid("cgroup: parent group is empty (the default is 'corral')");
  for (auto part : split(spec.parent, '/'))
    if (part.empty() || part == "." || part == ".." || !clean(part))
      return Error::invalid("cgroup: parent group '" + spec.parent +
                            "' must be relative components of A-Z a-z 0-9 _ . - (no '.', '..' or empty)");
  constexpr std::uint64_t kMax = std::uint64_t{1} << 63;
  auto check = [](const char* what, const std::optional<std::uint64_t>& v) -> Status {
    if (!v) return {};
    if (*v == 0) return Error::invalid(std::string("cgroup: ") + what + " must be at least 1");
    if (*v >= kMax) return Error(ERANGE, std::string("cgroup: ") + what + " is too large (max 2^63-1)");
    return {};
  };
  if (Status s = check("memory_bytes", spec.memory_bytes); !s) return s;
  return check("pids_max", spec.pids_max);
}

std::string unique_run_name(std::string_view run_name) {
  static unsigned counter = 0;
  std::uint32_t rnd = 0;
  if (getrandom(&rnd, sizeof rnd, GRND_NONBLOCK) != sizeof rnd)
    rnd = static_cast<std::uint32_t>(now_ms()) * 2654435761u + __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
  char hex[9];
  snprintf(hex, sizeof hex, "%08x", rnd);
  return std::string(run_name.empty() ? "run" : run_name) + "-" + std::to_string(getpid()) + "-" + hex;
}

Expected<UniqueFd> open_procs(std::string_view who, const std::string& dir) {
  std::string path = dir + "/cgroup.procs";
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return Error::from_errno(errno, std::string(who) + ": open " + path);
  return fd;
}

}  // namespace detail

// ---------------------------------------------------------------- RunCgroup

namespace {
Error moved_from() { return Error(EBADF, "cgroup: this RunCgroup was moved from"); }
}  // namespace

RunCgroup::RunCgroup(std::unique_ptr<detail::CgroupBackend> backend) : backend_(std::move(backend)) {
  for (const auto& fd : backend_->procs_fds)
    if (join_count_ < kCgroupMaxJoinFds) join_fds_[join_count_++] = fd.get();
}

RunCgroup::RunCgroup(RunCgroup&& other) noexcept { *this = std::move(other); }

RunCgroup& RunCgroup::operator=(RunCgroup&& other) noexcept {
  if (this == &other) return *this;
  if (backend_ && !backend_->removed) (void)backend_->remove();
  backend_ = std::move(other.backend_);
  std::copy(std::begin(other.join_fds_), std::end(other.join_fds_), join_fds_);
  join_count_ = std::exchange(other.join_count_, 0);
  return *this;
}

RunCgroup::~RunCgroup() {
  if (backend_ && !backend_->removed) (void)backend_->remove();
}

CgroupVersion RunCgroup::version() const noexcept {
  return backend_ ? backend_->version() : CgroupVersion::none;
}

const std::string& RunCgroup::name() const noexcept {
  static const std::string empty;
  return backend_ ? backend_->name : empty;
}

std::vector<std::string> RunCgroup::dirs() const { return backend_ ? backend_->dirs() : std::vector<std::string>{}; }

std::string RunCgroup::describe() const { return backend_ ? backend_->description : std::string(); }

bool RunCgroup::swap_capped() const noexcept { return backend_ && backend_->swap_capped; }

int RunCgroup::cgroup_fd() const noexcept { return backend_ ? backend_->cgroup_fd() : -1; }

Status RunCgroup::add_process(pid_t pid) { return backend_ ? backend_->add_process(pid) : moved_from(); }

Expected<CgroupStats> RunCgroup::stats() const {
  if (!backend_) return moved_from();
  return backend_->stats();
}

Status RunCgroup::kill_all() { return backend_ ? backend_->kill_all() : moved_from(); }

Status RunCgroup::remove() {
  if (!backend_) return moved_from();
  Status s = backend_->remove();
  if (backend_->removed) join_count_ = 0;  // the fds are closed
  return s;
}

Expected<RunCgroup> create_run_cgroup(const CgroupProbe& probe, const CgroupSpec& spec,
                                      std::string_view run_name) {
  if (Status s = detail::validate_spec(spec, run_name); !s) return std::move(s).error();
  if (probe.backend == CgroupVersion::none)
    return Error(ENOTSUP, "cgroup: no usable cgroup hierarchy: " + probe.why_none);
  // A random suffix makes a clash with a stale group (a crashed supervisor
  // with our pid) unlikely; EEXIST gets a fresh name all the same.
  for (int attempt = 0;; ++attempt) {
    std::string name = detail::unique_run_name(run_name);
    auto backend = probe.backend == CgroupVersion::v2 ? detail::create_v2(probe, spec, name)
                                                      : detail::create_v1(probe, spec, name);
    if (backend) return RunCgroup(std::move(*backend));
    if (backend.error().code() != EEXIST || attempt == 3) return std::move(backend).error();
  }
}

int join_cgroup_in_child(const RunCgroup& run) noexcept {
  // Async-signal-safe: raw write(2) on fds the parent opened; "0" = the writer.
  for (int i = 0; i < run.join_fd_count(); ++i)
    if (int err = sys::write_all(run.join_fds()[i], "0", 1)) return err;
  return 0;
}

Expected<int> sweep_stale_run_cgroups(const CgroupProbe& probe, const CgroupSpec& spec) {
  if (Status s = detail::validate_spec(spec, ""); !s) return std::move(s).error();
  std::vector<std::string> bases;
  if (probe.backend == CgroupVersion::v2) {
    bases.push_back(spec.under_hierarchy_root ? probe.v2_mount : probe.v2_own_dir);
  } else if (probe.backend == CgroupVersion::v1) {
    for (int role : {probe.v1_memory, probe.v1_pids, probe.v1_cpuacct, probe.v1_freezer}) {
      if (role < 0) continue;
      const auto& h = probe.v1[role];
      std::string base = spec.under_hierarchy_root ? h.mount_point : h.own_dir;
      if (!contains(bases, base)) bases.push_back(base);
    }
  }
  int removed = 0;
  for (const auto& base : bases) {
    std::string parent = base + "/" + spec.parent;
    DIR* d = ::opendir(parent.c_str());
    if (!d) {
      if (errno == ENOENT) continue;
      return Error::from_errno(errno, "cgroup: open " + parent);
    }
    std::vector<std::string> stale;
    while (struct dirent* e = ::readdir(d)) {
      // "<label>-<pid>-<8 hex>": the pid of the supervisor that made it.
      std::string_view n = e->d_name;
      auto last = n.rfind('-');
      if (e->d_type != DT_DIR || last == std::string_view::npos || n.size() - last != 9) continue;
      auto prev = n.rfind('-', last - 1);
      if (prev == std::string_view::npos) continue;
      auto pid = parse_u64(n.substr(prev + 1, last - prev - 1));
      if (!pid || *pid == 0 || *pid > 0x3fffffff) continue;
      if (::kill(static_cast<pid_t>(*pid), 0) == 0 || errno == EPERM) continue;  // alive
      stale.emplace_back(n);
    }
    ::closedir(d);
    for (const auto& n : stale)
      if (::rmdir((parent + "/" + n).c_str()) == 0) ++removed;
  }
  return removed;
}

}  // namespace corral
