// Sessions (session.hpp): warm container sandboxes keyed by scope, exec and
// files against the live sandbox, disposal from host state. Every check is
// made from the host where it can be: /proc, the cgroup tree, the sessions
// directory, the keeper's and pid 1's liveness.
#include <criterion/criterion.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <sstream>
#include <thread>

#include "corral/session.hpp"
#include "../src/session_cgroup.hpp"
#include "host_view.hpp"
#include "session_support.hpp"

using namespace corral;
using namespace container_test;
using namespace session_test;

namespace {

std::string scope_for(const char* name) { return std::string("test-") + std::to_string(getpid()) + "-" + name; }


// Submits `r` into session `id` and turns the loop until a host process
// runs `marker` (the exec has started) or its Result came; the Result
// lands in `got`. Fails the test when the marker never ran. The handle is
// the caller's to keep: dropping it cancels the exec.
RunHandle submit_until_running(Supervisor& sup, const std::string& id, const Request& r,
                          std::vector<std::string> marker, std::shared_ptr<Result>& got) {
  auto h = sup.submit(session_exec_request(id, r),
                      RunCallbacks{nullptr, [&got](const Result& res) { got = std::make_shared<Result>(res); }});
  cr_assert(h, "submit: %s", h ? "" : h.error().message().c_str());
  bool running = false;
  for (int i = 0; i < 500 && !running && !got; ++i) {
    (void)sup.run_once(0.02);
    running = corral_test::host_pid_with_argv(marker) > 0;
  }
  cr_assert(running, "the exec never ran");
  return std::move(*h);
}

// The OOM tests' session: the helpers, and a memory ceiling of its own.
SessionSpec spec_with_ceiling(std::uint64_t memory_bytes) {
  auto spec = spec_with_helpers();
  spec.base.limits.set(Limit::memory_bytes, memory_bytes);
  return spec;
}

}  // namespace

TestSuite(session, .timeout = 120);

Test(session, state_persists_across_execs_and_the_same_key_is_the_same_session) {
  SKIP_UNLESS_SESSIONS();
  Scope sc{scope_for("persist")};
  auto spec = spec_with_helpers();
  auto s = open_session(sc.name, "t1", spec);
  auto again = open_session(sc.name, "t1", spec);
  cr_expect_eq(again.id, s.id);
  cr_expect_eq(again.pid1, s.pid1, "the same live pid 1, not a new sandbox");
  // A spec that differs in a ceiling is refused, not silently reused.
  auto other = spec;
  other.base.limits.set(Limit::memory_bytes, 128ull << 20);
  auto refused = acquire_session(SessionKey{sc.name, "t1", ""}, other);
  cr_expect(!refused, "a different spec under a live key must be refused");

  auto sup = supervisor();
  auto w = exec(*sup, s.id, {"/bin/sh", "-c", "echo warm > /workspace/state && id -u"});
  cr_expect_eq(w.outcome, Outcome::exited, "%s", w.detail.c_str());
  cr_expect_eq(w.exit_code, 0, "%s / %s", w.stderr_capture.text.c_str(), w.detail.c_str());
  cr_expect_eq(w.stdout_capture.text, "65534\n");
  auto r = exec(*sup, s.id, {"/bin/cat", "/workspace/state"});
  cr_expect_eq(r.stdout_capture.text, "warm\n", "got '%s' (%s)", r.stdout_capture.text.c_str(), r.detail.c_str());
  // The file is the sandbox uid's on the host, in the session's pid 1's mount namespace.
  struct stat st {};
  cr_assert_eq(stat(workdir_path(s, "state").c_str(), &st), 0);
  cr_expect_eq(st.st_uid, s.outside_uid);
  auto got = session_get(s.id, "state");
  cr_assert(got, "%s", got ? "" : got.error().message().c_str());
  cr_expect_eq(*got, "warm\n");
  // Exit-code fidelity and the working directory.
  cr_expect_eq(exec(*sup, s.id, {"/bin/sh", "-c", "exit 42"}).exit_code, 42);
  cr_expect_eq(exec(*sup, s.id, {"/bin/pwd"}).stdout_capture.text, "/workspace\n");
}

