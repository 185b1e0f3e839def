// Session execs (session_join.hpp, session_cgroup.hpp): the exec's child
// and its confinement seen from the host, the exec groups kept for reuse
// (the pool) and what a reused group must not carry, and the keeper's
// looks between execs. Every check is made from the host where it can be.
#include <criterion/criterion.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <sstream>

#include "corral/host_probe.hpp"
#include "corral/landlock.hpp"
#include "corral/run_setup.hpp"
#include "corral/session.hpp"
#include "corral/session_join.hpp"
#include "cmdline_mark.hpp"
#include "host_view.hpp"
#include "session_support.hpp"

using namespace corral;
using namespace container_test;
using namespace session_test;

TestSuite(session_exec, .timeout = 120);

namespace {
// The exec's memory group as the exec itself sees it (/proc/self/cgroup's
// memory line, in the session's cgroup namespace: "/execs/<name>").
std::string exec_group_of(const Result& r) {
  const std::string& t = r.stdout_capture.text;
  auto at = t.find(":memory:");
  if (at == std::string::npos) return "";
  auto end = t.find('\n', at);
  std::string path = t.substr(at + 8, end == std::string::npos ? std::string::npos : end - at - 8);
  return path.substr(path.rfind('/') + 1);
}

const char* kShowGroup = "cat /proc/self/cgroup; ";

Result exec_sh(Supervisor& sup, const std::string& id, const std::string& script, Limits limits = {}) {
  return exec(sup, id, {"/bin/sh", "-c", kShowGroup + script}, limits);
}

bool group_exists(const SessionInfo& s, const std::string& name) {
  for (const auto& d : s.cgroup_dirs)
    if (exists(d + "/execs/" + name)) return true;
  return false;
}

// The pool is v1's: a v2 exec group's counters (memory.events,
// pids.events) cannot be reset, so every exec there gets a new group.
#define SKIP_UNLESS_POOL()                                                                                  \
  do {                                                                                                      \
    if (!run_cgroups_reusable(host().cgroups))                                                              \
      cr_skip_test("exec groups are kept for reuse on cgroup v1 only (v2's memory.events and pids.events "   \
                   "cannot be reset); this host's run cgroups are v2");                                    \
  } while (0)

std::string scope_for(const char* name) { return std::string("exectest-") + std::to_string(getpid()) + "-" + name; }

// What each pool test starts from: a session of its own (disposed at the
// end) and a supervisor to exec into it.
struct WarmSession {
  Scope scope;
  SessionInfo s;
  std::unique_ptr<Supervisor> sup;
  explicit WarmSession(const char* name)
      : scope{scope_for(name)}, s(open_session(scope.name, "t", spec_with_helpers())), sup(supervisor()) {}
};
}  // namespace

