// The door: a request from someone else (a batch job) goes through the
// gate in the library — host paths only under what the operator allowed
// (resolved: no "..", no symlink out), provenance against the tier, the
// operator's floor, a named route's limits and refusals — and the request's
// own fields are checked for every entry point (NULs, empty paths, limits
// beyond what their mechanism holds).
#include "corral/door.hpp"

#include <sys/stat.h>

#include "corral/json.hpp"
#include "corral/routes_file.hpp"
#include "support.hpp"

using namespace corral;
using corral_test::contains;
using corral_test::assert_mentions;
using corral_test::TempDir;

namespace {

// A batch job line through job_from_json and the door.
Expected<Request> through(const std::string& line, const DoorPolicy& policy) {
  auto job = job_from_json(line);
  if (!job) return std::move(job).error();
  return admit(std::move(job->request), job->ask, policy);
}

std::string refusal(const std::string& line, const DoorPolicy& policy) {
  auto r = through(line, policy);
  cr_assert(!r.ok(), "accepted: %s", line.c_str());
  return r.error().message();
}

DoorPolicy allowing(std::vector<std::string> prefixes) {
  DoorPolicy p;
  p.allow_host_paths = std::move(prefixes);
  return p;
}

const char kShadowJob[] = R"({"inputs":[{"name":"s","host_path":"/etc/shadow"}],"argv":["cat","s"]})";

}  // namespace

TestSuite(door);

Test(door, a_job_naming_a_host_file_is_refused_unless_its_prefix_is_allowed) {
  std::string none = refusal(kShadowJob, DoorPolicy{});
  assert_mentions(none, {"/etc/shadow", "not allowed", "--allow-host-path"});
  assert_mentions(refusal(kShadowJob, allowing({"/tmp", "/usr"})), {"'/etc/shadow'", "not under an allowed host path"});
  auto allowed = through(kShadowJob, allowing({"/etc"}));
  cr_assert(allowed.ok(), "%s", allowed.ok() ? "" : allowed.error().message().c_str());
  cr_assert_eq(*allowed->inputs[0].host_path, "/etc/shadow");
  cr_assert(allowed->inputs[0].resolved, "the input is not marked for symlink-free staging");
}

Test(door, binds_rootfs_artifact_root_and_write_paths_are_host_paths_too) {
  for (const char* job : {R"({"argv":["true"],"tier":"container","binds":["/etc:/hostetc"]})",
                          R"({"argv":["true"],"tier":"container","ro_binds":["/etc"]})",
                          R"({"argv":["true"],"tier":"container","rootfs":"/etc"})",
                          R"({"argv":["true"],"artifact_root":"/etc"})",
                          R"({"argv":["true"],"write_paths":["/etc"]})",
                          R"({"argv":["true"],"cwd":"/etc"})"}) {
    assert_mentions(refusal(job, DoorPolicy{}), {"'/etc'", "not allowed"});
    auto ok = through(job, allowing({"/etc"}));
    cr_assert(ok.ok(), "%s: %s", job, ok.ok() ? "" : ok.error().message().c_str());
  }
  // In a container cwd is inside the sandbox: no host path.
  cr_assert(through(R"({"argv":["true"],"tier":"container","cwd":"/workspace"})", DoorPolicy{}).ok());
}