// An exec's processes are what the kernel's OOM killer takes first
// (oom_score_adj 1000, as every run's); pid 1, which keeps the session,
// never before them: -1000 where the host grants CAP_SYS_RESOURCE to lower
// it, else as the supervisor's own (0 here). Old code: the exec had 0.
Test(session, an_exec_is_the_first_oom_victim_and_pid_1_the_last) {
  SKIP_UNLESS_SESSIONS();
  Scope sc{scope_for("oomadj")};
  auto s = open_session(sc.name, "t1", spec_with_helpers());
  auto sup = supervisor();
  auto r = exec(*sup, s.id, {"/bin/sh", "-c", "cat /proc/self/oom_score_adj"});
  cr_expect_eq(r.outcome, Outcome::exited, "%s", r.detail.c_str());
  cr_expect_eq(r.stdout_capture.text, "1000\n", "the exec's oom_score_adj: %s", r.stdout_capture.text.c_str());
  const std::string pid1 = corral_test::read_file("/proc/" + std::to_string(s.pid1) + "/oom_score_adj");
  cr_expect(pid1 == "-1000\n" || pid1 == corral_test::read_file("/proc/self/oom_score_adj"),
            "pid 1's oom_score_adj: %s", pid1.c_str());
}

Test(session, two_keys_share_no_files_processes_or_network) {
  SKIP_UNLESS_SESSIONS();
  Scope sc{scope_for("keys")};
  auto spec = spec_with_helpers();
  auto a = open_session(sc.name, "a", spec);
  auto b = open_session(sc.name, "b", spec);
  cr_assert_neq(a.id, b.id);
  cr_expect_neq(a.outside_uid, b.outside_uid, "each session holds a uid of its own");
  for (const char* ns : {"pid", "net", "mnt", "ipc", "user"})
    cr_expect_neq(ns_of(a.pid1, ns), ns_of(b.pid1, ns), "%s namespace shared", ns);
  cr_expect_neq(ns_of(a.pid1, "net"), ns_of(getpid(), "net"));
  cr_assert(session_put(a.id, "secret-of-a", "a's\n"));
  auto sup = supervisor();
  // b sees neither a's file nor a's processes (a runs a marked sleeper meanwhile).
  Request bg;
  bg.argv = {"/bin/sleep", "7771"};
  bg.limits.set(Limit::wall_seconds, 30);
  std::shared_ptr<Result> bg_result;
  auto h = sup->submit(session_exec_request(a.id, bg), RunCallbacks{nullptr, [&](const Result& r) {
                                                                       bg_result = std::make_shared<Result>(r);
                                                                     }});
  cr_assert(h);
  cr_assert(gone_within([] { return host_processes_with("sleep 7771") == 1; }, 5));
  auto r = exec(*sup, b.id, {"/bin/sh", "-c", "ls /workspace; cat /proc/[0-9]*/cmdline | tr '\\0' ' '"});
  cr_expect(!contains(r.stdout_capture.text, "secret-of-a"), "b listed a's file: %s", r.stdout_capture.text.c_str());
  cr_expect(!contains(r.stdout_capture.text, "7771"), "b saw a's process: %s", r.stdout_capture.text.c_str());
  h->cancel();
  while (!bg_result) (void)sup->run_once(1);
  cr_expect_eq(bg_result->outcome, Outcome::cancelled);
}

