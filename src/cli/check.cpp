// corral check --routes FILE
#include <cstring>
#include <string>

#include "cli.hpp"
#include "corral/routes_file.hpp"
#include "options.hpp"
#include "output.hpp"

namespace corral::cli {
namespace {

const char kCheckHelp[] =
    "usage: corral check --routes FILE\n"
    "\n"
    "Build every route of the routes file FILE (TOML; see examples/routes.toml)\n"
    "through the gate, against corral's tier declarations and this host's\n"
    "enforcement map, and print for each route its tier, the effective isolation\n"
    "floor and how each of its limits is enforced here.\n"
    "\n"
    "Exit: 0 when every route passes; 2 at the first refusal, with its message.\n";

std::string egress_text(const Route& route) {
  const auto& allow = route.spec.egress_allow;
  switch (route.tier.egress) {
    case Egress::unrestricted: return "the host's network (acknowledge_network_egress)";
    case Egress::closed:
      return allow.empty() ? "closed" : "closed (the tier confines more than egress_allow asks)";
    case Egress::allowlist: {
      if (allow.empty()) return "closed";
      std::string entries;
      for (const auto& entry : allow) entries += (entries.empty() ? "" : ", ") + entry;
      return "TCP connect only to " + entries + " (by port" +
             (route.tier.egress_filters_hosts ? "" : "; hosts are not filtered") + ")";
    }
  }
  return "?";
}

void print_route(const Route& route, const HostEnforcementView& view) {
  const RouteSpec& spec = route.spec;
  std::string out = "route '" + spec.name + "'\n";
  auto line = [&](std::string_view label, const std::string& text) {
    std::string padded(label);
    padded.resize(12, ' ');
    out += "  " + padded + text + "\n";
  };
  line("provenance", std::string(to_string(*spec.provenance)));
  line("tier", spec.tier + " (isolation " + std::string(to_string(route.tier.isolation)) + ")");
  line("floor", std::string(to_string(route.effective_floor)) + " (" + route.floor_source + ")");
  for (const auto& [limit, how] : route.enforcement) {
    std::string note(view.note(spec.tier, limit));
    line("limit", std::string(limit_name(limit)) + "=" + spec.limits.text(limit) + ": " +
                      how + (note.empty() || how == "unsupported" ? "" : " (" + note + ")"));
  }
  line("egress", egress_text(route));
  for (const auto& o : spec.outputs)
    line("output", o.path + " -> " + o.landing_name() + " (" + o.media_type + ", " +
                       std::string(to_string(o.disposition)) + (o.required ? ", required" : "") + ")");
  for (const auto& w : route.warnings) line("warning", w);
  write_all_fd(1, out);
}

}  // namespace

int check_main(int argc, char** argv) {
  std::string path;
  static const option kOptions[] = {{"help", no_argument, nullptr, 'h'},
                                    {"routes", required_argument, nullptr, 'r'},
                                    {nullptr, 0, nullptr, 0}};
  int operands = argc;
  int rc = parse_options(argc, argv, "check", "hr:", kOptions, [&](int opt, const char* v) -> int {
    if (opt == 'r') {
      path = v;
      return -1;
    }
    write_all_fd(1, kCheckHelp);
    return 0;
  }, operands);
  if (rc >= 0) return rc;
  if (operands < argc) {
    say("check: unexpected argument '%s' (usage: corral check --routes FILE)", argv[operands]);
    return 2;
  }
  if (path.empty()) {
    say("check: no routes file given (usage: corral check --routes FILE)");
    return 2;
  }
  auto file = load_routes_file(path);
  if (!file) {
    say("%s", file.error().message().c_str());
    return 2;
  }
  HostFacts host = probe_host();
  HostEnforcementView view(host);
  auto router = build_routes(*file, host, [&](const Route& route) { print_route(route, view); });
  if (!router) {
    say("%s", router.error().message().c_str());
    return 2;
  }
  std::size_t n = router->names().size();
  write_all_fd(1, std::to_string(n) + (n == 1 ? " route passes" : " routes pass") + " the gate (" + path + ")\n");
  return 0;
}

}  // namespace corral::cli