// Exec groups are kept for reuse (no mkdir/rmdir per exec), and a reused
// group carries nothing of the exec before: its ceilings are the new
// exec's (a tighter memory and pids ceiling do not stay), its peak memory
// and CPU time start again, so each exec's Result is its own.
Test(session_exec, a_reused_exec_group_carries_nothing_from_the_exec_before) {
  SKIP_UNLESS_SESSIONS();
  SKIP_UNLESS_POOL();
  WarmSession w("reuse");
  auto& [sc, s, sup] = w;
  Limits tight;
  tight.set(Limit::memory_bytes, 32ull << 20);
  tight.set(Limit::process_count, 4);
  auto a = exec_sh(*sup, s.id, "true", tight);
  const std::string g = exec_group_of(a);
  cr_assert(!g.empty(), "no memory group in %s", a.stdout_capture.text.c_str());
  cr_expect_eq(a.exit_code, 0, "%s", a.detail.c_str());
  // 96 MiB under the session's 256 MiB, and 9 processes under its 64: the
  // 32 MiB / 4 of the exec before would refuse both.
  auto big = exec_sh(*sup, s.id, "/helpers/memhog touch 100663296");
  cr_expect_eq(exec_group_of(big), g, "a clean exec's group was not reused");
  cr_expect_eq(big.outcome, Outcome::exited, "%s", big.detail.c_str());
  cr_expect_eq(big.exit_code, 0, "the last exec's memory ceiling stayed: %s", big.detail.c_str());
  cr_expect_geq(big.max_rss_bytes, 96ull << 20);
  // The 96 MiB high-water mark is the exec before's, not this one's. Right
  // after it: one process's exit leaves less to uncharge late than nine's
  // (a group is kept only while under 1 MiB stays charged to it; the nine
  // of the fork exec below once left more than that for a moment on a
  // busy host, and the exec after got a new group).
  auto small = exec_sh(*sup, s.id, "/helpers/memhog touch 1048576");
  cr_expect_eq(exec_group_of(small), g);
  cr_expect_lt(small.max_rss_bytes, 24ull << 20, "the reused group kept the last peak: %llu bytes",
               static_cast<unsigned long long>(small.max_rss_bytes));
  auto forks = exec_sh(*sup, s.id, "for i in 1 2 3 4 5 6 7 8; do /bin/sleep 0.3 & done; wait");
  cr_expect_eq(exec_group_of(forks), g);
  cr_expect_eq(forks.exit_code, 0, "the last exec's pids ceiling stayed: %s / %s", forks.stderr_capture.text.c_str(),
               forks.detail.c_str());
  cr_expect_str_empty(forks.stderr_capture.text.c_str());
  // CPU time: a spinning exec killed at its deadline leaves the group
  // clean (killed, empty); the next exec's cpu_seconds is its own.
  // A group is kept only while under 1 MiB stays charged to it
  // (kReuseResidueBytes), and a killed process's last pages can take a
  // moment to be uncharged on a busy host: then the next exec gets a new
  // group, which carries nothing by construction. So the spinner goes
  // again until its group is the one the next exec gets, three times at
  // most: a group never reused after a kill fails the test.
  Limits spin;
  spin.set(Limit::wall_seconds, 2);
  std::string was = g;
  for (int round = 0;; ++round) {
    auto hog = exec(*sup, s.id, {"/helpers/hostile", "spin"}, spin);
    cr_expect_eq(hog.outcome, Outcome::killed_timeout, "%s", hog.detail.c_str());
    cr_assert_gt(hog.cpu_seconds, 0.2, "the spinner did not spin (a busy host?): %f", hog.cpu_seconds);
    auto after = exec_sh(*sup, s.id, "true");
    cr_expect_lt(after.cpu_seconds, std::min(0.1, hog.cpu_seconds / 2),
                 "the exec after a spinner kept its CPU time: %f (the spinner's %f)", after.cpu_seconds,
                 hog.cpu_seconds);
    cr_expect(!after.kill_confirmed);
    const std::string now = exec_group_of(after);
    if (now == was) break;  // the spinner's group, reused: and nothing of its CPU time came with it
    cr_assert_lt(round, 2, "three spinners killed at their deadline, and no exec after one got its group");
    was = now;  // the exec after ran in this one; the next spinner gets it
  }
}

