#include "corral/route.hpp"

#include <algorithm>

#include "corral/names.hpp"
#include "corral/request.hpp"

namespace corral {
namespace {

std::string q(std::string_view s) { return quote_input(s); }

// Collects refusals as "route 'NAME': ..." errors.
class Gate {
 public:
  explicit Gate(const RouteSpec& spec) : spec_(spec) {}

  Error refuse(const std::string& why) const { return Error::invalid(prefix() + why); }
  std::string warn(const std::string& why) const { return prefix() + "warning: " + why; }
  std::string tier_name() const { return "tier " + q(spec_.tier); }

 private:
  std::string prefix() const { return "route " + q(spec_.name) + ": "; }
  const RouteSpec& spec_;
};

// The one rule (request.hpp): a route's name, env_passthrough and secrets
// are names as a request's variables are.
bool is_variable_name(std::string_view name) { return variable_name_problem(name).empty(); }

bool is_host_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '-' || c == '_';
}

bool is_ipv6_char(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == ':' ||
         c == '.';
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + q(item);
  return out;
}

}  // namespace

bool is_enforced(std::string_view how) { return !how.empty() && how != "unsupported"; }

MapEnforcementView& MapEnforcementView::set(std::string tier, Limit limit, std::string how) {
  table_[std::move(tier)][limit] = std::move(how);
  return *this;
}

MapEnforcementView& MapEnforcementView::set_all(const std::string& tier, const std::string& how) {
  for (const auto& info : all_limits()) set(tier, info.limit, how);
  return *this;
}

std::string_view MapEnforcementView::how(std::string_view tier, Limit limit) const {
  auto t = table_.find(tier);
  if (t == table_.end()) return {};
  auto l = t->second.find(limit);
  return l == t->second.end() ? std::string_view{} : std::string_view(l->second);
}

Isolation HostPolicy::floor_for(Provenance provenance) const {
  Isolation floor = provenance == Provenance::untrusted ? untrusted_floor : trusted_floor;
  if (floor_for_all && *floor_for_all > floor) floor = *floor_for_all;
  return floor;
}

Expected<std::pair<std::string, std::uint16_t>> parse_egress_entry(std::string_view route,
                                                                   std::string_view entry) {
  auto bad = [&](const std::string& why) {
    return Error::invalid("route " + q(route) + ": egress_allow entry " + q(entry) + " " + why +
                          " (expected host:port, *:port or [ipv6]:port)");
  };
  std::string_view host, port;
  if (!entry.empty() && entry.front() == '[') {
    auto close = entry.find(']');
    if (close == std::string_view::npos || close + 1 >= entry.size() || entry[close + 1] != ':')
      return bad("has an unclosed or portless [ipv6] host");
    host = entry.substr(1, close - 1);
    port = entry.substr(close + 2);
    if (host.empty() || !std::all_of(host.begin(), host.end(), is_ipv6_char))
      return bad("has an invalid IPv6 address");
  } else {
    auto colon = entry.rfind(':');
    if (colon == std::string_view::npos) return bad("has no port");
    host = entry.substr(0, colon);
    port = entry.substr(colon + 1);
    if (host.empty()) return bad("has no host");
    if (host != "*" && !std::all_of(host.begin(), host.end(), is_host_char))
      return bad("has an invalid host");
  }
  if (port.empty() || port.size() > 5 || !std::all_of(port.begin(), port.end(), [](char c) {
        return c >= '0' && c <= '9';
      }))
    return bad("has an invalid port");
  unsigned long value = std::stoul(std::string(port));
  if (value == 0 || value > 65535) return bad("has a port outside 1-65535");
  return std::pair{std::string(host), static_cast<std::uint16_t>(value)};
}

