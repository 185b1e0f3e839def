// host: the facts of this host a run is set up against (Landlock ABI,
// seccomp, user namespaces, cgroup controllers, where workspaces go), as
// plain data, below the run layer that reads them. probe_host() is
// host_probe.hpp; the map from these facts to what enforces each limit
// (enforcement.hpp) is the policy layer's.
#pragma once

#include <string>

#include "corral/cgroup.hpp"

namespace corral {

// Kernel and host facts, probed from the running system.
struct HostFacts {
  bool root = false;              // euid 0 with CAP_SETUID/CAP_SETGID
  bool cap_sys_resource = false;
  // What a program we exec as ourselves (tier none; tier process when not
  // root, which drops nothing) holds. The kernel does not apply
  // RLIMIT_NPROC to real uid 0 nor to a holder of CAP_SYS_RESOURCE or
  // CAP_SYS_ADMIN (kernel/fork.c, copy_process); a holder of
  // CAP_SYS_RESOURCE may raise its own hard limits (setrlimit(2)). After
  // execve uid 0 holds the bounding set, anyone else the ambient set.
  bool program_nproc_exempt = false;
  bool program_raises_rlimits = false;
  // CAP_SYS_ADMIN effective: as root, tier process gives each run an IPC
  // namespace (a root without it, e.g. in a default docker container, cannot).
  bool cap_sys_admin = false;
  int landlock_abi = 0;
  bool seccomp = false;           // seccomp filter mode available
  bool io_uring = false;
  bool pidfd = false;
  bool user_namespaces = false;   // creating a user namespace works here
  // In a user + mount namespace: a private tmpfs can be mounted and
  // pivot_root'ed into (what the container tier's mount tree does first).
  bool pivot_root = false;
  std::string container_probe;    // the step that failed ("" when all worked)
  std::string container_probe_how; // what was tried, for `corral enforcement`
  bool containers_probed = false; // the three fields above and the cgroup fields below hold a probe's answer
  CgroupProbe cgroups;            // the cgroup module's probe (backend, controllers, delegation)
  bool cgroup_memory = false;     // a per-run memory cgroup can be created (root or delegated)
  bool cgroup_pids = false;
  std::string cgroup_summary;     // cgroups.describe()
  std::string kernel;             // uname release
  // Where a workspace goes when no base is named (choose_workspace_base
  // without preparing anything) and whether memory backs it.
  std::string workspace_base;
  std::string workspace_source;   // "workspace_base", "TMPDIR", "default"
  bool workspace_tmpfs = false;
  std::string workspace_note;
};

}  // namespace corral
