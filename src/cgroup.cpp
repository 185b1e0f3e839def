// The cgroup mechanism's common part: file formats, the shared file helpers,
// RunCgroup's dispatch to the v1 / v2 backends (src/cgroup_v1.cpp,
// src/cgroup_v2.cpp), and the stale-group sweep. The probe is in
// src/cgroup_probe.cpp. Everything here runs in the parent except
// join_cgroup_in_child.
#include "corral/cgroup.hpp"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <initializer_list>
#include <set>
#include <utility>

#include "cgroup_backend.hpp"
#include "corral/syscalls.hpp"

namespace corral {

namespace detail {

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

}  // namespace detail

using detail::contains;
using detail::parse_u64;
using detail::split;
using detail::trim;

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
  // Each reader fills fields (a keyed file is read once for all the keys
  // wanted from it); a read error or a file that does not parse stops the
  // whole answer with the file named.
  struct Key {
    const char* key;
    std::optional<std::uint64_t>* out;
    std::uint64_t scale = 1;
  };
  auto keyed = [&](const std::string& dir, const char* file, std::initializer_list<Key> keys) {
    if (failure.code()) return;
    auto text = read_optional(who, dir, file);
    if (!text) return void(failure = std::move(text).error());
    if (!*text) return;
    for (const Key& k : keys)
      if (auto v = keyed_value(**text, k.key)) *k.out = *v * k.scale;
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
    std::optional<std::uint64_t> ooms;
    keyed(dirs.memory, "memory.events",
          {{"oom_kill", &st.oom_kills}, {"oom_group_kill", &st.oom_group_kills}, {"oom", &ooms}});
    st.hit_ceiling = ooms.value_or(0) > 0;
    single(dirs.memory, "memory.peak", st.memory_peak_bytes);
    keyed(dirs.cpu, "cpu.stat", {{"usage_usec", &st.cpu_usage_ns, 1000}});
  } else {
    std::optional<std::uint64_t> under_oom, memory_limit, memsw_limit, memsw_peak;
    keyed(dirs.memory, "memory.oom_control", {{"oom_kill", &st.oom_kills}, {"under_oom", &under_oom}});
    st.under_oom = under_oom.value_or(0) != 0;
    single(dirs.memory, "memory.max_usage_in_bytes", st.memory_peak_bytes);
    const std::string ceiling_dir = dirs.memory_ceiling ? dirs.memory : std::string();
    single(ceiling_dir, "memory.limit_in_bytes", memory_limit);
    // With swap accounting a charge must fit under both limits (memsw is
    // tried first); either one can be the ceiling that was hit.
    single(ceiling_dir, "memory.memsw.limit_in_bytes", memsw_limit);
    single(ceiling_dir, "memory.memsw.max_usage_in_bytes", memsw_peak);
    const std::uint64_t slack = kOomChargePages * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
    auto at_limit = [&](const std::optional<std::uint64_t>& peak, const std::optional<std::uint64_t>& limit) {
      return peak && limit && *limit < (std::uint64_t{1} << 62) && *peak + slack >= *limit;
    };
    st.hit_ceiling = at_limit(st.memory_peak_bytes, memory_limit) || at_limit(memsw_peak, memsw_limit);
    single(dirs.cpu, "cpuacct.usage", st.cpu_usage_ns);
  }
  single(dirs.pids, "pids.current", st.pids_current);
  keyed(dirs.pids, "pids.events", {{"max", &st.pids_limit_hits}});
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
    // Only cgroup files come here (the probe reads /proc with a loop of its
    // own). They are seq_files: a read takes records until the next one
    // would not fit in the kernel's page-sized buffer, or none is left
    // (fs/seq_file.c, seq_read_iter). Each is made of short lines (a
    // number, "key value", a pid), so a read that stopped with over half a
    // page to spare ran out of records: the 0 that asking again would get
    // is skipped. Short of that, read on.
    if (n < static_cast<ssize_t>(sizeof buf / 2)) return out;
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
  // cgroup.procs moves the whole thread group, whatever `pid` is doing.
  std::string text = std::to_string(pid);
  for (const auto& p : placements)
    if (Status s = write_text(who(), p.dir + "/cgroup.procs", text); !s) return s;
  return {};
}

