#include "corral/reaper.hpp"

#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>

#include <sstream>

#include "corral/process.hpp"
#include "corral/supervisor.hpp"
#include "support.hpp"

using namespace corral;
using corral_test::report;
using corral_test::run_in_child_reporting;

namespace {

// Polls `done` every millisecond for up to 5 s.
template <class F>
bool eventually(F done) {
  for (int i = 0; i < 5000; ++i) {
    if (done()) return true;
    struct timespec ms {0, 1000000};
    nanosleep(&ms, nullptr);
  }
  return false;
}

// Returns when `fd` reaches EOF (every write end closed).
void wait_for_eof(int fd) {
  char byte;
  while (read(fd, &byte, 1) > 0) {
  }
}

// True when the calling process has no children left at all (not even zombies).
bool no_children_left() {
  siginfo_t info{};
  return waitid(P_ALL, 0, &info, WEXITED | WNOHANG) != 0 && errno == ECHILD;
}

// Forks a child that forks a grandchild and exits. The grandchild waits
// until it is re-parented, writes its new parent's pid to the returned fd,
// then exits as soon as the `go` pipe reaches EOF (the caller closes both
// ends). Returns the read end; the intermediate child is already reaped.
int orphan_reporting_parent(const int go[2]) {
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) != 0) return -1;
  pid_t c = fork();
  if (c == 0) {
    pid_t intermediate = getpid();
    if (fork() == 0) {
      close(go[1]);
      eventually([&] { return getppid() != intermediate; });
      pid_t now = getppid();
      if (write(ready[1], &now, sizeof now) != sizeof now) _exit(1);
      wait_for_eof(go[0]);
      _exit(0);
    }
    _exit(0);
  }
  close(ready[1]);
  waitpid(c, nullptr, 0);
  return ready[0];
}

pid_t read_pid(int fd) {
  pid_t pid = -1;
  if (read(fd, &pid, sizeof pid) != sizeof pid) return -1;
  return pid;
}

// "key=value" lines of a child's report.
std::string field(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (line.compare(0, key.size() + 1, key + "=") == 0) return line.substr(key.size() + 1);
  return "<missing " + key + ">";
}

void expect_field(const corral_test::ChildReport& r, const std::string& key, const std::string& want) {
  std::string got = field(r.output, key);
  cr_expect_eq(got, want, "%s: got '%s', want '%s'; report:\n%s", key.c_str(), got.c_str(), want.c_str(),
               r.output.c_str());
}

// The raw clone(2) as fork: no new stack, `flags` with its exit signal in
// the low byte. The child runs only raw calls and _exit.
pid_t raw_clone(unsigned long flags) {
  return static_cast<pid_t>(syscall(SYS_clone, flags, nullptr, nullptr, nullptr, 0));
}


}  // namespace

Test(reaper, orphan_is_adopted_and_reaped) {
  auto r = run_in_child_reporting([](int fd) {
    if (!become_subreaper().ok()) return 100;
    report(fd, std::string("subreaper=") + (is_subreaper() ? "yes" : "no") + "\n");
    int go[2];
    if (pipe2(go, O_CLOEXEC) != 0) return 101;
    int ready = orphan_reporting_parent(go);
    close(go[0]);
    pid_t adopted_by = read_pid(ready);
    report(fd, std::string("adopted_by_us=") + (adopted_by == getpid() ? "yes" : std::to_string(adopted_by)) + "\n");
    report(fd, "reaped_while_alive=" + std::to_string(reap_orphans()) + "\n");
    close(go[1]);  // the grandchild exits now
    std::size_t reaped = 0;
    eventually([&] { return (reaped += reap_orphans()) >= 1; });
    report(fd, "reaped=" + std::to_string(reaped) + "\n");
    report(fd, std::string("zombies_left=") + (no_children_left() ? "no" : "yes") + "\n");
    return 0;
  });
  cr_assert(r.end.exited && r.end.code == 0, "exit %d signal %d", r.end.code, r.end.signal);
  expect_field(r, "subreaper", "yes");
  expect_field(r, "adopted_by_us", "yes");
  expect_field(r, "reaped_while_alive", "0");
  expect_field(r, "reaped", "1");
  expect_field(r, "zombies_left", "no");
}

