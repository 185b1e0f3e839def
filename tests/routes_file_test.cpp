// The routes file: parsing every field, refusals that name the file, the
// line and the key, building through the gate against a host's enforcement
// map, and `corral check` on the shipped example and on broken files.
#include "corral/routes_file.hpp"

#include "cli_runner.hpp"
#include "support.hpp"

using namespace corral;
using corral_test::contains;
using corral_test::assert_mentions;

namespace {

RoutesFile parsed(const std::string& text) {
  auto file = parse_routes(text, "t.toml");
  cr_assert(file.ok(), "%s", file.error().message().c_str());
  return std::move(file).value();
}

void assert_parse_refused(const std::string& text, std::initializer_list<std::string_view> words) {
  auto file = parse_routes(text, "t.toml");
  cr_assert(!file.ok(), "accepted:\n%s", text.c_str());
  assert_mentions(file.error().message(), words);
}

// A host like this one: root, Landlock ABI 7, seccomp, user namespaces, the
// memory and pids controllers usable per run.
HostFacts rich_host() {
  HostFacts h;
  h.root = true;
  h.landlock_abi = 7;
  h.seccomp = h.io_uring = h.pidfd = h.user_namespaces = true;
  h.cgroup_memory = h.cgroup_pids = true;
  return h;
}

// An unprivileged host with an old Landlock: no per-run cgroups.
HostFacts poor_host() {
  HostFacts h;
  h.landlock_abi = 3;
  h.seccomp = true;
  return h;
}

Expected<Router> build(const std::string& text, const HostFacts& host = rich_host(),
                       std::vector<std::string>* seen = nullptr) {
  return build_routes(parsed(text), host, [&](const Route& r) {
    if (seen) seen->push_back(r.spec.name);
  });
}

const char kTrusted[] = R"([[route]]
name = "grader"
provenance = "trusted"
tier = "os_process"
)";

}  // namespace

// ---- parsing

Test(routes_file, parses_every_field_of_a_route) {
  RoutesFile file = parsed(R"([host]
floor = "os_process"
trusted_floor = "os_process"
untrusted_floor = "hardened_container"

[[route]]
name = "grader"
provenance = "trusted"
tier = "os_process"
min_isolation = "os_process"
requires = ["exec", "files_out"]
egress_allow = ["*:443", "api.example.com:8443"]
env_passthrough = ["PATH", "LANG"]
secrets = ["TOKEN"]
acknowledge_network_egress = true
acknowledged_unenforced = ["process_count"]
limits = { cpu_seconds = 10, memory_bytes = 1_000_000 }
transfer = { max_bytes_per_file = 10, max_total_bytes = 20, max_files = 3 }
[[route.outputs]]
path = "report.json"
media_type = "application/json"
required = true
name = "out/report.json"
disposition = "consume"

[[route]]
name = "second"
)");
  cr_assert_eq(file.policy.floor_for_all, Isolation::os_process);
  cr_assert_eq(file.policy.trusted_floor, Isolation::os_process);
  cr_assert_eq(file.policy.untrusted_floor, Isolation::hardened_container);
  cr_assert_eq(file.routes.size(), 2u);
  cr_assert_eq(file.lines[0], 6);
  cr_assert_eq(file.lines[1], 26);
  const RouteSpec& s = file.routes[0];
  cr_assert_str_eq(s.name.c_str(), "grader");
  cr_assert_eq(*s.provenance, Provenance::trusted);
  cr_assert_str_eq(s.tier.c_str(), "os_process");
  cr_assert_eq(*s.min_isolation, Isolation::os_process);
  cr_assert(s.required_capabilities == std::vector<Capability>({Capability::exec, Capability::files_out}));
  cr_assert(s.egress_allow == std::vector<std::string>({"*:443", "api.example.com:8443"}));
  cr_assert(s.env_passthrough == std::vector<std::string>({"PATH", "LANG"}));
  cr_assert(s.secrets == std::vector<std::string>({"TOKEN"}));
  cr_assert(s.acknowledge_network_egress);
  cr_assert(s.acknowledged_unenforced == std::set<Limit>({Limit::process_count}));
  cr_assert_eq(*s.limits.get(Limit::cpu_seconds), 10u);
  cr_assert_eq(*s.limits.get(Limit::memory_bytes), 1000000u);
  cr_assert(!s.limits.has(Limit::wall_seconds));
  cr_assert_eq(s.transfer.max_bytes_per_file, 10u);
  cr_assert_eq(s.transfer.max_total_bytes, 20u);
  cr_assert_eq(s.transfer.max_files, 3u);
  cr_assert_eq(s.outputs.size(), 1u);
  cr_assert_str_eq(s.outputs[0].path.c_str(), "report.json");
  cr_assert_str_eq(s.outputs[0].media_type.c_str(), "application/json");
  cr_assert(s.outputs[0].required);
  cr_assert_str_eq(s.outputs[0].name.c_str(), "out/report.json");
  cr_assert_eq(s.outputs[0].disposition, Disposition::consume);

  // Left out: no provenance (the gate refuses it), PATH passed through, the
  // default transfer caps, nothing acknowledged.
  const RouteSpec& d = file.routes[1];
  cr_assert(!d.provenance);
  cr_assert(d.tier.empty());
  cr_assert(d.env_passthrough == std::vector<std::string>({"PATH"}));
  cr_assert_eq(d.transfer.max_files, TransferLimits{}.max_files);
  cr_assert(!d.acknowledge_network_egress && d.acknowledged_unenforced.empty() && d.outputs.empty());
}

