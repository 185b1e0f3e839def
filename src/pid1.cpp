// pid 1 of a container run's pid namespace (namespaces.hpp): it splits
// off the program, then reaps, forwards signals and reports the program's
// end. In template mode it drops to the run's host ids before the program,
// which enters the user namespace template, goes on.
// Everything here runs in the cloned child: raw syscalls only.
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include <cstring>

#include "corral/namespaces.hpp"
#include "corral/process.hpp"
#include "corral/syscalls.hpp"

// src/process.cpp's clone3 trampoline: fn(arg) on the new stack, then exit_group.
extern "C" long corral_clone3_raw(struct clone_args* args, std::size_t size, corral::ChildFunction fn, void* arg);

namespace corral {

namespace {

constexpr std::uint64_t sigbit(int sig) { return 1ull << (sig - 1); }
// What pid 1 takes synchronously: SIGCHLD to reap, the rest to forward.
// The kernel's sigset is 64 bits; rt_sig* calls get its size, 8.
constexpr std::uint64_t kPid1Signals = sigbit(SIGCHLD) | sigbit(SIGTERM) | sigbit(SIGINT) | sigbit(SIGHUP) |
                                       sigbit(SIGQUIT) | sigbit(SIGUSR1) | sigbit(SIGUSR2);
constexpr long kSigsetSize = 8;

[[noreturn]] void exit_now(int code) noexcept {
  for (;;) sys::call(SYS_exit_group, code);
}

// pid 1 keeps nothing it does not need: the program's pipes must see EOF
// when the program and its descendants are gone (and an exec-error pipe
// must not be held open by a process that never execs); no capabilities in
// the namespace; not dumpable, so the program (same uid) cannot ptrace it
// or read its memory through /proc. A pid 1 on the spawner's memory
// (Pid1UserNs::program_stack) leaves the flag alone: it is the address
// space's, so the spawner's, and not ours to keep. There the program's
// ids map to pid 1's host uid and gid, so the kernel's ptrace check passes
// its id test (it compares host ids) and falls to that flag, which the
// kernel sets to fs.suid_dumpable at each id change of a task on that
// memory (1: dumpable; a PR_SET_DUMPABLE 0 here would be undone by the
// next run's pid 1), and to the LSMs. Two of those refuse the program
// whatever the flag says: the capability check (the program is in a user
// namespace below pid 1's and holds no CAP_SYS_PTRACE over pid 1's;
// measured with suid_dumpable=1 and no Landlock: /proc/PID/mem and environ
// EACCES, process_vm_readv, ptrace and pidfd_getfd EPERM, where a tracer
// of the same uid in pid 1's namespace got all five), and the program's
// Landlock domain (the template's scoping, container.cpp), which refuses
// it any process outside the domain. The program's /proc does not list
// pid 1 (hidepid=ptraceable, mount_tree.cpp).
//
// All of it before the program is released (split_program_in_child). Where
// the program's ids are pid 1's and nothing reset the dumpable flag
// (rootless: the id switch changed no host id), a program running beside
// it could seize it with ptrace: its first steps, which hold the same
// capabilities, at once; an exec'd program without any, between pid 1's
// capset and its PR_SET_DUMPABLE, and then write pid 1's report.
// `keep_fd` (the release pipe) stays open with `report_fd`.
void harden_pid1(int report_fd, int keep_fd, bool own_memory) noexcept {
  int lo = report_fd < keep_fd ? report_fd : keep_fd, hi = report_fd < keep_fd ? keep_fd : report_fd;
  int from = 0;
  for (int keep : {lo, hi}) {
    if (keep < 0) continue;
    if (keep > from) sys::call(SYS_close_range, from, keep - 1, 0);
    from = keep + 1;
  }
  sys::call(SYS_close_range, from, ~0u, 0);
  struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];
  std::memset(data, 0, sizeof data);
  sys::call(SYS_capset, reinterpret_cast<long>(&hdr), reinterpret_cast<long>(data));
  if (own_memory) sys::call(SYS_prctl, PR_SET_DUMPABLE, 0, 0, 0, 0);
  sys::call(SYS_prctl, PR_SET_NAME, reinterpret_cast<long>("corral-init"), 0, 0, 0);
}

[[noreturn]] void finish_pid1(int status, int report_fd) noexcept {
  if (report_fd >= 0) {
    Pid1Report report{kPid1ReportMagic, status};
    sys::write_all(report_fd, &report, sizeof report);
  }
  int code = 255;
  if (WIFEXITED(status)) code = WEXITSTATUS(status);
  else if (WIFSIGNALED(status)) code = kPid1SignalExitBase + WTERMSIG(status);
  exit_now(code);
}

// Reap everything that has ended; finish when the program is among them.
void reap_pid1(pid_t program, int report_fd, long options) noexcept {
  int status = 0;
  long pid;
  while ((pid = sys::call(SYS_wait4, -1, reinterpret_cast<long>(&status), options | __WALL, 0)) > 0) {
    if (pid == program) finish_pid1(status, report_fd);
    if (!(options & WNOHANG)) return;
  }
}

[[noreturn]] void pid1_loop(pid_t program, int report_fd) noexcept {
  siginfo_t info;
  for (;;) {
    long sig = sys::call(SYS_rt_sigtimedwait, reinterpret_cast<long>(&kPid1Signals),
                         reinterpret_cast<long>(&info), 0, kSigsetSize);
    if (sig == SIGCHLD) {
      // SIGCHLDs coalesce: one wakeup reaps all; a child ending after the
      // last wait4 raises a fresh pending SIGCHLD.
      reap_pid1(program, report_fd, WNOHANG);
    } else if (sig > 0) {
      sys::call(SYS_kill, program, sig);
    } else if (sig != -EINTR) {
      // Should not happen; do not spin. Blocking reaping still ends us.
      reap_pid1(program, report_fd, 0);
    }
  }
}

int read_int_in_child(int fd, int fallback) noexcept {
  int v = fallback;
  long n;
  while ((n = sys::call(SYS_read, fd, reinterpret_cast<long>(&v), sizeof v)) == -EINTR) {
  }
  return n == static_cast<long>(sizeof v) ? v : fallback;
}

// pid 1 with a Pid1UserNs: still the host's root (it made the mounts). It
// drops to the outside ids and checks the supervisor before it lets the
// program go (release_program_in_pid1, after harden_pid1), so no code of
// the program's ever runs beside a host-root pid 1; if either fails pid 1
// ends (and the pid namespace with it), and the program reads EOF.
void drop_in_pid1(const Pid1UserNs& u) noexcept {
  sys::call(SYS_close, u.userns_fd);
  if (sys::call(SYS_setresgid, u.outside_gid, u.outside_gid, u.outside_gid) < 0 ||
      sys::call(SYS_setresuid, u.outside_uid, u.outside_uid, u.outside_uid) < 0)
    exit_now(kPid1SignalExitBase + SIGKILL);
  if (u.parent_pidfd >= 0 && die_with_parent_in_child(u.parent_pidfd) != 0) exit_now(kPid1SignalExitBase + SIGKILL);
}

void release_program_in_pid1(int go) noexcept {
  int answer = 0;
  sys::write_all(go, &answer, sizeof answer);
  sys::call(SYS_close, go);
}

// The program's side: into the user namespace template (still host root,
// so setns may), then, once pid 1 has dropped and hardened, the inside ids
// (which keep its capabilities there: the inside 0 is unmapped; the
// program's later steps drop them).
int program_userns_in_child(int go, const Pid1UserNs& u, NsFailure* f) noexcept {
  int err = sys::error_of(sys::call(SYS_setns, u.userns_fd, CLONE_NEWUSER));
  sys::call(SYS_close, u.userns_fd);
  int answer = read_int_in_child(go, ECANCELED);
  sys::call(SYS_close, go);
  if (err || answer) {
    f->stage = err ? NsStage::user_ns : NsStage::pid1_drop;
    return f->err = err ? err : answer;
  }
  return switch_ids_in_child(u.inside_gid, u.inside_uid, f);
}

// Without a Pid1UserNs: only the wait for pid 1's release (EOF: pid 1 died
// before it, and the program must not go on alone).
int program_wait_for_release_in_child(int go, NsFailure* f) noexcept {
  int answer = read_int_in_child(go, ECANCELED);
  sys::call(SYS_close, go);
  if (answer) {
    f->stage = NsStage::pid1;
    return f->err = answer;
  }
  return 0;
}

int fail_pid1(NsFailure* f, long ret) noexcept {
  f->stage = NsStage::pid1;
  return f->err = sys::error_of(ret);
}

}  // namespace

