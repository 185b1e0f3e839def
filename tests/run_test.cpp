// Integration tests of a run: real children through the supervisor, with
// hostile helpers from tests/helpers/hostile.c.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>

#include "corral/capture.hpp"
#include "corral/host_probe.hpp"
#include "corral/supervisor.hpp"
#include "observe_support.hpp"
#include "support.hpp"
#include "supervisor_harness.hpp"

using namespace corral;
using corral_test::contains;
using corral_test::Harness;
using corral_test::req;
using corral_test::helper;
using corral_test::TempDir;
using corral_test::open_fd_count;

namespace {

// Children other than the supervisor's guardian (guardian.hpp: a live child
// for as long as the supervisor is, by design).
std::size_t zombie_children() {
  std::size_t n = 0;
  std::string list = corral_test::children_of_self();
  for (std::size_t pos = 0; pos < list.size();) {
    std::size_t end = list.find(' ', pos);
    if (end == std::string::npos) end = list.size();
    std::string pid = list.substr(pos, end - pos);
    pos = end + 1;
    if (pid.empty()) continue;
    n += corral_test::read_file("/proc/" + pid + "/comm") != "corral-guard\n";
  }
  return n;
}

bool pid_gone(pid_t pid) {
  for (int i = 0; i < 100; ++i) {
    std::string stat = corral_test::read_file("/proc/" + std::to_string(pid) + "/stat");
    auto close = stat.rfind(')');
    if (stat.empty() || (close != std::string::npos && stat[close + 2] == 'Z')) return true;
    usleep(20000);
  }
  return false;
}

}  // namespace

Test(run, environment_is_only_what_was_named) {
  setenv("CORRAL_TEST_LEAK", "leaked", 1);
  Harness h;
  Request r = req(Tier::none, {"env"});
  r.env["GREETING"] = "hello";
  Result res = h.run(std::move(r));
  cr_assert_eq(res.outcome, Outcome::exited);
  const std::string& out = res.stdout_capture.text;
  cr_assert(contains(out, "GREETING=hello\n"), "%s", out.c_str());
  cr_assert(contains(out, "PATH="), "%s", out.c_str());
  cr_assert(contains(out, "HOME=" + h.base.path()), "%s", out.c_str());
  cr_assert(contains(out, "TMPDIR=" + h.base.path()), "%s", out.c_str());
  cr_assert(!contains(out, "CORRAL_TEST_LEAK"), "corral's environment leaked: %s", out.c_str());
}

Test(run, secret_split_across_chunks_is_masked_everywhere) {
  const std::string secret = "hunter2-very-secret-token";
  setenv("CORRAL_TEST_TOKEN", secret.c_str(), 1);
  Harness h;
  Request r = req(Tier::none, {helper("hostile"), "secret-halves", "CORRAL_TEST_TOKEN"});
  r.secrets.push_back(SecretRef{"CORRAL_TEST_TOKEN", "", {}});
  auto st = h.sup->stream(std::move(r));
  cr_assert(st.ok());
  std::string streamed;
  std::shared_ptr<Result> res;
  int chunks = 0;
  while (true) {
    auto ev = st->next();
    cr_assert(ev.ok());
    if (!ev->has_value()) break;
    if ((*ev)->kind == RunEvent::output) {
      streamed += (*ev)->data;
      ++chunks;
    } else {
      res = (*ev)->final;
    }
  }
  cr_assert(res);
  cr_assert_geq(chunks, 2, "the helper writes in two pieces; got %d chunk(s)", chunks);
  cr_assert(!contains(streamed, secret.substr(0, 6)) || !contains(streamed, secret), "streamed: %s", streamed.c_str());
  cr_assert(!contains(streamed, secret), "secret streamed: %s", streamed.c_str());
  cr_assert_str_eq(res->stdout_capture.text.c_str(), "before:***:after\n");
  cr_assert_str_eq(res->stderr_capture.text.c_str(), "err:***:end\n");
  std::string want = Sha256::hex_of("before:***:after\n");
  cr_assert_str_eq(res->stdout_capture.sha256.c_str(), want.c_str());
}