// What persists between the execs of one session, and only there: files
// an exec leaves in /tmp, /dev/shm, $HOME (/workspace/home) and /workspace,
// and its SysV IPC objects, are found by the session's next exec (a warm
// sandbox), never by an exec of a session of another scope, which has
// tmpfs mounts and an IPC namespace of its own. Checked from the host too:
// the file is in a's /tmp, not in b's.
Test(session, files_and_ipc_persist_within_a_session_and_never_reach_another_scope) {
  SKIP_UNLESS_SESSIONS();
  Scope sa{scope_for("persist-a")}, sb{scope_for("persist-b")};
  auto spec = spec_with_helpers();
  auto a = open_session(sa.name, "t", spec);
  auto b = open_session(sb.name, "t", spec);
  auto sup = supervisor();
  const std::string plant =
      "for d in /tmp /dev/shm \"$HOME\" /workspace; do echo planted > \"$d/planted-by-a\" || exit 3; done; "
      "ipcmk -M 4096 >/dev/null || exit 4; echo ok";
  auto p = exec(*sup, a.id, {"/bin/sh", "-c", plant});
  cr_assert_eq(p.exit_code, 0, "%s / %s", p.stderr_capture.text.c_str(), p.detail.c_str());
  const std::string look =
      "for d in /tmp /dev/shm \"$HOME\" /workspace; do cat \"$d/planted-by-a\" 2>/dev/null || echo none; done; "
      "ipcs -m | grep -c '^0x'";
  auto same = exec(*sup, a.id, {"/bin/sh", "-c", look});
  cr_expect_eq(same.stdout_capture.text, "planted\nplanted\nplanted\nplanted\n1\n",
               "the session's next exec: '%s' (%s)", same.stdout_capture.text.c_str(), same.detail.c_str());
  auto other = exec(*sup, b.id, {"/bin/sh", "-c", look});
  cr_expect_eq(other.stdout_capture.text, "none\nnone\nnone\nnone\n0\n",
               "another scope's exec: '%s' (%s)", other.stdout_capture.text.c_str(), other.detail.c_str());
  const std::string in_a = "/proc/" + std::to_string(a.pid1) + "/root/tmp/planted-by-a";
  const std::string in_b = "/proc/" + std::to_string(b.pid1) + "/root/tmp/planted-by-a";
  cr_expect(exists(in_a), "the host does not see a's /tmp file in a");
  cr_expect(!exists(in_b), "the host sees a's /tmp file in b");
}

Test(session, a_timed_out_exec_takes_its_setsid_children_and_the_session_serves_on) {
  SKIP_UNLESS_SESSIONS();
  Scope sc{scope_for("timeout")};
  auto s = open_session(sc.name, "t", spec_with_helpers());
  auto sup = supervisor();
  Limits l;
  l.set(Limit::wall_seconds, 1);
  auto r = exec(*sup, s.id, {"/bin/sh", "-c", "setsid /bin/sleep 7772 & /bin/sleep 7773; wait"}, l);
  cr_expect_eq(r.outcome, Outcome::killed_timeout, "%s", r.detail.c_str());
  cr_expect(r.kill_confirmed.value_or(false), "the kill was not confirmed: %s", r.detail.c_str());
  // Confirmed means gone already, not gone eventually.
  cr_expect_eq(host_processes_with("sleep 7772") + host_processes_with("sleep 7773"), 0,
               "the exec's processes (a setsid one too) outlived a confirmed kill");
  cr_expect(process_alive(s.pid1), "the session's pid 1 died with the exec");
  cr_expect(process_alive(s.keeper));
  // Nothing of that exec is left in the cgroup tree either: no process in
  // any exec group, and no group beyond the clean ones kept for reuse.
  for (const auto& d : s.cgroup_dirs) {
    auto groups = exec_groups(d);
    cr_expect_leq(groups.size(), static_cast<std::size_t>(kExecPoolKeep), "%zu exec cgroups left under %s",
                  groups.size(), d.c_str());
    for (const auto& g : groups)
      cr_expect_str_empty(corral_test::read_file(d + "/execs/" + g + "/cgroup.procs").c_str(),
                          "processes left in the exec cgroup %s/execs/%s", d.c_str(), g.c_str());
  }
  auto next = exec(*sup, s.id, {"/bin/echo", "still here"});
  cr_expect_eq(next.outcome, Outcome::exited, "%s", next.detail.c_str());
  cr_expect_eq(next.stdout_capture.text, "still here\n");
  cr_expect(!next.kill_confirmed, "an exec corral did not kill says kill_confirmed");
}

