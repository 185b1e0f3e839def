#include "corral/enforcement.hpp"

#include <algorithm>

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "corral/capabilities.hpp"
#include "corral/container.hpp"
#include "corral/kernel_oom_log.hpp"
#include "corral/landlock.hpp"
#include "corral/ns_template.hpp"
#include "corral/privilege.hpp"
#include "corral/rlimits.hpp"
#include "corral/process.hpp"
#include "corral/syscalls.hpp"
#include "corral/tier_limits.hpp"
#include "corral/tier_runner.hpp"
#include "corral/workspace.hpp"

#include "tmpfs_options.hpp"

namespace corral {

namespace {

// Why a per-run cgroup with `controller` cannot be had here, and how to get it.
std::string cgroup_missing(const HostFacts& h, const char* controller) {
  std::string why = h.cgroups.backend == CgroupVersion::none
                        ? h.cgroups.why_none
                        : std::string("the ") + std::string(cgroup_version_name(h.cgroups.backend)) +
                              " hierarchy we may write has no " + controller + " controller" +
                              (h.cgroups.hidden_mounts.empty() ? "" : "; " + h.cgroups.hidden_note());
  return "no per-run cgroup with the " + std::string(controller) + " controller (" + why +
         "); run as root, or in a delegated cgroup (e.g. systemd-run --user --scope -p Delegate=yes)";
}

std::string namespaces_note(const HostFacts& h) {
  if (h.user_namespaces && h.pivot_root) return "user, pid, net, mount (pivot_root), ipc, uts, cgroup namespaces";
  return "this host refused " + h.container_probe +
         " (user namespaces may be disabled: sysctl user.max_user_namespaces, kernel.unprivileged_userns_clone, "
         "or an AppArmor/SELinux policy)";
}


// Whether the program runs as the caller would exec it (HostFacts's
// program_* facts then hold): tier none always; tier process unless root,
// which changes the uid and drops every capability (not root, it has
// nothing it may drop). A container's program holds no capability and a
// mapped non-root uid.
bool program_runs_as_caller(const HostFacts& h, Tier tier) {
  return tier == Tier::none || (tier == Tier::os_process && !h.root);
}

}  // namespace

std::vector<EnforcementEntry> enforcement_map(const HostFacts& h, Tier tier) {
  std::vector<EnforcementEntry> m;
  const bool process = tier == Tier::os_process;
  const bool container = tier == Tier::container;
  auto add = [&](std::string_view name, std::string how, std::string note) {
    m.push_back({std::string(name), std::move(how), std::move(note)});
  };
  // The kernel applies these rlimits to root too; a program that holds
  // CAP_SYS_RESOURCE may lift them itself, so they bind only a program
  // that does not try.
  const bool as_caller = program_runs_as_caller(h, tier);
  const bool raisable = as_caller && h.program_raises_rlimits;
  auto rlimit = [&](std::string_view name, std::string how, std::string note) {
    if (raisable)
      add(name, "hard_unless_raised",
          note + "; the program holds CAP_SYS_RESOURCE in tier " + std::string(to_string(tier)) +
              " and may raise its own hard limit (use --tier process" + (h.root ? "" : " as root") + ")");
    else
      add(name, std::move(how), std::move(note));
  };
  // RLIMIT_CPU counts each process on its own: only a reading of the whole
  // tree (the container's cgroup) holds the run to the limit.
  if (container)
    rlimit("cpu_seconds", "hard",
           "the run's cgroup CPU usage, every process of it, read by the supervisor, which kills the run at "
           "the limit (a run's enforcement: supervisor_cgroup_cpu); RLIMIT_CPU, rounded up, holds each process "
           "as well (SIGXCPU, SIGKILL one second later)");
  else
    rlimit("cpu_seconds", "hard_per_process",
           "RLIMIT_CPU of each process: SIGXCPU at the limit, SIGKILL one second later; a child the program "
           "forks has a budget of its own (use --tier container for the whole run); a fraction (0.25), which "
           "RLIMIT_CPU cannot count, is enforced by the supervisor reading the program's CPU clock (a run's "
           "enforcement: supervisor_cpu_clock) and killing at the limit");
  // Which mechanism each limit has in this tier is tier_limits.hpp's; this
  // says what the host makes of it.
  auto mechanism = [&](Limit limit) { return limit_mechanism(limit, tier); };
  if (mechanism(Limit::memory_bytes) == LimitMechanism::cgroup)
    add("memory_bytes", h.cgroup_memory ? "cgroup" : "unsupported",
        h.cgroup_memory ? std::string("memory cgroup (") + std::string(cgroup_version_name(h.cgroups.backend)) +
                              ") ceiling for the whole tree, swap " +
                              (h.cgroups.backend == CgroupVersion::v2 || h.cgroups.v1_memsw ? "capped at 0"
                                                                                            : "not accounted") +
                              "; an OOM kill is killed_oom"
                        : cgroup_missing(h, "memory"));
  else
    rlimit("memory_bytes", "hard_per_process",
           std::string(rlimit_resource_name(limit_info(Limit::memory_bytes).rlimit_resource)) +
               ": address space of each process, not the tree");
  if (mechanism(Limit::process_count) == LimitMechanism::cgroup)
    add("process_count", h.cgroup_pids ? "cgroup" : "unsupported",
        h.cgroup_pids ? std::string("pids.max (") + std::string(cgroup_version_name(h.cgroups.backend)) +
                            ") over every process and thread of the run"
                      : cgroup_missing(h, "pids"));
  else if (as_caller && h.program_nproc_exempt)
    add("process_count", "unsupported",
        std::string(h.root ? "the program runs as uid 0" : "the program holds CAP_SYS_RESOURCE or CAP_SYS_ADMIN") +
            " in tier " + std::string(to_string(tier)) +
            ", and the kernel does not apply RLIMIT_NPROC to uid 0 nor to a holder of either (use --tier process" +
            (h.root ? ": a uid of the run's own" : " as root") + ")");
  else if (h.root && process)
    add("process_count", "hard_per_run", "RLIMIT_NPROC on a uid of the run's own");
  else
    add("process_count", "hard_per_user",
        "RLIMIT_NPROC counts every process of the caller's uid, not just this run's (run as root for per-run uids)");
  rlimit("file_bytes", "hard", "RLIMIT_FSIZE: SIGXFSZ on a write past it");
  rlimit("open_files", "hard", "RLIMIT_NOFILE per process");
  add("wall_seconds", "supervisor", "deadline: SIGTERM to the group, grace, SIGKILL");
  add("stdout_bytes", "supervisor", "kept up to the cap; the rest counted and hashed");
  add("stderr_bytes", "supervisor", "kept up to the cap; the rest counted and hashed");
  add("artifact_bytes", "supervisor", "per collected file");
  add("artifact_total_bytes", "supervisor", "all collected files");
  add("artifact_count", "supervisor", "more files refuse the collection");
  // Said of every tmpfs a run gets: what it holds besides its size.
  const std::string inodes = "; at most one inode per " + std::to_string(detail::kTmpfsBytesPerInode >> 10) +
                             " KiB of it plus " + std::to_string(detail::kTmpfsInodeAllowance) +
                             " (empty files, links and directories take no size)";
  if (mechanism(Limit::workspace_bytes) == LimitMechanism::tmpfs && container && container_workspace_on_tmpfs(h))
    add("workspace_bytes", "hard",
        "the workspace is a tmpfs of this size (default " + std::to_string(kContainerWorkspaceBytes >> 20) +
            " MiB): a write past it fails with ENOSPC" + inodes + "; its pages count against memory_bytes");
  else if (mechanism(Limit::workspace_bytes) == LimitMechanism::tmpfs && process && process_workspace_tmpfs_possible(h))
    add("workspace_bytes", "hard",
        "the workspace is a tmpfs of this size (default " + std::to_string(kContainerWorkspaceBytes >> 20) +
            " MiB) over its directory, mounted for the run's time (with --confine-writes, or when set in a "
            "base the caller chose, in the run's own mount namespace): a write past it fails with ENOSPC" + inodes +
            "; in "
            "a base the caller chose (not " + std::string(kRootWorkspaceMount) + "), an unset one leaves a "
            "directory there, which every run shares");
  else
    add("workspace_bytes", "unsupported",
        std::string(container ? "a rootless run's workspace" : "the workspace") + " is a directory under " +
            h.workspace_base +
            (h.workspace_tmpfs ? " (a tmpfs shared by all runs: memory, not disk)" : " (not a tmpfs: disk)") +
            ": no per-run size limit, file_bytes caps each file (" +
            (container || process ? "as root it is a tmpfs of its own)" : "tiers process and container as root have one)"));
  if (mechanism(Limit::tmp_bytes) == LimitMechanism::tmpfs) {
    add("tmp_bytes", "hard",
        "/tmp is a tmpfs of this size (default 1 GiB, at most memory_bytes), and so is a --tmpfs "
        "without a size: a write past it fails with ENOSPC" + inodes + "; its pages count against memory_bytes");
    add("shm_bytes", "hard",
        "/dev/shm is a tmpfs of this size (default " + std::to_string(kContainerShmBytes >> 20) +
            " MiB): a write past it fails with ENOSPC" + inodes + "; its pages count against memory_bytes");
  } else {
    add("tmp_bytes", "unsupported", "the process tiers share the host's /tmp; TMPDIR is the workspace's tmp");
    add("shm_bytes", "unsupported",
        process && h.root && h.cap_sys_admin
            ? "not a limit to set here: with --confine-writes /dev/shm is a tmpfs of the run's own of " +
                  std::to_string(kContainerShmBytes >> 20) +
                  " MiB (acknowledged, shm_bytes sets its size), without it the host's /dev/shm"
            : "the process tiers share the host's /dev/shm");
  }

  auto landlock_how = [&]() -> std::string {
    if (h.landlock_abi >= 3) return "hard_content";
    if (h.landlock_abi >= 1) return "hard_content_except_truncate";
    return "unsupported";
  };
  if (process)
    add(kGuaranteeWriteConfinement, landlock_how(),
        "Landlock ABI " + std::to_string(h.landlock_abi) +
            (h.root && h.cap_sys_admin
                 ? "; /dev/shm is a tmpfs of the run's own (" + std::to_string(kContainerShmBytes >> 20) +
                       " MiB, in a mount namespace of its own) inside the write set: POSIX semaphores and shared "
                       "memory work, and die with the run"
                 : "; /dev/shm is the host's, outside the write set (not root: no mount namespace for one of the "
                   "run's own): POSIX semaphores and shared memory fail with EACCES unless --write-path /dev/shm, "
                   "which shares the host's"));
  else if (container)
    add(kGuaranteeWriteConfinement, h.pivot_root ? "container" : "unsupported",
        "fresh read-only root (pivot_root); only /workspace, --bind targets, /tmp and /dev/shm (size-capped tmpfs) "
        "writable; /root, /home and the rest of the host invisible");
  else
    add(kGuaranteeWriteConfinement, "unsupported", "tier none has no boundary: use --tier process");

  if (process)
    add(kGuaranteeNetworkNone,
        !h.seccomp                  ? "unsupported"
        : h.landlock_abi >= 6       ? "hard"
        : h.landlock_abi >= 4       ? "hard_but_abstract_unix"
                                    : "seccomp_only",
        "seccomp no-network (socket() and socketpair() only for AF_UNIX: IP, netlink, packet, vsock and every "
        "other family refused with EACCES) + Landlock TCP rules (ABI >= 4) + Landlock's abstract unix socket "
        "scope (ABI >= 6: an abstract socket of another run or of the host, which could pass in a connected "
        "socket, is out of reach)");
  else if (container)
    add(kGuaranteeNetworkNone, h.user_namespaces ? "container" : "unsupported",
        h.root && h.landlock_abi >= 6
            ? "network empty_namespace: the namespace template's empty network namespace, shared by runs, no "
              "interface up (socket(AF_INET) works, connect and sendto ENETUNREACH), "
              "abstract unix sockets scoped to the run (Landlock ABI 6); --loopback (or binds): network loopback, "
              "one of the run's own with lo up. Sockets only AF_UNIX, AF_INET, AF_INET6 (seccomp inet-only). "
              "Neither the host's network nor its loopback, nor vsock, netlink or packet"
            : "network loopback: an empty network namespace of the run's own (lo up), sockets only AF_UNIX, AF_INET, AF_INET6 "
              "(seccomp inet-only: vsock, which no network namespace isolates, netlink, packet and every other "
              "family refused): neither the host's network nor its loopback");
  else
    add(kGuaranteeNetworkNone, "unsupported", "tier none has no boundary: use --tier process");

  if (tier == Tier::none)
    add(kGuaranteePrivilegeDrop, "unsupported", "tier none runs as the caller");
  else if (container)
    add(kGuaranteePrivilegeDrop, h.user_namespaces ? "container" : "unsupported",
        std::string("non-root uid inside a user namespace (default 65534), mapped to ") +
            (h.root ? "a host uid of the run's own" : "the caller's own uid"));
  else
    add(kGuaranteePrivilegeDrop, h.root ? "hard_per_run" : "unsupported",
        h.root ? "a uid of its own per run in flight, held by no other run on the host (a lock in "
                 "/run/corral/uids.lock the kernel drops if its holder dies); not reused while a process of it lives, "
                 "nor while a file of it is left in /tmp, /var/tmp, /dev/shm or /run/lock (removed as the uid); "
                 "it has no passwd entry (getpwuid fails; HOME, USER and LOGNAME are set): use tier container for one"
               : "not root: the program runs as the caller's uid");
  if (tier == Tier::none)
    add(kGuaranteeCapabilityDrop, "unsupported", "tier none keeps the caller's capabilities");
  else if (h.root || container)
    add(kGuaranteeCapabilityDrop, "hard", "bounding, permitted, effective, ambient cleared; no_new_privs");
  else
    add(kGuaranteeCapabilityDrop, "no_new_privs", "not root: no capabilities to drop; no_new_privs stops exec gaining any");
  add(kGuaranteeSeccomp, tier == Tier::none ? "unsupported" : (h.seccomp ? "hard" : "unsupported"),
      tier == Tier::none ? "tier none installs no filter"
                         : "profile default (deny-list, EPERM; set-user/group-id bits refused: chmod and "
                           "creating a file or directory with S_ISUID or S_ISGID fail with EPERM, openat2 with "
                           "ENOSYS) + the network policy's allow-list of socket families "
                           "(EACCES; tier process with the host's network: AF_UNIX, AF_INET, AF_INET6, AF_NETLINK)");
  if (container && h.cgroups.backend != CgroupVersion::none)
    add(kGuaranteeGroupKill, "cgroup", "SIGKILL to pid 1 ends the pid namespace; every task in the run's cgroup killed");
  else if (container)
    add(kGuaranteeGroupKill, "container", "SIGKILL to pid 1 ends the pid namespace (no cgroup here)");
  else
    add(kGuaranteeGroupKill, "hard", "killpg + pidfd_send_signal on the session the program leads");
  if (container)
    add(kGuaranteeReapsDescendants, "container", "pid namespace: nothing survives pid 1");
  else if (tier == Tier::os_process && h.root)
    add(kGuaranteeReapsDescendants, "uid",
        "the run's uid is its own on the host (locked in /run/corral/uids.lock): at the deadline, at cancel and "
        "at the end of the run every process of it is killed, setsid and setpgid escapees too; also when corral "
        "dies (its guardian). Not with --user, a uid runs share: then only the process group");
  else
    add(kGuaranteeReapsDescendants, "process_group",
        tier == Tier::none
            ? "the program's group is killed; a setsid escapee leaves it (use --tier container), except under "
              "corral run, which kills everything left below it when the run ends, and corral batch, which kills "
              "it when no other job is in flight, or else once none is, at the latest when the batch ends"
            : "not root, so no uid of the run's own to kill everything of: the program's group is killed, a "
              "setsid escapee leaves it (run as root, or use --tier container), except under corral run, which "
              "kills everything left below it when the run ends, and corral batch, which kills it when no other "
              "job is in flight, or else once none is, at the latest when the batch ends");
  add(kGuaranteeSecretMasking, "supervisor", "*** in every captured and streamed byte");
  if (container)
    add(kGuaranteeIpc, h.user_namespaces ? "container" : "unsupported",
        "an IPC namespace of the run's own (SysV IPC, POSIX message queues); /dev/shm a private tmpfs");
  else if (process && h.root && h.cap_sys_admin)
    add(kGuaranteeIpc, "hard_per_run",
        "an IPC namespace of the run's own: SysV shm, semaphores, message queues and POSIX message queues die "
        "with the run and no other run sees them (a namespace a run left empty may serve a later run); POSIX "
        "shm (/dev/shm) is the host's tmpfs, not namespaced: "
        "what a run leaves there is removed before its uid is another run's");
  else
    add(kGuaranteeIpc, "shared",
        process ? "not root (or no CAP_SYS_ADMIN): SysV IPC, POSIX message queues and /dev/shm are the host's; what a run makes there "
                  "outlives it and other runs of the uid see it (run as root, or use --tier container)"
                : "tier none has no boundary: SysV IPC, POSIX message queues and /dev/shm are the host's");
  if (container) {
    const bool devices = h.cgroups.has("devices");
    add(kGuaranteeDevices, devices ? "cgroup" : "unsupported",
        devices ? std::string("with --dev-bind, the run's ") +
                      (h.cgroups.backend == CgroupVersion::v2 ? "BPF device program (cgroup v2)" : "devices.allow (cgroup v1)") +
                      " allows exactly those devices and /dev/{null,zero,full,random,urandom,tty,ptmx,pts/*}: any "
                      "other open fails with EPERM; without it every mount but those /dev nodes is nodev"
                : "no devices cgroup here (" + cgroup_missing(h, "devices") + "): --dev-bind is refused");
    add(kGuaranteeBindOwner, h.root ? "idmapped" : "caller",
        h.root ? "a writable --bind is an idmapped mount: files the program writes land on the host owned by the "
                 "directory's owner (or owner=UID:GID), never root; a root-owned directory, or a filesystem that "
                 "cannot idmap, gets the run's host uid (said in the result)"
               : "rootless: files written through a --bind are owned by the caller's uid");
  } else {
    add(kGuaranteeDevices, "unsupported", "tier " + std::string(to_string(tier)) + " sees the host's /dev");
    add(kGuaranteeBindOwner, "unsupported", "binds need tier container");
  }
  if (container)
    add(kGuaranteeNamespaces, h.user_namespaces && h.pivot_root ? "hard" : "unsupported", namespaces_note(h));
  else
    add(kGuaranteeNamespaces, "unsupported", "tier " + std::string(to_string(tier)) +
                                                 " shares the host's namespaces (use --tier container)");
  return m;
}

std::map<std::string, std::string> enforcement_summary(const HostFacts& host, Tier tier) {
  std::map<std::string, std::string> out;
  for (auto& e : enforcement_map(host, tier)) out[e.name] = e.how;
  return out;
}

namespace {

// Whether `request` asks for guarantee `name`, by a flag or by its tier's
// default. A line this does not name (group_kill, reaps_descendants, and
// whatever a tier adds later) is applied to every run of the tier.
bool guarantee_requested(std::string_view name, const Request& r) {
  const bool container = r.tier == Tier::container;
  const bool boundary = r.tier != Tier::none;
  if (name == kGuaranteeWriteConfinement) return container || r.confine_writes || !r.write_paths.empty();
  // The container tier's network is always closed (an empty or the
  // template's network namespace); elsewhere only --net none closes it.
  if (name == kGuaranteeNetworkNone) return container || r.net == NetworkAccess::none;
  if (name == kGuaranteePrivilegeDrop) return boundary || r.user.has_value();
  if (name == kGuaranteeCapabilityDrop || name == kGuaranteeSeccomp) return boundary;
  if (name == kGuaranteeNamespaces) return container;
  if (name == kGuaranteeDevices) return container && !r.dev_binds.empty();
  if (name == kGuaranteeBindOwner)
    return container && std::any_of(r.binds.begin(), r.binds.end(), [](const MountBind& b) { return b.writable; });
  if (name == kGuaranteeSecretMasking) return !r.secrets.empty();
  return true;
}

}  // namespace

std::map<std::string, std::string> run_enforcement(const std::map<std::string, std::string>& host,
                                                   const Request& request, const Limits& in_force) {
  std::map<std::string, std::string> out;
  for (const auto& [name, how] : host) {
    bool requested;
    if (auto limit = limit_from_name(name)) requested = in_force.has(*limit);
    else requested = guarantee_requested(name, request);
    out[name] = requested ? how : std::string(kNotRequested);
  }
  // A pinned uid (Request::user) is the caller's choice, not one of the
  // run's own: RLIMIT_NPROC counts every process of that uid, and the uid
  // is dropped to but may be shared.
  if (request.user && request.tier == Tier::os_process) {
    if (auto it = out.find("process_count"); it != out.end() && it->second == "hard_per_run")
      it->second = "hard_per_user";
    if (auto it = out.find(std::string(kGuaranteePrivilegeDrop)); it != out.end() && it->second == "hard_per_run")
      it->second = "hard";
    // Not the run's alone either: no uid kill (it would reach other runs
    // and whatever else runs as that uid), only the process group.
    if (auto it = out.find(std::string(kGuaranteeReapsDescendants)); it != out.end() && it->second == "uid")
      it->second = "process_group";
  }
  // An egress allow-list (tcp_connect_ports, a route's egress_allow) opens
  // TCP ports in the closed network: what this run got is not network_none,
  // whatever closed the rest (the container tier has no allow-list).
  if (!request.tcp_connect_ports.empty() && request.tier != Tier::container)
    if (auto it = out.find(std::string(kGuaranteeNetworkNone));
        it != out.end() && it->second != kNotRequested && it->second != "unsupported")
      it->second = "tcp_allowlist";
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
  // The container tier is its namespaces: no acknowledgement runs it without them.
  if (request.tier == Tier::container)
    if (const EnforcementEntry* e = find(kGuaranteeNamespaces); e && e->how == "unsupported")
      return Error(ENOTSUP, "tier container is not available on this host: " + e->note);
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
    // The result's detail says what an acknowledgement let through.
    if (asked && acked)
      warnings.push_back(std::string(info.name) + "=" + request.limits.text(info.limit) +
                         " (acknowledged) is not enforced in tier " + std::string(to_string(request.tier)) + ": " +
                         e->note);
    if (!asked && defaults.has(info.limit) && !acked)
      warnings.push_back(std::string(info.name) + " (default) is not enforced in tier " +
                         std::string(to_string(request.tier)) + ": " + e->note);
  }
  auto guarantee = [&](bool asked, std::string_view name) -> Status {
    if (!asked) return {};
    const EnforcementEntry* e = find(name);
    if (!e || e->how != "unsupported") return {};
    if (request.acknowledged.count(std::string(name)) == 0) return refuse(name, *e);
    warnings.push_back(std::string(name) + " (acknowledged) is not enforced in tier " +
                       std::string(to_string(request.tier)) + ": " + e->note);
    return {};
  };
  if (auto st = guarantee(request.confine_writes || !request.write_paths.empty(), kGuaranteeWriteConfinement); !st) return st;
  if (auto st = guarantee(request.net == NetworkAccess::none, kGuaranteeNetworkNone); !st) return st;
  if (auto st = guarantee(request.user.has_value(), kGuaranteePrivilegeDrop); !st) return st;
  // The container tier promises a seccomp filter whether or not one was asked for.
  if (auto st = guarantee(request.tier == Tier::container, kGuaranteeSeccomp); !st) return st;
  if (auto st = guarantee(request.tier == Tier::container && !request.dev_binds.empty(), kGuaranteeDevices); !st)
    return st;
  return {};
}

