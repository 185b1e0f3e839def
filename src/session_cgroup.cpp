// A session's exec cgroups (session_cgroup.hpp): the claim of an exec's
// group (a pooled one reused where the backend can, else a new one), the
// sweep of groups nobody holds, the removal of them all. The same code on
// v1 and v2; what differs is behind the cgroup module. Parent side.
#include "session_cgroup.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstring>

#include "cgroup_backend.hpp"
#include "corral/fd.hpp"

namespace corral {
namespace {

// A pool group is tried at most this many times per claim (each try that
// finds one unfit removes it), then a new group is made.
constexpr int kClaimTries = 3;

std::vector<std::string> exec_group_names(const std::string& session_dir) {
  std::vector<std::string> names;
  if (DIR* d = ::opendir((session_dir + "/execs").c_str())) {
    while (struct dirent* e = ::readdir(d))
      if (e->d_name[0] != '.' && e->d_type == DT_DIR) names.emplace_back(e->d_name);
    ::closedir(d);
  }
  return names;
}

std::vector<std::string> dirs_of(const std::vector<std::string>& session_dirs, const std::string& name) {
  std::vector<std::string> out;
  for (const auto& s : session_dirs) out.push_back(s + "/execs/" + name);
  return out;
}

bool rmdir_all(const std::vector<std::string>& dirs, std::vector<std::string>& problems) {
  bool all = true;
  for (const auto& d : dirs) {
    // EBUSY a moment while the kernel still detaches tasks just killed.
    for (int i = 0;; ++i) {
      if (::rmdir(d.c_str()) == 0 || errno == ENOENT) break;
      if (errno != EBUSY || i == 100) {
        problems.push_back("session: rmdir '" + d + "': " + std::strerror(errno));
        all = false;
        break;
      }
      detail::sleep_ms(2);
    }
  }
  return all;
}

// LOCK_EX on <first session group>/execs (made when missing): claims and
// sweeps of one session do not overlap.
Expected<UniqueFd> lock_execs(const std::string& first_session_dir) {
  const std::string execs = first_session_dir + "/execs";
  UniqueFd fd(::open(execs.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd && errno == ENOENT) {
    if (Status s = detail::make_dir("session", execs, true); !s) return std::move(s).error();
    fd.reset(::open(execs.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  }
  if (!fd) return Error::from_errno(errno, "session: open '" + execs + "'");
  while (::flock(fd.get(), LOCK_EX) != 0)
    if (errno != EINTR) return Error::from_errno(errno, "session: lock '" + execs + "'");
  return fd;
}

}  // namespace

Expected<RunCgroup> claim_exec_cgroup(const CgroupProbe& host, const std::vector<std::string>& session_dirs,
                                      std::optional<std::uint64_t> memory_bytes,
                                      std::optional<std::uint64_t> pids_max, std::string_view run_name) {
  if (session_dirs.empty()) return Error(ENOTSUP, "session exec: the session has no cgroup");
  if (host.backend == CgroupVersion::none) return Error(ENOTSUP, "session exec: no cgroup hierarchy (" + host.why_none + ")");
  // Groups below the session's: <session group>/execs/<name> in each
  // hierarchy the session uses (v1), below the process-free session group
  // that hands memory and pids down (v2, RunCgroup::hold_processes_in),
  // where the memory ceiling comes with memory.oom.group 1: an OOM takes
  // the whole exec.
  const CgroupProbe probe = probe_below(host, session_dirs);
  const bool v2 = probe.backend == CgroupVersion::v2;
  CgroupSpec spec;
  spec.parent = "execs";
  // v1: in the freezer when the session has a group there (the keeper's
  // make_freezer_group): an exec shares the session's pid namespace, so the
  // group kill is all that ends it, and frozen tasks cannot fork.
  spec.freezer_kill = !v2 && probe.v1_freezer >= 0 && probe.v1[probe.v1_freezer].writable;
  spec.reusable = true;  // v1: kept for the next exec when clean; v2: held while it runs, then removed
  spec.cpu_accounting = v2 || (probe.v1_cpuacct >= 0 && probe.v1[probe.v1_cpuacct].writable);
  // Always in the pids hierarchy when the session is, so that every exec
  // group has the same hierarchies whatever its own ceilings.
  const bool pids = v2 || (probe.v1_pids >= 0 && probe.v1[probe.v1_pids].writable);
  spec.pids_accounting = pids;
  spec.memory_bytes = memory_bytes;
  if (pids) spec.pids_max = pids_max;

  auto lock = lock_execs(session_dirs.front());
  if (!lock) return std::move(lock).error();
  if (run_cgroups_reusable(probe)) {
    int tries = 0;
    for (const auto& name : exec_group_names(session_dirs.front())) {
      if (tries == kClaimTries) break;
      auto reused = reuse_run_cgroup(probe, spec, name);
      if (reused) return reused;
      // Held by a running exec: not a try. Unfit ones were removed.
      if (reused.error().code() != EAGAIN) ++tries;
    }
  }
  return create_run_cgroup(probe, spec, run_name);
}

int sweep_unclaimed_execs(const std::vector<std::string>& session_dirs, int pool_keep,
                          std::vector<std::string>& problems, bool* held) {
  if (held) *held = false;
  if (session_dirs.empty()) return 0;
  auto names = exec_group_names(session_dirs.front());
  if (names.empty()) return 0;
  auto lock = lock_execs(session_dirs.front());
  if (!lock) {
    problems.push_back(lock.error().message());
    return 0;
  }
  int removed = 0, pool = 0;
  for (const auto& name : names) {
    auto dirs = dirs_of(session_dirs, name);
    if (run_cgroup_held(dirs.front())) {
      if (held) *held = true;
      continue;
    }
    std::size_t listed = 0;
    for (const auto& d : dirs)
      if (auto pids = detail::read_procs("session", d)) listed += pids->size();
    // reuse_run_cgroup checks a kept group again before an exec gets it.
    if (listed == 0 && ++pool <= pool_keep) continue;
    if (listed > 0)
      if (auto st = detail::kill_until_empty("session", dirs, 2000); !st) {
        problems.push_back(st.error().message());
        continue;
      }
    removed += rmdir_all(dirs, problems);
  }
  return removed;
}

int remove_exec_cgroups(const std::vector<std::string>& session_dirs, std::vector<std::string>& problems) {
  int left = 0;
  for (const auto& sdir : session_dirs) {
    for (const auto& name : exec_group_names(sdir)) {
      const std::string c = sdir + "/execs/" + name;
      if (auto st = detail::kill_until_empty("session", {c}, 2000); !st) problems.push_back(st.error().message());
      if (!rmdir_all({c}, problems)) ++left;
    }
    if (!rmdir_all({sdir + "/execs"}, problems)) ++left;
  }
  return left;
}

}  // namespace corral