Test(reaper, without_subreaper_the_orphan_goes_elsewhere) {
  // The control for the test above, so it can fail: an outer subreaper
  // forks an inner process that is not one; the inner one's orphan goes to
  // the outer one (and is reaped there, not left to init).
  auto r = run_in_child_reporting([](int fd) {
    if (!become_subreaper().ok()) return 100;
    pid_t inner = fork();
    if (inner == 0) {
      int go[2];
      if (pipe2(go, O_CLOEXEC) != 0) _exit(101);
      int ready = orphan_reporting_parent(go);
      close(go[0]);
      close(go[1]);
      pid_t adopted_by = read_pid(ready);
      report(fd, std::string("adopted_by_inner=") + (adopted_by == getpid() ? "yes" : "no") + "\n");
      report(fd, std::string("adopted_by_outer=") + (adopted_by == getppid() ? "yes" : "no") + "\n");
      _exit(0);
    }
    waitpid(inner, nullptr, 0);
    std::size_t reaped = 0;
    eventually([&] { return (reaped += reap_orphans()) >= 1; });
    report(fd, "reaped_by_outer=" + std::to_string(reaped) + "\n");
    return 0;
  });
  cr_assert(r.end.exited && r.end.code == 0, "exit %d", r.end.code);
  expect_field(r, "adopted_by_inner", "no");
  expect_field(r, "adopted_by_outer", "yes");
  expect_field(r, "reaped_by_outer", "1");
}

