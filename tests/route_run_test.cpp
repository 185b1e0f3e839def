// Running through a route: the Request a route gives (limits tighten,
// never loosen; the route owns tier, network, env, secrets, outputs), the
// workspace as an OutputSource, declared outputs landing through transfer()
// after real runs, and the audit line of a real run that printed a secret.
// The CLI's runs through a route: route_run_cli_test.cpp.
#include "corral/route_run.hpp"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "corral/audit.hpp"
#include "corral/enforcement.hpp"
#include "corral/json.hpp"
#include "corral/supervisor.hpp"
#include "support.hpp"
#include "supervisor_harness.hpp"

using namespace corral;
using corral_test::contains;
using corral_test::expect_text;
using corral_test::assert_mentions;
using corral_test::Harness;
using corral_test::TempDir;

namespace {

RouteSpec spec(std::string name, std::string tier, Provenance provenance = Provenance::trusted) {
  RouteSpec s;
  s.name = std::move(name);
  s.tier = std::move(tier);
  s.provenance = provenance;
  return s;
}

DeclaredOutput output(std::string path, Disposition disposition = Disposition::land, std::string name = "",
                      bool required = false) {
  DeclaredOutput o;
  o.path = std::move(path);
  o.media_type = "text/plain";
  o.name = std::move(name);
  o.disposition = disposition;
  o.required = required;
  return o;
}

Route built(RouteSpec s) {
  MapEnforcementView view = corral_test::all_hard_view();
  Router router;
  auto caps = tier_capabilities(s.tier);
  cr_assert(caps.ok());
  auto route = router.add(std::move(s), *caps, view);
  cr_assert(route.ok(), "%s", route.error().message().c_str());
  return std::move(route).value();
}

Request base(std::vector<std::string> argv = {"true"}) {
  Request r;
  r.argv = std::move(argv);
  return r;
}

void assert_refused(const Expected<Request>& r, std::initializer_list<std::string_view> words) {
  cr_assert(!r.ok(), "the request was accepted");
  assert_mentions(r.error().message(), words);
}

Request routed(const Route& route, Request b, const RouteOverrides& o = {}) {
  auto r = request_for_route(route, std::move(b), o);
  cr_assert(r.ok(), "%s", r.error().message().c_str());
  return std::move(r).value();
}

std::string notes(const Result& r) {
  std::string out;
  for (const auto& n : r.artifact_notes) out += n + "\n";
  return out;
}

std::size_t entries(const std::string& dir) {
  std::size_t n = 0;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

}  // namespace

// ---- the Request a route gives

Test(route_run, the_request_is_the_routes) {
  RouteSpec s = spec("grader", "os_process");
  s.limits.set(Limit::cpu_seconds, 5);
  s.env_passthrough = {"PATH", "LANG"};
  s.secrets = {"CORRAL_TEST_GRADER_TOKEN"};
  s.acknowledged_unenforced = {Limit::process_count};
  Request b = base({"prog", "arg"});
  b.env["MODE"] = "fast";
  b.tier = Tier::none;  // not the caller's to choose: replaced
  Request r = routed(built(std::move(s)), std::move(b));
  cr_assert_eq(r.tier, Tier::os_process);
  cr_assert(r.argv == std::vector<std::string>({"prog", "arg"}));
  cr_assert_str_eq(r.env.at("MODE").c_str(), "fast");
  cr_assert_eq(*r.limits.get(Limit::cpu_seconds), 5u);
  cr_assert(r.pass_env == std::vector<std::string>({"PATH", "LANG"}));
  cr_assert_eq(r.secrets.size(), 1u);
  cr_assert_str_eq(r.secrets[0].name.c_str(), "CORRAL_TEST_GRADER_TOKEN");
  cr_assert_str_eq(r.secrets[0].from_env.c_str(), "CORRAL_TEST_GRADER_TOKEN");
  cr_assert(r.acknowledged == std::set<std::string>({"process_count"}));
  cr_assert_eq(r.net, NetworkAccess::none, "no egress_allow: no network");
  cr_assert(r.tcp_connect_ports.empty());
  cr_assert_str_eq(r.route.c_str(), "grader");
  cr_assert_str_eq(r.provenance.c_str(), "trusted");
  cr_assert(r.declared_outputs.empty() && !r.output_caps, "no outputs declared");
}

Test(route_run, limits_may_be_tightened_never_loosened) {
  RouteSpec s = spec("grader", "os_process");
  s.limits.set(Limit::cpu_seconds, 5);
  Route route = built(std::move(s));
  Request tight = base();
  tight.limits.set(Limit::cpu_seconds, 3).set(Limit::memory_bytes, 1u << 30);
  Request r = routed(route, std::move(tight));
  cr_assert_eq(*r.limits.get(Limit::cpu_seconds), 3u);
  cr_assert_eq(*r.limits.get(Limit::memory_bytes), 1u << 30, "a limit neither sets nor defaults is a tightening");

  Request loose = base();
  loose.limits.set(Limit::cpu_seconds, 6);
  auto refused = request_for_route(route, std::move(loose));
  cr_assert(!refused.ok());
  cr_assert_str_eq(refused.error().message().c_str(),
                   "route 'grader': limit cpu_seconds=6 is looser than the route's cpu_seconds=5; a route's "
                   "limits may be tightened, never loosened");
  Request past_default = base();
  past_default.limits.set(Limit::wall_seconds, 601);
  assert_refused(request_for_route(route, std::move(past_default)),
                 {"limit wall_seconds=601 is looser than the route's wall_seconds=600 (corral's default; the route "
                  "sets none)"});
}

Test(route_run, the_caller_cannot_take_what_the_route_owns) {
  RouteSpec s = spec("grader", "os_process");
  s.env_passthrough = {"PATH"};
  s.secrets = {"TOKEN"};
  Route route = built(std::move(s));
  RouteOverrides tier;
  tier.tier = Tier::none;
  assert_refused(request_for_route(route, base(), tier),
                 {"route 'grader': runs in tier os_process; it cannot be run in tier none"});
  RouteOverrides same;
  same.tier = Tier::os_process;
  cr_assert(request_for_route(route, base(), same).ok());
  RouteOverrides net;
  net.net = NetworkAccess::host;
  assert_refused(request_for_route(route, base(), net), {"route 'grader': network host would open what the route closes"});
  RouteOverrides env;
  env.pass_env = {"HOME"};
  assert_refused(request_for_route(route, base(), env), {"env passthrough 'HOME' is not in the route's env_passthrough"});
  env.pass_env = {"PATH"};
  cr_assert(request_for_route(route, base(), env).ok());
  Request other_secret = base();
  other_secret.secrets.push_back(SecretRef{"OTHER", "", {}});
  assert_refused(request_for_route(route, std::move(other_secret)), {"secret 'OTHER' is not one of the route's secrets"});
  Request ack = base();
  ack.acknowledged.insert("memory_bytes");
  assert_refused(request_for_route(route, std::move(ack)), {"acknowledgements belong to the route", "'memory_bytes'"});
  Request outputs = base();
  outputs.outputs = {"*.txt"};
  assert_refused(request_for_route(route, std::move(outputs)), {"declares its own outputs; '*.txt' cannot be added"});
}

Test(route_run, landing_outputs_need_an_artifact_root) {
  RouteSpec s = spec("grader", "os_process");
  s.outputs = {output("report.json", Disposition::land, "grades/report.json"), output("n.txt", Disposition::consume)};
  Route route = built(std::move(s));
  assert_refused(request_for_route(route, base()),
                 {"route 'grader': outputs 'grades/report.json' land in a sink, and no artifact root was given"});
  Request b = base();
  b.artifact_root = "/tmp";
  Request r = routed(route, std::move(b));
  // Plain data: the declaration and the caps, nothing to call.
  cr_assert_eq(r.declared_outputs.size(), 2u);
  cr_assert_str_eq(r.declared_outputs[0].landing_name().c_str(), "grades/report.json");
  cr_assert(r.output_caps.has_value());
  cr_assert(r.outputs.empty(), "route outputs are declared outputs, not --output globs");
}

Test(route_run, the_network_follows_the_tiers_egress) {
  RouteSpec fetch = spec("fetch", "os_process");
  fetch.egress_allow = {"*:443", "api.example.com:443", "[::1]:8080"};
  Route allow = built(std::move(fetch));
  Request r = routed(allow, base());
  cr_assert_eq(r.net, NetworkAccess::none);
  cr_assert(r.tcp_connect_ports == std::vector<std::uint16_t>({443, 8080}));
  RouteOverrides closed;
  closed.net = NetworkAccess::none;
  Request c = routed(allow, base(), closed);
  cr_assert(c.tcp_connect_ports.empty(), "--net none closes even the allow-list");

  RouteSpec plain = spec("script", "none");
  plain.acknowledge_network_egress = true;
  cr_assert_eq(routed(built(std::move(plain)), base()).net, NetworkAccess::host);
  Request agent = routed(built(spec("agent", "container", Provenance::untrusted)), base());
  cr_assert_eq(agent.net, NetworkAccess::none);
  cr_assert_eq(agent.tier, Tier::container);
  cr_assert_str_eq(agent.provenance.c_str(), "untrusted");
}

Test(route_run, an_allow_list_on_the_hosts_network_is_refused_by_the_run_layer) {
  Harness h;
  Request r = base();
  r.tier = Tier::os_process;
  r.tcp_connect_ports = {443};
  auto refused = h.sup->run(std::move(r));
  cr_assert(!refused.ok(), "ports on an open network were accepted");
  assert_mentions(refused.error().message(), {"tcp_connect_ports need net none"});
}

// ---- the workspace as an OutputSource

Test(route_run, workspace_source_lists_stats_and_reads_only_regular_files) {
  TempDir base_dir;
  WorkspaceOptions o;
  o.base_dir = base_dir.path();
  auto ws = Workspace::create(o);
  cr_assert(ws.ok());
  const std::string root = ws->path();
  cr_assert(ws->stage_bytes("a.txt", "alpha").ok());
  cr_assert(ws->stage_bytes(".hidden.txt", "h").ok());
  cr_assert(ws->stage_bytes("d/b.txt", "bravo!").ok());
  cr_assert(ws->stage_bytes("d/c.log", "c").ok());
  cr_assert(ws->stage_bytes("linked", "x").ok());
  cr_assert_eq(symlink("/etc/passwd", (root + "/passwd.txt").c_str()), 0);
  cr_assert_eq(symlink(root.c_str(), (root + "/loop").c_str()), 0);
  cr_assert_eq(mkfifo((root + "/pipe.txt").c_str(), 0644), 0);
  cr_assert_eq(mkdir((root + "/dir.txt").c_str(), 0755), 0);
  cr_assert_eq(link((root + "/linked").c_str(), (root + "/hard.dat").c_str()), 0);

  WorkspaceOutputSource source(*ws);
  auto txt = source.list("*.txt");
  cr_assert(txt.ok(), "%s", txt.error().message().c_str());
  // Listed so that the transfer can say why each is not delivered; a
  // directory is not a file and is never listed.
  cr_assert(*txt == std::vector<std::string>({".hidden.txt", "a.txt", "passwd.txt", "pipe.txt"}),
            "got %zu names", txt->size());
  auto nested = source.list("*/*");
  cr_assert(nested.ok());
  cr_assert(*nested == std::vector<std::string>({"d/b.txt", "d/c.log"}), "symlinked dirs are not walked");

  cr_assert_eq(**source.stat("d/b.txt"), 6u);
  for (const char* unknown : {"pipe.txt", "dir.txt"}) {
    auto size = source.stat(unknown);
    cr_assert(size.ok(), "%s: %s", unknown, size.error().message().c_str());
    cr_assert(!size->has_value(), "%s has a size", unknown);
  }
  for (const char* link : {"passwd.txt", "loop"}) {
    auto size = source.stat(link);
    cr_assert(!size.ok(), "%s: a symlink has a size", link);
    cr_assert_eq(size.error().code(), EPERM);
    assert_mentions(size.error().message(), {"is a symlink; outputs follow none"});
  }
  auto missing = source.stat("nope");
  cr_assert(!missing.ok());
  cr_assert_eq(missing.error().code(), ENOENT);
  auto hard = source.stat("hard.dat");
  cr_assert(!hard.ok());
  cr_assert_eq(hard.error().code(), EPERM);
  assert_mentions(hard.error().message(), {"'hard.dat' is a hard link (st_nlink=2)"});
  auto through = source.stat("loop/a.txt");
  cr_assert(!through.ok());
  assert_mentions(through.error().message(), {"'loop/a.txt'", "a symlink is in the way"});

  auto b = source.open("d/b.txt");
  cr_assert(b.ok(), "%s", b.error().message().c_str());
  char buf[100];
  auto n = (*b)->read(std::span<char>(buf, 3));
  cr_assert(n.ok() && *n == 3);
  expect_text(std::string(buf, 3), "bra");
  n = (*b)->read(std::span<char>(buf, sizeof buf));
  cr_assert(n.ok() && *n == 3);
  expect_text(std::string(buf, 3), "vo!");
  auto link_read = source.open("passwd.txt");
  cr_assert(!link_read.ok(), "a symlink was read");
  auto fifo_read = source.open("pipe.txt");
  cr_assert(!fifo_read.ok(), "a fifo was read");
  assert_mentions(fifo_read.error().message(), {"no longer a regular file"});
}

// One collector: a route's declared glob "logs/**" and `--output 'logs/**'`
// (Request::outputs) go through the same transfer and collect the same
// files, the deep ones too. (Routes had fnmatch per segment, where "**"
// was "*": logs/top.txt only; then --output had a walker of its own.)
Test(route_run, a_route_glob_and_output_glob_collect_the_same_files) {
  TempDir base_dir;
  WorkspaceOptions o;
  o.base_dir = base_dir.path();
  auto ws = Workspace::create(o);
  cr_assert(ws.ok());
  cr_assert(ws->stage_bytes("logs/top.txt", "t").ok());
  cr_assert(ws->stage_bytes("logs/a/b/deep.txt", "d").ok());
  cr_assert(ws->stage_bytes("other/x.txt", "x").ok());
  auto names = [](const Result& r) {
    std::vector<std::string> out;
    for (const auto& a : r.artifacts) out.push_back(a.name);
    std::sort(out.begin(), out.end());
    return out;
  };
  const std::vector<std::string> want = {"logs/a/b/deep.txt", "logs/top.txt"};
  for (const char* glob : {"logs/**", "**/*.txt", "logs/**/deep.txt", "*/top.txt"}) {
    Request by_output = base();
    by_output.outputs = {glob};
    Request by_route = base();
    by_route.declared_outputs = {output(glob, Disposition::consume)};
    by_route.output_caps = TransferLimits{};
    Result a, b;
    collect_run_outputs(by_output, default_limits(), *ws, a, nullptr);
    collect_run_outputs(by_route, default_limits(), *ws, b, nullptr);
    cr_assert(a.artifact_notes.empty() && b.artifact_notes.empty(), "%s: notes", glob);
    cr_assert(names(a) == names(b), "%s: --output collects %zu file(s), the route %zu", glob, names(a).size(),
              names(b).size());
    if (std::string(glob) == "logs/**") cr_assert(names(a) == want, "logs/** collects %zu", names(a).size());
  }
}

// ---- real runs through a route

Test(route_run, declared_outputs_land_in_the_sink_and_consumed_ones_are_hashed) {
  Harness h;
  TempDir artifacts;
  RouteSpec s = spec("grader", "os_process");
  s.outputs = {output("report.json", Disposition::land, "grades/report.json", true),
               output("*.log", Disposition::land, "logs"), output("answer.txt", Disposition::consume),
               output("optional.bin")};
  Request b = base({"sh", "-c", "echo '{}' > report.json; echo one > a.log; echo two > b.log; echo 42 > answer.txt"});
  b.artifact_root = artifacts.path();
  Result res = h.run(routed(built(std::move(s)), std::move(b)));
  cr_assert_eq(res.outcome, Outcome::exited, "%s", res.detail.c_str());
  cr_assert(res.artifact_notes.empty(), "%s", notes(res).c_str());
  cr_assert_eq(res.artifacts.size(), 4u);
  const std::string dir = artifacts / res.run_id;
  cr_assert_str_eq(res.artifacts[0].name.c_str(), "grades/report.json");
  const std::string report = dir + "/grades/report.json";
  cr_assert_str_eq(res.artifacts[0].path.c_str(), report.c_str());
  expect_text(corral_test::read_file(dir + "/grades/report.json"), "{}\n");
  expect_text(corral_test::read_file(dir + "/logs/b.log"), "two\n");
  cr_assert_str_eq(res.artifacts[3].name.c_str(), "answer.txt");
  cr_assert(res.artifacts[3].path.empty(), "a consumed output lands nowhere");
  const std::string answer = sha256_hex("42\n");
  cr_assert_str_eq(res.artifacts[3].sha256.c_str(), answer.c_str());
  cr_assert_eq(entries(h.base.path()), 0u, "workspace left behind");
}

// One file with a name no destination may hold (a backslash, bad UTF-8)
// under a landing glob costs only itself: the others land, and a note names
// it (every output was refused).
Test(route_run, a_bad_name_under_a_glob_skips_only_that_file) {
  Harness h;
  TempDir artifacts;
  RouteSpec s = spec("grader", "os_process");
  s.outputs = {output("logs/*", Disposition::land, "logs"), output("report.txt")};
  Request b = base({"sh", "-c",
                    "mkdir logs; echo good > logs/good.txt; echo bad > 'logs/a\\b.txt'; "
                    "echo worse > \"logs/$(printf 'x\\377')\"; echo r > report.txt"});
  b.artifact_root = artifacts.path();
  Result res = h.run(routed(built(std::move(s)), std::move(b)));
  cr_assert_eq(res.outcome, Outcome::exited, "%s", res.detail.c_str());
  std::string names;
  for (const auto& a : res.artifacts) names += a.name + " ";
  cr_assert_str_eq(names.c_str(), "logs/good.txt report.txt ", "notes: %s", notes(res).c_str());
  assert_mentions(notes(res), {"logs/a\\b.txt' contains a backslash", "logs/x\\xff' is not valid UTF-8"});
  expect_text(corral_test::read_file(artifacts / res.run_id + "/logs/good.txt"), "good\n");
}

// Two files a landing glob lists that are one file at a case-insensitive
// destination (Report.txt, report.txt) cost only the second: the route's
// other outputs land, and a note names both (every output was refused, and
// the run's artifact directory stayed empty).
Test(route_run, a_case_collision_under_a_glob_skips_only_that_file) {
  Harness h;
  TempDir artifacts;
  RouteSpec s = spec("grader", "os_process");
  s.outputs = {output("logs/*", Disposition::land, "logs"), output("report.txt")};
  Request b = base({"sh", "-c",
                    "mkdir logs; echo upper > logs/Report.txt; echo lower > logs/report.txt; "
                    "echo r > report.txt"});
  b.artifact_root = artifacts.path();
  Result res = h.run(routed(built(std::move(s)), std::move(b)));
  cr_assert_eq(res.outcome, Outcome::exited, "%s", res.detail.c_str());
  std::string names;
  for (const auto& a : res.artifacts) names += a.name + " ";
  cr_assert_str_eq(names.c_str(), "logs/Report.txt report.txt ", "notes: %s", notes(res).c_str());
  assert_mentions(notes(res), {"outputs: output 'logs/*': match 'logs/report.txt'",
                               "'logs/Report.txt' and 'logs/report.txt' differ only by case", "not delivered"});
  cr_assert(!contains(notes(res), "outputs refused"), "%s", notes(res).c_str());
  expect_text(corral_test::read_file(artifacts / res.run_id + "/logs/Report.txt"), "upper\n");
  expect_text(corral_test::read_file(artifacts / res.run_id + "/report.txt"), "r\n");
  cr_assert_eq(::access((artifacts / res.run_id + "/logs/report.txt").c_str(), F_OK), -1, "the skipped file landed");
}

// A match that is a hard link (both names of the linked file) and an
// optional output that is a symlink cost only themselves: good.txt lands,
// each of the others is a note saying why, and the Result lists only what
// was delivered (the whole transfer was refused).
Test(route_run, a_hard_link_or_a_symlink_among_the_outputs_skips_only_that_file) {
  Harness h;
  TempDir artifacts;
  RouteSpec s = spec("grader", "os_process");
  s.outputs = {output("*.txt", Disposition::land, "texts"), output("passwd")};
  Request b = base({"sh", "-c",
                    "echo good > good.txt; echo other > other.txt; ln other.txt link.txt; ln -s /etc/passwd passwd"});
  b.artifact_root = artifacts.path();
  Result res = h.run(routed(built(std::move(s)), std::move(b)));
  cr_assert_eq(res.outcome, Outcome::exited, "%s", res.detail.c_str());
  std::string names;
  for (const auto& a : res.artifacts) names += a.name + " ";
  cr_assert_str_eq(names.c_str(), "texts/good.txt ", "notes: %s", notes(res).c_str());
  assert_mentions(notes(res), {"outputs: output '*.txt': 'link.txt' is a hard link (st_nlink=2)",
                               "outputs: output '*.txt': 'other.txt' is a hard link (st_nlink=2)",
                               "outputs: output 'passwd': 'passwd' is a symlink; outputs follow none", "not delivered"});
  cr_assert(!contains(notes(res), "outputs refused"), "%s", notes(res).c_str());
  const std::string dir = artifacts / res.run_id;
  expect_text(corral_test::read_file(dir + "/texts/good.txt"), "good\n");
  cr_assert_eq(entries(dir + "/texts"), 1u, "a skipped file landed");
  cr_assert_eq(entries(dir), 1u, "a skipped file landed");
}

Test(route_run, a_cap_breach_on_the_third_output_delivers_nothing) {
  Harness h;
  TempDir artifacts;
  RouteSpec s = spec("grader", "os_process");
  s.transfer.max_bytes_per_file = 10;
  s.outputs = {output("a.txt"), output("b.txt"), output("c.txt")};
  Request b = base({"sh", "-c", "echo a > a.txt; echo b > b.txt; echo ccccccccccccccc > c.txt"});
  b.artifact_root = artifacts.path();
  Result res = h.run(routed(built(std::move(s)), std::move(b)));
  cr_assert_eq(res.outcome, Outcome::exited);
  cr_assert(res.artifacts.empty());
  assert_mentions(notes(res), {"outputs refused (cap_exceeded)", "'c.txt' has 16 bytes, over max_bytes_per_file (10)"});
  cr_assert_eq(entries(artifacts.path()), 0u, "something was delivered");
}

Test(route_run, outputs_are_collected_after_a_kill_and_symlinks_are_not_followed) {
  Harness h;
  TempDir artifacts;
  RouteSpec s = spec("grader", "os_process");
  s.limits.set(Limit::wall_seconds, 1);
  s.outputs = {output("partial.txt", Disposition::land, "", true)};
  Request b = base({"sh", "-c", "echo so-far > partial.txt; exec sleep 30"});
  b.artifact_root = artifacts.path();
  b.grace_seconds = 0.2;
  Result killed = h.run(routed(built(s), std::move(b)));
  cr_assert_eq(killed.outcome, Outcome::killed_timeout);
  cr_assert_eq(killed.artifacts.size(), 1u, "%s", notes(killed).c_str());
  expect_text(corral_test::read_file(killed.artifacts[0].path), "so-far\n");

  Request planted = base({"ln", "-s", "/etc/passwd", "partial.txt"});
  planted.artifact_root = artifacts.path();
  s.limits.clear(Limit::wall_seconds);
  Result res = h.run(routed(built(s), std::move(planted)));
  cr_assert(res.artifacts.empty());
  // A required output planted as a symlink refuses the transfer, naming it.
  assert_mentions(notes(res), {"outputs refused (required_missing)", "'partial.txt' is a symlink; outputs follow none"});
}

// ---- audit

Test(route_run, the_audit_line_of_a_real_run_never_holds_the_secret) {
  const std::string secret = "corral-audit-secret-4711";
  setenv("CORRAL_TEST_AUDIT_TOKEN", secret.c_str(), 1);
  TempDir dir;
  auto file = FileAuditSink::open(dir / "audit.jsonl");
  cr_assert(file.ok());
  SupervisorOptions with_audit;
  with_audit.audit = std::make_shared<FileAuditSink>(std::move(*file));
  Harness h(std::move(with_audit));
  RouteSpec s = spec("grader", "os_process");
  s.secrets = {"CORRAL_TEST_AUDIT_TOKEN"};
  s.limits.set(Limit::cpu_seconds, 7);
  // The secret reaches stdout, stderr and an artifact's name.
  s.outputs = {output("*.txt", Disposition::consume)};
  Request b = base({"sh", "-c",
                    "echo $CORRAL_TEST_AUDIT_TOKEN; echo $CORRAL_TEST_AUDIT_TOKEN >&2; "
                    "echo x > \"$CORRAL_TEST_AUDIT_TOKEN.txt\""});
  Result res = h.run(routed(built(std::move(s)), std::move(b)));
  cr_assert_str_eq(res.stdout_capture.text.c_str(), "***\n");
  cr_assert_eq(res.artifacts.size(), 1u, "%s", notes(res).c_str());
  Result plain = h.run(base({"true"}));
  cr_assert_eq(plain.outcome, Outcome::exited);

  std::string lines = corral_test::read_file(dir / "audit.jsonl");
  cr_assert(!contains(lines, secret), "the secret reached the audit file: %s", lines.c_str());
  std::string first = lines.substr(0, lines.find('\n'));
  assert_mentions(first, {"\"route\":\"grader\"", "\"provenance\":\"trusted\"", "\"tier\":\"os_process\"",
                          "\"cpu_seconds\":7", "\"outcome\":\"exited\"", "\"wall_seconds\":",
                          "\"enforcement\":{", "\"cpu_seconds\":\"hard_per_process\"", "\"name\":\"***.txt\"", "\"bytes\":2",
                          ("\"stdout_sha256\":\"" + res.stdout_capture.sha256 + "\"").c_str()});
  std::string second = lines.substr(first.size() + 1);
  assert_mentions(second, {"\"route\":\"\"", "\"provenance\":null"});
  cr_assert_eq(std::count(lines.begin(), lines.end(), '\n'), 2, "one line per run");
}

// A route secret whose value is in a file (SecretRef::from_file, plain
// data in the Request where a callback used to ride): read at spawn, seen
// by the program, masked in its output. A fifo or an empty file is refused
// naming the path, never blocking.
Test(route_run, a_route_secret_read_from_a_file_is_masked, .timeout = 20) {
  TempDir dir;
  corral_test::write_file(dir / "token", "file-secret-0815\n");
  Harness h;
  RouteSpec s = spec("grader", "os_process");
  s.secrets = {"FILE_TOKEN"};
  Route route = built(std::move(s));
  Request b = base({"sh", "-c", "echo \"[$FILE_TOKEN]\"; printf %s \"$FILE_TOKEN\" | wc -c"});
  b.secrets.push_back(SecretRef{"FILE_TOKEN", "", dir / "token"});
  Request r = routed(route, std::move(b));
  cr_assert_eq(r.secrets.size(), 1u, "the caller's SecretRef stands for the route's secret");
  Result res = h.run(std::move(r));
  expect_text(res.stdout_capture.text, "[***]\n16\n");

  cr_assert_eq(mkfifo((dir / "fifo").c_str(), 0600), 0);
  corral_test::write_file(dir / "empty", "\n");
  for (const char* bad : {"fifo", "empty", "absent"}) {
    Request again = base({"true"});
    again.secrets.push_back(SecretRef{"FILE_TOKEN", "", dir / bad});
    auto refused = h.sup->run(routed(route, std::move(again)));
    cr_assert(!refused.ok(), "%s: the run was not refused", bad);
    assert_mentions(refused.error().message(), {"secret FILE_TOKEN", ("secret file '" + (dir / bad) + "'").c_str()});
  }
}

// on_output_limit: the route's kill stands; a caller may ask for kill on a
// route that truncates.
Test(route_run, the_output_limit_policy_is_the_routes_kill_or_the_callers) {
  RouteSpec killing = spec("killing", "os_process");
  killing.kill_on_output_limit = true;
  cr_assert(routed(built(killing), base()).on_output_limit == OutputLimitPolicy::kill);
  Route plain = built(spec("plain", "os_process"));
  cr_assert(routed(plain, base()).on_output_limit == OutputLimitPolicy::truncate);
  Request asks = base();
  asks.on_output_limit = OutputLimitPolicy::kill;
  cr_assert(routed(plain, std::move(asks)).on_output_limit == OutputLimitPolicy::kill);
}

// ---- names holding a secret, and the artifact root

Test(route_run, a_listed_name_holding_a_secret_is_withheld_and_masked) {
  setenv("ROUTE_NAME_TOKEN", "TopSecret123", 1);
  Harness h;
  TempDir artifacts;
  RouteSpec s = spec("grader", "os_process");
  s.secrets = {"ROUTE_NAME_TOKEN"};
  s.outputs = {output("*.txt", Disposition::land, "out")};
  Request b = base({"sh", "-c", "echo s > \"$ROUTE_NAME_TOKEN.txt\"; echo p > plain.txt"});
  b.artifact_root = artifacts.path();
  Result res = h.run(routed(built(std::move(s)), std::move(b)));
  cr_assert_eq(res.outcome, Outcome::exited, "%s", res.detail.c_str());
  const std::string json = result_to_json(res);
  cr_assert(!contains(json, "TopSecret123"), "the secret is in the JSON: %s", json.c_str());
  assert_mentions(notes(res), {"***.txt: its name contains a secret"});
  cr_assert_eq(res.artifacts.size(), 1u, "%s", json.c_str());
  expect_text(res.artifacts[0].name, "out/plain.txt");
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(artifacts.path(), ec);
       !ec && it != std::filesystem::end(it); it.increment(ec))
    cr_assert(!contains(it->path().string(), "TopSecret123"), "on disk: %s", it->path().c_str());
}

Test(route_run, a_missing_artifact_root_is_refused_before_the_program_runs) {
  Harness h;
  TempDir scratch;
  const std::string marker = scratch / "ran";
  RouteSpec s = spec("grader", "os_process");
  s.outputs = {output("a.txt")};
  Request b = base({"touch", marker});
  b.artifact_root = scratch / "no-such-dir";
  auto res = h.sup->run(routed(built(std::move(s)), std::move(b)));
  cr_assert(!res.ok(), "the run went ahead");
  assert_mentions(res.error().message(), {"no-such-dir", "No such file or directory"});
  cr_assert(access(marker.c_str(), F_OK) != 0, "the program ran");
}