Test(door, dot_dot_and_symlinks_are_resolved_before_the_prefix_check) {
  TempDir dir;
  std::string allowed = dir / "allowed";
  cr_assert_eq(mkdir(allowed.c_str(), 0755), 0);
  corral_test::write_file(allowed + "/ok.txt", "fine");
  cr_assert_eq(symlink("/etc/shadow", (allowed + "/link").c_str()), 0);
  cr_assert_eq(symlink("/etc", (allowed + "/etcdir").c_str()), 0);
  auto job = [](const std::string& path) {
    return R"({"argv":["true"],"inputs":[{"name":"x","host_path":")" + path + R"("}]})";
  };
  DoorPolicy policy = allowing({allowed});
  assert_mentions(refusal(job(allowed + "/../../../etc/shadow"), policy), {"resolved '/etc/shadow'", "not under"});
  assert_mentions(refusal(job(allowed + "/link"), policy), {"resolved '/etc/shadow'"});
  assert_mentions(refusal(job(allowed + "/etcdir/passwd"), policy), {"resolved '/etc/passwd'"});
  // A prefix is a directory, not a string prefix: /x/allowed-not is not under /x/allowed.
  std::string sibling = dir / "allowed-not";
  cr_assert_eq(mkdir(sibling.c_str(), 0755), 0);
  corral_test::write_file(sibling + "/f", "x");
  assert_mentions(refusal(job(sibling + "/f"), policy), {"not under"});
  auto ok = through(job(allowed + "/./ok.txt"), policy);
  cr_assert(ok.ok(), "%s", ok.ok() ? "" : ok.error().message().c_str());
  cr_assert_eq(*ok->inputs[0].host_path, allowed + "/ok.txt", "the checked path is the one staged");
}

Test(door, the_operators_own_paths_are_taken_as_given) {
  DoorPolicy run;
  run.operator_paths = true;
  cr_assert(through(kShadowJob, run).ok());
}

Test(door, untrusted_below_container_and_below_the_floor_are_refused) {
  std::string want = untrusted_below_container(Tier::os_process);
  cr_assert_eq(refusal(R"({"argv":["true"],"provenance":"untrusted"})", DoorPolicy{}), want);
  cr_assert_eq(refusal(R"({"argv":["true"],"provenance":"untrusted","tier":"none"})", DoorPolicy{}),
               untrusted_below_container(Tier::none));
  cr_assert(through(R"({"argv":["true"],"provenance":"trusted"})", DoorPolicy{}).ok());
  assert_mentions(refusal(R"({"argv":["true"],"provenance":"maybe"})", DoorPolicy{}), {"provenance"});
  DoorPolicy floor;
  floor.min_tier = Tier::os_process;
  assert_mentions(refusal(R"({"argv":["true"],"tier":"none"})", floor), {"tier none is below the floor os_process"});
  cr_assert(through(R"({"argv":["true"],"tier":"process"})", floor).ok());
}

Test(door, a_job_naming_a_route_runs_under_it_and_is_refused_where_it_refuses) {
  auto router = load_router("examples/routes.toml", probe_host());
  cr_assert(router.ok(), "%s", router.ok() ? "" : router.error().message().c_str());
  DoorPolicy policy;
  policy.routes = *router;
  auto graded = through(R"({"argv":["true"],"route":"fetch"})", policy);
  cr_assert(graded.ok(), "%s", graded.ok() ? "" : graded.error().message().c_str());
  cr_assert_eq(graded->tier, Tier::os_process);
  cr_assert_eq(*graded->limits.get(Limit::cpu_seconds), 5u);
  cr_assert_eq(graded->route, "fetch");
  cr_assert_eq(graded->provenance, "trusted");
  assert_mentions(refusal(R"({"argv":["true"],"route":"fetch","limits":{"cpu_seconds":6}})", policy),
                  {"looser than the route's cpu_seconds=5"});
  assert_mentions(refusal(R"({"argv":["true"],"route":"fetch","tier":"none"})", policy),
                  {"it cannot be run in tier none"});
  assert_mentions(refusal(R"({"argv":["true"],"route":"nope"})", policy), {"no route 'nope'"});
  assert_mentions(refusal(R"({"argv":["true"],"route":"fetch"})", DoorPolicy{}), {"no routes file"});
  // An untrusted job on a trusted os_process route stays untrusted.
  cr_assert_eq(refusal(R"({"argv":["true"],"route":"fetch","provenance":"untrusted"})", policy),
               untrusted_below_container(Tier::os_process));
}

