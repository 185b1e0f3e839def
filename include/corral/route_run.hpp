// route_run: running through a built Route. A Route (route.hpp, checked by
// the gate) becomes a Request whose limits, tier, network, environment,
// secrets and declared outputs are the route's; a caller may tighten the
// limits, never loosen them. The route's declared outputs and its transfer
// caps become plain data in the Request (declared_outputs, output_caps);
// finish_run collects them with the one collector (output_collect.hpp), so
// it sees the workspace after the program ended or was killed and before
// it is removed, on every path.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "corral/output_collect.hpp"
#include "corral/outputs.hpp"
#include "corral/request.hpp"
#include "corral/result.hpp"
#include "corral/route.hpp"
#include "corral/status.hpp"
#include "corral/workspace.hpp"

namespace corral {

// What a caller says about a route's run beyond `base` (route-owned fields
// whose Request defaults cannot tell "not said" from a choice). Unset means
// "as the route says".
struct RouteOverrides {
  std::optional<Tier> tier;           // must be the route's tier
  std::optional<NetworkAccess> net;   // none closes the route's egress; host is refused unless the route has it
  std::vector<std::string> pass_env;  // each must be in the route's env_passthrough
  // (Where a route secret's value comes from is base.secrets' business: a
  // SecretRef naming it, with from_env or from_file. Default: corral's
  // environment variable of the same name.)
};

// The Request for running `route`. From `base` come argv, env, inputs,
// payload, stdin, cwd, merge_output, confine_writes, write_paths, user,
// grace_seconds, artifact_root and id; the rest is the route's:
//   on_output_limit kill when the route says so (base may ask for kill)
//   tier            the route's (RouteOverrides::tier must agree)
//   limits          the route's, each tightened by base.limits: a value
//                   above the route's (or, where the route sets none, above
//                   corral's default) is refused, naming the limit and the
//                   route's value
//   net             none unless the tier cannot close the network (tier
//                   none, acknowledged by the gate); an egress_allow on
//                   os_process becomes tcp_connect_ports
//   pass_env        the route's env_passthrough
//   secrets         the route's names; base.secrets may only name them
//   acknowledged    the route's acknowledged_unenforced (base's must be empty)
//   declared_outputs, output_caps
//                   the route's declared outputs and transfer caps
//                   (base.outputs and base.declared_outputs must be empty);
//                   landing outputs need base.artifact_root
//   route, provenance  for the audit line
// Errors start "route 'NAME': ".
Expected<Request> request_for_route(const Route& route, Request base, const RouteOverrides& overrides = {});

}  // namespace corral