// A dirty group is never handed to another exec: one whose exec was OOM
// killed (the counter cannot be reset: the next exec would be killed_oom
// for nothing), whose pids ceiling refused a fork, that still holds
// 8 MB of the exec's files (charged to it, they would eat the next
// exec's ceiling), or with a process left in it. Each is removed.
Test(session_exec, a_dirty_exec_group_is_never_reused) {
  SKIP_UNLESS_SESSIONS();
  SKIP_UNLESS_POOL();
  WarmSession w("dirty");
  auto& [sc, s, sup] = w;
  Limits small;
  small.set(Limit::memory_bytes, 48ull << 20);
  small.set(Limit::wall_seconds, 30);
  auto oom = exec_sh(*sup, s.id, "exec /helpers/memhog grow", small);
  cr_expect_eq(oom.outcome, Outcome::killed_oom, "%s", oom.detail.c_str());
  const std::string oomed = exec_group_of(oom);
  cr_assert(!oomed.empty());
  cr_expect(!group_exists(s, oomed), "the OOM's group %s was kept", oomed.c_str());
  auto killed = exec_sh(*sup, s.id, "kill -9 $$", small);
  cr_expect_neq(exec_group_of(killed), oomed);
  cr_expect_eq(killed.outcome, Outcome::signaled, "an OOM carried over: %s", killed.detail.c_str());

  Limits few;
  few.set(Limit::process_count, 3);
  auto refused = exec_sh(*sup, s.id, "for i in 1 2 3 4 5 6; do /bin/sleep 0.2 & done; wait", few);
  const std::string at_ceiling = exec_group_of(refused);
  cr_assert(!at_ceiling.empty());
  cr_expect(contains(refused.detail, "pids.max refused"), "no fork was refused: %s", refused.detail.c_str());
  cr_expect(!group_exists(s, at_ceiling), "the group whose pids ceiling refused a fork was kept");

  auto writer = exec_sh(*sup, s.id, "head -c 8000000 /dev/zero > /workspace/big");
  cr_expect_eq(writer.exit_code, 0, "%s", writer.detail.c_str());
  const std::string charged = exec_group_of(writer);
  cr_expect(!group_exists(s, charged), "the group holding 8 MB of the exec's files was kept");

  // A process planted in a pool group (from the host): the group is not
  // reused, the process is killed and the group removed.
  auto clean = exec_sh(*sup, s.id, "true");
  const std::string planted = exec_group_of(clean);
  cr_assert(group_exists(s, planted), "a clean group was not kept");
  pid_t squatter = fork();
  if (squatter == 0) {
    execl("/bin/sleep", "sleep", "7791", static_cast<char*>(nullptr));
    _exit(127);
  }
  cr_assert_gt(squatter, 0);
  for (const auto& d : s.cgroup_dirs)
    corral_test::write_file(d + "/execs/" + planted + "/cgroup.procs", std::to_string(squatter));
  cr_assert(contains(corral_test::read_file(s.cgroup_dirs.front() + "/execs/" + planted + "/cgroup.procs"),
                     std::to_string(squatter)),
            "the process was not planted");
  auto next = exec_sh(*sup, s.id, "true");
  cr_expect_eq(next.exit_code, 0, "%s", next.detail.c_str());
  cr_expect_neq(exec_group_of(next), planted, "an exec was put in a group with a process left in it");
  cr_expect(gone_within([&] { return !process_alive(squatter) && !group_exists(s, planted); }, 3),
            "the group with a process left in it (and the process) stayed");
  kill(squatter, SIGKILL);
  waitpid(squatter, nullptr, 0);
}

// A group is kept though the kernel still holds memory charged to it when
// its exec ends: each CPU's reserve and the exited processes' stacks
// (0.2-1 MiB after any exec here), and a negative dentry per missing path
// the exec looked up (~200 bytes each, kept after it ends). None of it is
// a file of the exec's. A bound of 1 MiB on all that is charged threw
// such groups away, and now and then a clean one. An exec that leaves
// more than kReuseChargedBytes of it gets no successor in its group: the
// next exec's peak would start from all that.
Test(session_exec, a_group_is_kept_though_the_kernel_still_caches_its_lookups) {
  SKIP_UNLESS_SESSIONS();
  SKIP_UNLESS_POOL();
  WarmSession w("lookups");
  auto& [sc, s, sup] = w;
  // Names no earlier run looked up: a dentry already cached is charged to
  // whoever made it.
  const std::string missing = "/usr/corral-missing-" + std::to_string(getpid()) + "-" + std::to_string(time(nullptr));
  auto look_up = [&](int n) {
    const std::string count = std::to_string(n);
    return exec_sh(*sup, s.id,
                   "i=0; while [ $i -lt " + count + " ]; do [ -e " + missing + "-" + count + "-$i ]; i=$((i+1)); done");
  };
  auto some = look_up(6000);
  cr_expect_eq(some.exit_code, 0, "%s", some.detail.c_str());
  const std::string g = exec_group_of(some);
  cr_assert(!g.empty());
  cr_assert(group_exists(s, g), "a group left holding only the kernel's cache of 6,000 lookups was not kept");
  std::uint64_t charged = 0, pages = 0;
  for (const auto& d : s.cgroup_dirs)
    if (const std::string group = d + "/execs/" + g; exists(group + "/memory.usage_in_bytes")) {
      charged = std::stoull(corral_test::read_file(group + "/memory.usage_in_bytes"));
      const std::string stat = corral_test::read_file(group + "/memory.stat");
      pages = cgroupfs::keyed_value(stat, "total_cache").value_or(0) +
              cgroupfs::keyed_value(stat, "total_rss").value_or(0);
    }
  if (charged <= kReuseResidueBytes)
    cr_skip_test("6,000 lookups of missing paths left %llu bytes charged to the exec's group: this kernel does not "
                 "charge their dentries to it, so no group here is over 1 MiB for the kernel's memory alone",
                 static_cast<unsigned long long>(charged));
  cr_expect_leq(pages, kReuseResidueBytes, "the lookups left %llu bytes of pages",
                static_cast<unsigned long long>(pages));
  auto next = exec_sh(*sup, s.id, "true");
  cr_expect_eq(next.exit_code, 0, "%s", next.detail.c_str());
  cr_expect_eq(exec_group_of(next), g, "a group with %llu bytes charged, %llu of them pages, was not reused",
               static_cast<unsigned long long>(charged), static_cast<unsigned long long>(pages));

  auto many = look_up(40000);
  const std::string piled = exec_group_of(many);
  cr_assert(!piled.empty());
  cr_expect(!group_exists(s, piled), "a group the kernel holds 40,000 lookups' dentries for was kept");
  auto after = exec_sh(*sup, s.id, "true");
  cr_expect_neq(exec_group_of(after), piled);
}