// The deadline's SIGTERM reaches every process of the exec, not only its
// leader: a setsid child that handles SIGTERM gets to run its handler
// within the grace (the leader ignores SIGTERM, so only the grace's SIGKILL
// ends the exec). Seen from the host: the marker the child's handler wrote
// into the session's /workspace.
Test(session, the_deadlines_sigterm_reaches_every_process_of_the_exec) {
  SKIP_UNLESS_SESSIONS();
  Scope sc{scope_for("term")};
  auto s = open_session(sc.name, "t", spec_with_helpers());
  auto sup = supervisor();
  Request r;
  r.argv = {"/helpers/hostile", "term-marker", "/workspace"};
  r.limits.set(Limit::wall_seconds, 1);
  r.grace_seconds = 2;
  auto res = sup->run(session_exec_request(s.id, r));
  cr_assert(res, "exec: %s", res ? "" : res.error().message().c_str());
  cr_expect_eq(res->outcome, Outcome::killed_timeout, "%s", res->detail.c_str());
  cr_expect(res->kill_confirmed.value_or(false), "the kill was not confirmed: %s", res->detail.c_str());
  cr_assert(exists(workdir_path(s, "child-ready")), "the setsid child never started: %s", res->detail.c_str());
  cr_expect(exists(workdir_path(s, "child-termed")),
            "the exec's setsid child never got the deadline's SIGTERM (only the leader did)");
  cr_expect(process_alive(s.pid1), "the session died with the exec");
}

Test(session, a_cancelled_execs_setsid_escapee_is_killed_and_the_kill_confirmed) {
  SKIP_UNLESS_SESSIONS();
  Scope sc{scope_for("cancel")};
  auto s = open_session(sc.name, "t", spec_with_helpers());
  auto sup = supervisor();
  Request r;
  r.argv = {"/bin/sh", "-c", "setsid /bin/sleep 7774 & exec /bin/sleep 7775"};
  r.limits.set(Limit::wall_seconds, 60);
  std::shared_ptr<Result> got;
  auto h = sup->submit(session_exec_request(s.id, r), RunCallbacks{nullptr, [&](const Result& res) {
                                                                     got = std::make_shared<Result>(res);
                                                                   }});
  cr_assert(h, "%s", h ? "" : h.error().message().c_str());
  // The escapee runs in a session of its own, outside the exec's process group.
  cr_assert(gone_within([] { return host_processes_with("sleep 7774") == 1 && host_processes_with("sleep 7775") == 1; }, 5));
  h->cancel();
  while (!got) (void)sup->run_once(1);
  cr_expect_eq(got->outcome, Outcome::cancelled, "%s", got->detail.c_str());
  cr_expect(got->kill_confirmed.value_or(false), "the kill was not confirmed: %s", got->detail.c_str());
  cr_expect_eq(host_processes_with("sleep 7774"), 0, "the setsid escapee outlived a confirmed kill");
  cr_expect(process_alive(s.pid1), "the session died with the exec");
}

Test(session, an_oom_exec_is_killed_oom_and_the_session_survives) {
  SKIP_UNLESS_SESSIONS();
  Scope sc{scope_for("oom")};
  auto s = open_session(sc.name, "t", spec_with_helpers());
  auto sup = supervisor();
  Limits l;
  l.set(Limit::memory_bytes, 48ull << 20);
  l.set(Limit::wall_seconds, 30);
  auto r = exec(*sup, s.id, {"/helpers/memhog", "grow"}, l);
  cr_expect_eq(r.outcome, Outcome::killed_oom, "%s", r.detail.c_str());
  cr_expect(process_alive(s.pid1));
  auto next = exec(*sup, s.id, {"/bin/true"});
  cr_expect_eq(next.outcome, Outcome::exited, "%s", next.detail.c_str());
  cr_expect_eq(next.exit_code, 0);
}