Test(routes_file, refusals_name_the_file_the_line_and_the_key) {
  struct Case {
    std::string text;
    std::vector<std::string_view> words;
  };
  std::string t(kTrusted);  // 4 lines
  const Case cases[] = {
      {"[routez]\n", {"t.toml:1: routes file: unknown key 'routez' (known: route, host)"}},
      {t + "tierr = \"none\"\n", {"t.toml:5: route 'grader': unknown key 'tierr'", "known: name, min_isolation", "tier, provenance"}},
      {t + "limits = { cpu_seconds = 1, cpu_secs = 2 }\n",
       {"t.toml:5: route 'grader': key 'limits.cpu_secs': unknown limit 'cpu_secs'", "known: cpu_seconds, memory_bytes"}},
      {t + "[route.limits]\nwall_seconds = -1\n", {"t.toml:6: route 'grader': key 'limits.wall_seconds': limit wall_seconds: '-1': negative value refused"}},
      {t + "[route.limits]\nprocess_count = 0\n",
       {"t.toml:6:", "key 'limits.process_count': limit process_count: must be at least 1"}},
      {t + "limits = { cpu_seconds = \"10x\" }\n", {"t.toml:5:", "key 'limits.cpu_seconds': limit cpu_seconds: '10x': unknown unit 'x'"}},
      {t + "limits = { cpu_seconds = 1.0005 }\n", {"key 'limits.cpu_seconds': limit cpu_seconds: '1.0005': finer than a millisecond"}},
      {t + "limits = { cpu_seconds = true }\n", {"key 'limits.cpu_seconds': must be a number or a string such as \"512MiB\", not a boolean"}},
      {"[[route]]\nname = \"x\"\ntier = 3\n", {"t.toml:3: route 'x': key 'tier': must be a string, not an integer"}},
      {"[[route]]\nname = \"x\"\nprovenance = \"Trusted\"\n",
       {"t.toml:3: route 'x': key 'provenance': provenance 'Trusted' is unknown"}},
      {t + "min_isolation = \"sandbox\"\n", {"t.toml:5:", "key 'min_isolation': isolation 'sandbox' is unknown"}},
      {t + "requires = [\"exec\",\n  \"gpu\"]\n", {"t.toml:6: route 'grader': key 'requires[2]': capability 'gpu' is unknown"}},
      {t + "requires = \"exec\"\n", {"key 'requires' must be an array of strings, not a string"}},
      {t + "acknowledged_unenforced = [\"proc_count\"]\n",
       {"t.toml:5:", "key 'acknowledged_unenforced[1]': 'proc_count' is not a limit"}},
      {t + "acknowledge_network_egress = \"yes\"\n", {"key 'acknowledge_network_egress' must be a boolean"}},
      {t + "transfer = { max_files = 0 }\n", {"t.toml:5:", "key 'transfer.max_files': must be at least 1"}},
      {t + "transfer = { max_file = 1 }\n", {"unknown key 'transfer.max_file'", "max_bytes_per_file"}},
      {t + "[[route.outputs]]\nmedia_type = \"text/plain\"\n", {"t.toml:5: route 'grader': key 'outputs[1].path' is missing"}},
      {t + "[[route.outputs]]\npath = \"a\"\n", {"t.toml:5:", "'outputs[1].media_type' is missing", "never sniffed"}},
      {t + "[[route.outputs]]\npath = \"a\"\nmedia_type = \"text/plain\"\nsize = 3\n",
       {"t.toml:8: route 'grader': unknown key 'outputs[1].size'"}},
      {t + "[[route.outputs]]\npath = \"a\"\nmedia_type = \"text/plain\"\ndisposition = \"keep\"\n",
       {"t.toml:8:", "key 'outputs[1].disposition'", "'keep'"}},
      {t + "[[route.outputs]]\npath = \"a\"\nmedia_type = \"text/plain\"\nrequired = 1\n",
       {"key 'outputs[1].required' must be a boolean"}},
      {"[route]\nname = \"x\"\n", {"t.toml:1: routes file: key 'route' must be an array of tables ([[route]]), not a table"}},
      {"[[route]]\nprovenance = \"trusted\"\n", {"t.toml:1: route #1: key 'name' is missing"}},
      {std::string("[host]\nuntrusted_floor = \"os_process\"\n") + kTrusted,
       {"t.toml:2: [host]: key 'untrusted_floor': os_process would lower the floor below container"}},
      {std::string("[host]\nceiling = \"vm\"\n") + kTrusted, {"t.toml:2: [host]: unknown key 'ceiling'"}},
      {t + "name = \"again\"\n", {"t.toml:5:", "not valid TOML"}},
      {"[host]\nfloor = \"none\"\n", {"t.toml: defines no routes"}},
  };
  for (const auto& c : cases) {
    auto file = parse_routes(c.text, "t.toml");
    cr_assert(!file.ok(), "accepted:\n%s", c.text.c_str());
    for (auto word : c.words)
      cr_assert(contains(file.error().message(), word), "'%.*s' not in: %s\n--- for:\n%s", (int)word.size(),
                word.data(), file.error().message().c_str(), c.text.c_str());
  }
}