Test(run, deadline_kills_the_whole_group) {
  Harness h;
  TempDir scratch;
  std::string pidfile = scratch / "bg.pid";
  Request r = req(Tier::none, {helper("hostile"), "fork-sleep", pidfile});
  r.limits.set(Limit::wall_seconds, 1);
  r.grace_seconds = 0.2;
  Result res = h.run(std::move(r));
  cr_assert_eq(res.outcome, Outcome::killed_timeout, "outcome %s", std::string(to_string(res.outcome)).c_str());
  cr_assert_eq(cli_exit_code(res), 124);
  pid_t bg = std::atoi(corral_test::read_file(pidfile).c_str());
  cr_assert_gt(bg, 0);
  cr_assert(pid_gone(bg), "background child %d survived the deadline", bg);
  cr_assert_eq(h.leftovers(), 0u);
}

Test(run, ignoring_sigterm_gets_sigkill_after_grace) {
  Harness h;
  Request r = req(Tier::none, {helper("hostile"), "ignore-term"});
  r.limits.set(Limit::wall_seconds, 1);
  r.grace_seconds = 0.3;
  Result res = h.run(std::move(r));
  cr_assert_eq(res.outcome, Outcome::killed_timeout);
  cr_assert_eq(res.signal, SIGKILL);
  cr_assert_lt(res.wall_seconds, 3.0);
}

Test(run, collection_skips_symlinks_and_hard_links) {
  Harness h;
  TempDir host;
  corral_test::write_file(host / "host-file", "host secret contents\n");
  Request r = req(Tier::none, {helper("hostile"), "plant-links", host / "host-file"});
  r.outputs = {"out/*"};
  Result res = h.run(std::move(r));
  cr_assert_eq(res.outcome, Outcome::exited, "%s", res.detail.c_str());
  cr_assert_eq(res.artifacts.size(), 1u, "artifacts: %zu", res.artifacts.size());
  cr_assert_str_eq(res.artifacts[0].name.c_str(), "out/ok.txt");
  std::string notes;
  for (auto& n : res.artifact_notes) notes += n + "\n";
  cr_assert(contains(notes, "out/passwd"), "%s", notes.c_str());
  cr_assert(contains(notes, "out/hard"), "%s", notes.c_str());
  cr_assert_eq(h.leftovers(), 0u);
}

Test(run, output_flood_is_capped_counted_and_hashed) {
  Harness h;
  Request r = req(Tier::none, {helper("hostile"), "flood", "1000000"});
  r.limits.set(Limit::stdout_bytes, 1000);
  Result res = h.run(std::move(r));
  cr_assert_eq(res.outcome, Outcome::exited);
  cr_assert_eq(res.stdout_capture.text.size(), 1000u);
  cr_assert(res.stdout_capture.truncated);
  cr_assert_eq(res.stdout_capture.bytes, 1000000u);
  std::string want = Sha256::hex_of(std::string(1000000, 'x'));
  cr_assert_str_eq(res.stdout_capture.sha256.c_str(), want.c_str());
}

// The opt-in policy, through the library: an endless flood past
// stdout_bytes is killed by the supervisor (before, only `truncated` was
// set and the run went on to its deadline).
Test(run, output_limit_kill_ends_an_endless_flood_as_killed_resource) {
  Harness h;
  Request r = req(Tier::none, {"yes"});
  r.limits.set(Limit::stdout_bytes, 1000);
  r.limits.set(Limit::wall_seconds, 60);
  r.on_output_limit = OutputLimitPolicy::kill;
  Result res = h.run(std::move(r));
  cr_assert_eq(res.outcome, Outcome::killed_resource, "%s", res.detail.c_str());
  cr_assert_str_eq(res.resource.c_str(), "stdout_bytes");
  cr_assert_eq(res.signal, SIGKILL);
  cr_assert_eq(cli_exit_code(res), 137);
  cr_assert(res.stdout_capture.truncated);
  cr_assert_eq(res.stdout_capture.text.size(), 1000u);
  cr_assert_lt(res.wall_seconds, 10.0);
  cr_assert(contains(res.detail, "stdout_bytes"), "%s", res.detail.c_str());
}

