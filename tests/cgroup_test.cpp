// The cgroup module on the real kernel: run cgroups are made, children join
// them, hit their ceilings, are killed as a group, and nothing is left behind.
// The host's own backend is tested in full (on the development host: v1); the
// v2 backend is tested on the unified mount as far as its controllers allow
// (kill, freeze, placement, CLONE_INTO_CGROUP, CPU), the rest of its file
// logic in tests/cgroup_probe_test.cpp.
#include <dirent.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <initializer_list>
#include <set>
#include <vector>

#include "corral/cgroup.hpp"
#include "support.hpp"  // before syscalls.hpp: its P_PIDFD macro breaks a later <sys/wait.h>
#include "corral/syscalls.hpp"

using namespace corral;
using corral_test::ChildEnd;
using corral_test::run_in_child;

namespace {

// Criterion does not unwind a test whose assertion failed, so its RunCgroup
// destructors do not run: each test first sweeps the empty groups that
// earlier, dead test processes left.
void sweep_leftovers(const CgroupProbe& p) { (void)sweep_stale_run_cgroups(p, CgroupSpec{}); }

// The host's backend with the controllers a test needs, or a skip that says
// what is missing.
CgroupProbe host_or_skip(std::initializer_list<const char*> need) {
  CgroupProbe p = probe_cgroups();
  if (p.backend == CgroupVersion::none) cr_skip_test("no usable cgroups here: %s", p.why_none.c_str());
  for (const char* c : need)
    if (!p.has(c)) cr_skip_test("no writable %s controller here: %s", c, p.describe().c_str());
  sweep_leftovers(p);
  return p;
}

// The v2 backend on this host's unified mount, whatever the host's own
// backend is; skipped when we cannot create groups there.
CgroupProbe v2_or_skip() {
  CgroupProbe p = probe_cgroups();
  if (p.v2_own_dir.empty() || !p.v2_writable)
    cr_skip_test("no writable cgroup2 mount here: %s", p.describe().c_str());
  p.backend = CgroupVersion::v2;
  sweep_leftovers(p);
  return p;
}

RunCgroup must_create(const CgroupProbe& p, const CgroupSpec& spec, std::string_view name) {
  auto r = create_run_cgroup(p, spec, name);
  cr_assert(r.ok(), "create_run_cgroup: %s", r.error().message().c_str());
  return std::move(*r);
}

CgroupSpec spec_with(std::optional<std::uint64_t> memory, std::optional<std::uint64_t> pids) {
  CgroupSpec s;
  s.memory_bytes = memory;
  s.pids_max = pids;
  return s;
}

bool dir_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool lists_pid(const std::string& dir, pid_t pid) {
  std::istringstream in(corral_test::read_file(dir + "/cgroup.procs"));
  std::string line;
  while (std::getline(in, line))
    if (line == std::to_string(pid)) return true;
  return false;
}

// In a forked child: is this process listed in every dir? 0 or 1.
int listed_everywhere(const std::vector<std::string>& dirs) {
  for (const auto& d : dirs)
    if (!lists_pid(d, getpid())) return 1;
  return 0;
}

CgroupStats must_stats(const RunCgroup& run) {
  auto st = run.stats();
  cr_assert(st.ok(), "stats: %s", st.error().message().c_str());
  return *st;
}

// Child work, run after joining.
int touch_memory(std::size_t bytes) {
  void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return 91;
  for (std::size_t i = 0; i < bytes; i += 4096) static_cast<volatile char*>(m)[i] = 1;
  return 0;
}

void burn_cpu_ms(long ms) {
  struct timespec ts {};
  volatile unsigned long x = 0;
  do {
    for (int i = 0; i < 100000; ++i) x = x + static_cast<unsigned long>(i);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  } while (ts.tv_sec * 1000 + ts.tv_nsec / 1000000 < ms);
}

// Fork until the kernel refuses; children wait for the release pipe to close.
// Returns how many forks succeeded when the refusal was EAGAIN, 250 when
// nothing refused, 251 for another errno.
int fork_until_refused() {
  int release[2];
  if (pipe(release) != 0) return 252;
  int count = 0, err = 0;
  for (int i = 0; i < 200; ++i) {
    pid_t p = fork();
    if (p < 0) {
      err = errno;
      break;
    }
    if (p == 0) {
      close(release[1]);
      char c;
      (void)!read(release[0], &c, 1);
      _exit(0);
    }
    ++count;
  }
  close(release[1]);
  while (wait(nullptr) > 0) {
  }
  return err == EAGAIN ? count : err == 0 ? 250 : 251;
}

// Reap the pids in `tree` (our children, or orphans we are subreaper for)
// until none is left or timeout; each reaped pid leaves the set. Returns how
// many ended by SIGKILL.
int reap(std::set<pid_t>& tree, int timeout_ms, bool count_sigkill) {
  int by_sigkill = 0;
  for (int waited = 0; !tree.empty() && waited < timeout_ms;) {
    int status = 0;
    pid_t got = waitpid(-1, &status, WNOHANG);
    if (got > 0 && tree.erase(got) && count_sigkill && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      ++by_sigkill;
    if (got <= 0) {
      usleep(1000);
      ++waited;
    }
  }
  return by_sigkill;
}

// A child in `run` with a grandchild that called setsid() and a
// great-grandchild under it; all three block. kill_all must end every one
// with SIGKILL: we are their subreaper, so the orphans come back to us to
// be counted.
void check_kill_all_ends_the_tree(RunCgroup& run) {
  cr_assert_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  int report[2];
  cr_assert_eq(pipe(report), 0);
  pid_t child = fork();
  cr_assert_geq(child, 0);
  if (child == 0) {
    close(report[0]);
    if (join_cgroup_in_child(run) != 0) _exit(90);
    if (fork() == 0) {
      setsid();
      (void)fork();  // the great-grandchild shares the rest
    }
    pid_t me = getpid();
    (void)!write(report[1], &me, sizeof me);
    for (;;) pause();
  }
  close(report[1]);
  std::set<pid_t> tree;
  pid_t pid;
  while (tree.size() < 3 && read(report[0], &pid, sizeof pid) == sizeof pid) tree.insert(pid);
  close(report[0]);
  cr_assert_eq(tree.size(), 3u, "the tree did not start");

  Status killed = run.kill_all();
  bool emptied = true;
  for (const auto& d : run.dirs()) emptied = emptied && corral_test::read_file(d + "/cgroup.procs").empty();
  int by_sigkill = reap(tree, 3000, true);
  // Safety net before asserting, so a failing kill leaves no processes
  // behind. Safe by pid: unreaped, none of these pids can be reused yet.
  for (pid_t left : tree) kill(left, SIGKILL);
  reap(tree, 1000, false);
  cr_assert(killed.ok(), "kill_all: %s", killed.error().message().c_str());
  cr_assert(emptied, "cgroup.procs not empty after kill_all");
  cr_assert_eq(by_sigkill, 3, "only %d of 3 ended by SIGKILL", by_sigkill);
}

void assert_gone(const std::vector<std::string>& dirs) {
  for (const auto& d : dirs) cr_assert(!dir_exists(d), "%s is still there", d.c_str());
}

}  // namespace

// ---------------------------------------------------------------- probe on this host

Test(cgroup, probe_finds_the_cgroups_this_process_is_in) {
  CgroupProbe p = host_or_skip({});
  for (int role : {p.v1_memory, p.v1_pids, p.v1_cpuacct, p.v1_freezer})
    if (role >= 0) cr_assert(lists_pid(p.v1[role].own_dir, getpid()), "%s", p.v1[role].own_dir.c_str());
  if (!p.v2_own_dir.empty()) cr_assert(lists_pid(p.v2_own_dir, getpid()), "%s", p.v2_own_dir.c_str());
  cr_assert(p.describe().find(std::string("cgroup ") + std::string(cgroup_version_name(p.backend))) == 0,
            "%s", p.describe().c_str());
}

// ---------------------------------------------------------------- the host's backend

Test(cgroup, create_and_remove_leave_nothing) {
  CgroupProbe p = host_or_skip({"memory", "pids"});
  RunCgroup run = must_create(p, spec_with(64 << 20, 20), "life");
  auto dirs = run.dirs();
  cr_assert(!dirs.empty());
  for (const auto& d : dirs) {
    cr_assert(dir_exists(d), "%s", d.c_str());
    cr_assert(d.find("/corral/life-" + std::to_string(getpid()) + "-") != std::string::npos, "%s", d.c_str());
  }
  cr_assert(run.describe().find("=67108864") != std::string::npos, "%s", run.describe().c_str());
  cr_assert(run.describe().find("pids.max=20") != std::string::npos, "%s", run.describe().c_str());
  cr_assert(run.remove().ok());
  assert_gone(dirs);
  // The parent group is kept for the next run (made once, not per run).
  for (const auto& d : dirs) {
    std::string parent = d.substr(0, d.rfind('/'));
    cr_assert(dir_exists(parent), "the parent group %s went with the run", parent.c_str());
  }
  cr_assert(run.remove().ok(), "remove is idempotent");
  cr_assert_eq(run.join_fd_count(), 0);
  cr_assert(!run.stats().ok(), "stats of a removed group");
}

Test(cgroup, destructor_and_move_remove_once) {
  CgroupProbe p = host_or_skip({});
  std::vector<std::string> dirs;
  {
    RunCgroup a = must_create(p, CgroupSpec{}, "raii");
    dirs = a.dirs();
    RunCgroup b = std::move(a);
    cr_assert_eq(a.version(), CgroupVersion::none);
    cr_assert(!a.kill_all().ok(), "a moved-from RunCgroup refuses");
    cr_assert(dir_exists(dirs[0]));
    cr_assert_eq(b.version(), p.backend);
  }
  assert_gone(dirs);
}

// A child that joins `run` and blocks until killed; returns once it is in.
pid_t start_member(const RunCgroup& run) {
  int ready[2];
  cr_assert_eq(pipe(ready), 0);
  pid_t child = fork();
  if (child == 0) {
    close(ready[0]);
    if (join_cgroup_in_child(run) != 0) _exit(90);
    (void)!write(ready[1], "x", 1);
    for (;;) pause();
  }
  close(ready[1]);
  char c;
  cr_assert_eq(read(ready[0], &c, 1), 1, "the member did not join");
  close(ready[0]);
  return child;
}

// The signal that ended `pid` within 3 s; -2 (after killing it ourselves,
// so nothing is left running) when it did not end.
int end_signal(pid_t pid) {
  int status = 0;
  for (int waited = 0; waited < 3000; ++waited) {
    if (waitpid(pid, &status, WNOHANG) == pid) return WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    usleep(1000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -2;
}

// The lean spec (the container tier's: no freezer, so remove() tries its
// rmdirs first) takes the kill path once the first rmdir is refused.
Test(cgroup, remove_and_destructor_kill_what_is_still_inside) {
  CgroupProbe p = host_or_skip({});
  CgroupSpec lean;
  lean.freezer_kill = lean.pids_accounting = lean.cpu_accounting = false;
  for (const CgroupSpec& spec : {CgroupSpec{}, lean}) {
    RunCgroup run = must_create(p, spec, "occupied");
    auto dirs = run.dirs();
    pid_t member = start_member(run);
    Status s = run.remove();
    int sig = end_signal(member);
    cr_assert(s.ok(), "remove: %s", s.error().message().c_str());
    cr_assert_eq(sig, SIGKILL);
    assert_gone(dirs);
  }
  pid_t member;
  std::vector<std::string> dirs;
  {
    RunCgroup scoped = must_create(p, CgroupSpec{}, "occupied");
    dirs = scoped.dirs();
    member = start_member(scoped);
  }
  cr_assert_eq(end_signal(member), SIGKILL);
  assert_gone(dirs);
}

Test(cgroup, child_joins_by_writing_zero_to_each_join_fd) {
  CgroupProbe p = host_or_skip({});
  RunCgroup run = must_create(p, CgroupSpec{}, "join");
  auto dirs = run.dirs();
  cr_assert_eq(run.join_fd_count(), static_cast<int>(dirs.size()));
  // v1 joins through `tasks` (a move of the writer's own thread, without
  // cgroup.procs' global lock and its RCU wait); v2 through cgroup.procs.
  const char* file = run.version() == CgroupVersion::v1 ? "/tasks" : "/cgroup.procs";
  for (int i = 0; i < run.join_fd_count(); ++i) {
    char target[PATH_MAX] = {};
    std::string link = "/proc/self/fd/" + std::to_string(run.join_fds()[i]);
    cr_assert_gt(readlink(link.c_str(), target, sizeof target - 1), 0);
    cr_assert_eq(std::string(target), dirs[static_cast<std::size_t>(i)] + file, "join fd %d is %s", i, target);
  }
  ChildEnd end = run_in_child([&] {
    if (int err = join_cgroup_in_child(run)) return 100 + err;
    return listed_everywhere(dirs);
  });
  cr_assert(end.exited && end.code == 0, "child: exited=%d code=%d", end.exited, end.code);
}

Test(cgroup, parent_places_a_waiting_child) {
  CgroupProbe p = host_or_skip({});
  RunCgroup run = must_create(p, CgroupSpec{}, "place");
  int go[2];
  cr_assert_eq(pipe(go), 0);
  pid_t child = fork();
  if (child == 0) {
    char c;
    close(go[1]);
    _exit(read(go[0], &c, 1) == 1 ? listed_everywhere(run.dirs()) : 2);
  }
  close(go[0]);
  Status placed = run.add_process(child);
  cr_assert(placed.ok(), "add_process: %s", placed.error().message().c_str());
  cr_assert_eq(write(go[1], "x", 1), 1);
  int status = 0;
  cr_assert_eq(waitpid(child, &status, 0), child);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %#x", status);
}

Test(cgroup, placing_a_dead_pid_names_the_file) {
  CgroupProbe p = host_or_skip({});
  RunCgroup run = must_create(p, CgroupSpec{}, "dead");
  pid_t gone = fork();
  if (gone == 0) _exit(0);
  waitpid(gone, nullptr, 0);
  Status s = run.add_process(gone);
  cr_assert(!s.ok());
  cr_assert_eq(s.error().code(), ESRCH);
  const std::string& m = s.error().message();
  cr_assert(m.find("'" + std::to_string(gone) + "'") != std::string::npos && m.find("cgroup.procs") != std::string::npos,
            "%s", m.c_str());
}

Test(cgroup, memory_ceiling_ends_in_an_oom_kill_that_stats_report) {
  CgroupProbe p = host_or_skip({"memory"});
  RunCgroup run = must_create(p, spec_with(64 << 20, std::nullopt), "oom");
  ChildEnd end = run_in_child([&] {
    if (join_cgroup_in_child(run)) return 90;
    return touch_memory(std::size_t{512} << 20);
  });
  cr_assert_eq(end.signal, SIGKILL, "child: exited=%d code=%d signal=%d (swap capped: %d)", end.exited, end.code,
               end.signal, run.swap_capped());
  CgroupStats st = must_stats(run);
  cr_assert(st.oom_killed(), "oom_kills=%llu", (unsigned long long)st.oom_kills.value_or(0));
  cr_assert(st.hit_ceiling && st.ceiling_oom());
  cr_assert(st.memory_peak_bytes.has_value());
  cr_assert_geq(*st.memory_peak_bytes, std::uint64_t{32} << 20);
  cr_assert_leq(*st.memory_peak_bytes, std::uint64_t{68} << 20);
}

Test(cgroup, a_plain_sigkill_is_not_an_oom_kill) {
  CgroupProbe p = host_or_skip({"memory"});
  RunCgroup run = must_create(p, spec_with(64 << 20, std::nullopt), "notoom");
  ChildEnd end = run_in_child([&] {
    if (join_cgroup_in_child(run)) return 90;
    touch_memory(std::size_t{8} << 20);
    raise(SIGKILL);
    return 91;
  });
  cr_assert_eq(end.signal, SIGKILL);
  CgroupStats st = must_stats(run);
  cr_assert(st.oom_kills.has_value(), "the memory controller must answer");
  cr_assert(!st.oom_killed(), "oom_kills=%llu", (unsigned long long)*st.oom_kills);
  cr_assert(!st.ceiling_oom(true), "under its ceiling, even if an ancestor's OOM had signalled the eventfd");
}

Test(cgroup, pids_ceiling_refuses_the_fork_bomb_with_eagain) {
  CgroupProbe p = host_or_skip({"pids"});
  RunCgroup run = must_create(p, spec_with(std::nullopt, 20), "bomb");
  ChildEnd end = run_in_child([&] {
    if (join_cgroup_in_child(run)) return 90;
    return fork_until_refused();
  });
  cr_assert(end.exited, "signal %d", end.signal);
  cr_assert_neq(end.code, 250, "200 forks and no refusal");
  cr_assert_neq(end.code, 251, "a fork failed, but not with EAGAIN");
  // pids.max counts the bomb itself: at most 19 children.
  cr_assert(end.code >= 1 && end.code <= 19, "%d forks succeeded", end.code);
  CgroupStats st = must_stats(run);
  cr_assert_geq(st.pids_limit_hits.value_or(0), 1u);
  cr_assert_eq(st.pids_current, 0u);
}

Test(cgroup, kill_all_ends_a_tree_with_a_setsid_grandchild) {
  CgroupProbe p = host_or_skip({});
  RunCgroup run = must_create(p, spec_with(std::nullopt, 50), "tree");
  check_kill_all_ends_the_tree(run);
  cr_assert(run.remove().ok());
}

Test(cgroup, v1_kill_all_without_a_freezer_loops_until_empty) {
  CgroupProbe p = host_or_skip({});
  if (p.backend != CgroupVersion::v1) cr_skip_test("the host's backend is %s, not v1", p.describe().c_str());
  p.v1_freezer = -1;
  RunCgroup run = must_create(p, CgroupSpec{}, "nofreeze");
  for (const auto& d : run.dirs()) cr_assert(d.find("freezer") == std::string::npos, "%s", d.c_str());
  check_kill_all_ends_the_tree(run);
}

// What a run in a pid namespace of its own asks for (the container tier):
// no freezer, and pids only when there is a ceiling to keep.
Test(cgroup, v1_hierarchies_a_run_does_without_are_not_joined) {
  CgroupProbe p = host_or_skip({});
  if (p.backend != CgroupVersion::v1) cr_skip_test("the host's backend is %s, not v1", p.describe().c_str());
  if (p.v1_pids < 0 || p.v1_freezer < 0) cr_skip_test("no v1 pids or freezer hierarchy here: %s", p.describe().c_str());
  auto joined = [&p](const RunCgroup& run, int role) {
    for (const auto& d : run.dirs())
      if (d.rfind(p.v1[role].own_dir + "/", 0) == 0) return true;
    return false;
  };
  CgroupSpec lean;
  lean.freezer_kill = false;
  lean.pids_accounting = false;
  RunCgroup plain = must_create(p, lean, "lean");
  cr_assert(!joined(plain, p.v1_freezer), "joined the freezer");
  cr_assert(!joined(plain, p.v1_pids), "joined pids without a ceiling");
  if (p.v1_memory >= 0) cr_assert(joined(plain, p.v1_memory));
  cr_assert(plain.remove().ok());
  lean.pids_max = 10;
  RunCgroup capped = must_create(p, lean, "leancap");
  cr_assert(joined(capped, p.v1_pids), "a pids ceiling without the pids hierarchy");
  cr_assert(!joined(capped, p.v1_freezer));
  cr_assert(capped.remove().ok());
  RunCgroup full = must_create(p, CgroupSpec{}, "full");
  cr_assert(joined(full, p.v1_freezer) && joined(full, p.v1_pids), "the defaults join every hierarchy");
  cr_assert(full.remove().ok());
}

Test(cgroup, kill_all_on_an_empty_group_is_quick) {
  CgroupProbe p = host_or_skip({});
  RunCgroup run = must_create(p, CgroupSpec{}, "empty");
  struct timespec a {}, b {};
  clock_gettime(CLOCK_MONOTONIC, &a);
  cr_assert(run.kill_all().ok());
  clock_gettime(CLOCK_MONOTONIC, &b);
  cr_assert_lt((b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000, 100);
}

Test(cgroup, peak_memory_and_cpu_time_after_work) {
  CgroupProbe p = host_or_skip({"memory", "cpu"});
  RunCgroup run = must_create(p, CgroupSpec{}, "work");
  ChildEnd end = run_in_child([&] {
    if (join_cgroup_in_child(run)) return 90;
    burn_cpu_ms(60);
    return touch_memory(std::size_t{32} << 20);
  });
  cr_assert(end.exited && end.code == 0);
  CgroupStats st = must_stats(run);
  cr_assert_geq(st.memory_peak_bytes.value_or(0), std::uint64_t{32} << 20);
  cr_assert_geq(st.cpu_usage_ns.value_or(0), 40'000'000u, "cpu %llu ns", (unsigned long long)st.cpu_usage_ns.value_or(0));
  cr_assert(!st.oom_killed());
}

Test(cgroup, fifty_create_remove_cycles_leave_nothing) {
  CgroupProbe p = host_or_skip({});
  const std::string prefix = "cycle-" + std::to_string(getpid()) + "-";
  std::set<std::string> parents;
  for (int i = 0; i < 50; ++i) {
    RunCgroup run = must_create(p, spec_with(16 << 20, 8), "cycle");
    auto dirs = run.dirs();
    for (const auto& d : dirs) parents.insert(d.substr(0, d.rfind('/')));
    Status s = run.remove();
    cr_assert(s.ok(), "cycle %d: %s", i, s.error().message().c_str());
    assert_gone(dirs);
  }
  for (const auto& parent : parents) {
    DIR* d = opendir(parent.c_str());
    if (!d) continue;  // the parent went too: nothing else was using it
    while (struct dirent* e = readdir(d))
      cr_assert(std::string(e->d_name).rfind(prefix, 0) != 0, "left behind: %s/%s", parent.c_str(), e->d_name);
    closedir(d);
  }
}

Test(cgroup, sweep_removes_empty_groups_of_dead_supervisors_only) {
  CgroupProbe p = host_or_skip({});
  // A parent of its own: the other tests' sweeps cannot take our stale groups.
  CgroupSpec spec;
  spec.parent = "corral-sweep-test";
  RunCgroup run = must_create(p, spec, "sweep");  // keeps the parents in place
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, nullptr, 0);
  std::vector<std::string> stale, live;
  for (const auto& d : run.dirs()) {
    std::string parent = d.substr(0, d.rfind('/'));
    stale.push_back(parent + "/crashed-" + std::to_string(dead) + "-0badf00d");
    live.push_back(parent + "/other-" + std::to_string(getpid()) + "-0badf00d");
    cr_assert_eq(mkdir(stale.back().c_str(), 0755), 0, "%s", stale.back().c_str());
    cr_assert_eq(mkdir(live.back().c_str(), 0755), 0, "%s", live.back().c_str());
  }
  auto swept = sweep_stale_run_cgroups(p, spec);
  bool live_kept = true;
  for (const auto& l : live) live_kept = dir_exists(l) && rmdir(l.c_str()) == 0 && live_kept;
  cr_assert(swept.ok(), "%s", swept.error().message().c_str());
  cr_assert_geq(*swept, static_cast<int>(stale.size()));
  assert_gone(stale);
  cr_assert(live_kept, "a group of a live supervisor was swept");
  for (const auto& d : run.dirs()) cr_assert(dir_exists(d), "our own run was swept: %s", d.c_str());
}

// ---------------------------------------------------------------- v2 on the unified mount

Test(cgroup_v2, refuses_a_ceiling_whose_controller_is_not_offered) {
  CgroupProbe p = v2_or_skip();
  auto offered = std::find(p.v2_controllers.begin(), p.v2_controllers.end(), "memory");
  if (offered != p.v2_controllers.end()) cr_skip_test("this v2 mount offers memory: nothing to refuse");
  auto r = create_run_cgroup(p, spec_with(64 << 20, std::nullopt), "nomem");
  cr_assert(!r.ok());
  const std::string& m = r.error().message();
  cr_assert(m.find("cgroup v2: memory_bytes needs the memory controller") != std::string::npos &&
                m.find("cgroup.controllers") != std::string::npos,
            "%s", m.c_str());
}

Test(cgroup_v2, lifecycle_join_and_cpu_accounting) {
  CgroupProbe p = v2_or_skip();
  RunCgroup run = must_create(p, CgroupSpec{}, "v2life");
  cr_assert_eq(run.version(), CgroupVersion::v2);
  auto dirs = run.dirs();
  cr_assert_eq(dirs.size(), 1u);
  cr_assert_geq(run.cgroup_fd(), 0);
  ChildEnd end = run_in_child([&] {
    if (int err = join_cgroup_in_child(run)) return 100 + err;
    burn_cpu_ms(30);
    return listed_everywhere(dirs);
  });
  cr_assert(end.exited && end.code == 0, "child: exited=%d code=%d", end.exited, end.code);
  CgroupStats st = must_stats(run);
  cr_assert_geq(st.cpu_usage_ns.value_or(0), 20'000'000u);
  cr_assert(run.remove().ok());
  assert_gone(dirs);
  cr_assert_eq(run.cgroup_fd(), -1);
}

Test(cgroup_v2, clone_into_cgroup_starts_the_child_inside) {
  CgroupProbe p = v2_or_skip();
  RunCgroup run = must_create(p, CgroupSpec{}, "clone3");
  struct clone_args args {};
  args.flags = CLONE_INTO_CGROUP;
  args.exit_signal = SIGCHLD;
  args.cgroup = static_cast<std::uint64_t>(run.cgroup_fd());
  long pid = syscall(SYS_clone3, &args, sizeof args);
  if (pid < 0 && (errno == ENOSYS || errno == E2BIG)) cr_skip_test("clone3 CLONE_INTO_CGROUP: %s", strerror(errno));
  cr_assert_geq(pid, 0, "clone3: %s", strerror(errno));
  if (pid == 0) _exit(listed_everywhere(run.dirs()));
  int status = 0;
  cr_assert_eq(waitpid(static_cast<pid_t>(pid), &status, 0), pid);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %#x", status);
}

Test(cgroup_v2, kill_all_with_cgroup_kill) {
  CgroupProbe p = v2_or_skip();
  if (!p.v2_kill) cr_skip_test("no cgroup.kill (kernel < 5.14)");
  RunCgroup run = must_create(p, CgroupSpec{}, "v2kill");
  check_kill_all_ends_the_tree(run);
}

Test(cgroup_v2, kill_all_by_freezing_when_cgroup_kill_is_missing) {
  CgroupProbe p = v2_or_skip();
  if (!p.v2_freeze) cr_skip_test("no cgroup.freeze (kernel < 5.2)");
  p.v2_kill = false;
  RunCgroup run = must_create(p, CgroupSpec{}, "v2freeze");
  check_kill_all_ends_the_tree(run);
  // Thawed on the way out: a new member runs.
  ChildEnd end = run_in_child([&] { return join_cgroup_in_child(run); });
  cr_assert(end.exited && end.code == 0);
  cr_assert(corral_test::read_file(run.dirs()[0] + "/cgroup.freeze").rfind("0", 0) == 0);
}

Test(cgroup_v2, kill_all_by_looping_without_kill_or_freeze) {
  CgroupProbe p = v2_or_skip();
  p.v2_kill = false;
  p.v2_freeze = false;
  RunCgroup run = must_create(p, CgroupSpec{}, "v2loop");
  check_kill_all_ends_the_tree(run);
}