Test(door, a_routes_allow_host_paths_add_to_the_operators) {
  TempDir dir;
  corral_test::write_file(dir / "in.txt", "x");
  std::string toml = "[[route]]\nname = \"r\"\nprovenance = \"trusted\"\ntier = \"none\"\n"
                     "acknowledge_network_egress = true\nallow_host_paths = [\"" + dir.path() + "\"]\n";
  auto file = parse_routes(toml, "inline.toml");
  cr_assert(file.ok(), "%s", file.ok() ? "" : file.error().message().c_str());
  auto built = build_routes(*file, probe_host(false));
  cr_assert(built.ok(), "%s", built.ok() ? "" : built.error().message().c_str());
  DoorPolicy policy;
  policy.routes = std::make_shared<Router>(std::move(*built));
  std::string job = R"({"argv":["true"],"inputs":[{"name":"x","host_path":")" + (dir / "in.txt") + R"("}])";
  cr_assert(!through(job + "}", policy).ok(), "a host path without the route");
  auto ok = through(job + R"(,"route":"r"})", policy);
  cr_assert(ok.ok(), "%s", ok.ok() ? "" : ok.error().message().c_str());
  auto bad = parse_routes("[[route]]\nname = \"r\"\nprovenance = \"trusted\"\ntier = \"none\"\n"
                          "acknowledge_network_egress = true\nallow_host_paths = [\"relative\"]\n",
                          "bad.toml");
  cr_assert(bad.ok());
  auto refused = build_routes(*bad, probe_host(false));
  cr_assert(!refused.ok());
  assert_mentions(refused.error().message(), {"bad.toml:1:", "allow_host_paths entry 'relative'"});
}

// A batch job line's session key joins the live session of that key,
// whoever opened it: the gate lets a job name only a scope the operator
// listed, and a request that names none is not asked.
Test(door, a_session_scope_is_refused_unless_the_operator_allowed_it) {
  auto job = job_from_json(R"({"argv":["true"],"tier":"container"})");
  cr_assert(job.ok());
  Ask ask = job->ask;
  ask.session_scope = "agents";
  DoorPolicy policy;
  auto none = admit(job->request, ask, policy);
  cr_assert(!none.ok(), "a session scope passed a gate that allows none");
  assert_mentions(none.error().message(), {"'agents'", "--allow-session-scope"});
  policy.allow_session_scopes = {"other"};
  cr_assert(!admit(job->request, ask, policy).ok(), "a scope passed that was not the one allowed");
  policy.allow_session_scopes = {"other", "agents"};
  auto allowed = admit(job->request, ask, policy);
  cr_assert(allowed.ok(), "%s", allowed.ok() ? "" : allowed.error().message().c_str());
  cr_assert(admit(job->request, job->ask, DoorPolicy{}).ok(), "a request without a session was refused");
}

// Outside tier container "user" is the program's uid on the host: a job line
// naming a real user's uid would get that user's files. The operator lists
// the uids a line may name; inside a container it is a uid of the run's own.
Test(door, a_job_running_as_a_host_uid_is_refused_unless_the_operator_allowed_it) {
  const char* process = R"({"argv":["true"],"tier":"process","user":1000})";
  assert_mentions(refusal(process, DoorPolicy{}), {"user 1000", "--allow-user 1000"});
  assert_mentions(refusal(R"({"argv":["true"],"tier":"none","user":1000})", DoorPolicy{}), {"--allow-user"});
  DoorPolicy policy;
  policy.allow_users = {2000};
  refusal(process, policy);
  policy.allow_users = {2000, 1000};
  auto allowed = through(process, policy);
  cr_assert(allowed.ok(), "%s", allowed.ok() ? "" : allowed.error().message().c_str());
  auto inside = through(R"({"argv":["true"],"tier":"container","user":1000})", DoorPolicy{});
  cr_assert(inside.ok(), "%s", inside.ok() ? "" : inside.error().message().c_str());
  DoorPolicy own;
  own.operator_paths = true;
  cr_assert(through(process, own).ok(), "the operator's own --user was refused");
}