Test(run, cpu_limit_is_a_resource_kill) {
  Harness h;
  Request r = req(Tier::none, {helper("hostile"), "spin"});
  r.limits.set(Limit::cpu_seconds, 1);
  Result res = h.run(std::move(r));
  cr_assert_eq(res.outcome, Outcome::killed_resource, "%s", res.detail.c_str());
  cr_assert_str_eq(res.resource.c_str(), "cpu_seconds");
  cr_assert_eq(cli_exit_code(res), 152);
  cr_assert(contains(res.detail, "cpu_seconds=1"), "detail must name the limits: %s", res.detail.c_str());
}

// Under contention the kernel's RLIMIT_CPU (CPU time sampled at ticks)
// runs ahead of the exact runtime the rusage holds: pinned to one CPU
// beside two spinners, most runs got SIGXCPU with 0.81-0.95 s of a 1 s
// limit in their rusage, which the old rule (within 0.05 s) read as a plain
// signal. Every round must still be the limit.
Test(run, a_cpu_limit_met_under_contention_is_still_a_resource_kill) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  cr_assert_eq(sched_getaffinity(0, sizeof allowed, &allowed), 0);
  int cpu = 0;
  while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &allowed)) ++cpu;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  std::vector<pid_t> spinners;
  for (int i = 0; i < 2; ++i) {
    pid_t p = fork();
    if (p == 0) {
      sched_setaffinity(0, sizeof one, &one);
      for (;;) {
      }
    }
    cr_assert_gt(p, 0);
    spinners.push_back(p);
  }
  // Before the Harness: its threads, and so the run, inherit the CPU.
  cr_assert_eq(sched_setaffinity(0, sizeof one, &one), 0);
  std::vector<std::string> ends;
  {
    Harness h;
    for (int round = 0; round < 3; ++round) {
      Request r = req(Tier::none, {helper("hostile"), "spin"});
      r.limits.set(Limit::cpu_seconds, 1);
      Result res = h.run(std::move(r));
      if (res.outcome != Outcome::killed_resource || res.resource != "cpu_seconds")
        ends.push_back(res.detail + " (cpu_seconds " + std::to_string(res.cpu_seconds) + ")");
    }
  }
  sched_setaffinity(0, sizeof allowed, &allowed);
  for (pid_t p : spinners) {
    kill(p, SIGKILL);
    waitpid(p, nullptr, 0);
  }
  cr_assert(ends.empty(), "%zu of 3 limit kills read otherwise, first: %s", ends.size(),
            ends.empty() ? "" : ends.front().c_str());
}

Test(run, file_size_limit_is_a_resource_kill) {
  Harness h;
  Request r = req(Tier::none, {helper("hostile"), "write-file", "big", "50000"});
  r.limits.set(Limit::file_bytes, 1000);
  Result res = h.run(std::move(r));
  cr_assert_eq(res.outcome, Outcome::killed_resource, "%s", res.detail.c_str());
  cr_assert_str_eq(res.resource.c_str(), "file_bytes");
  cr_assert_eq(cli_exit_code(res), 153);
}

Test(run, open_files_limit_binds) {
  Harness h;
  Request r = req(Tier::none, {helper("hostile"), "open-many"});
  r.limits.set(Limit::open_files, 20);
  Result res = h.run(std::move(r));
  cr_assert_eq(res.outcome, Outcome::exited);
  // 20 minus stdin/out/err and whatever the runtime holds (a sanitizer build holds more).
  int opened = -1;
  std::sscanf(res.stdout_capture.text.c_str(), "opened %d", &opened);
  cr_assert(opened >= 10 && opened <= 17, "open_files=20 let it open %d: %s", opened, res.stdout_capture.text.c_str());
}

Test(run, workspace_removed_even_with_000_dirs) {
  Harness h;
  Result res = h.run(req(Tier::os_process, {helper("hostile"), "leave-000"}));
  cr_assert_eq(res.outcome, Outcome::exited, "%s", res.detail.c_str());
  cr_assert_eq(h.leftovers(), 0u, "workspace left behind");
}

