#include "corral/route.hpp"

#include "support.hpp"

using namespace corral;
using corral_test::contains;

namespace {

TierCapabilities tier(std::string_view name) {
  auto caps = tier_capabilities(name);
  cr_assert(caps.ok(), "%s", caps.error().message().c_str());
  return *caps;
}

RouteSpec spec(std::string name, std::optional<Provenance> provenance, std::string tier_name) {
  RouteSpec s;
  s.name = std::move(name);
  s.provenance = provenance;
  s.tier = std::move(tier_name);
  return s;
}

Expected<Route> add(Router& router, RouteSpec s, const EnforcementView& view = corral_test::all_hard_view()) {
  auto caps = tier(s.tier);
  return router.add(std::move(s), caps, view);
}

Expected<Route> add_one(RouteSpec s, HostPolicy policy = {}) {
  Router router(policy);
  return add(router, std::move(s));
}

void assert_refused(const Expected<Route>& r, const std::string& route,
                    std::initializer_list<std::string_view> words) {
  cr_assert(!r.ok(), "route '%s' was accepted", route.c_str());
  const std::string& msg = r.error().message();
  cr_assert(contains(msg, "route '" + route + "': "), "route not named: %s", msg.c_str());
  for (auto word : words)
    cr_assert(contains(msg, word), "'%.*s' not in: %s", (int)word.size(), word.data(), msg.c_str());
}

void assert_warned(const Expected<Route>& r, std::initializer_list<std::string_view> words) {
  cr_assert(r.ok(), "%s", r.error().message().c_str());
  for (const auto& w : r->warnings) {
    bool all = true;
    for (auto word : words) all = all && contains(w, word);
    if (all) return;
  }
  std::string got;
  for (const auto& w : r->warnings) got += w + " | ";
  cr_assert_fail("no warning with the expected words; warnings: %s", got.c_str());
}

}  // namespace

// ---- acceptances

Test(route, accepts_a_trusted_route_on_os_process) {
  auto s = spec("build", Provenance::trusted, "os_process");
  s.limits.set(Limit::cpu_seconds, 5).set(Limit::memory_bytes, 1 << 30);
  s.required_capabilities = {Capability::exec, Capability::files_out};
  auto r = add_one(s);
  cr_assert(r.ok(), "%s", r.error().message().c_str());
  cr_assert_eq(r->effective_floor, Isolation::none);
  cr_assert_eq(r->tier.isolation, Isolation::os_process);
  cr_assert_eq(r->enforcement.size(), 2u);
  cr_assert(r->enforcement.at(Limit::cpu_seconds) == "hard");
  cr_assert(r->warnings.empty());
}

Test(route, accepts_an_untrusted_route_on_container) {
  auto r = add_one(spec("grader", Provenance::untrusted, "container"));
  cr_assert(r.ok(), "%s", r.error().message().c_str());
  cr_assert_eq(r->effective_floor, Isolation::container);
  cr_assert(contains(r->floor_source, "host's floor for untrusted routes"), "%s", r->floor_source.c_str());
  cr_assert(r->warnings.empty());
}

// ---- provenance and floors

Test(route, refuses_a_missing_provenance) {
  auto r = add_one(spec("grader", std::nullopt, "container"));
  assert_refused(r, "grader", {"provenance is missing", "no default"});
}

Test(route, refuses_untrusted_below_container_with_the_exact_message) {
  auto r = add_one(spec("grader", Provenance::untrusted, "os_process"));
  cr_assert(!r.ok());
  cr_assert_str_eq(r.error().message().c_str(),
                   "route 'grader': provenance untrusted needs isolation container or above; "
                   "tier 'os_process' gives os_process");
}

Test(route, a_host_cannot_lower_the_untrusted_floor_below_container) {
  HostPolicy lax;
  lax.untrusted_floor = Isolation::none;
  assert_refused(add_one(spec("grader", Provenance::untrusted, "none"), lax), "grader",
                 {"provenance untrusted needs isolation container", "tier 'none' gives none"});
}

Test(route, the_host_can_raise_the_floor_for_all_routes) {
  HostPolicy strict;
  strict.floor_for_all = Isolation::container;
  cr_assert_eq(strict.floor_for(Provenance::trusted), Isolation::container);
  auto r = add_one(spec("build", Provenance::trusted, "os_process"), strict);
  cr_assert(!r.ok());
  cr_assert_str_eq(r.error().message().c_str(),
                   "route 'build': needs isolation container or above (the host's floor for all "
                   "routes); tier 'os_process' gives os_process");
}

Test(route, the_host_floor_for_trusted_routes_applies) {
  HostPolicy host;
  host.trusted_floor = Isolation::os_process;
  assert_refused(add_one(spec("lint", Provenance::trusted, "none"), host), "lint",
                 {"needs isolation os_process or above (the host's floor for trusted routes)",
                  "tier 'none' gives none"});
}

