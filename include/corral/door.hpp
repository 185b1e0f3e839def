// door: where a request comes in. Every front end (corral run, corral
// batch, a library caller acting for someone else) hands the door a
// Request plus what the caller said about it (provenance, a route, the
// fields it gave explicitly) and a policy the operator set; the door
// applies the route, then the gate: provenance against the tier, the
// operator's floor, the network a tier can give, and the host-path policy.
// What comes out is a Request the supervisor may run as it is.
//
// Parent-side and pure apart from realpath(3) on the host paths it checks.
// The request's own field checks (NULs, empty paths, limit ranges) are
// validate_request (request.hpp), which prepare_run repeats for callers
// that skip the door.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "corral/enforcement.hpp"
#include "corral/isolation.hpp"
#include "corral/request.hpp"
#include "corral/route.hpp"
#include "corral/route_run.hpp"
#include "corral/status.hpp"

namespace corral {

// What the operator allows the requests coming through this door.
struct DoorPolicy {
  // The requests are the operator's own (corral run): their host paths are
  // taken as given. Otherwise (corral batch: a job file someone else may
  // have written) every host path a request names — an input's host_path,
  // a bind's source, rootfs, artifact_root, write_paths, and cwd outside
  // tier container — must resolve (realpath: no "..", no symlink left)
  // under one of `allow_host_paths` or the route's own allow_host_paths;
  // with neither, none is allowed.
  bool operator_paths = false;
  std::vector<std::string> allow_host_paths;
  // The lowest tier a request may run in (corral batch --min-tier).
  std::optional<Tier> min_tier;
  // The session scopes a batch job line may name (corral batch
  // --allow-session-scope). A line with a session key joins the live
  // session of that key, whoever opened it (its files, its processes), or
  // opens one that the key's owner would join later: a job file someone
  // else may have written does so only in a scope the operator listed.
  std::vector<std::string> allow_session_scopes;
  // The host uids a job line may run as with "user" outside tier container
  // (corral batch --allow-user). There "user" is the program's uid on the
  // host: any uid a line named, a real user's among them, would give the
  // line's author that user's files. In tier container it is the uid
  // inside, mapped to a uid of the run's own, and needs no allowing.
  std::vector<uid_t> allow_users;
  // The routes a request may name (corral run/batch --routes FILE).
  std::shared_ptr<const Router> routes;
  std::string routes_file;  // names the routes in messages
};

// What the caller said about a request beyond its fields.
struct Ask {
  std::optional<Provenance> provenance;  // absent: trusted (the operator's own job)
  std::string route;                     // "" : no route
  // The route-owned fields the caller gave explicitly (tier, net,
  // pass_env): a route checks them; without a route, `net` host is refused
  // in tier container.
  RouteOverrides given;
  // The scope of the session a batch job line names ("": none).
  std::string session_scope;
};

// A batch job line: the Request and what it asks of the door.
struct Job {
  Request request;
  Ask ask;
  // Which field gave the stdin ("stdin_text" or "stdin_b64"): a job gives
  // one of the two, whichever order its keys come in.
  std::string_view stdin_from{};
};

// Applies `ask.route` (request_for_route), then refuses, in this order:
// a session scope outside policy.allow_session_scopes;
// untrusted provenance below tier container; a tier below policy.min_tier;
// net host in tier container; a host path outside the allowed prefixes
// (which it rewrites to its resolved form, and marks inputs so staging
// follows no symlink). Runs validate_request first and last.
Expected<Request> admit(Request request, const Ask& ask, const DoorPolicy& policy);

// The secrets a request would run with: its own references, and those of
// the route `ask` names in `policy` (by name, from corral's variable of the
// same name, as request_for_route adds them) that it does not give. Known
// before the door and the gate decide, so a front end can mask their
// values in whatever it echoes of a refused request (its id, its argv, a
// path in the reason) and in the refusal's audit line.
std::vector<SecretRef> secrets_named(const Request& request, const Ask& ask, const DoorPolicy& policy);

// The one message for untrusted code below container (run, batch, routes).
std::string untrusted_below_container(Tier tier);

// `path` resolved with realpath(3) if it falls under one of `allowed`
// (each resolved too; a prefix that does not exist allows nothing);
// otherwise an error naming `what`, the path, and what it resolved to.
Expected<std::string> resolve_allowed_path(std::string_view what, const std::string& path,
                                           const std::vector<std::string>& allowed);

// A routes file loaded and built through the gate (routes_file.hpp), kept
// for the requests that name its routes.
Expected<std::shared_ptr<const Router>> load_router(const std::string& path, const HostFacts& host);

}  // namespace corral