Test(routes_file, on_output_limit_is_truncate_or_kill) {
  RoutesFile file = parsed("[[route]]\nname = \"judge\"\nprovenance = \"trusted\"\ntier = \"os_process\"\n"
                           "on_output_limit = \"kill\"\n");
  cr_assert(file.routes.at(0).kill_on_output_limit);
  assert_parse_refused("[[route]]\nname = \"judge\"\nprovenance = \"trusted\"\ntier = \"os_process\"\n"
                       "on_output_limit = \"explode\"\n",
                       {"t.toml:5", "on_output_limit", "explode"});
}

Test(routes_file, the_first_problem_in_file_order_is_reported) {
  // toml++ keeps keys sorted; the reader goes by line, so 'zzz' (line 5)
  // is reported before 'aaa' (line 6).
  assert_parse_refused(std::string(kTrusted) + "zzz = 1\naaa = 2\n", {"t.toml:5:", "'zzz'"});
}

Test(routes_file, loading_a_missing_file_names_it) {
  auto file = load_routes_file("/nonexistent/routes.toml");
  cr_assert(!file.ok());
  cr_assert_eq(file.error().code(), ENOENT);
  assert_mentions(file.error().message(), {"routes file '/nonexistent/routes.toml'", "No such file"});
}

// ---- building through the gate

Test(routes_file, builds_a_trusted_route_on_os_process_and_an_untrusted_one_on_container) {
  std::vector<std::string> seen;
  auto router = build(std::string(kTrusted) + R"(limits = { cpu_seconds = 5, memory_bytes = 100_000_000 }
[[route]]
name = "agent"
provenance = "untrusted"
tier = "container"
limits = { memory_bytes = 100_000_000, process_count = 32 }
)",
                      rich_host(), &seen);
  cr_assert(router.ok(), "%s", router.error().message().c_str());
  cr_assert(seen == std::vector<std::string>({"grader", "agent"}));
  const Route* grader = router->find("grader");
  cr_assert_str_eq(grader->enforcement.at(Limit::memory_bytes).c_str(), "hard_per_process");
  cr_assert_str_eq(grader->enforcement.at(Limit::cpu_seconds).c_str(), "hard_per_process");
  cr_assert_eq(grader->effective_floor, Isolation::none);
  const Route* agent = router->find("agent");
  cr_assert_str_eq(agent->enforcement.at(Limit::memory_bytes).c_str(), "cgroup");
  cr_assert_str_eq(agent->enforcement.at(Limit::process_count).c_str(), "cgroup");
  cr_assert_eq(agent->effective_floor, Isolation::container);
}

