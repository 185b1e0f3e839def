#include "corral/door.hpp"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "corral/names.hpp"
#include "corral/request_fields.hpp"
#include "corral/routes_file.hpp"

namespace corral {
namespace {

std::string q(std::string_view s) { return quote_input(s); }

// realpath(3) into a std::string; errno on failure.
std::optional<std::string> resolved(const std::string& path) {
  char buf[PATH_MAX];
  if (!::realpath(path.c_str(), buf)) return std::nullopt;
  return std::string(buf);
}

bool under(const std::string& path, const std::string& prefix) {
  if (prefix == "/") return true;
  return path == prefix || (path.size() > prefix.size() && path.compare(0, prefix.size(), prefix) == 0 &&
                            path[prefix.size()] == '/');
}

// Every host path of `r` goes through `check`, which may rewrite it.
Status each_host_path(Request& r, const std::function<Status(std::string_view, std::string&)>& check) {
  for (auto& in : r.inputs) {
    if (!in.host_path) continue;
    if (Status st = check("input " + q(in.name) + " host_path", *in.host_path); !st) return st;
    in.resolved = true;
  }
  for (auto& b : r.binds) {
    if (Status st = check(b.writable ? "binds" : "ro_binds", b.source); !st) return st;
    b.resolved = true;
  }
  for (auto& d : r.dev_binds)
    if (Status st = check("dev_binds", d); !st) return st;
  if (r.rootfs)
    if (Status st = check("rootfs", *r.rootfs); !st) return st;
  if (r.artifact_root)
    if (Status st = check("artifact_root", *r.artifact_root); !st) return st;
  for (auto& p : r.write_paths)
    if (Status st = check("write_paths", p); !st) return st;
  // In a container cwd is a path inside the sandbox, not the host's.
  if (r.cwd && r.tier != Tier::container)
    if (Status st = check("cwd", *r.cwd); !st) return st;
  if (r.chdir && r.tier != Tier::container)
    if (Status st = check("chdir", *r.chdir); !st) return st;
  return {};
}

}  // namespace

std::vector<SecretRef> secrets_named(const Request& request, const Ask& ask, const DoorPolicy& policy) {
  std::vector<SecretRef> refs = request.secrets;
  const Route* route = ask.route.empty() || !policy.routes ? nullptr : policy.routes->find(ask.route);
  if (route)
    for (const auto& name : route->spec.secrets)
      if (std::none_of(refs.begin(), refs.end(), [&](const SecretRef& r) { return r.name == name; }))
        refs.push_back(SecretRef{name, name});
  return refs;
}

std::string untrusted_below_container(Tier tier) {
  return "provenance untrusted needs tier container or above; tier " + std::string(to_string(tier)) +
         " is below it (use tier container)";
}

Expected<std::string> resolve_allowed_path(std::string_view what, const std::string& path,
                                           const std::vector<std::string>& allowed) {
  std::string who = std::string(what) + " " + q(path);
  if (path.empty()) return Error::invalid(std::string(what) + ": empty path");
  if (allowed.empty())
    return Error(EPERM, who + ": host paths are not allowed here (the operator allows none: --allow-host-path PREFIX)");
  auto real = resolved(path);
  if (!real) return Error(errno == ENOENT ? ENOENT : EPERM, who + ": cannot resolve it: " + std::strerror(errno));
  std::string prefixes;
  for (const auto& prefix : allowed) {
    prefixes += (prefixes.empty() ? "" : ", ") + prefix;
    auto p = resolved(prefix);
    if (p && under(*real, *p)) return *real;
  }
  return Error(EPERM, who + (*real == path ? "" : " (resolved " + q(*real) + ")") +
                          " is not under an allowed host path (" + prefixes + ")");
}

Expected<Request> admit(Request request, const Ask& ask, const DoorPolicy& policy) {
  if (Status st = validate_request(request); !st) return st.error();
  if (!ask.session_scope.empty() &&
      std::find(policy.allow_session_scopes.begin(), policy.allow_session_scopes.end(), ask.session_scope) ==
          policy.allow_session_scopes.end())
    return Error::invalid("session: scope " + q(ask.session_scope) +
                          " is not one the operator lets job lines use (corral batch --allow-session-scope " +
                          q(ask.session_scope) + ")");
  std::vector<std::string> allowed = policy.allow_host_paths;
  std::optional<Provenance> provenance = ask.provenance;
  const std::optional<uid_t> line_user = request.user;  // what the line asked, before a route
  if (!ask.route.empty()) {
    if (!policy.routes) return Error::invalid("route " + q(ask.route) + ": no routes file was given (--routes FILE)");
    const Route* route = policy.routes->find(ask.route);
    if (!route) {
      std::string names;
      for (const auto& n : policy.routes->names()) names += (names.empty() ? "" : ", ") + n;
      return Error::invalid("no route " + q(ask.route) + " in " +
                            (policy.routes_file.empty() ? std::string("the routes") : policy.routes_file) +
                            " (routes: " + names + ")");
    }
    auto routed = request_for_route(*route, std::move(request), ask.given);
    if (!routed) return std::move(routed).error();
    request = std::move(*routed);
    // The stricter word wins: an untrusted job stays untrusted on a trusted route.
    if (!provenance || *provenance == Provenance::trusted) provenance = route->spec.provenance;
    allowed.insert(allowed.end(), route->spec.allow_host_paths.begin(), route->spec.allow_host_paths.end());
  } else if (Status st = check_asked_network(request, ask); !st) {
    return st.error();
  }
  if (provenance == Provenance::untrusted && request.tier < Tier::container)
    return Error::invalid(untrusted_below_container(request.tier));
  if (policy.min_tier && request.tier < *policy.min_tier)
    return Error::invalid("tier " + std::string(to_string(request.tier)) + " is below the floor " +
                          std::string(to_string(*policy.min_tier)) + " the operator set (--min-tier)");
  if (!policy.operator_paths && line_user && request.tier != Tier::container &&
      std::find(policy.allow_users.begin(), policy.allow_users.end(), *line_user) == policy.allow_users.end()) {
    const std::string uid = std::to_string(*line_user);
    return Error(EPERM, "user " + uid + ": in tier " + std::string(to_string(request.tier)) +
                            " a job runs as that host uid, which the operator has not allowed (corral batch "
                            "--allow-user " + uid + "; in tier container user is a uid inside and needs no allowing)");
  }
  if (!policy.operator_paths) {
    Status st = each_host_path(request, [&](std::string_view what, std::string& path) -> Status {
      auto real = resolve_allowed_path(what, path, allowed);
      if (!real) return real.error();
      path = *real;
      return {};
    });
    if (!st) return st.error();
  }
  if (provenance) request.provenance = std::string(to_string(*provenance));
  if (Status st = validate_request(request); !st) return st.error();
  return request;
}

Expected<std::shared_ptr<const Router>> load_router(const std::string& path, const HostFacts& host) {
  auto file = load_routes_file(path);
  if (!file) return std::move(file).error();
  auto router = build_routes(*file, host);
  if (!router) return std::move(router).error();
  return std::shared_ptr<const Router>(std::make_shared<Router>(std::move(*router)));
}

}  // namespace corral