Test(reaper, tracked_children_are_left_for_their_owner) {
  auto r = run_in_child_reporting([](int fd) {
    if (!become_subreaper().ok()) return 100;
    // The tracked child is forked first, so it is first in our children list
    // and waitid(P_ALL) keeps returning it: the orphans behind it must still
    // be found.
    pid_t tracked = fork();
    if (tracked == 0) _exit(7);
    siginfo_t info{};
    if (waitid(P_PID, tracked, &info, WEXITED | WNOWAIT) != 0) return 101;  // now a zombie
    pid_t c = fork();
    if (c == 0) {
      for (int i = 0; i < 3; ++i)
        if (fork() == 0) _exit(0);
      _exit(0);
    }
    waitpid(c, nullptr, 0);
    ReapFilter is_tracked = [&](pid_t pid) { return pid == tracked; };
    std::size_t reaped = 0;
    eventually([&] { return (reaped += reap_orphans(is_tracked)) >= 3; });
    report(fd, "reaped=" + std::to_string(reaped) + "\n");
    info = {};
    bool kept = waitid(P_PID, tracked, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == tracked;
    report(fd, std::string("tracked_kept=") + (kept ? "yes" : "no") + "\n");
    int status = 0;
    if (waitpid(tracked, &status, 0) == tracked)
      report(fd, "tracked_exit=" + std::to_string(WEXITSTATUS(status)) + "\n");
    report(fd, std::string("zombies_left=") + (no_children_left() ? "no" : "yes") + "\n");
    return 0;
  });
  cr_assert(r.end.exited && r.end.code == 0, "exit %d signal %d", r.end.code, r.end.signal);
  expect_field(r, "reaped", "3");
  expect_field(r, "tracked_kept", "yes");
  expect_field(r, "tracked_exit", "7");
  expect_field(r, "zombies_left", "no");
}

Test(reaper, child_side_variant_sets_the_attribute) {
  auto r = run_in_child_reporting([](int) {
    if (is_subreaper()) return 1;
    if (int err = become_subreaper_in_child()) return 100 + err;
    int value = 0;
    return prctl(PR_GET_CHILD_SUBREAPER, &value, 0, 0, 0) == 0 && value == 1 ? 0 : 2;
  });
  cr_expect(r.end.exited && r.end.code == 0, "exit %d", r.end.code);
}

Test(reaper, nothing_to_reap_returns_zero) {
  auto r = run_in_child_reporting([](int) { return static_cast<int>(reap_orphans()); });
  cr_expect(r.end.exited && r.end.code == 0, "exit %d", r.end.code);
}

namespace {

// A tier none run of `sh -c script` on `sup`.
corral::Expected<corral::RunHandle> submit_sh(corral::Supervisor& sup, std::string script,
                                              corral::RunCallbacks callbacks = {}) {
  corral::Request r;
  r.tier = corral::Tier::none;
  r.argv = {"/bin/sh", "-c", std::move(script)};
  return sup.submit(std::move(r), std::move(callbacks));
}

// A script that leaves a setsid escapee (it writes its pid to `pid_file`,
// then sleeps 300 s), then runs `rest`.
// `rest` starts once the escapee has written its pid (at most 5 s on): a
// loaded host may take longer than `rest`'s own sleep to start it.
std::string leave_an_escapee(const std::string& pid_file, const std::string& rest) {
  return "setsid sh -c 'echo $$ > " + pid_file + "; exec sleep 300' </dev/null >/dev/null 2>&1 & " +
         corral_test::wait_for_file_sh(pid_file) + "; " + rest;
}

// Runs `sup`'s loop until the escapee has written its pid; 0 if it never does.
pid_t wait_for_escapee(corral::Supervisor& sup, const std::string& pid_file) {
  for (int i = 0; i < 500 && corral_test::read_file(pid_file).empty(); ++i) (void)sup.run_once(0.01);
  std::string text = corral_test::read_file(pid_file);
  return text.empty() ? 0 : static_cast<pid_t>(std::stol(text));
}

corral::Expected<std::unique_ptr<corral::Supervisor>> owning_supervisor() {
  corral::SupervisorOptions o;
  o.owns_every_child = true;
  return corral::Supervisor::create(o);
}

}  // namespace

// SupervisorOptions::owns_every_child with two runs in flight: the one that
// ends first leaves a setsid escapee, which cannot be told from the other
// run's processes then; it is killed by the time the supervisor is idle
// (at the last leader's exit, or at idle), and a supervisor without the
// option leaves it (a library caller's process may have children of its own).
Test(reaper, an_owning_supervisor_kills_what_a_run_left_while_another_was_in_flight, .timeout = 60) {
  for (bool owns : {true, false}) {
    corral_test::TempDir dir;
    auto report = corral_test::run_in_child_reporting([&](int fd) {
      corral::SupervisorOptions o;
      o.owns_every_child = owns;
      auto sup = corral::Supervisor::create(o);
      if (!sup) return 10;
      // Ends first, leaving an escapee that records its pid; the other
      // runs on meanwhile.
      auto early = submit_sh(**sup, leave_an_escapee(dir / "escapee", "sleep 0.3"));
      auto late = submit_sh(**sup, "sleep 1.5");
      if (!early || !late) return 11;
      early->detach();
      late->detach();
      if (!(*sup)->run_until_idle()) return 12;
      std::string text = corral_test::read_file(dir / "escapee");
      pid_t escapee = text.empty() ? 0 : static_cast<pid_t>(std::stol(text));
      const bool alive = escapee > 0 && corral_test::alive(escapee);
      std::string line = "escapee=" + std::to_string(escapee) + "\nalive=" + (alive ? "yes" : "no") + "\n";
      if (write(fd, line.data(), line.size()) < 0) return 13;
      if (alive) kill(escapee, SIGKILL);
      return 0;
    });
    cr_assert_eq(report.end.code, 0, "owns=%d: child exit %d: %s", owns, report.end.code, report.output.c_str());
    cr_assert(field(report.output, "escapee") != "0", "owns=%d: the escapee did not start", owns);
    expect_field(report, "alive", owns ? "no" : "yes");
  }
}

// A batch that never goes idle: the early run leaves a setsid escapee and
// ends while a later run, started after the escapee was born, is still in
// flight. The escapee descends from no run in flight then (it started
// before all of them), so it goes at the early run's end, not when the
// late run ends: checked while the late run is still running. A run that
// ends just before the early one takes the scan's turn (one each 0.1 s),
// so the early one's is owed, and the timer wheel must do it.
Test(reaper, an_escapee_older_than_every_run_in_flight_dies_at_its_runs_end, .timeout = 60) {
  corral_test::TempDir dir;
  auto report = corral_test::run_in_child_reporting([&](int fd) {
    auto sup = owning_supervisor();
    if (!sup) return 10;
    bool early_done = false;
    corral::RunCallbacks cb;
    cb.on_result = [&](const corral::Result&) { early_done = true; };
    auto early = submit_sh(**sup, leave_an_escapee(dir / "escapee", "sleep 0.5"), std::move(cb));
    auto just_before = submit_sh(**sup, "sleep 0.45");
    if (!early || !just_before) return 11;
    early->detach();
    just_before->detach();
    // The late run starts well after the escapee (start times count in
    // clock ticks, 10 ms).
    pid_t escapee = wait_for_escapee(**sup, dir / "escapee");
    for (int i = 0; i < 5; ++i) (void)(*sup)->run_once(0.01);
    auto late = submit_sh(**sup, "sleep 5");
    if (!late) return 12;
    late->detach();
    while (!early_done)
      if (!(*sup)->run_once(-1)) return 13;
    // The late run is still in flight here, for seconds yet.
    for (int i = 0; i < 20 && escapee > 0 && corral_test::alive(escapee); ++i) (void)(*sup)->run_once(0.01);
    const bool alive = escapee > 0 && corral_test::alive(escapee);
    std::string line = "escapee=" + std::to_string(escapee) + "\nalive_while_another_run_is_in_flight=" +
                       (alive ? "yes" : "no") + "\n";
    if (write(fd, line.data(), line.size()) < 0) return 14;
    if (alive) kill(escapee, SIGKILL);
    (*sup)->close();
    return 0;
  });
  cr_assert_eq(report.end.code, 0, "child exit %d: %s", report.end.code, report.output.c_str());
  cr_assert(field(report.output, "escapee") != "0", "the escapee did not start");
  expect_field(report, "alive_while_another_run_is_in_flight", "no");
}

// close() with runs still in flight: it kills them, and what they left
// (a setsid escapee outside their group) goes too under owns_every_child,
// though no leader exit and no idle loop ever looked for it.
Test(reaper, an_owning_supervisor_closed_with_runs_in_flight_kills_what_they_left, .timeout = 60) {
  corral_test::TempDir dir;
  auto report = corral_test::run_in_child_reporting([&](int fd) {
    auto sup = owning_supervisor();
    if (!sup) return 10;
    auto run = submit_sh(**sup, leave_an_escapee(dir / "escapee", "sleep 30"));
    if (!run) return 11;
    run->detach();
    pid_t escapee = wait_for_escapee(**sup, dir / "escapee");
    (*sup)->close();
    bool alive = escapee > 0 && corral_test::alive(escapee);
    std::string line = "escapee=" + std::to_string(escapee) + "\nalive=" + (alive ? "yes" : "no") + "\n";
    if (write(fd, line.data(), line.size()) < 0) return 13;
    if (alive) kill(escapee, SIGKILL);
    return 0;
  });
  cr_assert_eq(report.end.code, 0, "child exit %d: %s", report.end.code, report.output.c_str());
  cr_assert(field(report.output, "escapee") != "0", "the escapee did not start");
  expect_field(report, "alive", "no");
}

// The supervisor's leftover check (no_children_but_clone_children) takes
// ECHILD from a plain waitid as "nothing of any run is left". The guardian
// is a clone child (exit signal 0), which that waitid does not see; a
// program must not be able to hide the same way. Each way for a process
// to become a child of ours keeps it visible: a clone child is ours only
// when we made it, a CLONE_PARENT sibling gets its caller's SIGCHLD
// whatever exit signal it asks for, and an orphan re-parented to us gets
// SIGCHLD even when its parent was a clone child.
Test(reaper, no_process_hides_from_the_leftover_check_as_a_clone_child) {
  auto r = run_in_child_reporting([](int fd) {
    if (!become_subreaper().ok()) return 100;
    auto yes_no = [](bool b) { return std::string(b ? "yes" : "no"); };
    report(fd, "none_at_start=" + yes_no(no_children_but_clone_children()) + "\n");

    // 1. A clone child of ours, alive then a zombie: not seen, and still
    // waited for through its pidfd (wait_exit's __WALL).
    int go[2];
    if (pipe2(go, O_CLOEXEC) != 0) return 101;
    pid_t clone_child = raw_clone(0);
    if (clone_child == 0) {
      close(go[1]);
      wait_for_eof(go[0]);
      _exit(7);
    }
    close(go[0]);
    auto pidfd = Pidfd::open(clone_child);
    if (!pidfd) return 102;
    report(fd, "clone_child_alive_unseen=" + yes_no(no_children_but_clone_children()) + "\n");
    close(go[1]);
    eventually([&] {
      pollfd p{pidfd->fd(), POLLIN, 0};
      return poll(&p, 1, 0) == 1;
    });
    report(fd, "clone_child_zombie_unseen=" + yes_no(no_children_but_clone_children()) + "\n");
    auto st = wait_exit(*pidfd, false);
    report(fd, "clone_child_reaped_code=" +
                   (st && st->has_value() && (*st)->exited ? std::to_string((*st)->exit_code) : std::string("none")) +
                   "\n");

    // 2. A SIGCHLD child asks for a sibling (CLONE_PARENT) with exit signal
    // 0, then exits and is reaped: the sibling is ours, and seen.
    int sib[2], hold[2];
    if (pipe2(sib, O_CLOEXEC) != 0 || pipe2(hold, O_CLOEXEC) != 0) return 103;
    pid_t child = fork();
    if (child == 0) {
      pid_t sibling = raw_clone(CLONE_PARENT);  // exit signal bits 0
      if (sibling == 0) {
        close(hold[1]);
        wait_for_eof(hold[0]);
        _exit(0);
      }
      if (write(sib[1], &sibling, sizeof sibling) != sizeof sibling) _exit(1);
      _exit(0);
    }
    close(sib[1]);
    close(hold[0]);
    pid_t sibling = read_pid(sib[0]);
    waitpid(child, nullptr, 0);
    report(fd, std::string("sibling_is_ours=") + (sibling > 0 && getpgid(sibling) >= 0 ? "yes" : "no") + "\n");
    report(fd, "sibling_seen=" + yes_no(!no_children_but_clone_children()) + "\n");
    close(hold[1]);
    eventually([&] { return waitpid(sibling, nullptr, WNOHANG) == sibling; });

    // 3. A clone child's child, orphaned: re-parented to us, and seen.
    int orphan_go[2];
    if (pipe2(orphan_go, O_CLOEXEC) != 0) return 104;
    int ready[2];
    if (pipe2(ready, O_CLOEXEC) != 0) return 105;
    pid_t parent = raw_clone(0);
    if (parent == 0) {
      if (fork() == 0) {
        close(orphan_go[1]);
        wait_for_eof(orphan_go[0]);
        _exit(0);
      }
      _exit(0);  // leaves its child to us
    }
    close(orphan_go[0]);
    siginfo_t info{};
    waitid(P_PID, static_cast<id_t>(parent), &info, WEXITED | __WALL);
    report(fd, "orphan_seen=" + yes_no(!no_children_but_clone_children()) + "\n");
    close(orphan_go[1]);
    std::size_t reaped = 0;
    eventually([&] { return (reaped += reap_orphans()) >= 1; });
    report(fd, "none_at_end=" + yes_no(no_children_but_clone_children()) + "\n");
    return 0;
  });
  cr_assert(r.end.exited && r.end.code == 0, "exit %d signal %d; report:\n%s", r.end.code, r.end.signal,
            r.output.c_str());
  expect_field(r, "none_at_start", "yes");
  expect_field(r, "clone_child_alive_unseen", "yes");
  expect_field(r, "clone_child_zombie_unseen", "yes");
  expect_field(r, "clone_child_reaped_code", "7");
  expect_field(r, "sibling_is_ours", "yes");
  expect_field(r, "sibling_seen", "yes");
  expect_field(r, "orphan_seen", "yes");
  expect_field(r, "none_at_end", "yes");
}