Test(routes_file, gate_refusals_carry_the_file_and_the_route_line) {
  std::vector<std::string> seen;
  auto router = build(std::string(kTrusted) + R"(
[[route]]
name = "agent"
provenance = "untrusted"
tier = "os_process"
)",
                      rich_host(), &seen);
  cr_assert(!router.ok());
  cr_assert_str_eq(router.error().message().c_str(),
                   "t.toml:6: route 'agent': provenance untrusted needs isolation container or above; "
                   "tier 'os_process' gives os_process");
  cr_assert(seen == std::vector<std::string>({"grader"}), "routes before the refusal are still reported");

  // An unknown tier is refused as it is read, with the reason --tier gives.
  auto unknown = parse_routes("[[route]]\nname = \"x\"\nprovenance = \"trusted\"\ntier = \"vm\"\n", "t.toml");
  cr_assert(!unknown.ok());
  assert_mentions(unknown.error().message(), {"t.toml:4: route 'x': key 'tier': unknown tier 'vm' (tiers: none, process, container)"});

  auto twice = build(std::string(kTrusted) + kTrusted);
  cr_assert(!twice.ok());
  assert_mentions(twice.error().message(), {"t.toml:5: route 'grader': already defined"});

  auto no_tier = build("[[route]]\nname = \"x\"\nprovenance = \"trusted\"\n");
  cr_assert(!no_tier.ok());
  assert_mentions(no_tier.error().message(), {"t.toml:1: route 'x': tier is empty"});
}

Test(routes_file, the_files_host_floor_applies_to_every_route) {
  auto router = build(std::string("[host]\nfloor = \"container\"\n") + kTrusted);
  cr_assert(!router.ok());
  assert_mentions(router.error().message(),
                  {"t.toml:3: route 'grader': needs isolation container or above (the host's floor for all routes)"});
}

Test(routes_file, a_limit_this_host_cannot_enforce_is_refused_unless_acknowledged) {
  std::string agent = R"([[route]]
name = "agent"
provenance = "untrusted"
tier = "container"
limits = { memory_bytes = 100_000_000 }
)";
  auto refused = build(agent, poor_host());
  cr_assert(!refused.ok());
  assert_mentions(refused.error().message(),
                  {"t.toml:1: route 'agent': limit memory_bytes=100000000 is unsupported on tier 'container' here",
                   "acknowledged_unenforced"});
  auto acked = build(agent + "acknowledged_unenforced = [\"memory_bytes\"]\n", poor_host());
  cr_assert(acked.ok(), "%s", acked.error().message().c_str());
  const Route* route = acked->find("agent");
  cr_assert_str_eq(route->enforcement.at(Limit::memory_bytes).c_str(), "unsupported");
  cr_assert_eq(route->warnings.size(), 1u);
  assert_mentions(route->warnings[0], {"acknowledged: it will not bind"});
}

Test(routes_file, egress_follows_what_the_host_lets_os_process_do) {
  std::string fetch = std::string(kTrusted) + "egress_allow = [\"*:443\"]\n";
  // Landlock ABI >= 4 and seccomp: an allow-list by port.
  auto rich = build(fetch, rich_host());
  cr_assert(rich.ok(), "%s", rich.error().message().c_str());
  cr_assert_eq(rich->find("grader")->tier.egress, Egress::allowlist);
  cr_assert(rich->find("grader")->warnings.empty());
  // ABI 3: the tier can only close the network, which confines more than
  // asked: accepted, with a warning.
  auto older = build(fetch, poor_host());
  cr_assert(older.ok(), "%s", older.error().message().c_str());
  cr_assert_eq(older->find("grader")->tier.egress, Egress::closed);
  assert_mentions(older->find("grader")->warnings.at(0), {"gives egress closed", "will reach none of it"});
  // No seccomp: the tier cannot even close the network.
  HostFacts bare = poor_host();
  bare.seccomp = false;
  auto none = build(fetch, bare);
  cr_assert(!none.ok());
  assert_mentions(none.error().message(), {"egress_allow asks for only '*:443'", "gives egress unrestricted"});
  auto closed = build(kTrusted, bare);
  cr_assert(!closed.ok());
  assert_mentions(closed.error().message(), {"cannot close the network", "acknowledge_network_egress"});
}