// An exec with no memory_bytes of its own runs under the session's: when
// the session's group runs out, the exec whose process the kernel's OOM
// killer took is killed_oom, from the session's cgroup's evidence (its OOM
// eventfd: the session's own ceiling, not the host's), not `signaled` as
// though the host ran out. A neighbour exec in flight that did not
// allocate is neither killed nor blamed: it ends as it would have, and its
// detail says the session's ceiling ran out during it and took none of its
// processes.
Test(session, an_oom_at_the_sessions_ceiling_is_the_allocating_execs_and_spares_its_neighbour) {
  SKIP_UNLESS_SESSIONS();
  Scope sc{scope_for("session-oom")};
  auto s = open_session(sc.name, "t", spec_with_ceiling(64ull << 20));
  auto sup = supervisor();
  Request calm;
  calm.argv = {"/bin/sh", "-c", "/bin/sleep 3.4173; echo calm"};
  calm.limits.set(Limit::wall_seconds, 60);
  std::shared_ptr<Result> neighbour;
  auto h = submit_until_running(*sup, s.id, calm, {"/bin/sleep", "3.4173"}, neighbour);
  Limits l;
  l.set(Limit::wall_seconds, 30);
  auto r = exec(*sup, s.id, {"/helpers/memhog", "grow"}, l);
  cr_expect_eq(r.outcome, Outcome::killed_oom, "%s", r.detail.c_str());
  cr_expect(contains(r.detail, "the session's memory_bytes ceiling (64 MiB)"), "%s", r.detail.c_str());
  while (!neighbour) (void)sup->run_once(1);
  cr_expect_eq(neighbour->outcome, Outcome::exited, "the neighbour was killed for the session's OOM: %s",
               neighbour->detail.c_str());
  cr_expect_eq(neighbour->exit_code, 0, "%s", neighbour->detail.c_str());
  cr_expect_eq(neighbour->stdout_capture.text, "calm\n");
  cr_expect(contains(neighbour->detail, "ran out during this exec; the kernel's OOM killer took no process of this exec"),
            "%s", neighbour->detail.c_str());
  cr_expect(process_alive(s.pid1));
  // Under the ceiling again: an exec that stays below it is never killed_oom.
  auto next = exec(*sup, s.id, {"/helpers/memhog", "touch", "8388608"});
  cr_expect_eq(next.outcome, Outcome::exited, "%s", next.detail.c_str());
  cr_expect(!contains(next.detail, "ran out"), "%s", next.detail.c_str());
}

// An exec with a memory_bytes of its own below its session's: the session's
// group running out (another exec's doing) signals the exec's OOM eventfd
// too (the kernel notifies the groups below). That OOM is not the exec's,
// and the old loop then stopped watching its eventfd: when the exec later
// ran out of its own ceiling, nothing killed it as a whole. The kernel's
// OOM killer took the allocating process and its shell went on ("survived").
Test(session, an_exec_that_saw_its_sessions_oom_is_still_killed_whole_at_its_own_ceiling) {
  SKIP_UNLESS_SESSIONS();
  Scope sc{scope_for("oom-twice")};
  auto s = open_session(sc.name, "t", spec_with_ceiling(64ull << 20));
  auto sup = supervisor();
  Request own;
  own.argv = {"/bin/sh", "-c", "/bin/sleep 3.4175; /helpers/memhog grow; echo survived; /bin/sleep 1"};
  own.limits.set(Limit::memory_bytes, 24ull << 20);
  own.limits.set(Limit::wall_seconds, 60);
  std::shared_ptr<Result> got;
  auto h = submit_until_running(*sup, s.id, own, {"/bin/sleep", "3.4175"}, got);
  // The session's ceiling runs out while it sleeps.
  Limits l;
  l.set(Limit::wall_seconds, 30);
  auto hog = exec(*sup, s.id, {"/helpers/memhog", "grow"}, l);
  cr_expect_eq(hog.outcome, Outcome::killed_oom, "%s", hog.detail.c_str());
  while (!got) (void)sup->run_once(1);
  cr_expect_eq(got->outcome, Outcome::killed_oom, "%s", got->detail.c_str());
  cr_expect(!contains(got->stdout_capture.text, "survived"),
            "the exec went on after its own ceiling ran out: %s", got->detail.c_str());
  cr_expect(process_alive(s.pid1));
}

