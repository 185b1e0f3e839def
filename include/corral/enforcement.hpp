// enforcement: what this host can enforce, probed once, and for each tier
// the map from every limit and guarantee to what enforces it here. The same
// map is printed by `corral enforcement`, narrowed to what one run asked
// for in its Result (run_enforcement), and consulted before a run: asking for something `unsupported` is refused
// unless acknowledged.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "corral/ns_template.hpp"
#include "corral/cgroup.hpp"
#include "corral/host.hpp"
#include "corral/host_probe.hpp"
#include "corral/limits.hpp"
#include "corral/request.hpp"
#include "corral/status.hpp"

namespace corral {

// probe_host, probe_container_facts, set_workspace_facts, note_live_session: host_probe.hpp.

// Guarantees (beyond limits) a run may ask for or get.
inline constexpr std::string_view kGuaranteeWriteConfinement = "write_confinement";
inline constexpr std::string_view kGuaranteeNetworkNone = "network_none";
inline constexpr std::string_view kGuaranteePrivilegeDrop = "privilege_drop";
inline constexpr std::string_view kGuaranteeCapabilityDrop = "capability_drop";
inline constexpr std::string_view kGuaranteeSeccomp = "seccomp";
inline constexpr std::string_view kGuaranteeGroupKill = "group_kill";
inline constexpr std::string_view kGuaranteeReapsDescendants = "reaps_descendants";
inline constexpr std::string_view kGuaranteeSecretMasking = "secret_masking";
// SysV IPC and POSIX message queues: an IPC namespace of the run's own
// (tier process as root; tier container always), or the host's, shared.
inline constexpr std::string_view kGuaranteeIpc = "ipc";
// The container tier itself: user, pid, net, mount (pivot_root), ipc, uts
// and cgroup namespaces. A container-tier run is refused without it.
inline constexpr std::string_view kGuaranteeNamespaces = "namespaces";
// Tier container: the devices a run may open are exactly its --dev-bind
// devices and the standard nodes (the device cgroup).
inline constexpr std::string_view kGuaranteeDevices = "devices";
// Tier container as root: what a run writes through a writable bind is
// owned on the host by the directory's owner (an idmapped mount).
inline constexpr std::string_view kGuaranteeBindOwner = "bind_owner";

struct EnforcementEntry {
  std::string name;   // limit or guarantee
  std::string how;    // hard, hard_per_run, hard_per_user, hard_per_process, hard_unless_raised, cgroup,
                      // supervisor, hard_content, hard_content_except_truncate, unsupported, ...
  std::string note;   // why, or how to get it when unsupported
};

// Every limit and guarantee for `tier` on this host, limits first.
std::vector<EnforcementEntry> enforcement_map(const HostFacts& host, Tier tier);
// The same as name -> how.
std::map<std::string, std::string> enforcement_summary(const HostFacts& host, Tier tier);

// What a Result (and its audit line) says in place of `how` for a limit
// the run did not have in force, or a guarantee it did not ask for.
inline constexpr std::string_view kNotRequested = "not_requested";

// What was applied to one run: `host` (enforcement_summary for the run's
// tier) with every limit not in `in_force` and every guarantee the request
// did not ask for — by a flag (--confine-writes, --write-path, --net none,
// --secret-env, --user) or by its tier's default (a container's closed
// network and fresh root; a boundary tier's privilege, capability and
// seccomp steps) — said as `not_requested`; a uid the request pins makes
// `hard_per_run` per user. A line it does not know is
// applied to every run of the tier and keeps the host's word. The one place
// a run's enforcement is decided: finish_run puts it in the Result, and the
// audit line copies the Result's.
std::map<std::string, std::string> run_enforcement(const std::map<std::string, std::string>& host,
                                                   const Request& request, const Limits& in_force);

// The request's explicit asks checked against the map: an `unsupported`
// limit or guarantee the request did not acknowledge is an Error naming it
// and how to get it. Defaults that are unsupported go into `warnings`.
Status check_enforceable(const HostFacts& host, const Request& request, const Limits& defaults,
                         std::vector<std::string>& warnings);

// The kernel facts as "name value" pairs for `corral enforcement`.
std::vector<std::pair<std::string, std::string>> host_fact_lines(const HostFacts& host);

}  // namespace corral