Test(routes_file, host_enforcement_view_reads_the_real_map) {
  HostEnforcementView view(rich_host());
  cr_assert(view.how("os_process", Limit::cpu_seconds) == "hard_per_process");
  cr_assert(view.how("container", Limit::cpu_seconds) == "hard");
  cr_assert(view.how("process", Limit::memory_bytes) == "hard_per_process");
  cr_assert(view.how("container", Limit::memory_bytes) == "cgroup");
  cr_assert(view.how("none", Limit::wall_seconds) == "supervisor");
  cr_assert(view.how("microvm", Limit::cpu_seconds).empty(), "a tier corral does not run is unknown");
  assert_mentions(std::string(view.note("os_process", Limit::memory_bytes)), {"RLIMIT_AS"});
  HostEnforcementView poor(poor_host());
  cr_assert(poor.how("container", Limit::memory_bytes) == "unsupported");
  cr_assert(poor.how("os_process", Limit::process_count) == "hard_per_user");
}

Test(routes_file, load_route_finds_a_route_or_lists_the_others) {
  corral_test::TempDir dir;
  corral_test::write_file(dir / "r.toml", kTrusted);
  auto found = load_route(dir / "r.toml", "grader", rich_host());
  cr_assert(found.ok(), "%s", found.error().message().c_str());
  cr_assert_eq(found->tier.isolation, Isolation::os_process);
  auto missing = load_route(dir / "r.toml", "agent", rich_host());
  cr_assert(!missing.ok());
  assert_mentions(missing.error().message(), {"no route 'agent' in", "(routes: grader)"});
}

// ---- corral check

Test(routes_file, check_passes_the_shipped_example) {
  auto run = corral_test::run_cli({"check", "--routes", "examples/routes.toml"});
  cr_assert_eq(run.code, 0, "exit %d; stderr: %s", run.code, run.err.c_str());
  assert_mentions(run.out, {"route 'grader'", "route 'agent'", "route 'fetch'", "3 routes pass the gate",
                            "floor       container (the host's floor for untrusted routes)",
                            "limit       memory_bytes=1073741824: hard_per_process"});
  cr_assert(run.err.empty(), "stderr: %s", run.err.c_str());
}

Test(routes_file, check_exits_2_at_the_first_refusal_with_its_message) {
  auto refused = corral_test::run_cli({"check", "--routes", "tests/data/routes_untrusted_on_process.toml"});
  cr_assert_eq(refused.code, 2, "exit %d", refused.code);
  cr_assert_str_eq(refused.err.c_str(),
                   "corral: tests/data/routes_untrusted_on_process.toml:13: route 'agent': provenance untrusted "
                   "needs isolation container or above; tier 'os_process' gives os_process\n");
  assert_mentions(refused.out, {"route 'grader'"});  // the route before it passed and was printed
  cr_assert(!contains(refused.out, "routes pass"));

  auto broken = corral_test::run_cli({"check", "--routes", "tests/data/routes_bad_limit.toml"});
  cr_assert_eq(broken.code, 2);
  cr_assert_str_eq(broken.err.c_str(),
                   "corral: tests/data/routes_bad_limit.toml:7: route 'grader': key 'limits.cpu_secs': unknown limit "
                   "'cpu_secs' (known: cpu_seconds, memory_bytes, process_count, file_bytes, open_files, wall_seconds, "
                   "stdout_bytes, stderr_bytes, artifact_bytes, artifact_total_bytes, artifact_count, workspace_bytes, tmp_bytes, shm_bytes)\n");
  cr_assert(broken.out.empty());

  auto missing = corral_test::run_cli({"check", "--routes", "tests/data/no-such-file.toml"});
  cr_assert_eq(missing.code, 2);
  assert_mentions(missing.err, {"corral: routes file 'tests/data/no-such-file.toml': No such file"});
  auto usage = corral_test::run_cli({"check"});
  cr_assert_eq(usage.code, 2);
  assert_mentions(usage.err, {"corral: check: no routes file given"});
}