Status CgroupBackend::remove() {
  if (removed) return {};
  if (rmdir_first()) {
    // Most groups are empty by now (a container's pid 1 reaped its whole
    // namespace before its own exit was seen), and an rmdir is the kernel's
    // own emptiness check: v1 and v2 both refuse a populated group with
    // EBUSY. So a group that goes at once held nothing of the run, and
    // nothing was left to kill; reading cgroup.procs first (an open, a read
    // and a close per hierarchy) would only say so again. The first group
    // that refuses sends us the long way, where the ones already gone read
    // as empty. (Every process joins the first placement first, so a group
    // that holds anything refuses there, before any other is gone.)
    std::size_t gone = 0;
    for (; gone < placements.size(); ++gone)
      if (::rmdir(placements[gone].dir.c_str()) != 0 && errno != ENOENT) break;
    if (gone == placements.size()) {
      join_fds.clear();
      hold.reset();
      removed = true;
      return {};
    }
  }
  Status first = kill_all();
  if (first && left_for_reuse()) {
    join_fds.clear();
    hold.reset();
    removed = true;
    return first;
  }
  bool all_gone = true;
  for (const auto& p : placements) {
    // A nested group's children (hold_processes_in) go first: a group with
    // a child group refuses rmdir.
    std::vector<std::string> order = nested ? cgroup_subtree(p.dir) : std::vector<std::string>{p.dir};
    if (order.empty()) order.push_back(p.dir);
    for (const auto& d : order)
      if (Status s = remove_group(who(), d, 2000); !s) {
        all_gone = false;
        if (first) first = std::move(s);
        break;
      }
  }
  // The fds stay while a directory does: a join must keep failing loudly
  // rather than write to nothing, and the destructor tries again.
  if (all_gone) {
    join_fds.clear();
    hold.reset();
    removed = true;
  }
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

Expected<UniqueFd> open_join_file(std::string_view who, const std::string& dir, const char* file) {
  std::string path = dir + "/" + file;
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
  for (const auto& fd : backend_->join_fds)
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

Status RunCgroup::signal_all(int sig, pid_t except) {
  if (!backend_) return moved_from();
  if (backend_->removed) return {};
  const std::vector<std::string> dirs = backend_->dirs();
  std::set<pid_t> sent;
  for (int round = 0; round < 8; ++round) {
    bool fresh = false;
    for (const auto& d : dirs) {
      auto pids = detail::read_procs(backend_->who(), d);
      if (!pids) return std::move(pids).error();
      for (pid_t pid : *pids) {
        if (pid <= 0 || pid == except || !sent.insert(pid).second) continue;
        fresh = true;
        if (::kill(pid, sig) < 0 && errno != ESRCH)
          return Error::from_errno(errno, backend_->who() + ": signal " + std::to_string(sig) + " to " +
                                              std::to_string(pid));
      }
    }
    if (!fresh) break;
  }
  return {};
}

Status RunCgroup::hold_processes_in(std::string_view leaf) {
  if (!backend_) return moved_from();
  if (Status s = detail::validate_spec(CgroupSpec{}, leaf); !s) return s;
  if (Status s = backend_->hold_processes_in(std::string(leaf)); !s) return s;
  // The backend's join fds may now be the leaf's.
  join_count_ = 0;
  for (const auto& fd : backend_->join_fds)
    if (join_count_ < kCgroupMaxJoinFds) join_fds_[join_count_++] = fd.get();
  return {};
}

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

Expected<RunCgroup> reuse_run_cgroup(const CgroupProbe& probe, const CgroupSpec& spec, std::string_view name) {
  if (Status s = detail::validate_spec(spec, name); !s) return std::move(s).error();
  if (probe.backend != CgroupVersion::v1)
    return Error(ENOTSUP, "cgroup: groups are reused on v1 only (v2's memory.events counters cannot be reset)");
  auto backend = detail::reuse_v1(probe, spec, std::string(name));
  if (!backend) return std::move(backend).error();
  return RunCgroup(std::move(*backend));
}

bool run_cgroups_reusable(const CgroupProbe& probe) noexcept { return probe.backend == CgroupVersion::v1; }

bool run_cgroup_held(const std::string& dir) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  return fd && ::flock(fd.get(), LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
}

int join_cgroup_in_child(const RunCgroup& run) noexcept {
  // Async-signal-safe: raw write(2) on fds the parent opened; "0" = the writer.
  for (int i = 0; i < run.join_fd_count(); ++i)
    if (int err = sys::write_all(run.join_fds()[i], "0", 1)) return err;
  return 0;
}

Expected<int> sweep_run_cgroups(const CgroupProbe& probe, const CgroupSpec& spec,
                                const std::function<bool(std::string_view)>& is_stale) {
  if (Status s = detail::validate_spec(spec, ""); !s) return std::move(s).error();
  std::vector<std::string> bases;
  if (probe.backend == CgroupVersion::v2) {
    bases.push_back(detail::v2_run_base(probe, spec));
  } else if (probe.backend == CgroupVersion::v1) {
    for (int role : {probe.v1_memory, probe.v1_pids, probe.v1_cpuacct, probe.v1_freezer, probe.v1_devices}) {
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
    while (struct dirent* e = ::readdir(d))
      if (e->d_type == DT_DIR && e->d_name[0] != '.' && is_stale(e->d_name)) stale.emplace_back(e->d_name);
    ::closedir(d);
    for (const auto& n : stale)
      if (::rmdir((parent + "/" + n).c_str()) == 0) ++removed;
  }
  return removed;
}

Expected<int> sweep_stale_run_cgroups(const CgroupProbe& probe, const CgroupSpec& spec) {
  return sweep_run_cgroups(probe, spec, [](std::string_view n) {
    // "<label>-<pid>-<8 hex>": the pid of the supervisor that made it.
    auto last = n.rfind('-');
    if (last == std::string_view::npos || n.size() - last != 9) return false;
    auto prev = n.rfind('-', last - 1);
    if (prev == std::string_view::npos) return false;
    auto pid = parse_u64(n.substr(prev + 1, last - prev - 1));
    if (!pid || *pid == 0 || *pid > 0x3fffffff) return false;
    return !(::kill(static_cast<pid_t>(*pid), 0) == 0 || errno == EPERM);  // alive: not stale
  });
}

Expected<UniqueFd> RunCgroup::oom_notifier() const {
  if (version() != CgroupVersion::v1) return UniqueFd();
  return cgroup_v1_oom_notifier(dirs());
}

Expected<UniqueFd> cgroup_v1_oom_notifier(const std::vector<std::string>& dirs) {
  for (const auto& dir : dirs) {
    auto event = cgroup_v1_oom_notifier(dir);
    if (!event || event->valid()) return event;  // else not the memory hierarchy
  }
  return UniqueFd();
}

Expected<UniqueFd> cgroup_v1_oom_notifier(const std::string& dir) {
  UniqueFd control(::open((dir + "/memory.oom_control").c_str(), O_RDONLY | O_CLOEXEC));
  if (!control) return UniqueFd();  // not a v1 memory group
  UniqueFd event(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!event) return Error::from_errno(errno, "cgroup: eventfd for OOM notifications");
  UniqueFd registry(::open((dir + "/cgroup.event_control").c_str(), O_WRONLY | O_CLOEXEC));
  if (!registry) return Error::from_errno(errno, "cgroup: open " + dir + "/cgroup.event_control");
  // "<event fd> <memory.oom_control fd>"; the kernel keeps the cgroup, not
  // our control fd, so it may be closed once registered.
  std::string line = std::to_string(event.get()) + " " + std::to_string(control.get());
  if (::write(registry.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size()))
    return Error::from_errno(errno, "cgroup: register OOM notification in " + dir);
  return event;
}

}  // namespace corral