// The same two OOMs, but both before the supervisor looks: the session's
// ceiling runs out (a neighbour exec's doing), then the exec's own, while
// the loop is not running. The exec's eventfd then holds two notifications
// and the session's one. The old check saw the session's new OOM and took
// the whole wake-up for the session's: nothing killed the exec as a whole,
// and its shell went on ("survived").
Test(session, an_execs_own_oom_right_after_its_sessions_is_told_apart_in_one_wakeup) {
  SKIP_UNLESS_SESSIONS();
  Scope sc{scope_for("oom-one-look")};
  auto s = open_session(sc.name, "t", spec_with_ceiling(64ull << 20));
  auto sup = supervisor();
  auto wait_for = [](const char* flag) {
    return "/bin/touch /workspace/" + std::string(flag) + "-ready; until [ -e /workspace/" + flag +
           " ]; do /bin/sleep 0.01; done; ";
  };
  Request hog;
  hog.argv = {"/bin/sh", "-c", wait_for("go") + "/helpers/memhog grow; /bin/touch /workspace/hog-done"};
  hog.limits.set(Limit::wall_seconds, 60);
  Request own;
  own.argv = {"/bin/sh", "-c",
              wait_for("hog-done") + "/helpers/memhog grow; /bin/touch /workspace/own-done; /bin/sleep 3.4178; echo survived"};
  own.limits.set(Limit::memory_bytes, 24ull << 20);
  own.limits.set(Limit::wall_seconds, 60);
  std::shared_ptr<Result> hog_result, own_result;
  auto keep = [](std::shared_ptr<Result>& into) {
    return RunCallbacks{nullptr, [&into](const Result& res) { into = std::make_shared<Result>(res); }};
  };
  auto h1 = sup->submit(session_exec_request(s.id, own), keep(own_result));
  auto h2 = sup->submit(session_exec_request(s.id, hog), keep(hog_result));
  cr_assert(h1 && h2, "submit: %s", !h1 ? h1.error().message().c_str() : h2.error().message().c_str());
  for (int i = 0; i < 500 && !(exists(workdir_path(s, "hog-done-ready")) && exists(workdir_path(s, "go-ready"))); ++i)
    (void)sup->run_once(0.02);
  cr_assert(exists(workdir_path(s, "go-ready")) && exists(workdir_path(s, "hog-done-ready")), "the execs never ran");
  // From here the loop does not run until both ceilings have run out.
  corral_test::write_file(workdir_path(s, "go"), "");
  cr_assert(gone_within([&] { return exists(workdir_path(s, "own-done")); }, 30),
            "the exec's memhog never met its own ceiling");
  // Seen from the host: the exec's shell went on past its OOM.
  const std::vector<std::string> went_on = {"/bin/sleep", "3.4178"};
  cr_assert(gone_within([&] { return corral_test::host_pid_with_argv(went_on) > 0; }, 5),
            "the exec's shell never went on to its sleep");
  while (!own_result || !hog_result) (void)sup->run_once(1);
  cr_expect_eq(corral_test::host_pid_with_argv(went_on), 0, "the exec's sleep outlived its Result");
  cr_expect(exists(workdir_path(s, "hog-done")), "the session's OOM did not come first");
  cr_expect_eq(own_result->outcome, Outcome::killed_oom, "%s", own_result->detail.c_str());
  cr_expect(!contains(own_result->stdout_capture.text, "survived"),
            "the exec went on after its own ceiling ran out: %s", own_result->detail.c_str());
  // The neighbour's memhog was the session OOM's victim; its shell went on,
  // as the kernel's OOM killer left it.
  cr_expect(contains(hog_result->detail, "out of memory under the session's memory_bytes ceiling (64 MiB)"), "%s",
            hog_result->detail.c_str());
  cr_expect(process_alive(s.pid1));
}