// toml++ recursed once per dotted key segment: 300,000 of them (a 600 KB
// line) overflowed the stack and corral died of SIGSEGV. The bounds are
// checked before the parser sees the text, for check and run --routes alike.
Test(routes_file, keys_and_nesting_beyond_the_bounds_are_refused_before_the_parser) {
  corral_test::TempDir dir;
  std::string dotted;
  for (int i = 0; i < 300000; ++i) dotted += i ? ".a" : "a";
  corral_test::write_file(dir / "dotted.toml", "# deep\n" + dotted + " = 1\n");
  std::string header = "[[route]]\nname = \"r\"\n[" + dotted + "]\n";
  corral_test::write_file(dir / "header.toml", header);
  corral_test::write_file(dir / "nested.toml", "x = " + std::string(100000, '[') + std::string(100000, ']') + "\n");
  corral_test::write_file(dir / "inline.toml", "x = " + [] {
    std::string s;
    for (int i = 0; i < 50000; ++i) s += "{a=";
    s += "1";
    for (int i = 0; i < 50000; ++i) s += "}";
    return s;
  }() + "\n");
  for (auto [file, line, why] : {std::tuple{"dotted.toml", 2, "dotted segments"}, {"header.toml", 3, "dotted segments"},
                                 {"nested.toml", 1, "nested more than"}, {"inline.toml", 1, "nested more than"}}) {
    std::string path = dir / file;
    auto check = corral_test::run_cli({"check", "--routes", path});
    cr_assert_eq(check.code, 2, "%s: exit %d: %s", file, check.code, check.err.c_str());
    assert_mentions(check.err, {("corral: " + path + ":" + std::to_string(line) + ": ").c_str(), why});
    auto run = corral_test::run_cli({"run", "--routes", path, "--route", "r", "--", "true"});
    cr_assert_eq(run.code, 2, "%s: exit %d", file, run.code);
    assert_mentions(run.err, {(path + ":" + std::to_string(line) + ": ").c_str()});
  }
  // Strings and comments may hold dots and brackets freely.
  auto fine = parse_routes("# a.b.c.d [[[[\n[[route]]\nname = \"a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r.s.t.u.v.w.x.y.z.0.1.2.3.4.5.6\"\n"
                           "provenance = 'trusted'\ntier = 'none'\negress_allow = [\"\"\"[[[[[[\"\"\"]\n",
                           "fine.toml");
  cr_assert(fine.ok(), "%s", fine.ok() ? "" : fine.error().message().c_str());
}

// Non-ASCII outside a string or comment: toml++ 3.3's whitespace test for
// such a character reaches an unreachable point (undefined behaviour; UBSan
// stops `corral check` on `é = 1`). The scan refuses it with FILE:LINE first;
// inside strings and comments it stays legal.
Test(routes_file, non_ascii_outside_strings_and_comments_is_refused_before_the_parser) {
  for (const char* text : {"\xc3\xa9 = 1\n", "[[route]]\nname = \xc3\xa9\n", "[a\xc2\xa1]\n", "x = [\xd2\x99]\n",
                           "a.\xc3\xa9 = 1\n"}) {
    auto parsed = parse_routes(text, "u.toml");
    cr_assert(!parsed.ok(), "accepted: %s", text);
    cr_assert(contains(parsed.error().message(), "non-ASCII character outside a string or comment"), "%s",
              parsed.error().message().c_str());
    cr_assert(contains(parsed.error().message(), "u.toml:"), "%s", parsed.error().message().c_str());
  }
  auto fine = parse_routes("# caf\xc3\xa9\n[[route]]\nname = \"caf\xc3\xa9\"\nprovenance = 'trusted'\n", "fine.toml");
  cr_assert(fine.ok(), "%s", fine.ok() ? "" : fine.error().message().c_str());
}
