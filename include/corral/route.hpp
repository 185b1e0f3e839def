// Routes and the gate. A route names what a kind of work may do (provenance,
// tier, limits, network, outputs); the Router checks it against the tier's
// declared capabilities and the host's enforcement when the route is built,
// so an unsafe wiring fails loudly at construction instead of silently at
// run time. Nothing here runs anything: the run layer takes a built Route.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "corral/isolation.hpp"
#include "corral/limits.hpp"
#include "corral/outputs.hpp"
#include "corral/status.hpp"

namespace corral {

struct RouteSpec {
  std::string name;
  std::optional<Provenance> provenance;  // required: there is no default
  std::string tier;                      // the tier's name, e.g. "os_process"
  Limits limits;
  std::optional<Isolation> min_isolation;  // raises the host's floor, never lowers it
  std::vector<Capability> required_capabilities;  // `requires` in a routes file
  // "host:port" destinations ("*:443" for any host, "[::1]:8080" for IPv6);
  // empty = the route needs no network.
  std::vector<std::string> egress_allow;
  std::vector<DeclaredOutput> outputs;
  TransferLimits transfer;
  std::vector<std::string> env_passthrough;  // variable names
  std::vector<std::string> secrets;          // names of secrets, never values
  bool acknowledge_network_egress = false;   // accept a tier that cannot close the network
  // on_output_limit = "kill": a stdout_bytes/stderr_bytes overrun ends the
  // run as killed_resource (Request::on_output_limit); a caller may ask for
  // kill on a route that truncates, never the reverse.
  bool kill_on_output_limit = false;
  std::set<Limit> acknowledged_unenforced;   // limits accepted although unsupported here
  // Host path prefixes a request through this route may name (inputs'
  // host_path, binds, rootfs, ...): the door (door.hpp) adds them to the
  // operator's. Absolute; empty = the operator's list alone.
  std::vector<std::string> allow_host_paths;
};

// How each limit is enforced on this host, per tier. The run layer's
// enforcement map implements this; the gate only reads it. `how` returns the
// enforcement word ("hard", "hard_per_user", "cgroup", "unsupported", ...);
// "" means the view does not know, which the gate treats as unsupported.
class EnforcementView {
 public:
  virtual ~EnforcementView() = default;
  virtual std::string_view how(std::string_view tier, Limit limit) const = 0;
};

// True when `how` names a real enforcement (not "" and not "unsupported").
bool is_enforced(std::string_view how);

// A table-backed EnforcementView (tests, and callers with fixed knowledge).
class MapEnforcementView final : public EnforcementView {
 public:
  MapEnforcementView& set(std::string tier, Limit limit, std::string how);
  // Every limit of `tier` at once.
  MapEnforcementView& set_all(const std::string& tier, const std::string& how);
  std::string_view how(std::string_view tier, Limit limit) const override;

 private:
  std::map<std::string, std::map<Limit, std::string>, std::less<>> table_;
};

// The host's floors. A route's min_isolation can only raise them; untrusted
// routes need `container` or above whatever the policy says.
struct HostPolicy {
  Isolation untrusted_floor = Isolation::container;
  Isolation trusted_floor = Isolation::none;
  std::optional<Isolation> floor_for_all;  // raises both floors when set

  Isolation floor_for(Provenance provenance) const;
};

// A route that passed the gate.
struct Route {
  RouteSpec spec;
  TierCapabilities tier;
  Isolation effective_floor = Isolation::none;
  // Which rule set the floor: "host floor for untrusted routes", "route's
  // min_isolation", ...
  std::string floor_source;
  // How each limit the route sets is enforced here (from the view).
  std::map<Limit, std::string> enforcement;
  // Accepted, but worth saying (e.g. a tier that confines more than asked).
  std::vector<std::string> warnings;
};

class Router {
 public:
  explicit Router(HostPolicy policy = {}) : policy_(policy) {}

  // Checks `spec` against `tier` and `enforcement`, in this order, and
  // refuses with "route 'NAME': ..." naming what it asked and what the tier
  // offers: name (empty, duplicate); tier name empty; provenance missing;
  // untrusted below container; below the effective floor; a required
  // capability missing; a limit unsupported here (unless acknowledged);
  // egress (an allow-list the tier cannot confine to, or a network the tier
  // cannot close without acknowledge_network_egress); the egress allow-list
  // entries, env and secret names; the declared outputs (files_out, globs
  // need files_list, names, collisions). On success the route is kept and a
  // copy returned.
  Expected<Route> add(RouteSpec spec, const TierCapabilities& tier, const EnforcementView& enforcement);

  const Route* find(std::string_view name) const;
  std::vector<std::string> names() const;  // in the order added
  const HostPolicy& policy() const { return policy_; }

 private:
  HostPolicy policy_;
  std::vector<Route> routes_;
};

// Parses one egress_allow entry into (host, port); "*" is any host. The
// message names `route`.
Expected<std::pair<std::string, std::uint16_t>> parse_egress_entry(std::string_view route,
                                                                   std::string_view entry);

}  // namespace corral
