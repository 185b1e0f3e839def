#include "corral/route_run.hpp"

#include <algorithm>

#include "corral/names.hpp"

namespace corral {
namespace {

std::string q(std::string_view s) { return quote_input(s); }

bool contains(const std::vector<std::string>& items, const std::string& item) {
  return std::find(items.begin(), items.end(), item) != items.end();
}

// The route's limits, each tightened by `asked`. The bound of a limit the
// route leaves unset is corral's default, which the route runs with.
Expected<Limits> tightened(const RouteSpec& spec, const Limits& asked, const std::string& who) {
  Limits out = spec.limits;
  Limits defaults = default_limits();
  for (const auto& info : all_limits()) {
    auto want = asked.raw(info.limit);
    if (!want) continue;
    auto own = spec.limits.raw(info.limit);
    auto bound = own ? own : defaults.raw(info.limit);
    if (bound && *want > *bound) {
      std::string name(info.name);
      return Error::invalid(who + "limit " + name + "=" + limit_value_text(info, *want) + " is looser than the route's " +
                            name + "=" + limit_value_text(info, *bound) +
                            (own ? "" : " (corral's default; the route sets none)") +
                            "; a route's limits may be tightened, never loosened");
    }
    out.set_raw(info.limit, *want);
  }
  return out;
}

}  // namespace

Expected<Request> request_for_route(const Route& route, Request base, const RouteOverrides& overrides) {
  const RouteSpec& spec = route.spec;
  const std::string who = "route " + q(spec.name) + ": ";
  auto refuse = [&](const std::string& why) { return Error::invalid(who + why); };

  auto tier = parse_tier(spec.tier);
  if (!tier) return refuse(tier.error().message());
  if (!spec.provenance) return refuse("provenance is missing (was the route built by a Router?)");
  if (overrides.tier && *overrides.tier != *tier)
    return refuse("runs in tier " + std::string(to_string(*tier)) + "; it cannot be run in tier " +
                  std::string(to_string(*overrides.tier)) + " (the route decides its tier)");

  Request request = std::move(base);
  request.tier = *tier;
  auto limits = tightened(spec, request.limits, who);
  if (!limits) return std::move(limits).error();
  request.limits = *limits;

  // The network follows the tier's egress level, as the gate saw it.
  if (!request.tcp_connect_ports.empty()) return refuse("egress belongs to the route (egress_allow), not to the caller");
  request.net = NetworkAccess::none;
  if (route.tier.egress == Egress::unrestricted) {
    request.net = NetworkAccess::host;  // the gate demanded acknowledge_network_egress
  } else if (route.tier.egress == Egress::allowlist) {
    for (const auto& entry : spec.egress_allow) {
      auto parsed = parse_egress_entry(spec.name, entry);
      if (!parsed) return std::move(parsed).error();
      if (std::find(request.tcp_connect_ports.begin(), request.tcp_connect_ports.end(), parsed->second) ==
          request.tcp_connect_ports.end())
        request.tcp_connect_ports.push_back(parsed->second);
    }
  }
  if (overrides.net == NetworkAccess::none) {
    request.net = NetworkAccess::none;
    request.tcp_connect_ports.clear();
  } else if (overrides.net == NetworkAccess::host && request.net != NetworkAccess::host) {
    return refuse("network host would open what the route closes (tier " + spec.tier + " gives egress " +
                  std::string(to_string(route.tier.egress)) + ", egress_allow " +
                  (spec.egress_allow.empty() ? std::string("empty") : "limited to its entries") + ")");
  }

  for (const auto& name : overrides.pass_env)
    if (!contains(spec.env_passthrough, name))
      return refuse("env passthrough " + q(name) + " is not in the route's env_passthrough");
  request.pass_env = spec.env_passthrough;

  for (const auto& ref : request.secrets)
    if (!contains(spec.secrets, ref.name))
      return refuse("secret " + q(ref.name) + " is not one of the route's secrets");
  for (const auto& name : spec.secrets) {
    bool given = std::any_of(request.secrets.begin(), request.secrets.end(),
                             [&](const SecretRef& ref) { return ref.name == name; });
    if (given) continue;
    request.secrets.push_back(SecretRef{name, name});
  }

  // The route's kill stands; a caller's kill tightens a route that truncates.
  if (spec.kill_on_output_limit) request.on_output_limit = OutputLimitPolicy::kill;

  if (!request.acknowledged.empty())
    return refuse("acknowledgements belong to the route (acknowledged_unenforced), not to the caller: " +
                  q(*request.acknowledged.begin()));
  for (Limit limit : spec.acknowledged_unenforced) request.acknowledged.insert(std::string(limit_name(limit)));

  if (!request.outputs.empty())
    return refuse("declares its own outputs; " + q(request.outputs.front()) + " cannot be added to them");
  if (!request.declared_outputs.empty())
    return refuse("declares its own outputs; " + q(request.declared_outputs.front().path) + " cannot be added to them");
  if (!spec.outputs.empty()) {
    std::string landing;
    for (const auto& out : spec.outputs)
      if (out.disposition == Disposition::land) landing += (landing.empty() ? "" : ", ") + q(out.landing_name());
    if (!landing.empty() && !request.artifact_root)
      return refuse("outputs " + landing + " land in a sink, and no artifact root was given (--artifact-root DIR)");
    // Plain data: finish_run collects them (output_collect.hpp).
    request.declared_outputs = spec.outputs;
    request.output_caps = spec.transfer;
  }

  request.route = spec.name;
  request.provenance = std::string(to_string(*spec.provenance));
  return request;
}

}  // namespace corral