Expected<Route> Router::add(RouteSpec spec, const TierCapabilities& tier,
                            const EnforcementView& enforcement) {
  Gate gate(spec);
  Route route;

  // Identity.
  if (spec.name.empty()) return Error::invalid("route: name is empty");
  if (!is_variable_name(spec.name)) return gate.refuse("name contains '=' or a control character");
  if (find(spec.name)) return gate.refuse("already defined");
  if (spec.tier.empty()) return gate.refuse("tier is empty (name the tier the route runs in)");

  // Provenance: no default.
  if (!spec.provenance)
    return gate.refuse("provenance is missing (say trusted or untrusted; there is no default)");
  Provenance provenance = *spec.provenance;

  // Untrusted code needs a container, whatever the host's policy says.
  if (provenance == Provenance::untrusted && tier.isolation < Isolation::container)
    return gate.refuse("provenance untrusted needs isolation container or above; " +
                       gate.tier_name() + " gives " + std::string(to_string(tier.isolation)));

  // The effective floor: the host's, raised (never lowered) by the route's.
  Isolation floor = provenance == Provenance::untrusted ? policy_.untrusted_floor : policy_.trusted_floor;
  std::string source = "the host's floor for " + std::string(to_string(provenance)) + " routes";
  if (policy_.floor_for_all && *policy_.floor_for_all > floor) {
    floor = *policy_.floor_for_all;
    source = "the host's floor for all routes";
  }
  if (spec.min_isolation) {
    if (*spec.min_isolation > floor) {
      floor = *spec.min_isolation;
      source = "the route's min_isolation";
    } else if (*spec.min_isolation < floor) {
      route.warnings.push_back(gate.warn(
          "min_isolation " + std::string(to_string(*spec.min_isolation)) + " is below " + source +
          " (" + std::string(to_string(floor)) + "), which applies"));
    }
  }
  if (tier.isolation < floor)
    return gate.refuse("needs isolation " + std::string(to_string(floor)) + " or above (" + source +
                       "); " + gate.tier_name() + " gives " + std::string(to_string(tier.isolation)));

  // Capabilities.
  for (auto capability : spec.required_capabilities)
    if (!tier.has(capability))
      return gate.refuse("requires " + std::string(to_string(capability)) + "; " + gate.tier_name() +
                         " does not offer it (offers: " + tier.describe_capabilities() + ")");

  // Limits the host cannot enforce on this tier.
  for (const auto& info : all_limits()) {
    if (!spec.limits.has(info.limit)) continue;
    std::string value = spec.limits.text(info.limit);
    std::string how(enforcement.how(spec.tier, info.limit));
    if (!is_enforced(how)) {
      std::string what = "limit " + std::string(info.name) + "=" + value +
                         " is " + (how.empty() ? "of unknown enforcement" : "unsupported") +
                         " on " + gate.tier_name() + " here";
      if (!spec.acknowledged_unenforced.count(info.limit))
        return gate.refuse(what + "; list it in acknowledged_unenforced to run without it");
      route.warnings.push_back(gate.warn(what + " (acknowledged: it will not bind)"));
      how = "unsupported";
    }
    route.enforcement[info.limit] = how;
  }

  // Egress. An allow-list needs a tier that can confine to it; a tier that
  // confines more is accepted with a warning; a tier that cannot close the
  // network needs an explicit acknowledgement.
  std::vector<std::pair<std::string, std::uint16_t>> destinations;
  for (const auto& entry : spec.egress_allow) {
    auto parsed = parse_egress_entry(spec.name, entry);
    if (!parsed) return std::move(parsed).error();
    destinations.push_back(std::move(*parsed));
  }
  std::string egress_offered = gate.tier_name() + " gives egress " + std::string(to_string(tier.egress));
  if (!destinations.empty()) {
    switch (tier.egress) {
      case Egress::unrestricted:
        return gate.refuse("egress_allow asks for only " + joined(spec.egress_allow) + "; " +
                           egress_offered + " and cannot confine it that narrowly");
      case Egress::closed:
        route.warnings.push_back(gate.warn(
            "egress_allow asks for " + joined(spec.egress_allow) + "; " + egress_offered +
            ": the network is closed and the program will reach none of it"));
        break;
      case Egress::allowlist:
        if (!tier.egress_filters_hosts) {
          std::string wider;
          for (std::size_t i = 0; i < destinations.size(); ++i)
            if (destinations[i].first != "*")
              wider += (wider.empty() ? "" : ", ") + q(spec.egress_allow[i]) +
                       " admits any host on port " + std::to_string(destinations[i].second);
          if (!wider.empty())
            route.warnings.push_back(
                gate.warn(gate.tier_name() + " allow-lists by port only: " + wider));
        }
        break;
    }
  } else if (tier.egress == Egress::unrestricted) {
    if (!spec.acknowledge_network_egress)
      return gate.refuse("asks for no network; " + egress_offered +
                         " and cannot close the network; set acknowledge_network_egress to run "
                         "with the host's network");
    route.warnings.push_back(gate.warn("runs with the host's network (acknowledge_network_egress)"));
  }

  // Environment and secrets: names only.
  for (const auto& name : spec.env_passthrough)
    if (!is_variable_name(name))
      return gate.refuse("env_passthrough name " + q(name) + " is not a variable name");
  for (const auto& name : spec.secrets)
    if (!is_variable_name(name))
      return gate.refuse("secret name " + q(name) + " is not a variable name");

  for (const auto& prefix : spec.allow_host_paths)
    if (prefix.empty() || prefix.front() != '/' || prefix.find('\0') != std::string::npos)
      return gate.refuse("allow_host_paths entry " + q(prefix) + " is not an absolute path");

  // Declared outputs: everything the declaration alone decides.
  if (!spec.outputs.empty() && !tier.files_out)
    return gate.refuse("declares outputs; " + gate.tier_name() + " does not offer files_out");
  if (Status declared = validate_declaration(spec.outputs, tier.files_list); !declared)
    return gate.refuse(declared.error().message());

  route.tier = tier;
  route.effective_floor = floor;
  route.floor_source = std::move(source);
  route.spec = std::move(spec);
  routes_.push_back(route);
  return route;
}

const Route* Router::find(std::string_view name) const {
  for (const auto& route : routes_)
    if (route.spec.name == name) return &route;
  return nullptr;
}

std::vector<std::string> Router::names() const {
  std::vector<std::string> out;
  for (const auto& route : routes_) out.push_back(route.spec.name);
  return out;
}

}  // namespace corral
