#include "corral/isolation.hpp"

#include "corral/names.hpp"
#include "corral/tier_limits.hpp"

namespace corral {
namespace {

constexpr std::array<Isolation, kIsolationCount> kLadder{
    Isolation::none,      Isolation::runtime,           Isolation::os_process, Isolation::container,
    Isolation::hardened_container, Isolation::microvm, Isolation::vm,
};
constexpr std::array<std::string_view, kIsolationCount> kIsolationNames{
    "none", "runtime", "os_process", "container", "hardened_container", "microvm", "vm",
};

constexpr std::array<Capability, kCapabilityCount> kCapabilities{
    Capability::exec,       Capability::files_in, Capability::files_out,
    Capability::files_list, Capability::network,  Capability::streaming,
};
constexpr std::array<std::string_view, kCapabilityCount> kCapabilityNames{
    "exec", "files_in", "files_out", "files_list", "network", "streaming",
};

constexpr std::array<std::string_view, 2> kProvenanceNames{"trusted", "untrusted"};
constexpr std::array<std::string_view, 3> kEgressNames{"closed", "allowlist", "unrestricted"};

// What each of corral's tiers declares. The route gate believes these, so
// each claim must be true of the tier as built; correct them here.
//
// none: a plain child with the ceilings wired (rlimits, deadline, capture).
//  - enforces_memory false: memory_bytes is RLIMIT_AS (tier_limits.hpp), a
//    per-process cap on address space. Each process of the tree gets its
//    own, so N children use N times the limit; it is not a ceiling for the
//    tree (and it also refuses large mappings that would never be touched).
//  - reports_resource_kill true: RLIMIT_CPU ends the program with SIGXCPU and
//    RLIMIT_FSIZE with SIGXFSZ; both signals name the limit.
//  - reaps_descendants false: nothing stops a child that leaves the group.
//  - egress unrestricted: the child shares the host's network.
//
// os_process: adds privilege drop, capability drop, Landlock and seccomp.
//  - enforces_memory false: still RLIMIT_AS (see above).
//  - reaps_descendants false, conservatively: without root the group kill
//    reaches the process group and the subreaper collects orphans, but a
//    descendant that calls setsid() leaves the process group, is not killed
//    by killpg, and can outlive the run. As root the run has a uid of its
//    own on the host and every process of it is killed at the end (a uid
//    kill: uid_lock.hpp); host_tier_capabilities (routes_file.hpp) then says
//    true, and the enforcement map says "uid".
//  - egress allowlist, by TCP port only: Landlock (ABI >= 4, kernel 6.7)
//    allows connect() to listed TCP ports; it cannot name hosts, and it does
//    not cover UDP or raw sockets, so the allow-list holds only when the
//    seccomp profile limits sockets to AF_UNIX and TCP. With an empty
//    allow-list the seccomp `no-network` profile closes the network. On a
//    kernel without Landlock ABI 4 the tier can only close, not allow-list.
//
// container: namespaces (user, pid, net, mount, ipc, uts), a cgroup, seccomp,
// no capabilities, a non-root uid inside.
//  - enforces_memory true: the run's memory cgroup (tier_limits.hpp:
//    memory.max / memory.limit_in_bytes) bounds the whole tree.
//  - reports_resource_kill true: the cgroup's OOM kill is reported as
//    killed_oom, the pids ceiling and rlimits as killed_resource.
//  - reaps_descendants true: when the namespace's pid 1 exits, the kernel
//    kills every process in the pid namespace, setsid() or not.
//  - network false, egress closed: an empty network namespace (only `lo`).
constexpr TierCapabilities kNoneTier{
    .isolation = Isolation::none,
    .exec = true, .files_in = true, .files_out = true, .files_list = true,
    .network = true, .streaming = true,
    .enforces_memory = tier_enforces_memory(Tier::none), .reports_resource_kill = true, .reaps_descendants = false,
    .egress = Egress::unrestricted, .egress_filters_hosts = false,
};
constexpr TierCapabilities kOsProcessTier{
    .isolation = Isolation::os_process,
    .exec = true, .files_in = true, .files_out = true, .files_list = true,
    .network = true, .streaming = true,
    .enforces_memory = tier_enforces_memory(Tier::os_process), .reports_resource_kill = true, .reaps_descendants = false,
    .egress = Egress::allowlist, .egress_filters_hosts = false,
};
constexpr TierCapabilities kContainerTier{
    .isolation = Isolation::container,
    .exec = true, .files_in = true, .files_out = true, .files_list = true,
    .network = false, .streaming = true,
    .enforces_memory = tier_enforces_memory(Tier::container), .reports_resource_kill = true, .reaps_descendants = true,
    .egress = Egress::closed, .egress_filters_hosts = false,
};

// The notes say what memory_bytes is in each tier in tier_limits' words.
const std::array<TierDeclaration, 3>& tiers() {
  static const std::array<std::string, 3> notes{
      "plain child; memory_bytes is " + limit_mechanism_text(Limit::memory_bytes, Tier::none) +
          "; descendants may outlive the run; host network",
      "shared kernel; memory_bytes is " + limit_mechanism_text(Limit::memory_bytes, Tier::os_process) +
          "; a setsid() descendant escapes the group kill; egress allow-list by TCP port (Landlock ABI 4), not by "
          "host",
      "pid namespace reaps every descendant; memory_bytes is " +
          limit_mechanism_text(Limit::memory_bytes, Tier::container) + "; empty network namespace",
  };
  static const std::array<TierDeclaration, 3> declared{{
      {"none", kNoneTier, notes[0]},
      {"os_process", kOsProcessTier, notes[1]},
      {"container", kContainerTier, notes[2]},
  }};
  return declared;
}

template <class Enum, std::size_t N>
std::string_view name_of(const std::array<std::string_view, N>& names, Enum value) {
  auto i = static_cast<std::size_t>(value);
  return i < N ? names[i] : std::string_view("?");
}

template <std::size_t N>
std::string joined(const std::array<std::string_view, N>& names, std::string_view sep) {
  std::string out;
  for (auto name : names) {
    if (!out.empty()) out += sep;
    out += name;
  }
  return out;
}

// The index of `text` in `names`, or an error "<what> 'text' is unknown (known: ...)".
template <class Enum, std::size_t N>
Expected<Enum> parse_name(const std::array<std::string_view, N>& names, std::string_view what,
                          std::string_view text, std::string_view sep = ", ") {
  for (std::size_t i = 0; i < N; ++i)
    if (names[i] == text) return static_cast<Enum>(i);
  if (text.empty())
    return Error::invalid(std::string(what) + " is empty (say one of: " + joined(names, sep) +
                          "; there is no default)");
  return Error::invalid(std::string(what) + " " + quote_input(text) + " is unknown (known: " +
                        joined(names, sep) + ")");
}

}  // namespace

const std::array<Isolation, kIsolationCount>& isolation_ladder() { return kLadder; }

std::string_view to_string(Isolation level) { return name_of(kIsolationNames, level); }

std::string isolation_ladder_text() { return joined(kIsolationNames, " < "); }

Expected<Isolation> parse_isolation(std::string_view text) {
  return parse_name<Isolation>(kIsolationNames, "isolation", text, " < ");
}

std::string_view to_string(Provenance provenance) { return name_of(kProvenanceNames, provenance); }

Expected<Provenance> parse_provenance(std::string_view text) {
  return parse_name<Provenance>(kProvenanceNames, "provenance", text);
}

std::string_view to_string(Egress egress) { return name_of(kEgressNames, egress); }

Expected<Egress> parse_egress(std::string_view text) {
  return parse_name<Egress>(kEgressNames, "egress", text);
}

const std::array<Capability, kCapabilityCount>& all_capabilities() { return kCapabilities; }

std::string_view to_string(Capability capability) { return name_of(kCapabilityNames, capability); }

Expected<Capability> parse_capability(std::string_view text) {
  return parse_name<Capability>(kCapabilityNames, "capability", text);
}

bool TierCapabilities::has(Capability capability) const {
  switch (capability) {
    case Capability::exec: return exec;
    case Capability::files_in: return files_in;
    case Capability::files_out: return files_out;
    case Capability::files_list: return files_list;
    case Capability::network: return network;
    case Capability::streaming: return streaming;
  }
  return false;
}

std::string TierCapabilities::describe_capabilities() const {
  std::string out;
  for (auto capability : kCapabilities) {
    if (!has(capability)) continue;
    if (!out.empty()) out += ", ";
    out += to_string(capability);
  }
  return out.empty() ? "nothing" : out;
}

std::span<const TierDeclaration> corral_tiers() { return tiers(); }

Expected<TierCapabilities> tier_capabilities(std::string_view tier) {
  std::string_view lookup = tier == "process" ? std::string_view("os_process") : tier;
  for (const auto& declaration : tiers())
    if (declaration.name == lookup) return declaration.capabilities;
  std::string known;
  for (const auto& declaration : tiers()) {
    if (!known.empty()) known += ", ";
    known += declaration.name;
  }
  return Error::invalid("tier '" + std::string(tier) + "' is not one of corral's tiers (known: " +
                        known + ")");
}

}  // namespace corral
