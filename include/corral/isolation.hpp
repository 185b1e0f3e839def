// The vocabulary of the policy layer: the isolation ladder, provenance,
// egress levels, tier capabilities, and what corral's own tiers declare.
//
// Pure data and parsing; nothing here touches the kernel. The route gate
// (route.hpp) compares a route's needs against a tier's declaration; the
// declarations of corral's three tiers live in one table in isolation.cpp so
// they can be corrected in one place when the run layer proves otherwise.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "corral/status.hpp"

namespace corral {

// Weakest first. The enumerators are ordered, so `a < b` reads "a isolates
// less than b". Parsed from and printed as these exact names.
enum class Isolation : std::uint8_t {
  none,                // a plain child
  runtime,             // a language runtime's own sandbox (not shipped by corral)
  os_process,          // rlimits, privilege drop, capabilities, Landlock, seccomp
  container,           // namespaces + cgroup + seccomp + no network
  hardened_container,  // a container with a user-space kernel or similar (gVisor-like)
  microvm,             // a dedicated guest kernel (Firecracker-like)
  vm,                  // a full virtual machine
};

inline constexpr std::size_t kIsolationCount = 7;

// The ladder, weakest first.
const std::array<Isolation, kIsolationCount>& isolation_ladder();
std::string_view to_string(Isolation level);
// "none < runtime < os_process < ..." for messages.
std::string isolation_ladder_text();
// An unknown name is refused (never ranked); the message lists the ladder.
Expected<Isolation> parse_isolation(std::string_view text);

// Where the code a route runs comes from. There is no default anywhere in
// the library: "" is refused like any other unknown word.
enum class Provenance : std::uint8_t { trusted, untrusted };
std::string_view to_string(Provenance provenance);
Expected<Provenance> parse_provenance(std::string_view text);

// How narrowly a tier can confine network egress.
//   closed        no network at all (an empty network namespace, or a seccomp
//                 filter that allows only AF_UNIX sockets)
//   allowlist     only listed destinations; corral's os_process lists TCP
//                 ports, not hosts (see the table in isolation.cpp)
//   unrestricted  the host's network; the tier cannot close it
enum class Egress : std::uint8_t { closed, allowlist, unrestricted };
std::string_view to_string(Egress egress);
Expected<Egress> parse_egress(std::string_view text);

// What a route may require of a tier.
enum class Capability : std::uint8_t { exec, files_in, files_out, files_list, network, streaming };
inline constexpr std::size_t kCapabilityCount = 6;
const std::array<Capability, kCapabilityCount>& all_capabilities();
std::string_view to_string(Capability capability);
Expected<Capability> parse_capability(std::string_view text);

struct TierCapabilities {
  Isolation isolation = Isolation::none;
  // Capabilities a route may require.
  bool exec = false;        // runs a program given as argv
  bool files_in = false;    // stages input files into the workspace
  bool files_out = false;   // collects declared outputs
  bool files_list = false;  // lists the workspace, so an output may be a glob
  bool network = false;     // the program can reach a network at all
  bool streaming = false;   // output chunks arrive while the program runs
  // Guarantees a route's reader relies on.
  bool enforces_memory = false;        // one memory ceiling for the whole process tree
  bool reports_resource_kill = false;  // a resource kill is reported as such (killed_resource/killed_oom)
  bool reaps_descendants = false;      // nothing the program started outlives the run
  Egress egress = Egress::unrestricted;
  // Whether an egress allow-list can name hosts, or only ports. Only
  // meaningful when egress is `allowlist`.
  bool egress_filters_hosts = false;

  bool has(Capability capability) const;
  // "exec, files_in, ..." of the capabilities it has; "nothing" when none.
  std::string describe_capabilities() const;
};

// One of corral's tiers: its name (the route's `tier`), its declaration, and
// the reasons behind the declaration.
struct TierDeclaration {
  std::string_view name;
  TierCapabilities capabilities;
  std::string_view notes;
};

// corral's three tiers, weakest first: none, os_process, container.
std::span<const TierDeclaration> corral_tiers();
// The declaration of a corral tier by name; "process" is accepted for
// "os_process" (the CLI's short form). Unknown names are refused by name.
Expected<TierCapabilities> tier_capabilities(std::string_view tier);

}  // namespace corral
