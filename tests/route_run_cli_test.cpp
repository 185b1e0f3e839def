// Running through a route from the CLI (corral run --routes F --route R):
// what it refuses (a looser limit, a lower tier, an unknown route,
// untrusted below container), what a run through it prints and audits, and
// what its Result says of an egress allow-list. The library side is
// route_run_test.cpp.
#include "cli_runner.hpp"
#include "corral/host_probe.hpp"
#include "support.hpp"

using namespace corral;
using corral_test::assert_mentions;
using corral_test::contains;
using corral_test::TempDir;

Test(route_run, cli_runs_through_a_route_and_refuses_a_looser_limit) {
  const std::vector<std::string> route = {"run", "--routes", "examples/routes.toml", "--route", "grader"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> args = route;
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  auto loose = corral_test::run_cli(with({"--limit", "cpu_seconds=11", "--", "true"}), {"GRADER_TOKEN=t0k3n-value"});
  cr_assert_eq(loose.code, 2);
  cr_assert_str_eq(loose.err.c_str(),
                   "corral: route 'grader': limit cpu_seconds=11 is looser than the route's cpu_seconds=10; a "
                   "route's limits may be tightened, never loosened\n");
  auto tier = corral_test::run_cli(with({"--tier", "none", "--", "true"}));
  cr_assert_eq(tier.code, 2);
  assert_mentions(tier.err, {"corral: route 'grader': runs in tier os_process; it cannot be run in tier none"});
  auto unknown = corral_test::run_cli({"run", "--routes", "examples/routes.toml", "--route", "nope", "--", "true"});
  cr_assert_eq(unknown.code, 2);
  assert_mentions(unknown.err, {"no route 'nope' in examples/routes.toml (routes: grader, agent, fetch)"});
  auto untrusted = corral_test::run_cli(with({"--untrusted", "--artifact-root", "/tmp", "--", "true"}));
  cr_assert_eq(untrusted.code, 2);
  assert_mentions(untrusted.err, {"corral: provenance untrusted needs tier container or above; tier os_process is below it"});

  TempDir dir;
  auto ok = corral_test::run_cli(with({"--limit", "cpu_seconds=2", "--artifact-root", dir.path(), "--audit",
                                       dir / "audit.jsonl", "--", "sh", "-c",
                                       "echo $GRADER_TOKEN; echo '[]' > report.json"}),
                                 {"GRADER_TOKEN=t0k3n-value"});
  cr_assert_eq(ok.code, 0, "exit %d: %s", ok.code, ok.err.c_str());
  cr_assert_str_eq(ok.out.c_str(), "***\n");
  std::string audit = corral_test::read_file(dir / "audit.jsonl");
  cr_assert(!contains(audit, "t0k3n-value"), "%s", audit.c_str());
  assert_mentions(audit, {"\"route\":\"grader\"", "\"cpu_seconds\":2", "\"name\":\"grades/report.json\""});
}

// A process-tier route with egress_allow runs with net none plus TCP ports
// allowed: the Result it prints must not say network_none hard (it did);
// --net none closes the ports again, and then it is hard.
Test(route_run, cli_result_of_an_egress_allowlist_is_not_network_none_hard) {
  HostFacts host = probe_host(/*with_containers=*/false);
  if (host.landlock_abi < 4) cr_skip_test("Landlock ABI %d < 4: no TCP allow-list on this host", host.landlock_abi);
  const std::vector<std::string> fetch = {"run", "--json", "--routes", "examples/routes.toml", "--route", "fetch"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> args = fetch;
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  auto open = corral_test::run_cli(with({"--", "true"}));
  cr_assert_eq(open.code, 0, "exit %d: %s", open.code, open.err.c_str());
  assert_mentions(open.out, {"\"network_none\":\"tcp_allowlist\"", "\"network\":\"tcp_allowlist\""});
  cr_assert(!contains(open.out, "\"network_none\":\"hard\""), "%s", open.out.c_str());
  auto closed = corral_test::run_cli(with({"--net", "none", "--", "true"}));
  cr_assert_eq(closed.code, 0, "exit %d: %s", closed.code, closed.err.c_str());
  assert_mentions(closed.out, {"\"network_none\":\"hard\"", "\"network\":\"none\""});
}