Test(run, spawn_failure_names_the_stage) {
  Harness h;
  Result res = h.run(req(Tier::none, {"/nonexistent/program"}));
  cr_assert_eq(res.outcome, Outcome::spawn_failed);
  cr_assert_str_eq(res.spawn_stage.c_str(), "execve");
  cr_assert_eq(res.spawn_errno, ENOENT);
  cr_assert_eq(cli_exit_code(res), 125);
  cr_assert(contains(res.detail, "execve '/nonexistent/program': ENOENT"), "%s", res.detail.c_str());
  Result missing = h.run(req(Tier::none, {"corral-no-such-program"}));
  cr_assert_eq(missing.outcome, Outcome::spawn_failed);
  cr_assert(contains(missing.detail, "execve 'corral-no-such-program': ENOENT"), "%s", missing.detail.c_str());
  Request bad_cwd = req(Tier::none, {"true"});
  bad_cwd.cwd = "/nonexistent-dir";
  Result chdir_failed = h.run(std::move(bad_cwd));
  cr_assert_str_eq(chdir_failed.spawn_stage.c_str(), "chdir");
  cr_assert_eq(h.leftovers(), 0u);
}

// The process tiers' child searches PATH itself (no stat per entry in the
// supervisor): a PATH directory the run's uid cannot search comes before
// the one holding the program, and the program still runs; a name found
// nowhere is ENOENT, not the EACCES that directory gave the child.
Test(run, path_search_skips_unsearchable_dirs_and_missing_is_enoent) {
  if (geteuid() != 0) cr_skip_test("needs root: the run's own uid meets a 0700 directory of root's");
  Harness h;
  char dir[] = "/tmp/corral-path-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  cr_assert_eq(chmod(dir, 0700), 0);  // root's only: the run's uid gets EACCES in it
  const std::string path = std::string(dir) + ":/usr/bin:/bin";
  Request found = req(Tier::os_process, {"true"});
  found.env["PATH"] = path;
  Result ok = h.run(std::move(found));
  cr_assert_eq(ok.outcome, Outcome::exited, "%s", ok.detail.c_str());
  cr_assert_eq(ok.exit_code, 0);
  Request gone = req(Tier::os_process, {"corral-no-such-program"});
  gone.env["PATH"] = path;
  Result missing = h.run(std::move(gone));
  rmdir(dir);
  cr_assert_eq(missing.outcome, Outcome::spawn_failed, "%s", missing.detail.c_str());
  cr_assert_eq(missing.spawn_errno, ENOENT, "%s", missing.detail.c_str());
  cr_assert(contains(missing.detail, "execve 'corral-no-such-program': ENOENT"), "%s", missing.detail.c_str());
}

Test(run, a_program_exiting_127_is_not_a_spawn_failure) {
  Harness h;
  Result res = h.run(req(Tier::none, {helper("hostile"), "exit", "127"}));
  cr_assert_eq(res.outcome, Outcome::exited);
  cr_assert_eq(res.exit_code, 127);
}

Test(run, stdin_is_dev_null_or_the_given_text) {
  Harness h;
  Result empty = h.run(req(Tier::none, {"cat"}));
  cr_assert_eq(empty.stdout_capture.bytes, 0u);
  Request r = req(Tier::none, {"cat"});
  r.stdin_text = "hello stdin\n";
  Result res = h.run(std::move(r));
  cr_assert_str_eq(res.stdout_capture.text.c_str(), "hello stdin\n");
}

Test(run, merge_output_folds_stderr_at_the_fd_level) {
  Harness h;
  Request r = req(Tier::none, {"sh", "-c", "echo out; echo err >&2"});
  r.merge_output = true;
  Result res = h.run(std::move(r));
  cr_assert_str_eq(res.stdout_capture.text.c_str(), "out\nerr\n");
  cr_assert_eq(res.stderr_capture.bytes, 0u);
}

Test(run, payload_source_runs_under_its_interpreter) {
  Harness h;
  Request r;
  r.tier = Tier::none;
  r.payload = ProgramPayload{"import sys\nprint(6 * 7, sys.argv[1:])\n", {"python3"}, "main.py"};
  r.argv = {"arg"};
  Result res = h.run(std::move(r));
  cr_assert_str_eq(res.stdout_capture.text.c_str(), "42 ['arg']\n", "%s", res.stderr_capture.text.c_str());
}