Test(session, files_refuse_hostile_layouts) {
  SKIP_UNLESS_SESSIONS();
  Scope sc{scope_for("files")};
  auto s = open_session(sc.name, "t", spec_with_helpers());
  // Byte fidelity, implicit parents, overwrite replaces.
  std::string bytes("a\0b\xff\n", 5);
  cr_assert(session_put(s.id, "deep/er/f.bin", bytes));
  cr_expect_eq(*session_get(s.id, "deep/er/f.bin"), bytes);
  cr_assert(session_put(s.id, "deep/er/f.bin", "short"));
  cr_expect_eq(*session_get(s.id, "deep/er/f.bin"), "short");
  // Confinement of the write path.
  cr_expect(!session_put(s.id, "../escape", "x"));
  cr_expect(!session_put(s.id, "", "x"), "the work dir itself");
  // A host file and a symlinked parent planted in the work dir (as the
  // workload would: the host's view of the sandbox's /workspace).
  TempDir host_dir;
  corral_test::write_file(host_dir / "host-secret", "host bytes");
  cr_assert_eq(symlink((host_dir / "host-secret").c_str(), workdir_path(s, "link").c_str()), 0);
  cr_assert_eq(symlink(host_dir.path().c_str(), workdir_path(s, "dirlink").c_str()), 0);
  cr_assert_eq(mkfifo(workdir_path(s, "fifo").c_str(), 0666), 0);
  cr_expect(!session_get(s.id, "link"), "get followed a symlink");
  cr_expect(!session_get(s.id, "dirlink/host-secret"), "get went through a symlinked parent");
  cr_expect(!session_get(s.id, "fifo"), "get read a fifo");
  cr_expect(!session_get(s.id, "deep"), "get read a directory");
  cr_expect(!session_put(s.id, "dirlink/planted", "x"), "put went through a symlinked parent");
  cr_expect(!exists(host_dir / "planted"));
  // A hard link to a host file cannot be made on the sandbox's tmpfs.
  auto ln = [&] {
    auto sup = supervisor();
    return exec(*sup, s.id, {"/bin/ln", "/helpers/memhog", "/workspace/hard"});
  }();
  cr_expect_neq(ln.exit_code, 0, "a hard link across the work dir's mount was made");
  // put over a symlink replaces the link, never writes through it.
  cr_assert(session_put(s.id, "link", "replaced"));
  cr_expect_eq(corral_test::read_file(host_dir / "host-secret"), "host bytes");
  // remove: a link is removed, never followed, also inside a recursive removal.
  cr_assert_eq(symlink(host_dir.path().c_str(), workdir_path(s, "deep/er/hostlink").c_str()), 0);
  cr_expect(!session_remove(s.id, "deep", false), "a directory removed without recursive");
  cr_assert(session_remove(s.id, "dirlink", false));
  cr_expect(exists(host_dir / "host-secret"), "removing a link removed its target");
  auto rm = session_remove(s.id, "deep", true);
  cr_expect(rm, "%s", rm ? "" : rm.error().message().c_str());
  cr_expect(!exists(workdir_path(s, "deep")));
  cr_expect(exists(host_dir / "host-secret"), "a recursive removal followed a link");
  for (const char* root : {"", ".", "/", "/workspace"}) cr_expect(!session_remove(s.id, root, true), "'%s'", root);
  // list: links listed as links, glob per segment.
  cr_assert(session_put(s.id, "src/a.c", "a"));
  cr_assert(session_put(s.id, "src/b.h", "b"));
  auto ls = session_list(s.id, "src/*.c");
  cr_assert(ls);
  cr_assert_eq(ls->size(), 1u);
  cr_expect_eq((*ls)[0].path, "src/a.c");
}

Test(session, dispose_scope_from_another_process_counts_and_reclaims) {
  SKIP_UNLESS_SESSIONS();
  Scope sc{scope_for("dispose")};
  auto spec = spec_with_helpers();
  auto a = open_session(sc.name, "t", spec);
  auto b = open_session(sc.name, "u", spec);
  auto other = open_session(sc.name + "-other", "t", spec);
  pid_t child = fork();
  if (child == 0) _exit(dispose_scope(sc.name));
  int status = 0;
  waitpid(child, &status, 0);
  cr_expect(WIFEXITED(status));
  cr_expect_eq(WEXITSTATUS(status), 2, "disposed %d", WEXITSTATUS(status));
  for (const auto* s : {&a, &b}) {
    cr_expect(!process_alive(s->keeper), "keeper of %s alive", s->id.c_str());
    cr_expect(!process_alive(s->pid1), "pid 1 of %s alive", s->id.c_str());
    cr_expect(!exists(s->dir));
    for (const auto& d : s->cgroup_dirs) cr_expect(!exists(d), "cgroup %s left", d.c_str());
  }
  cr_expect(process_alive(other.pid1), "another scope's session was disposed");
  cr_expect_eq(dispose_scope(sc.name + "-other", std::string_view("t")), 1);
}