Test(route, min_isolation_raises_the_floor) {
  auto s = spec("grader", Provenance::untrusted, "container");
  s.min_isolation = Isolation::hardened_container;
  assert_refused(add_one(s), "grader",
                 {"needs isolation hardened_container or above (the route's min_isolation)",
                  "tier 'container' gives container"});
}

Test(route, min_isolation_never_lowers_the_floor) {
  HostPolicy host;
  host.trusted_floor = Isolation::os_process;
  auto s = spec("lint", Provenance::trusted, "none");
  s.min_isolation = Isolation::none;
  assert_refused(add_one(s, host), "lint", {"needs isolation os_process or above"});
  // On a tier that meets the host floor the low min_isolation is accepted,
  // and the route is told its floor did not apply.
  s.tier = "os_process";
  s.acknowledge_network_egress = true;
  auto r = add_one(s, host);
  assert_warned(r, {"min_isolation none is below the host's floor for trusted routes"});
  cr_assert_eq(r->effective_floor, Isolation::os_process);
}

// ---- capabilities and limits

Test(route, refuses_a_capability_the_tier_lacks) {
  auto s = spec("fetch", Provenance::untrusted, "container");
  s.required_capabilities = {Capability::exec, Capability::network};
  assert_refused(add_one(s), "fetch",
                 {"requires network; tier 'container' does not offer it",
                  "offers: exec, files_in, files_out, files_list, streaming"});
}

Test(route, refuses_a_limit_unsupported_here_unless_acknowledged) {
  MapEnforcementView view = corral_test::all_hard_view();
  view.set("none", Limit::process_count, "unsupported");
  auto s = spec("script", Provenance::trusted, "none");
  s.acknowledge_network_egress = true;
  s.limits.set(Limit::process_count, 16).set(Limit::cpu_seconds, 1);
  Router router;
  assert_refused(add(router, s, view), "script",
                 {"limit process_count=16 is unsupported on tier 'none' here",
                  "acknowledged_unenforced"});

  s.acknowledged_unenforced.insert(Limit::process_count);
  auto r = add(router, s, view);
  assert_warned(r, {"process_count=16", "acknowledged"});
  cr_assert(r->enforcement.at(Limit::process_count) == "unsupported");
  cr_assert(r->enforcement.at(Limit::cpu_seconds) == "hard");
}

Test(route, a_limit_the_view_does_not_know_counts_as_unsupported) {
  MapEnforcementView empty;
  auto s = spec("script", Provenance::untrusted, "container");
  s.limits.set(Limit::memory_bytes, 1 << 20);
  Router router;
  assert_refused(add(router, s, empty), "script",
                 {"limit memory_bytes=1048576 is of unknown enforcement on tier 'container'"});
  cr_assert(!is_enforced(""));
  cr_assert(!is_enforced("unsupported"));
  cr_assert(is_enforced("cgroup"));
}

// ---- egress: refuse where the tier confines less, warn where it confines more

Test(route, an_allow_list_on_a_closed_tier_is_accepted_with_a_warning) {
  auto s = spec("grader", Provenance::untrusted, "container");
  s.egress_allow = {"api.example.com:443"};
  auto r = add_one(s);
  assert_warned(r, {"route 'grader': warning:", "'api.example.com:443'", "egress closed",
                    "reach none of it"});
}

Test(route, an_allow_list_on_an_unrestricted_tier_is_refused_even_acknowledged) {
  auto s = spec("fetch", Provenance::trusted, "none");
  s.egress_allow = {"api.example.com:443"};
  s.acknowledge_network_egress = true;
  assert_refused(add_one(s), "fetch",
                 {"egress_allow asks for only 'api.example.com:443'",
                  "tier 'none' gives egress unrestricted", "cannot confine it"});
}

Test(route, an_allow_list_on_an_allowlist_tier_is_accepted) {
  auto s = spec("fetch", Provenance::trusted, "os_process");
  s.egress_allow = {"*:443"};
  auto any_host = add_one(s);
  cr_assert(any_host.ok(), "%s", any_host.error().message().c_str());
  cr_assert(any_host->warnings.empty());
  // os_process filters ports, not hosts: naming a host is said to be wider.
  s.egress_allow = {"api.example.com:443", "*:80"};
  assert_warned(add_one(s), {"allow-lists by port only", "'api.example.com:443' admits any host on port 443"});
}