Test(run, confine_writes_allows_only_the_workspace) {
  Harness h;
  TempDir outside;
  chmod(outside.path().c_str(), 0777);
  std::string target = outside / "escaped";
  Request r = req(Tier::os_process, {"sh", "-c", "echo in > inside && echo ok; echo out > " + target});
  r.confine_writes = true;
  Result res = h.run(std::move(r));
  cr_assert_eq(res.outcome, Outcome::exited, "%s", res.detail.c_str());
  cr_assert(contains(res.stdout_capture.text, "ok"), "write inside failed: %s", res.stderr_capture.text.c_str());
  cr_assert_neq(res.exit_code, 0);
  cr_assert(access(target.c_str(), F_OK) != 0, "a confined run wrote outside its workspace");
}

namespace {

// Connections waiting on the host listener `srv`, each accepted and closed:
// what reached the host, seen from the host, whatever the run printed.
int accept_waiting(int srv) {
  int n = 0;
  for (int c; (c = accept4(srv, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0; ++n) close(c);
  return n;
}

// `script` (python3, printing "connected") run with the host's network,
// which must connect, then with net none: the second run's Result. The
// host listener `srv` (non-blocking) must have seen the first connection
// and no other.
Result connects_only_with_the_network(Harness& h, const std::string& script, int srv) {
  fcntl(srv, F_SETFL, fcntl(srv, F_GETFL) | O_NONBLOCK);
  Result ok = h.run(req(Tier::os_process, {"python3", "-c", script}));
  cr_assert(contains(ok.stdout_capture.text, "connected"), "control run could not connect: %s",
            ok.stderr_capture.text.c_str());
  cr_assert_eq(accept_waiting(srv), 1, "the host listener did not see the control run's connection");
  Request closed = req(Tier::os_process, {"python3", "-c", script});
  closed.net = NetworkAccess::none;
  Result res = h.run(std::move(closed));
  cr_assert_eq(accept_waiting(srv), 0, "a --net none run's connection reached the host listener");
  return res;
}

}  // namespace

Test(run, net_none_refuses_tcp_to_a_loopback_listener) {
  Harness h;
  int srv = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  cr_assert_eq(bind(srv, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t len = sizeof a;
  getsockname(srv, reinterpret_cast<sockaddr*>(&a), &len);
  listen(srv, 4);
  std::string script = "import socket; socket.create_connection(('127.0.0.1', " + std::to_string(ntohs(a.sin_port)) +
                       ")); print('connected')";
  Result res = connects_only_with_the_network(h, script, srv);
  close(srv);
  cr_assert_neq(res.exit_code, 0);
  cr_assert(!contains(res.stdout_capture.text, "connected"));
  cr_assert(contains(res.stderr_capture.text, "PermissionError") || contains(res.stderr_capture.text, "Errno 13"),
            "%s", res.stderr_capture.text.c_str());
}

// An abstract unix socket has no file and no owner check: a --net none run
// connected to a host listener (or a --net host neighbour's) could be handed
// a connected TCP socket over SCM_RIGHTS. On the old code it connected.
Test(run, net_none_cannot_reach_an_abstract_unix_socket_outside_the_run) {
  const int abi = probe_host().landlock_abi;
  if (abi < 6) cr_skip_test("Landlock ABI %d: abstract unix scoping needs 6", abi);
  Harness h;
  const std::string name = "corral-test-abstract-" + std::to_string(getpid());
  int srv = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path + 1, name.data(), name.size());
  const socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  cr_assert_eq(bind(srv, reinterpret_cast<sockaddr*>(&a), len), 0, "bind @%s: %s", name.c_str(), strerror(errno));
  listen(srv, 4);
  std::string script = "import socket; s = socket.socket(socket.AF_UNIX); s.connect('\\0" + name +
                       "'); print('connected')";
  Result res = connects_only_with_the_network(h, script, srv);
  close(srv);
  cr_assert(!contains(res.stdout_capture.text, "connected"), "a --net none run reached @%s", name.c_str());
  cr_assert(contains(res.stderr_capture.text, "PermissionError") || contains(res.stderr_capture.text, "Errno 1"),
            "%s", res.stderr_capture.text.c_str());
  // Within the run, abstract sockets still work (the scope is the run's domain).
  Request inner = req(Tier::os_process, {"python3", "-c",
                                         "import socket; a = socket.socket(socket.AF_UNIX); a.bind('\\0in-run'); "
                                         "a.listen(); b = socket.socket(socket.AF_UNIX); b.connect('\\0in-run'); "
                                         "print('inside')"});
  inner.net = NetworkAccess::none;
  Result in = h.run(std::move(inner));
  cr_assert(contains(in.stdout_capture.text, "inside"), "%s", in.stderr_capture.text.c_str());
}

Test(run, unenforceable_asks_are_refused_unless_acknowledged) {
  Harness h;
  Request r = req(Tier::none, {"true"});
  r.confine_writes = true;
  auto refused = h.sup->run(r);
  cr_assert(!refused.ok());
  cr_assert(contains(refused.error().message(), "write_confinement"), "%s", refused.error().message().c_str());
  r.acknowledged.insert("write_confinement");
  auto ran = h.sup->run(std::move(r));
  cr_assert(ran.ok());
  cr_assert_eq(h.leftovers(), 0u);
}

// The supervisor remembers which checks passed (CheckMemo), by what the
// request asks: a run that asks nothing passing first must not let a later
// ask the host cannot enforce through, in either order, and the warnings a
// remembered check replays are the ones a fresh check gives.
Test(run, a_remembered_check_still_refuses_each_unenforceable_ask) {
  Harness h;
  for (int round = 0; round < 2; ++round) {
    auto plain = h.sup->run(req(Tier::none, {"true"}));
    cr_assert(plain.ok(), "%s", plain.ok() ? "" : plain.error().message().c_str());
    Request sized = req(Tier::none, {"true"});
    sized.limits.set(Limit::workspace_bytes, 1 << 20);  // a directory workspace in tier none: unsupported
    auto refused = h.sup->run(sized);
    cr_assert(!refused.ok(), "round %d: workspace_bytes ran unacknowledged", round);
    cr_assert_eq(refused.error().code(), ENOTSUP);
    cr_assert(contains(refused.error().message(), "workspace_bytes"), "%s", refused.error().message().c_str());
    Request confined = req(Tier::none, {"true"});
    confined.confine_writes = true;
    cr_assert(!h.sup->run(confined).ok(), "round %d: write_confinement ran unacknowledged", round);
    sized.acknowledged.insert("workspace_bytes");
    auto acked = h.sup->run(sized);
    cr_assert(acked.ok(), "%s", acked.ok() ? "" : acked.error().message().c_str());
    cr_assert(contains(acked->detail, "workspace_bytes=1048576 (acknowledged) is not enforced"), "%s",
              acked->detail.c_str());
  }
  // The same request twice: the second (remembered) says what the first did.
  Request a = req(Tier::none, {"true"});
  auto first = h.sup->run(a);
  auto second = h.sup->run(a);
  cr_assert(first.ok() && second.ok());
  cr_assert(first->warnings == second->warnings, "warnings differ between a fresh and a remembered check");
  cr_assert(first->enforcement == second->enforcement);
  cr_assert_eq(h.leftovers(), 0u);
}

Test(run, bad_requests_are_errors_that_name_the_problem) {
  Harness h;
  auto empty = h.sup->run(Request{});
  cr_assert(!empty.ok());
  cr_assert(contains(empty.error().message(), "argv"));
  Request secret = req(Tier::none, {"true"});
  secret.secrets.push_back(SecretRef{"CORRAL_TEST_UNSET_SECRET", "", {}});
  unsetenv("CORRAL_TEST_UNSET_SECRET");
  auto st = h.sup->run(std::move(secret));
  cr_assert(!st.ok());
  cr_assert(contains(st.error().message(), "CORRAL_TEST_UNSET_SECRET"), "%s", st.error().message().c_str());
  Request input = req(Tier::none, {"true"});
  input.inputs.push_back(Input{"../escape", std::string("x"), std::nullopt, 0644});
  auto in = h.sup->run(std::move(input));
  cr_assert(!in.ok());
  cr_assert(contains(in.error().message(), "../escape"), "%s", in.error().message().c_str());
  cr_assert_eq(h.leftovers(), 0u);
}

// A refused request's Error names the request (its id) and what was wrong
// with it, and with them the value of a secret the request carries. Its
// Result masks it; a refusal before the secrets were resolved (an empty
// argv, a bad field, a secret that is not set) did not, and a caller that
// logs the Error printed the secret.
Test(run, a_refused_requests_error_masks_its_secrets) {
  Harness h;
  const std::string value = "tok-" + std::to_string(getpid()) + "-x";
  setenv("CORRAL_TEST_REFUSED_TOKEN", value.c_str(), 1);
  unsetenv("CORRAL_TEST_REFUSED_UNSET");
  auto carrying = [&](std::vector<std::string> argv) {
    Request r = req(Tier::none, std::move(argv));
    r.id = "job-" + value;
    r.secrets.push_back(SecretRef{"CORRAL_TEST_REFUSED_TOKEN", "", {}});
    return r;
  };
  Request empty = carrying({});
  Request unset = carrying({"true"});
  unset.secrets.push_back(SecretRef{"CORRAL_TEST_REFUSED_UNSET", "", {}});
  Request bad_user = carrying({"true"});
  bad_user.user = 0;
  Request input = carrying({"true"});
  input.inputs.push_back(Input{"../" + value, std::string("x"), std::nullopt, 0644});
  const char* names[] = {"an empty argv", "an unset secret", "user 0", "an input out of the workspace"};
  int i = 0;
  for (Request* r : {&empty, &unset, &bad_user, &input}) {
    auto refused = h.sup->run(std::move(*r));
    cr_assert(!refused.ok(), "%s ran", names[i]);
    const std::string& why = refused.error().message();
    cr_expect(!contains(why, value), "%s: the secret is in the Error: %s", names[i], why.c_str());
    cr_expect(contains(why, "job-***"), "%s: the run is no longer named: %s", names[i], why.c_str());
    ++i;
  }
  // A streamed one goes through the same door.
  auto streamed = h.sup->stream(carrying({}));
  cr_assert(!streamed.ok());
  cr_expect(!contains(streamed.error().message(), value), "%s", streamed.error().message().c_str());
  unsetenv("CORRAL_TEST_REFUSED_TOKEN");
  cr_assert_eq(h.leftovers(), 0u);
}

Test(run, inputs_are_staged_and_outputs_copied_to_the_artifact_root) {
  Harness h;
  TempDir host, root;
  corral_test::write_file(host / "data.txt", "3 4\n");
  Request r = req(Tier::none, {"sh", "-c", "read a b < data.txt; echo $((a*b)) > answer.txt; cat note"});
  r.inputs.push_back(Input{"data.txt", std::nullopt, host / "data.txt", 0644});
  r.inputs.push_back(Input{"note", std::string("from bytes\n"), std::nullopt, 0644});
  r.outputs = {"answer.txt"};
  r.artifact_root = root.path();
  Result res = h.run(std::move(r));
  cr_assert_str_eq(res.stdout_capture.text.c_str(), "from bytes\n");
  cr_assert_eq(res.artifacts.size(), 1u);
  std::string copied = corral_test::read_file(res.artifacts[0].path);
  cr_assert_str_eq(copied.c_str(), "12\n");
}

Test(run, cancel_takes_effect_within_a_loop_turn) {
  Harness h;
  Result got;
  bool done = false;
  RunCallbacks cb;
  cb.on_result = [&](const Result& r) { got = r; done = true; };
  auto handle = h.sup->submit(req(Tier::none, {"sleep", "30"}), cb);
  cr_assert(handle.ok());
  auto more = h.sup->run_once(0.05);
  cr_assert(more.ok());
  handle->cancel();
  auto t0 = std::chrono::steady_clock::now();
  cr_assert(h.sup->run_until_idle().ok());
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  cr_assert(done);
  cr_assert_eq(got.outcome, Outcome::cancelled);
  cr_assert_lt(took, 1.0, "cancel took %.2fs", took);
  cr_assert_eq(h.leftovers(), 0u);
}

Test(run, a_thousand_runs_leak_nothing) {
  Harness h;
  // Warm up first: libraries open what they need once (OpenSSL, libseccomp).
  for (int i = 0; i < 10; ++i) (void)h.run(req(Tier::os_process, {"/bin/true"}));
  std::size_t fds_before = open_fd_count();
  for (int i = 0; i < 1000; ++i) {
    Result res = h.run(req(Tier::none, {"/bin/true"}));
    if (res.outcome != Outcome::exited) cr_assert_fail("run %d: %s", i, res.detail.c_str());
  }
  // A leak would show as +1000; the count may drop when warm-up fds close.
  cr_assert_leq(open_fd_count(), fds_before, "fds leaked: %zu -> %zu", fds_before, open_fd_count());
  cr_assert_eq(h.leftovers(), 0u);
  cr_assert_eq(zombie_children(), 0u, "children left: %s",
               corral_test::children_of_self().c_str());
}

Test(run, many_runs_in_flight_at_once) {
  Harness h;
  int done = 0;
  std::vector<RunHandle> handles;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 50; ++i) {
    RunCallbacks cb;
    cb.on_result = [&](const Result& r) { done += r.outcome == Outcome::exited; };
    auto hnd = h.sup->submit(req(Tier::none, {"sleep", "0.5"}), cb);
    cr_assert(hnd.ok());
    handles.push_back(std::move(*hnd));
  }
  cr_assert(h.sup->run_until_idle().ok());
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  cr_assert_eq(done, 50);
  cr_assert_lt(took, 5.0, "50 half-second sleeps took %.2fs: not concurrent", took);
}

// Each phase is measured on its own: exec (the child's execve until the
// kernel released us) is not a copy of clone (our clone3 until the child's
// first instruction), and the phases fit inside the wall time.
Test(run, timings_are_measured_phase_by_phase) {
  Harness h;
  Result res = h.run(req(Tier::os_process, {"true"}));
  cr_assert_eq(res.outcome, Outcome::exited, "%s", res.detail.c_str());
  const SetupTimings& t = res.timings;
  cr_assert(t.exec.has_value(), "tier process measures its exec");
  cr_assert(t.clone > 0 && t.child_setup > 0 && *t.exec > 0 && t.plan > 0 && t.run > 0 && t.collect > 0,
            "plan %g clone %g setup %g exec %g run %g collect %g", t.plan, t.clone, t.child_setup, *t.exec, t.run,
            t.collect);
  cr_assert_neq(*t.exec, t.clone, "exec is a copy of clone (%g)", t.clone);
  double sum = t.plan + t.clone + t.child_setup + *t.exec + t.run + t.collect;
  cr_assert_leq(sum, res.wall_seconds, "phases %g > wall %g", sum, res.wall_seconds);
  cr_assert_eq(timing_fields(t).size(), 6u);
}

// Tier process: the socket families a run may create are an allow-list per
// network policy. Closed: AF_UNIX only. The host's network: AF_UNIX, IP and
// netlink. vsock, packet, AF_ALG and the rest: never (EACCES from the
// filter, whatever this kernel has built in).
Test(run, process_tier_sockets_are_an_allow_list_per_network_policy) {
  Harness h;
  Request closed = req(Tier::os_process, {helper("inside"), "families"});
  closed.net = NetworkAccess::none;
  Result c = h.run(std::move(closed));
  cr_expect_eq(corral_test::observation_mismatches(c.stdout_capture.text,
                                                   corral_test::socket_families_allowing(false, false)),
               "", "net none:\n%s", c.stdout_capture.text.c_str());
  Result open = h.run(req(Tier::os_process, {helper("inside"), "families"}));
  cr_expect_eq(corral_test::observation_mismatches(open.stdout_capture.text,
                                                   corral_test::socket_families_allowing(true, true)),
               "", "net host:\n%s", open.stdout_capture.text.c_str());
}

// The library refuses uid 0 as a run's identity (a caller that skipped the
// CLI's and the job parser's check): an error, nothing run.
Test(run, the_library_refuses_user_0_in_every_tier) {
  Harness h;
  for (Tier tier : {Tier::os_process, Tier::container, Tier::none}) {
    Request r = req(tier, {"sh", "-c", "head -1 /etc/shadow"});
    r.user = 0;
    auto res = h.sup->run(std::move(r));
    cr_assert(!res.ok(), "tier %s: user 0 ran (%s)", std::string(to_string(tier)).c_str(),
              res.ok() ? res->stdout_capture.text.c_str() : "");
    cr_expect(contains(res.error().message(), "never root"), "%s", res.error().message().c_str());
  }
}
