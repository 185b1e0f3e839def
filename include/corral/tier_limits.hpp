// tier_limits: which mechanism enforces each limit in each tier — the one
// place that says so. "memory_bytes is RLIMIT_AS in the process tiers and
// the memory cgroup in container" is limit_mechanism() below; the run setup
// (which rlimits the child gets), the container's cgroup and mount sizes,
// the enforcement map and the tiers' declared capabilities (isolation.cpp)
// ask it instead of each writing the rule again.
//
// Pure data: nothing here touches the kernel, and nothing here knows the
// host. Whether the host can give the mechanism (a per-run memory cgroup,
// root for a tmpfs workspace) is the host facts' and the enforcement map's
// business; this says which one the tier uses.
#pragma once

#include "corral/limits.hpp"
#include "corral/request.hpp"

namespace corral {

// /dev/shm's size unless shm_bytes says, in every tier that gives a run one
// of its own (a container's, tier process's private /dev/shm): 256 MiB (at
// 16 MiB a 64 MiB shared-memory segment died of SIGBUS, see README).
inline constexpr std::uint64_t kDefaultShmBytes = 256ull << 20;
// A tmpfs workspace's size unless workspace_bytes says, in every tier that
// gives a run one (container as root; process as root with --confine-writes):
// 1 GiB (container.hpp, kContainerWorkspaceBytes).
inline constexpr std::uint64_t kDefaultWorkspaceBytes = 1ull << 30;

enum class LimitMechanism : std::uint8_t {
  rlimit,      // set in the child: LimitInfo::rlimit_resource (rlimits.hpp)
  cgroup,      // the run's cgroup: the memory controller's ceiling, pids.max (cgroup.hpp)
  supervisor,  // the loop: deadline, capture caps, collection caps (supervisor.hpp)
  tmpfs,       // the size of a tmpfs of the run's own (mount_tree.hpp, workspace.hpp)
  none,        // nothing in this tier enforces it
};
std::string_view to_string(LimitMechanism mechanism);

// The rule. Process tiers (none, os_process): the five rlimit-backed limits
// are rlimits — memory_bytes RLIMIT_AS (per process, address space, not a
// tree ceiling), process_count RLIMIT_NPROC (per uid) — and the sizes of a
// container's mounts mean nothing. container: memory_bytes and
// process_count are the run's cgroup (one ceiling over the tree; RLIMIT_AS
// would make an OOM the program's own MemoryError and say nothing, and
// RLIMIT_NPROC counts per uid in each user namespace); workspace_bytes,
// tmp_bytes and shm_bytes size its tmpfs mounts. workspace_bytes sizes
// tier process's tmpfs workspace too (as root: tier_runner.hpp). The supervisor's limits
// are the supervisor's everywhere.
constexpr LimitMechanism limit_mechanism(Limit limit, Tier tier) {
  const bool container = tier == Tier::container;
  switch (limit) {
    case Limit::memory_bytes:
    case Limit::process_count:
      return container ? LimitMechanism::cgroup : LimitMechanism::rlimit;
    case Limit::cpu_seconds:  // a fraction is also watched by the supervisor (supervisor_cpu.cpp)
    case Limit::file_bytes:
    case Limit::open_files:
      return LimitMechanism::rlimit;
    case Limit::workspace_bytes:  // as root; rootless it is a directory (container.hpp, tier_runner.hpp)
      return tier == Tier::none ? LimitMechanism::none : LimitMechanism::tmpfs;
    case Limit::tmp_bytes:
    case Limit::shm_bytes:
      return container ? LimitMechanism::tmpfs : LimitMechanism::none;
    case Limit::wall_seconds:
    case Limit::stdout_bytes:
    case Limit::stderr_bytes:
    case Limit::artifact_bytes:
    case Limit::artifact_total_bytes:
    case Limit::artifact_count:
      return LimitMechanism::supervisor;
  }
  return LimitMechanism::none;
}

// Whether `tier` holds one memory ceiling over the whole process tree
// (TierCapabilities::enforces_memory).
constexpr bool tier_enforces_memory(Tier tier) {
  return limit_mechanism(Limit::memory_bytes, tier) == LimitMechanism::cgroup;
}

// What of `limits` the child's rlimits carry in `tier`: the entries whose
// mechanism is rlimit there, nothing else (rlimits_from_limits takes it).
Limits rlimit_limits(const Limits& limits, Tier tier);

// What the mechanism of `limit` in `tier` is, in a few words for a note or a
// tier's description: "RLIMIT_AS per process, not a tree ceiling", "the
// run's memory cgroup: one ceiling for the tree".
std::string limit_mechanism_text(Limit limit, Tier tier);

}  // namespace corral