namespace {

// What the program starts with, forked or made with CLONE_VM; on pid 1's
// stack, which stays put (pid 1 never returns from split_program_in_child).
struct ProgramStart {
  ProgramFunction program;  // null: forked, and the caller goes on in the program
  void* arg;
  const Pid1UserNs* userns;
  int go, go_write;  // the pipe pid 1 releases the program through, once it has hardened
  int report_fd;
  std::uint64_t old_mask;
  NsFailure* failure;
};

// The program's first steps, either way: the mask it came with, none of
// pid 1's fds, then the user namespace step. 0 or the errno.
int begin_program_in_child(const ProgramStart& s) noexcept {
  sys::call(SYS_rt_sigprocmask, SIG_SETMASK, reinterpret_cast<long>(&s.old_mask), 0, kSigsetSize);
  if (s.report_fd >= 0) sys::call(SYS_close, s.report_fd);
  // pid 1's end: held here, a pid 1 that died would never give us EOF.
  sys::call(SYS_close, s.go_write);
  return s.userns ? program_userns_in_child(s.go, *s.userns, s.failure)
                  : program_wait_for_release_in_child(s.go, s.failure);
}

int start_program_in_child(void* p) noexcept {
  auto* s = static_cast<ProgramStart*>(p);
  return s->program(s->arg, begin_program_in_child(*s));
}

// The CLONE_VM program's stack: it runs beside pid 1 in one address space
// until its execve, so an overflow must fault on the guard page, not write
// pid 1's memory.
constexpr long kProgramStackBytes = 128 * 1024;
constexpr long kGuardBytes = 4096;

// Child side; async-signal-safe. The signals pid 1 handles are blocked
// before the split, so none can be lost between it and the wait loop (an
// init ignores signals it has no handler for unless they are blocked:
// blocked ones stay pending and rt_sigtimedwait collects them). With
// `program`, the program is made with CLONE_VM on a stack of its own and
// runs it; without, it is forked and this returns in it (0 or the errno of
// its user namespace step).
int split_program_in_child(int report_fd, const Pid1UserNs* userns, NsFailure* failure, ProgramFunction program,
                           void* arg) noexcept {
  NsFailure local;
  NsFailure* f = failure ? failure : &local;
  // The program's stack: the spawner's when pid 1 runs on its memory (a
  // mapping of ours would stay in the spawner's address space), else ours.
  const bool own_memory = !(userns && userns->program_stack);
  std::uint64_t stack = 0, stack_size = kProgramStackBytes;
  if (program && !own_memory) {
    stack = reinterpret_cast<std::uint64_t>(userns->program_stack);
    stack_size = static_cast<std::uint64_t>(userns->program_stack_size);
  } else if (program) {
    long map = sys::call(SYS_mmap, 0, kProgramStackBytes + kGuardBytes, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (map < 0) return fail_pid1(f, map);
    if (long r = sys::call(SYS_mprotect, map, kGuardBytes, PROT_NONE); r < 0) return fail_pid1(f, r);
    stack = static_cast<std::uint64_t>(map) + kGuardBytes;
  }
  int go[2] = {-1, -1};
  if (long r = sys::call(SYS_pipe2, reinterpret_cast<long>(go), O_CLOEXEC); r < 0) return fail_pid1(f, r);
  ProgramStart start{program, arg, userns, go[0], go[1], report_fd, 0, f};
  long ret = sys::call(SYS_rt_sigprocmask, SIG_BLOCK, reinterpret_cast<long>(&kPid1Signals),
                       reinterpret_cast<long>(&start.old_mask), kSigsetSize);
  long pid = ret;
  if (ret >= 0 && program) {
    struct clone_args ca;
    std::memset(&ca, 0, sizeof ca);
    ca.flags = CLONE_VM;
    ca.exit_signal = SIGCHLD;
    ca.stack = stack;
    ca.stack_size = stack_size;
    pid = corral_clone3_raw(&ca, sizeof ca, start_program_in_child, &start);
  } else if (ret >= 0) {
    pid = sys::call(SYS_clone, SIGCHLD, 0, 0, 0, 0);
    if (pid == 0) return begin_program_in_child(start);
  }
  if (pid < 0) {
    if (ret >= 0) sys::call(SYS_rt_sigprocmask, SIG_SETMASK, reinterpret_cast<long>(&start.old_mask), 0, kSigsetSize);
    for (int fd : {go[0], go[1]})
      if (fd >= 0) sys::call(SYS_close, fd);
    return fail_pid1(f, pid);
  }
  // pid 1. A CLONE_VM program has our memory until it execs: from here we
  // write nothing it reads (`start` and what it points to stay as they are).
  // The program waits on `go` until pid 1 has dropped (template mode) and
  // hardened: no instruction of its runs beside a pid 1 it could seize.
  sys::call(SYS_close, go[0]);
  if (userns) drop_in_pid1(*userns);
  harden_pid1(report_fd, go[1], own_memory);
  release_program_in_pid1(go[1]);
  pid1_loop(static_cast<pid_t>(pid), report_fd);
}

}  // namespace

int fork_program_under_pid1_in_child(int report_fd, const Pid1UserNs* userns, NsFailure* failure) noexcept {
  return split_program_in_child(report_fd, userns, failure, nullptr, nullptr);
}

int clone_program_under_pid1_in_child(int report_fd, const Pid1UserNs* userns, NsFailure* failure,
                                      ProgramFunction program, void* arg) noexcept {
  return split_program_in_child(report_fd, userns, failure, program, arg);
}

int fork_program_under_pid1_in_child(int report_fd) noexcept {
  NsFailure f;
  return fork_program_under_pid1_in_child(report_fd, nullptr, &f);
}

}  // namespace corral