// The pool is the session's: disposal removes the kept groups with the rest.
Test(session_exec, dispose_removes_the_exec_group_pool) {
  SKIP_UNLESS_SESSIONS();
  SKIP_UNLESS_POOL();
  WarmSession w("poolgone");
  auto& [sc, s, sup] = w;
  cr_expect_eq(exec(*sup, s.id, {"/bin/true"}).exit_code, 0);
  sup.reset();
  cr_assert(!exec_groups(s.cgroup_dirs.front()).empty(), "no exec group was kept for reuse");
  cr_expect_eq(dispose_scope(sc.name), 1);
  for (const auto& d : s.cgroup_dirs) cr_expect(!exists(d), "cgroup %s left", d.c_str());
}

// An exec's child borrows the supervisor's memory until its execve
// (CLONE_VM|CLONE_VFORK, session_join.cpp); what runs is confined all the
// same. Seen from the host, the exec's process: in every namespace of the
// session's pid 1, in an exec group below the session's cgroup (each
// hierarchy), the session's uid and gid with no supplementary group, no
// capability in any set, no_new_privs, a seccomp filter.
Test(session_exec, an_execs_process_is_confined_as_its_session_seen_from_the_host) {
  SKIP_UNLESS_SESSIONS();
  WarmSession w("confined");
  auto& [sc, s, sup] = w;
  const std::string marker = "7792" + std::to_string(getpid() % 10000);
  Request r;
  r.argv = {"/bin/sleep", marker};
  r.limits.set(Limit::wall_seconds, 60);
  std::shared_ptr<Result> result;
  auto h = sup->submit(session_exec_request(s.id, r), RunCallbacks{nullptr, [&](const Result& res) {
                                                                     result = std::make_shared<Result>(res);
                                                                   }});
  cr_assert(h, "submit: %s", h ? "" : h.error().message().c_str());
  // Found by its exec group's cgroup.procs (host pids), then its command line.
  pid_t pid = 0;
  std::string group;
  cr_assert(gone_within([&] {
              for (const auto& g : exec_groups(s.cgroup_dirs.front())) {
                std::istringstream procs(corral_test::read_file(s.cgroup_dirs.front() + "/execs/" + g + "/cgroup.procs"));
                for (pid_t p; procs >> p;) {
                  std::string cmd = corral_test::read_file("/proc/" + std::to_string(p) + "/cmdline");
                  std::replace(cmd.begin(), cmd.end(), '\0', ' ');
                  if (contains(cmd, "sleep " + marker)) pid = p, group = g;
                }
              }
              return pid > 0;
            }, 10),
            "the exec's process is in no exec group of the session");
  const std::string who = std::to_string(pid);
  for (const char* ns : {"user", "mnt", "net", "ipc", "uts", "pid", "cgroup"})
    cr_expect_eq(ns_of(pid, ns), ns_of(s.pid1, ns), "the exec's %s namespace is not the session's", ns);
  for (const char* ns : {"user", "mnt", "net", "pid"})
    cr_expect_neq(ns_of(pid, ns), ns_of(getpid(), ns), "the exec is in the host's %s namespace", ns);
  for (const auto& d : s.cgroup_dirs)
    cr_expect(contains(corral_test::read_file(d + "/execs/" + group + "/cgroup.procs"), who + "\n"),
              "the exec is not in %s/execs/%s", d.c_str(), group.c_str());
  const std::string uid = std::to_string(s.outside_uid), gid = std::to_string(s.outside_gid);
  cr_expect_eq(corral_test::proc_status_field(who, "Uid"), uid + "\t" + uid + "\t" + uid + "\t" + uid);
  cr_expect_eq(corral_test::proc_status_field(who, "Gid"), gid + "\t" + gid + "\t" + gid + "\t" + gid);
  cr_expect_eq(corral_test::proc_status_field(who, "Groups"), "");
  for (const char* set : {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"})
    cr_expect_eq(corral_test::proc_status_field(who, set), "0000000000000000", "%s is not empty", set);
  cr_expect_eq(corral_test::proc_status_field(who, "NoNewPrivs"), "1");
  cr_expect_eq(corral_test::proc_status_field(who, "Seccomp"), "2", "no seccomp filter on the exec");
  h->cancel();
  while (!result) (void)sup->run_once(1);
  cr_expect_eq(result->outcome, Outcome::cancelled, "%s", result->detail.c_str());
  // This thread's children are ours again: the pid namespace entered for
  // the clone was left.
  auto link = [](const char* path) {
    char buf[256];
    ssize_t n = readlink(path, buf, sizeof buf - 1);
    return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
  };
  cr_expect_eq(link("/proc/thread-self/ns/pid_for_children"), link("/proc/thread-self/ns/pid"),
               "this thread's children would go to the session's pid namespace");
}

// An idle session costs the host nothing between execs: its keeper sleeps
// until a deadline or an event (it used to look every second). Counted
// from the host as the keeper's context switches (every wake from poll is
// one) over 3 quiet seconds, after the looks that follow an exec are over.
// The looks still come with execs: one whose owner died is swept (the
// session_cli test of a SIGKILLed exec), and the idle timeout still ends it
// (an_idle_session_is_disposed).
Test(session_exec, an_idle_sessions_keeper_sleeps_between_execs) {
  SKIP_UNLESS_SESSIONS();
  WarmSession w("asleep");
  auto& [sc, s, sup] = w;
  cr_assert_eq(exec(*sup, s.id, {"/bin/true"}).exit_code, 0);
  auto switches = [&] {
    const std::string who = std::to_string(s.keeper);
    return std::atol(corral_test::proc_status_field(who, "voluntary_ctxt_switches").c_str()) +
           std::atol(corral_test::proc_status_field(who, "nonvoluntary_ctxt_switches").c_str());
  };
  // The keeper looks each second while execs come, and stops at the first
  // look that finds none held and none since: two looks after this exec.
  std::this_thread::sleep_for(std::chrono::milliseconds(3000));
  const long before = switches();
  std::this_thread::sleep_for(std::chrono::milliseconds(3000));
  const long woke = switches() - before;
  cr_expect_leq(woke, 1, "the idle session's keeper woke %ld times in 3 s", woke);
  cr_expect(process_alive(s.keeper));
  cr_expect_eq(exec(*sup, s.id, {"/bin/true"}).exit_code, 0, "the session does not serve after its sleep");
}

// Every exec of a session has the session's uid in its pid namespace. An
// exec's child shares its caller's memory until its execve
// (CLONE_VM|CLONE_VFORK) and the caller sleeps until then: a program that
// stops whatever it may signal, as soon as it may, must stop neither that
// child (the caller, this test's thread, would sleep until the session
// ends) nor another exec's program, nor the session's own processes.
Test(session_exec, an_exec_stops_no_process_of_another_exec, .timeout = 90) {
  SKIP_UNLESS_SESSIONS();
  if (host().landlock_abi < 6) cr_skip_test("Landlock ABI %d has no signal scoping (6)", host().landlock_abi);
  WarmSession w("stopper");
  auto& [sc, s, sup] = w;
  Request stop;
  stop.argv = {"/helpers/hostile", "stop-all", "8000"};
  stop.limits.set(Limit::wall_seconds, 40);
  std::shared_ptr<Result> stopper;
  auto h = sup->submit(session_exec_request(s.id, stop), RunCallbacks{nullptr, [&](const Result& res) {
                                                                      stopper = std::make_shared<Result>(res);
                                                                    }});
  cr_assert(h, "submit: %s", h ? "" : h.error().message().c_str());
  // A neighbour that runs as long as the stopper, watched from the host
  // with the session's pid 1: their State in the host's /proc while the
  // stopper runs, not what their Results say afterwards.
  Request sleeper;
  sleeper.argv = {"/bin/sleep", "20.5173"};
  sleeper.limits.set(Limit::wall_seconds, 40);
  std::shared_ptr<Result> neighbour;
  auto n = sup->submit(session_exec_request(s.id, sleeper), RunCallbacks{nullptr, [&](const Result& res) {
                                                                         neighbour = std::make_shared<Result>(res);
                                                                       }});
  cr_assert(n, "submit: %s", n ? "" : n.error().message().c_str());
  pid_t neighbour_pid = 0;
  for (int i = 0; i < 500 && !neighbour_pid && !neighbour; ++i) {
    (void)sup->run_once(0.02);
    neighbour_pid = corral_test::host_pid_with_argv(sleeper.argv);
  }
  cr_assert(neighbour_pid, "the host never saw the neighbour run");
  std::string stopped_seen;
  int looks = 0;
  auto look = [&] {
    for (pid_t pid : {neighbour_pid, s.pid1}) {
      std::string state = corral_test::proc_status_field(std::to_string(pid), "State");
      ++looks;
      if (!state.empty() && (state[0] == 'T' || state[0] == 't'))
        stopped_seen += std::to_string(pid) + " " + state + "; ";
    }
  };
  for (int i = 0; i < 5; ++i) (void)sup->run_once(0.1), look();  // under way
  Limits bounded;
  bounded.set(Limit::wall_seconds, 20);
  for (int i = 0; i < 5 && !stopper; ++i) {
    Result r = exec(*sup, s.id, {"/bin/true"}, bounded);
    cr_expect_eq(r.outcome, Outcome::exited, "exec %d beside the stopper: %s", i, r.detail.c_str());
    look();
  }
  while (!stopper) (void)sup->run_once(0.05), look();
  cr_expect(stopped_seen.empty(), "the host saw stopped processes while the stopper ran (%d looks): %s", looks,
            stopped_seen.c_str());
  n->cancel();
  while (!neighbour) (void)sup->run_once(1);
  cr_expect(contains(stopper->stdout_capture.text, "stopped=0\n"), "the stopper stopped something: %s",
            stopper->stdout_capture.text.c_str());
  cr_expect_eq(exec(*sup, s.id, {"/bin/true"}).exit_code, 0, "the session does not serve after the stopper");
}

// The session's /workspace is the programs' to fill, and an exec's cwd is
// a path there. A link planted as `/proc/self/fd/N` must not take the next
// exec's child, which holds its caller's fds until just before its execve,
// into a directory its caller has open on the host (every caller has some:
// the exec group's lock is one); that exec's program would start outside
// the session's root.
Test(session_exec, an_execs_cwd_follows_no_magic_link_out_of_the_session) {
  SKIP_UNLESS_SESSIONS();
  WarmSession w("magiclink");
  auto& [sc, s, sup] = w;
  const int host_root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  cr_assert_geq(host_root, 0);
  Result plant = exec(*sup, s.id, {"/bin/ln", "-s", "/proc/self/fd/" + std::to_string(host_root), "/workspace/escape"});
  cr_assert_eq(plant.exit_code, 0, "%s %s", plant.detail.c_str(), plant.stderr_capture.text.c_str());
  Request r;
  r.argv = {"/helpers/inside", "cwd-root"};
  r.cwd = "/workspace/escape";
  auto res = sup->run(session_exec_request(s.id, r));
  cr_assert(res, "exec: %s", res ? "" : res.error().message().c_str());
  cr_expect(!contains(res->stdout_capture.text, "cwd_in_root=no"), "the exec started outside the session's root: %s",
            res->stdout_capture.text.c_str());
  cr_expect(res->outcome == Outcome::spawn_failed, "an exec into the link ran: %s %s",
            std::string(to_string(res->outcome)).c_str(), res->stdout_capture.text.c_str());

  // From the host: /proc/PID/cwd of an exec whose cwd is the link. It never
  // runs; one whose cwd is /workspace is seen in the session's work dir, so
  // the watch is not blind.
  struct stat host_root_st;
  cr_assert_eq(fstat(host_root, &host_root_st), 0);
  Request plain;
  plain.argv = {"/bin/sleep", "30.6183"};
  plain.cwd = "/workspace";
  auto control = corral_test::see_from_host(*sup, session_exec_request(s.id, plain));
  cr_assert(control.pid && control.cwd_ok, "the host never saw the exec run: %s", control.result->detail.c_str());
  cr_expect(!corral_test::same_file(control.cwd, host_root_st), "an exec in /workspace runs in the host's /");
  Request escape = plain;
  escape.cwd = "/workspace/escape";
  auto seen = corral_test::see_from_host(*sup, session_exec_request(s.id, escape));
  close(host_root);
  cr_expect(!(seen.cwd_ok && corral_test::same_file(seen.cwd, host_root_st)),
            "the host saw the exec (pid %d) run in the host's /", static_cast<int>(seen.pid));
  cr_expect_eq(seen.pid, 0, "an exec whose cwd is the link ran (pid %d)", static_cast<int>(seen.pid));
}

// An exec's chdir (a path inside, as for a container run) is where it runs;
// it was dropped without a word and the exec ran in /workspace.
Test(session_exec, an_execs_chdir_is_where_it_runs) {
  SKIP_UNLESS_SESSIONS();
  WarmSession w("chdir");
  auto& [sc, s, sup] = w;
  Request r;
  r.argv = {"/bin/pwd"};
  r.chdir = "/tmp";
  auto res = sup->run(session_exec_request(s.id, r));
  cr_assert(res, "exec: %s", res ? "" : res.error().message().c_str());
  cr_expect_eq(res->stdout_capture.text, std::string("/tmp\n"), "ran in %s", res->stdout_capture.text.c_str());
}

// An exec's child shares its caller's memory until its execve
// (CLONE_VM|CLONE_VFORK), argv strings included: its /proc/PID/cmdline is
// the caller's command line, which may hold a secret. Another exec of the
// session (same uid, same pid namespace) watching /proc while execs start
// must read none of it, nor list any process that is not its own.
Test(session_exec, an_exec_reads_no_command_line_of_another_execs_caller, .timeout = 90) {
  SKIP_UNLESS_SESSIONS();
  WarmSession w("cmdline");
  auto& [sc, s, sup] = w;
  corral_test::CmdlineMark mark("mark-9b2c4e");
  cr_assert(mark.ok(), "our argv is too short to mark");
  Request watch;
  watch.argv = {"/helpers/inside", "cmdline-watch", "mark-9b2c4e", "5"};
  watch.limits.set(Limit::wall_seconds, 40);
  std::shared_ptr<Result> watcher;
  auto h = sup->submit(session_exec_request(s.id, watch), RunCallbacks{nullptr, [&](const Result& res) {
                                                                       watcher = std::make_shared<Result>(res);
                                                                     }});
  cr_assert(h, "submit: %s", h ? "" : h.error().message().c_str());
  for (int i = 0; i < 5; ++i) (void)sup->run_once(0.1);  // under way
  for (int i = 0; i < 60 && !watcher; ++i) {
    Result r = exec(*sup, s.id, {"/bin/true"});
    cr_expect_eq(r.outcome, Outcome::exited, "exec %d beside the watcher: %s", i, r.detail.c_str());
  }
  while (!watcher) (void)sup->run_once(1);
  cr_expect(contains(watcher->stdout_capture.text, "cmdline_seen=none\n"), "%s %s",
            watcher->stdout_capture.text.c_str(), watcher->detail.c_str());
  cr_expect(contains(watcher->stdout_capture.text, "pids_listed=0\n"), "%s", watcher->stdout_capture.text.c_str());
}

// An exec is a Landlock domain of its own at every ABI, not only where
// signals can be scoped (ABI 6). From inside a domain the kernel refuses
// ptrace-style access (/proc/PID/mem, environ) to every process outside
// it: another exec's program, and an exec's child before its execve, which
// runs on its caller's memory (with fs.suid_dumpable=1 that memory stays
// dumpable across the child's id switch). Prepared as on hosts reporting
// ABI 1 (5.13) and 5 (6.10), the exec's plan must still hold a ruleset.
Test(session_exec, an_exec_is_a_landlock_domain_of_its_own_below_abi_6) {
  SKIP_UNLESS_SESSIONS();
  if (landlock_abi() < 1) cr_skip_test("no Landlock on this kernel: an exec can be no domain of its own");
  WarmSession w("domain");
  const HostFacts probed = probe_host(/*with_containers=*/true, /*with_workspace=*/false);
  const SessionTarget target = session_target(w.s);
  for (int abi : {1, 5, landlock_abi()}) {
    HostFacts host = probed;
    host.landlock_abi = abi;
    RunContext ctx;
    ctx.host = &host;
    ctx.session = &target;
    Request req;
    req.argv = {"/bin/true"};
    auto run = prepare_run(session_exec_request(w.s.id, std::move(req)), ctx, "domain-" + std::to_string(abi));
    cr_assert(run, "ABI %d: %s", abi, run ? "" : run.error().message().c_str());
    cr_assert(run->plan && run->plan->landlock, "ABI %d: the exec is no Landlock domain of its own", abi);
    const LandlockEnforced& e = run->plan->landlock->enforced();
    cr_expect_eq(e.abi, abi);
    cr_expect(!e.writes_confined && !e.tcp_restricted(), "ABI %d: %s", abi, e.describe().c_str());
    bool warned = false;
    for (const auto& wmsg : run->warnings) warned |= contains(wmsg, "no signal scoping");
    if (abi >= 6) {
      cr_expect_eq(e.scoped, static_cast<std::uint64_t>(LANDLOCK_SCOPE_SIGNAL), "%s", e.describe().c_str());
      cr_expect(!warned, "ABI %d warns of signal scoping it has", abi);
    } else {
      cr_expect_eq(e.handled_fs, static_cast<std::uint64_t>(LANDLOCK_ACCESS_FS_MAKE_BLOCK), "%s", e.describe().c_str());
      cr_expect(contains(e.describe(), "a domain of its own"), "%s", e.describe().c_str());
      cr_expect(warned, "ABI %d: no warning that signals are not scoped", abi);
    }
  }
}

// A fork rabbit (each process forks one child, which makes a session of its
// own, and exits; forever) ends with its exec: the exec's group is in the
// freezer (v1), so its kill freezes the chain before it reads who to kill,
// instead of racing forks one cgroup.procs read at a time. No wall_seconds:
// the leader's exit is the exec's end. Checked from the host: no process
// of the chain is left, and the exec's group held none.
Test(session_exec, a_fork_rabbit_ends_with_its_exec_and_leaves_nothing, .timeout = 90) {
  SKIP_UNLESS_SESSIONS();
  WarmSession w("rabbit");
  auto& [sc, s, sup] = w;
  const std::string tag = "rabbit-" + std::to_string(getpid());
  auto r = exec_sh(*sup, s.id, "exec /helpers/hostile fork-chain " + tag);
  cr_expect_eq(r.outcome, Outcome::exited, "%s", r.detail.c_str());
  cr_expect(contains(r.stdout_capture.text, "chain\n"), "%s", r.stdout_capture.text.c_str());
  cr_expect(!contains(r.detail, "not fully removed"), "%s", r.detail.c_str());
  if (host().cgroups.backend == CgroupVersion::v1 && host().cgroups.v1_freezer >= 0)
  {
    const std::string& t = r.stdout_capture.text;
    auto at = t.find(":freezer:");
    cr_expect(at != std::string::npos && t.substr(at, t.find('\n', at) - at).find("/execs/") != std::string::npos,
              "the exec's group is not in the freezer: %s", t.c_str());
  }
  cr_expect_eq(host_processes_with(tag), 0, "the rabbit outlived its exec");
  for (const auto& d : s.cgroup_dirs)
    for (const auto& g : exec_groups(d))
      cr_expect_str_empty(corral_test::read_file(d + "/execs/" + g + "/cgroup.procs").c_str(), "%s/execs/%s", d.c_str(),
                          g.c_str());
  cr_expect_eq(exec(*sup, s.id, {"/bin/true"}).exit_code, 0, "the session does not serve after the rabbit");
}