Test(session, a_session_whose_keeper_was_killed_is_swept) {
  SKIP_UNLESS_SESSIONS();
  Scope sc{scope_for("sweep")};
  auto s = open_session(sc.name, "t", spec_with_helpers());
  cr_assert_eq(kill(s.keeper, SIGKILL), 0);
  cr_expect(gone_within([&] { return !process_alive(s.pid1); }, 2), "pid 1 outlived its keeper");
  auto found = find_session(s.id);
  cr_expect(!found);
  cr_expect(!exists(s.dir), "a dead keeper's session directory was not swept");
  for (const auto& d : s.cgroup_dirs) cr_expect(!exists(d), "cgroup %s left", d.c_str());
  // The key is free again: a fresh session.
  auto again = open_session(sc.name, "t", spec_with_helpers());
  cr_expect_neq(again.pid1, s.pid1);
}

Test(session, an_idle_session_is_disposed) {
  SKIP_UNLESS_SESSIONS();
  Scope sc{scope_for("idle")};
  auto spec = spec_with_helpers();
  spec.idle_seconds = 1;
  auto s = open_session(sc.name, "t", spec);
  cr_expect(gone_within([&] { return !process_alive(s.keeper) && !exists(s.dir); }, 5), "idle session kept");
  cr_expect(!process_alive(s.pid1));
  for (const auto& d : s.cgroup_dirs) cr_expect(!exists(d), "cgroup %s left", d.c_str());
}

static long keeper_rss_kib(pid_t keeper) {
  std::string status = corral_test::read_file("/proc/" + std::to_string(keeper) + "/status");
  auto at = status.find("VmRSS:");
  cr_assert_neq(at, std::string::npos);
  return std::atol(status.c_str() + at + 6);
}

// acquire starts the keeper without running our code in a forked copy of
// the caller (which may be multithreaded: a lock held by another thread at
// the fork would be held forever in the copy): the keeper is the corral
// CLI exec'd afresh, so it holds nothing of the caller's memory. Made here
// from a caller with a second thread and 64 MiB of touched heap; a keeper
// forked from it would map (and count in its RSS) those pages.
Test(session, the_keeper_is_a_fresh_program_not_a_fork_of_the_caller) {
  SKIP_UNLESS_SESSIONS();
  Scope sc{scope_for("fresh")};
  // A keeper's own footprint, from a caller with nothing to pass on: the
  // bound below is over it (a sanitized CLI alone holds ~38 MiB).
  auto lean = open_session(sc.name, "lean", spec_with_helpers());
  long lean_kib = keeper_rss_kib(lean.keeper);
  std::vector<char> heap(64u << 20, 'x');
  std::atomic<bool> stop{false};
  std::thread busy([&] {
    while (!stop) {
      std::vector<char> v(4096, 'y');
      (void)v;
    }
  });
  auto s = open_session(sc.name, "t", spec_with_helpers());
  stop = true;
  busy.join();
  char exe[4096] = {0};
  ssize_t n = readlink(("/proc/" + std::to_string(s.keeper) + "/exe").c_str(), exe, sizeof exe - 1);
  cr_assert_gt(n, 0);
  cr_expect(contains(std::string(exe), "/bin/corral"), "the keeper runs %s, not the corral CLI", exe);
  long rss_kib = keeper_rss_kib(s.keeper);
  cr_expect_lt(rss_kib, lean_kib + 32 * 1024,
               "the keeper holds %ld KiB (one from a lean caller %ld): the caller's heap came along", rss_kib,
               lean_kib);
  cr_expect_eq(heap[12345], 'x');
  auto sup = supervisor();
  cr_expect_eq(exec(*sup, s.id, {"/bin/true"}).exit_code, 0);
}
