// Shared by the session test binaries (session_test.cpp, session_exec_test.cpp,
// session_cli_test.cpp): the skip for hosts without sessions, a session
// opened for a test and disposed at its end, execs into it, and the
// host-side looks at processes, namespaces and exec groups.
#pragma once

#include <criterion/criterion.h>
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "container_support.hpp"
#include "corral/session.hpp"
#include "corral/supervisor.hpp"

namespace session_test {

using namespace corral;
using namespace container_test;

#define SKIP_UNLESS_SESSIONS()                                                                            \
  do {                                                                                                    \
    CORRAL_SKIP_UNLESS_ROOT();                                                                            \
    SKIP_UNLESS_CONTAINER();                                                                              \
    /* v1 with memory, or v2 with memory and pids delegated (session_keeper.cpp) */                      \
    if (!host().cgroup_memory || !(host().cgroups.backend == CgroupVersion::v1 ||                        \
                                   (host().cgroups.backend == CgroupVersion::v2 && host().cgroup_pids))) \
      cr_skip_test("sessions need cgroup v1 memory, or v2 memory and pids, here: %s",                    \
                   host().cgroup_summary.c_str());                                                       \
  } while (0)

inline SessionSpec spec_with_helpers() {
  SessionSpec spec;
  spec.base.tier = Tier::container;
  spec.base.binds.push_back(MountBind{helpers_dir(), "/helpers", false});
  spec.base.limits.set(Limit::memory_bytes, 256ull << 20);
  spec.base.limits.set(Limit::process_count, 64);
  spec.idle_seconds = 120;
  spec.max_lifetime_seconds = 600;
  return spec;
}

inline SessionInfo open_session(const std::string& scope, const std::string& thread, const SessionSpec& spec) {
  auto s = acquire_session(SessionKey{scope, thread, ""}, spec);
  cr_assert(s, "acquire: %s", s ? "" : s.error().message().c_str());
  return *s;
}

struct Scope {
  std::string name;
  ~Scope() { dispose_scope(name); }
};

inline Result exec(Supervisor& sup, const std::string& id, std::vector<std::string> argv, Limits limits = {}) {
  Request r;
  r.argv = std::move(argv);
  r.limits = limits;
  auto res = sup.run(session_exec_request(id, std::move(r)));
  cr_assert(res, "exec: %s", res ? "" : res.error().message().c_str());
  return *res;
}

inline std::unique_ptr<Supervisor> supervisor() {
  auto s = Supervisor::create();
  cr_assert(s, "supervisor: %s", s ? "" : s.error().message().c_str());
  return std::move(*s);
}

// Alive and not a zombie (an orphan adopted by a subreaper that has not reaped it yet is gone).
inline bool process_alive(pid_t pid) {
  if (pid <= 0 || (kill(pid, 0) != 0 && errno != EPERM)) return false;
  std::string stat = corral_test::read_file("/proc/" + std::to_string(pid) + "/stat");
  auto paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

inline bool gone_within(const std::function<bool()>& gone, double seconds) {
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (gone()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return gone();
}

inline bool exists(const std::string& path) {
  struct stat st {};
  return lstat(path.c_str(), &st) == 0;
}

inline std::string ns_of(pid_t pid, const char* ns) {
  char buf[256];
  ssize_t n = readlink(("/proc/" + std::to_string(pid) + "/ns/" + ns).c_str(), buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "";
}

inline std::string workdir_path(const SessionInfo& s, const std::string& rel) {
  return "/proc/" + std::to_string(s.pid1) + "/root/workspace/" + rel;
}

// The exec groups below a session group (held ones and the pool's).
inline std::vector<std::string> exec_groups(const std::string& session_group) {
  std::vector<std::string> names;
  if (DIR* dir = opendir((session_group + "/execs").c_str())) {
    while (dirent* e = readdir(dir))
      if (e->d_name[0] != '.' && e->d_type == DT_DIR) names.emplace_back(e->d_name);
    closedir(dir);
  }
  return names;
}

}  // namespace session_test