Test(route, a_tier_that_cannot_close_the_network_needs_an_acknowledgement) {
  auto s = spec("script", Provenance::trusted, "none");
  assert_refused(add_one(s), "script",
                 {"asks for no network; tier 'none' gives egress unrestricted",
                  "acknowledge_network_egress"});
  s.acknowledge_network_egress = true;
  assert_warned(add_one(s), {"host's network"});
  // A tier that can close it needs nothing.
  auto closed = add_one(spec("script", Provenance::trusted, "os_process"));
  cr_assert(closed.ok() && closed->warnings.empty());
}

Test(route, egress_entries_are_validated) {
  auto ok = parse_egress_entry("r", "[::1]:8080");
  cr_assert(ok.ok(), "%s", ok.error().message().c_str());
  cr_assert(ok->first == "::1" && ok->second == 8080);
  cr_assert(parse_egress_entry("r", "*:53").ok());
  for (const char* bad : {"example.com", "example.com:0", "example.com:70000", "[::1:80", ":80",
                          "a b:80", "host:http", "a:b:80", "[zz]:80", ""}) {
    auto r = parse_egress_entry("fetch", bad);
    cr_assert(!r.ok(), "accepted '%s'", bad);
    cr_assert(contains(r.error().message(), "route 'fetch': egress_allow entry '" + std::string(bad)),
              "%s", r.error().message().c_str());
  }
  auto s = spec("fetch", Provenance::trusted, "os_process");
  s.egress_allow = {"example.com"};
  assert_refused(add_one(s), "fetch", {"'example.com' has no port"});
}

// ---- identity, names, outputs

Test(route, refuses_duplicate_and_empty_names) {
  Router router;
  cr_assert(add(router, spec("grader", Provenance::untrusted, "container")).ok());
  assert_refused(add(router, spec("grader", Provenance::trusted, "os_process")), "grader",
                 {"already defined"});
  auto unnamed = add(router, spec("", Provenance::trusted, "os_process"));
  cr_assert(!unnamed.ok());
  cr_assert(contains(unnamed.error().message(), "route: name is empty"));
  RouteSpec no_tier = spec("x", Provenance::trusted, "");
  assert_refused(router.add(no_tier, tier("os_process"), corral_test::all_hard_view()), "x", {"tier is empty"});
  cr_assert(router.find("grader") != nullptr);
  cr_assert(router.find("x") == nullptr);
  cr_assert_eq(router.names().size(), 1u);
}

Test(route, refuses_bad_env_and_secret_names) {
  auto s = spec("deploy", Provenance::trusted, "os_process");
  s.env_passthrough = {"PATH", "A=B"};
  assert_refused(add_one(s), "deploy", {"env_passthrough name 'A=B'"});
  s.env_passthrough = {"PATH"};
  s.secrets = {""};
  assert_refused(add_one(s), "deploy", {"secret name ''"});
}

Test(route, checks_declared_outputs_against_the_tier) {
  auto s = spec("grader", Provenance::untrusted, "container");
  s.outputs = {DeclaredOutput{"report.json", "application/json", true, "", Disposition::land}};
  cr_assert(add_one(s).ok());

  TierCapabilities no_files = tier("container");
  no_files.files_out = false;
  no_files.files_list = false;
  Router router;
  assert_refused(router.add(s, no_files, corral_test::all_hard_view()), "grader",
                 {"declares outputs; tier 'container' does not offer files_out"});

  no_files.files_out = true;
  s.outputs = {DeclaredOutput{"results/*.json", "application/json", false, "", Disposition::land}};
  assert_refused(router.add(s, no_files, corral_test::all_hard_view()), "grader",
                 {"output 'results/*.json' is a glob", "files_list"});

  s.outputs = {DeclaredOutput{"../etc/passwd", "text/plain", false, "", Disposition::land}};
  assert_refused(add_one(s), "grader", {"output '../etc/passwd' has a '..' segment"});

  s.outputs = {DeclaredOutput{"a.txt", "text/plain", false, "Report.txt", Disposition::land},
               DeclaredOutput{"b.txt", "text/plain", false, "report.TXT", Disposition::land}};
  assert_refused(add_one(s), "grader", {"'Report.txt' and 'report.TXT' differ only by case"});
}

Test(route, checks_run_in_the_documented_order) {
  // Missing provenance comes before everything else wrong with this route.
  auto s = spec("messy", std::nullopt, "none");
  s.required_capabilities = {Capability::network};
  s.egress_allow = {"nonsense"};
  assert_refused(add_one(s), "messy", {"provenance is missing"});
  // Then the untrusted rule, before the capability.
  s.provenance = Provenance::untrusted;
  assert_refused(add_one(s), "messy", {"provenance untrusted needs isolation container"});
  // Capability before egress.
  s.tier = "container";
  assert_refused(add_one(s), "messy", {"requires network"});
  s.required_capabilities.clear();
  assert_refused(add_one(s), "messy", {"egress_allow entry 'nonsense'"});
}
