#include "corral/process.hpp"

#include <signal.h>
#include <sys/syscall.h>
#include <time.h>

#include <string>

#include "corral/spawn.hpp"
#include "corral/syscalls.hpp"
#include "support.hpp"

using namespace corral;

namespace {

struct ExecArgs {
  const char* path;
  char* const* argv;
  int setsid_result = -1;
};

int exec_child(void* p) noexcept {
  auto* a = static_cast<ExecArgs*>(p);
  a->setsid_result = become_session_leader_in_child();
  static char* const envp[] = {nullptr};
  sys::call(SYS_execve, reinterpret_cast<long>(a->path), reinterpret_cast<long>(a->argv),
            reinterpret_cast<long>(envp));
  return 127;
}

ExitStatus wait_ok(const Pidfd& child) {
  auto st = wait_exit(child);
  cr_assert(st.ok(), "%s", st.ok() ? "" : st.error().message().c_str());
  cr_assert(st->has_value());
  return **st;
}

bool process_gone(pid_t pid) {
  // Gone, or a zombie waiting for init: either way it no longer runs.
  for (int i = 0; i < 200; ++i) {
    std::string stat = corral_test::read_file("/proc/" + std::to_string(pid) + "/stat");
    if (stat.empty()) return true;
    auto close = stat.rfind(')');
    if (close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z') return true;
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, nullptr);
  }
  return false;
}

}  // namespace

Test(process, vfork_clone_runs_and_reports_exit_code) {
  auto stack = ChildStack::allocate();
  cr_assert(stack.ok());
  static char* const argv[] = {const_cast<char*>("sh"), const_cast<char*>("-c"),
                               const_cast<char*>("exit 7"), nullptr};
  ExecArgs args{"/bin/sh", argv};
  CloneSpec spec;
  spec.share_memory = true;
  spec.stack = &*stack;
  auto child = clone_child(spec, exec_child, &args);
  cr_assert(child.ok(), "%s", child.ok() ? "" : child.error().message().c_str());
  cr_assert_eq(args.setsid_result, 0, "setsid in the child failed");  // shared memory: visible here
  ExitStatus st = wait_ok(*child);
  cr_assert(st.exited);
  cr_assert_eq(st.exit_code, 7);
}

Test(process, fork_clone_reports_signal_and_rusage) {
  static char* const argv[] = {const_cast<char*>("sh"), const_cast<char*>("-c"),
                               const_cast<char*>("i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; kill -SEGV $$"),
                               nullptr};
  ExecArgs args{"/bin/sh", argv};
  auto child = clone_child(CloneSpec{}, exec_child, &args);
  cr_assert(child.ok());
  ExitStatus st = wait_ok(*child);
  cr_assert(!st.exited);
  cr_assert_eq(st.signal, SIGSEGV);
  cr_assert_gt(st.cpu_seconds(), 0.0);
  cr_assert_gt(st.max_rss_bytes(), 0u);
}

Test(process, exec_failure_is_the_childs_exit_status) {
  static char* const argv[] = {const_cast<char*>("nope"), nullptr};
  ExecArgs args{"/nonexistent/program", argv};
  auto stack = ChildStack::allocate();
  CloneSpec spec;
  spec.share_memory = true;
  spec.stack = &*stack;
  auto child = clone_child(spec, exec_child, &args);
  cr_assert(child.ok());
  ExitStatus st = wait_ok(*child);
  cr_assert(st.exited);
  cr_assert_eq(st.exit_code, 127);
}

Test(process, nonblocking_wait_and_pidfd_signal) {
  static char* const argv[] = {const_cast<char*>("sleep"), const_cast<char*>("30"), nullptr};
  ExecArgs args{"/bin/sleep", argv};
  auto child = clone_child(CloneSpec{}, exec_child, &args);
  cr_assert(child.ok());
  auto early = wait_exit(*child, false);
  cr_assert(early.ok());
  cr_assert(!early->has_value(), "a sleeping child reported an exit");
  cr_assert_eq(child->send_signal(SIGTERM), 0);
  ExitStatus st = wait_ok(*child);
  cr_assert_eq(st.signal, SIGTERM);
  cr_assert_eq(child->send_signal(SIGTERM), ESRCH, "signal to a reaped child must fail");
}

Test(process, group_kill_reaches_grandchildren) {
  int fds[2];
  cr_assert_eq(pipe(fds), 0);
  // The child leads its own group and forks a sleeping grandchild that
  // reports its pid; killing the group must take the grandchild too.
  struct Ctx { int wfd; } ctx{fds[1]};
  auto fn = [](void* p) noexcept -> int {
    auto* c = static_cast<Ctx*>(p);
    if (become_session_leader_in_child() != 0) return 1;
    pid_t g = fork();
    if (g == 0) {
      pid_t me = getpid();
      if (write(c->wfd, &me, sizeof me) != sizeof me) _exit(2);
      for (;;) pause();
    }
    for (;;) pause();
  };
  auto child = clone_child(CloneSpec{}, fn, &ctx);
  cr_assert(child.ok());
  close(fds[1]);
  pid_t grandchild = 0;
  cr_assert_eq(read(fds[0], &grandchild, sizeof grandchild), (ssize_t)sizeof grandchild);
  close(fds[0]);
  cr_assert_eq(getpgid(grandchild), child->pid(), "grandchild is not in the child's group");
  cr_assert_eq(kill_group(*child, SIGKILL), 0);
  ExitStatus st = wait_ok(*child);
  cr_assert_eq(st.signal, SIGKILL);
  cr_assert(process_gone(grandchild), "grandchild %d survived the group kill", grandchild);
}

Test(process, pidfd_open_names_a_missing_pid) {
  auto p = Pidfd::open(0x3fffffff);
  cr_assert(!p.ok());
  cr_assert(p.error().message().find("pidfd_open") != std::string::npos);
}

// ignored_signal_mask() must name exactly the signals sigaction() reports
// as SIG_IGN (an ignored SIGHUP and SIGUSR2 in, a handled SIGUSR1 and a
// default SIGTERM out), bit n for signal n.
Test(process, ignored_signal_mask_matches_sigaction) {
  struct sigaction ign {}, handled {}, old_hup {}, old_usr1 {}, old_usr2 {};
  ign.sa_handler = SIG_IGN;
  handled.sa_handler = [](int) {};
  sigaction(SIGHUP, &ign, &old_hup);
  sigaction(SIGUSR2, &ign, &old_usr2);
  sigaction(SIGUSR1, &handled, &old_usr1);
  std::uint64_t mask = ignored_signal_mask();
  std::uint64_t expected = 0;
  for (int sig = 1; sig < 32; ++sig) {
    struct sigaction sa {};
    if (sig != SIGKILL && sig != SIGSTOP && sigaction(sig, nullptr, &sa) == 0 && sa.sa_handler == SIG_IGN)
      expected |= std::uint64_t{1} << sig;
  }
  sigaction(SIGHUP, &old_hup, nullptr);
  sigaction(SIGUSR2, &old_usr2, nullptr);
  sigaction(SIGUSR1, &old_usr1, nullptr);
  cr_assert_eq(mask, expected, "mask %llx, sigaction says %llx", static_cast<unsigned long long>(mask),
               static_cast<unsigned long long>(expected));
  cr_assert(mask & (std::uint64_t{1} << SIGHUP));
  cr_assert(mask & (std::uint64_t{1} << SIGUSR2));
  cr_assert_eq(mask & ((std::uint64_t{1} << SIGUSR1) | (std::uint64_t{1} << SIGTERM)), 0u);
}