namespace {
// Whether a run the host's OOM killer (or an enclosing cgroup's) ends can
// be told from one that killed itself: the kernel's log, read by a
// supervisor the way this opens it.
std::string oom_kill_record_line() {
  auto log = KernelOomLog::open();
  if (log) return "the kernel log (/dev/kmsg): a run an OOM kill outside its own ceiling ends is killed_oom, resource null";
  return "none (" + log.error().message() + "): a run an OOM kill outside its own ceiling ends says signaled (SIGKILL)";
}
}  // namespace

std::vector<std::pair<std::string, std::string>> host_fact_lines(const HostFacts& h) {
  auto yes = [](bool b) { return std::string(b ? "yes" : "no"); };
  return {
      {"kernel", h.kernel},
      {"root", yes(h.root)},
      {"cap_sys_resource", yes(h.cap_sys_resource)},
      {"program_nproc_exempt", yes(h.program_nproc_exempt)},
      {"program_raises_rlimits", yes(h.program_raises_rlimits)},
      {"cap_sys_admin", yes(h.cap_sys_admin)},
      {"landlock_abi", std::to_string(h.landlock_abi)},
      {"seccomp", yes(h.seccomp)},
      {"io_uring", yes(h.io_uring)},
      {"pidfd", yes(h.pidfd)},
      {"user_namespaces", yes(h.user_namespaces)},
      {"pivot_root", h.pivot_root ? std::string("yes") : "no (" + h.container_probe + ")"},
      {"container_probe", h.container_probe_how.empty() ? std::string("not run") : h.container_probe_how},
      {"cgroups", h.cgroup_summary},
      {"cgroup_memory_per_run", yes(h.cgroup_memory)},
      {"cgroup_pids_per_run", yes(h.cgroup_pids)},
      {"workspace_base", h.workspace_base + " (" + h.workspace_source + ")"},
      {"workspace_backing", (h.workspace_tmpfs ? std::string("tmpfs (memory)") : "not a tmpfs (disk: each workspace costs disk writes)") +
                                (h.workspace_note.empty() ? "" : "; " + h.workspace_note)},
      {"oom_kill_record", oom_kill_record_line()},
  };
}

}  // namespace corral
