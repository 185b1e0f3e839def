#include "corral/enforcement.hpp"

#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "corral/capabilities.hpp"
#include "corral/landlock.hpp"
#include "corral/privilege.hpp"
#include "corral/syscalls.hpp"

namespace corral {
namespace {

std::string read_first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// A user namespace is what `container` needs first; try one in a throwaway
// child rather than trusting sysctls (distributions gate it differently).
bool probe_user_namespaces() {
  pid_t pid = fork();
  if (pid == 0) _exit(unshare(CLONE_NEWUSER) == 0 ? 0 : 1);
  if (pid < 0) return false;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return false;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

bool probe_io_uring() {
  // io_uring_setup with bad arguments: EFAULT means the call exists.
  long r = sys::call(SYS_io_uring_setup, 1, 0);
  return r == -EFAULT || r >= 0;
}

// Which cgroup hierarchy holds a controller: "v1" (its own mount), "v2", or "".
std::string controller_home(const std::string& controller, std::string& summary_v1, std::string& summary_v2) {
  std::ifstream mounts("/proc/self/mounts");
  std::string line;
  std::string home;
  while (std::getline(mounts, line)) {
    std::istringstream fields(line);
    std::string dev, dir, type, opts;
    fields >> dev >> dir >> type >> opts;
    if (type == "cgroup") {
      std::string o = "," + opts + ",";
      if (o.find("," + controller + ",") != std::string::npos) home = "v1";
    } else if (type == "cgroup2") {
      std::string ctl = read_first_line((dir + "/cgroup.controllers").c_str());
      if (summary_v2.empty()) summary_v2 = ctl.empty() ? "(none)" : ctl;
      if ((" " + ctl + " ").find(" " + controller + " ") != std::string::npos) home = "v2";
    }
  }
  if (home == "v1") summary_v1 += (summary_v1.empty() ? "" : ",") + controller;
  return home;
}

}  // namespace

HostFacts probe_host() {
  HostFacts h;
  h.root = is_root_capable();
  h.cap_sys_resource = has_effective_capability(24 /* CAP_SYS_RESOURCE */);
  h.landlock_abi = landlock_abi();
  h.seccomp = prctl(PR_GET_SECCOMP, 0, 0, 0, 0) >= 0;
  h.io_uring = probe_io_uring();
  long pidfd = sys::call(SYS_pidfd_open, getpid(), 0);
  h.pidfd = pidfd >= 0;
  if (pidfd >= 0) close(static_cast<int>(pidfd));
  h.user_namespaces = probe_user_namespaces();
  std::string v1, v2;
  // Per-run cgroups need root (or a delegated subtree, not probed yet).
  h.cgroup_memory = !controller_home("memory", v1, v2).empty() && h.root;
  h.cgroup_pids = !controller_home("pids", v1, v2).empty() && h.root;
  h.cgroup_summary = "v1: " + (v1.empty() ? std::string("(none)") : v1) + "; v2: " + (v2.empty() ? "(not mounted)" : v2);
  struct utsname u;
  if (uname(&u) == 0) h.kernel = u.release;
  return h;
}

std::vector<EnforcementEntry> enforcement_map(const HostFacts& h, Tier tier) {
  std::vector<EnforcementEntry> m;
  const bool process = tier == Tier::os_process;
  const bool container = tier == Tier::container;
  auto add = [&](std::string_view name, std::string how, std::string note) {
    m.push_back({std::string(name), std::move(how), std::move(note)});
  };
  add("cpu_seconds", "hard", "RLIMIT_CPU: SIGXCPU at the limit, SIGKILL one second later");
  if (container)
    add("memory_bytes", h.cgroup_memory ? "cgroup" : "unsupported",
        h.cgroup_memory ? "memory cgroup ceiling for the whole tree, swap off"
                        : "needs root or a delegated cgroup with the memory controller");
  else
    add("memory_bytes", "hard_per_process", "RLIMIT_AS: address space of each process, not the tree");
  if (container)
    add("process_count", h.cgroup_pids ? "cgroup" : "unsupported",
        h.cgroup_pids ? "pids cgroup" : "needs root or a delegated cgroup with the pids controller");
  else if (h.root && tier != Tier::none)
    add("process_count", "hard_per_run", "RLIMIT_NPROC on a uid of the run's own");
  else
    add("process_count", "hard_per_user",
        "RLIMIT_NPROC counts every process of the caller's uid, not just this run's (run as root for per-run uids)");
  add("file_bytes", "hard", "RLIMIT_FSIZE: SIGXFSZ on a write past it");
  add("open_files", "hard", "RLIMIT_NOFILE per process");
  add("wall_seconds", "supervisor", "deadline: SIGTERM to the group, grace, SIGKILL");
  add("stdout_bytes", "supervisor", "kept up to the cap; the rest counted and hashed");
  add("stderr_bytes", "supervisor", "kept up to the cap; the rest counted and hashed");
  add("artifact_bytes", "supervisor", "per collected file");
  add("artifact_total_bytes", "supervisor", "all collected files");
  add("artifact_count", "supervisor", "a glob over the count collects nothing");

  auto landlock_how = [&]() -> std::string {
    if (h.landlock_abi >= 3) return "hard_content";
    if (h.landlock_abi >= 1) return "hard_content_except_truncate";
    return "unsupported";
  };
  if (process)
    add(kGuaranteeWriteConfinement, landlock_how(), "Landlock ABI " + std::to_string(h.landlock_abi));
  else if (container)
    add(kGuaranteeWriteConfinement, "container", "read-only mount tree; only /workspace and /tmp writable");
  else
    add(kGuaranteeWriteConfinement, "unsupported", "tier none has no boundary: use --tier process");

  if (process)
    add(kGuaranteeNetworkNone, (h.landlock_abi >= 4 && h.seccomp) ? "hard" : (h.seccomp ? "seccomp_only" : "unsupported"),
        "seccomp no-network (socket() only for AF_UNIX) + Landlock TCP rules (ABI >= 4)");
  else if (container)
    add(kGuaranteeNetworkNone, h.user_namespaces ? "container" : "unsupported", "empty network namespace");
  else
    add(kGuaranteeNetworkNone, "unsupported", "tier none has no boundary: use --tier process");

  if (tier == Tier::none)
    add(kGuaranteePrivilegeDrop, "unsupported", "tier none runs as the caller");
  else if (container)
    add(kGuaranteePrivilegeDrop, h.user_namespaces ? "container" : "unsupported", "non-root uid in a user namespace");
  else
    add(kGuaranteePrivilegeDrop, h.root ? "hard_per_run" : "unsupported",
        h.root ? "a uid of its own per run in flight" : "not root: the program runs as the caller's uid");
  if (tier == Tier::none)
    add(kGuaranteeCapabilityDrop, "unsupported", "tier none keeps the caller's capabilities");
  else if (h.root || container)
    add(kGuaranteeCapabilityDrop, "hard", "bounding, permitted, effective, ambient cleared; no_new_privs");
  else
    add(kGuaranteeCapabilityDrop, "no_new_privs", "not root: no capabilities to drop; no_new_privs stops exec gaining any");
  add(kGuaranteeSeccomp, tier == Tier::none ? "unsupported" : (h.seccomp ? "hard" : "unsupported"),
      tier == Tier::none ? "tier none installs no filter" : "profile default (deny-list, EPERM)");
  add(kGuaranteeGroupKill, "hard", "killpg + pidfd_send_signal on the session the program leads");
  add(kGuaranteeReapsDescendants, container ? "container" : "process_group",
      container ? "pid namespace: nothing survives pid 1"
                : "the program's group is killed; a setsid escapee leaves it (use --tier container)");
  add(kGuaranteeSecretMasking, "supervisor", "*** in every captured and streamed byte");
  return m;
}

std::map<std::string, std::string> enforcement_summary(const HostFacts& host, Tier tier) {
  std::map<std::string, std::string> out;
  for (auto& e : enforcement_map(host, tier)) out[e.name] = e.how;
  return out;
}

Status check_enforceable(const HostFacts& host, const Request& request, const Limits& defaults,
                         std::vector<std::string>& warnings) {
  auto map = enforcement_map(host, request.tier);
  auto find = [&](std::string_view name) -> const EnforcementEntry* {
    for (auto& e : map)
      if (e.name == name) return &e;
    return nullptr;
  };
  auto refuse = [&](std::string_view name, const EnforcementEntry& e) {
    return Error(ENOTSUP, std::string(name) + " is not enforceable in tier " + std::string(to_string(request.tier)) +
                              " on this host (" + e.note + "); acknowledge it to run anyway");
  };
  for (const auto& info : all_limits()) {
    const EnforcementEntry* e = find(info.name);
    if (!e || e->how != "unsupported") continue;
    bool asked = request.limits.has(info.limit);
    bool acked = request.acknowledged.count(std::string(info.name)) > 0;
    if (asked && !acked) return refuse(info.name, *e);
    if (!asked && defaults.has(info.limit) && !acked)
      warnings.push_back(std::string(info.name) + " (default) is not enforced in tier " +
                         std::string(to_string(request.tier)) + ": " + e->note);
  }
  auto guarantee = [&](bool asked, std::string_view name) -> Status {
    if (!asked) return {};
    const EnforcementEntry* e = find(name);
    if (e && e->how == "unsupported" && request.acknowledged.count(std::string(name)) == 0) return refuse(name, *e);
    return {};
  };
  if (auto st = guarantee(request.confine_writes || !request.write_paths.empty(), kGuaranteeWriteConfinement); !st) return st;
  if (auto st = guarantee(request.net == NetworkAccess::none, kGuaranteeNetworkNone); !st) return st;
  if (auto st = guarantee(request.user.has_value(), kGuaranteePrivilegeDrop); !st) return st;
  return {};
}

std::vector<std::pair<std::string, std::string>> host_fact_lines(const HostFacts& h) {
  auto yes = [](bool b) { return std::string(b ? "yes" : "no"); };
  return {
      {"kernel", h.kernel},
      {"root", yes(h.root)},
      {"cap_sys_resource", yes(h.cap_sys_resource)},
      {"landlock_abi", std::to_string(h.landlock_abi)},
      {"seccomp", yes(h.seccomp)},
      {"io_uring", yes(h.io_uring)},
      {"pidfd", yes(h.pidfd)},
      {"user_namespaces", yes(h.user_namespaces)},
      {"cgroups", h.cgroup_summary},
      {"cgroup_memory_per_run", yes(h.cgroup_memory)},
      {"cgroup_pids_per_run", yes(h.cgroup_pids)},
  };
}

}  // namespace corral
