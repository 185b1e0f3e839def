// The container tier's spawn path (see container.hpp): a fork-like clone3
// into new namespaces, the parent writing the uid/gid maps while the child
// waits, pid 1 splitting off the program, and the program's last steps
// before execve. Everything named *_child runs in the cloned process and is
// async-signal-safe: raw syscalls only, no allocation, no locks, no stdio.
// Built per run it runs on a copy of the parent's memory (no CLONE_VM); in
// a namespace template on the parent's own (CLONE_VM, the parent waiting
// until the program has exec'd), so it writes nothing of the parent's but
// the ChildArgs it was given.
#include <fcntl.h>
#include <linux/sched.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "corral/container.hpp"
#include "corral/run_setup.hpp"
#include "corral/session_join.hpp"
#include "corral/syscalls.hpp"

// src/process.cpp's clone3 trampoline: fn(arg) on the new stack, then exit_group.
extern "C" long corral_clone3_raw(struct clone_args* args, std::size_t size, corral::ChildFunction fn, void* arg);

namespace corral {
namespace {

// What a child that failed before exec writes to the error pipe. One write,
// under PIPE_BUF: atomic.
struct ChildRecord {
  SpawnStage stage = SpawnStage::none;  // none: the set-up is done, exec comes next
  std::int32_t err = 0;
  NsFailure ns;
  std::uint64_t setup_ns = 0;  // child entry -> just before execve (stage none)
  std::uint64_t clone_ns = 0;  // the parent's clone3 call -> child entry
};

// The fd numbers the program sees before exec: 0-2 its stdio, 3 the error
// pipe (CLOEXEC: execve closes it, which is how the parent knows).
constexpr int kProgramErrorFd = 3;
// Where the program's fds are lifted before they are dup'ed into 0-3, so no
// source is overwritten while it is still needed.
constexpr long kLiftAbove = 10;

struct ChildArgs {
  const ChildPlan* plan;
  const PreparedNamespaces* ns;
  const RunCgroup* join_cgroup;  // v1: join from the child; null otherwise
  bool unshare_cgroup_ns;        // v1: the cgroup namespace after the join
  int sources[3];                // stdin, stdout, stderr in the child's copy of the table
  int error_fd;                  // write end of the error pipe
  int report_fd;                 // write end of pid 1's report pipe
  std::uint64_t reset_mask;      // signals the parent ignores: back to SIG_DFL
  std::uint64_t start_ns;        // the parent's clock before clone3; the child's entry once it runs
  ChildRecord record;
};

int fail_in_child(ChildArgs* a, SpawnStage stage, int err) noexcept {
  a->record.stage = stage;
  a->record.err = err;
  sys::write_all(a->error_fd, &a->record, sizeof a->record);
  return 127;
}

// The program's process (pid 2 inside): 0-2 from the sources, the error
// pipe at 3, nothing else open.
int install_fds_in_child(ChildArgs* a) noexcept {
  return sys::install_program_fds(a->sources, a->error_fd, kProgramErrorFd, kLiftAbove);
}

int program_steps_in_child(void* p, int ns_err) noexcept;

// Entry of the cloned child. Returns only to fail (the trampoline then
// exit_group()s with 127); pid 1 never returns from the namespace step.
int container_child(void* p) noexcept {
  auto* a = static_cast<ChildArgs*>(p);
  // Our own copy of the arguments: the set-up is timed from here.
  const std::uint64_t entry = sys::monotonic_ns();
  a->record.clone_ns = entry - a->start_ns;
  a->start_ns = entry;

  // CLONE_CLEAR_SIGHAND reset every handler; what the parent ignored stays
  // ignored unless we reset it. Unblocked here, so the mask pid 1 restores
  // in the program is empty.
  sys::reset_signals_to_default(a->reset_mask);
  if (int e = sys::unblock_all_signals())
    return fail_in_child(a, SpawnStage::signals, e);
  // pgid = our host pid: the supervisor's killpg reaches pid 1 and the program.
  if (int e = become_session_leader_in_child()) return fail_in_child(a, SpawnStage::setsid, e);
  // pid 1 too: the program inherits it, and pid 1 killed ends the run.
  if (a->plan->first_oom_victim)
    if (int e = make_first_oom_victim_in_child()) return fail_in_child(a, SpawnStage::oom_score, e);

  if (a->join_cgroup)
    if (int e = join_cgroup_in_child(*a->join_cgroup)) return fail_in_child(a, SpawnStage::cgroup, e);
  // After the join, so the new cgroup namespace is rooted at the run's group.
  // CAP_SYS_ADMIN: we hold every capability in the user namespace clone made.
  if (a->unshare_cgroup_ns)
    if (int e = sys::error_of(sys::call(SYS_unshare, CLONE_NEWCGROUP)))
      return fail_in_child(a, SpawnStage::namespaces, e);

  // Waits for the maps, switches to the inside ids, hostname, lo, the mount
  // tree (cwd /workspace), then splits off the program, which goes on in
  // program_steps_in_child (pid 1 never returns).
  int e = apply_namespaces_in_child(*a->ns, a->report_fd, &a->record.ns, program_steps_in_child, a);
  return fail_in_child(a, SpawnStage::namespaces, e);
}

// The program's last steps, with CLONE_VM beside pid 1 until its execve
// (apply_namespaces_in_child): only its stack, the plan and raw calls.
int program_steps_in_child(void* p, int ns_err) noexcept {
  auto* a = static_cast<ChildArgs*>(p);
  const ChildPlan& plan = *a->plan;
  if (ns_err) return fail_in_child(a, SpawnStage::namespaces, ns_err);

  // The shared template's scoping (container.cpp), while its ruleset fd is
  // still open; we hold CAP_SYS_ADMIN in our own user namespace, which
  // landlock_restrict_self accepts in place of no_new_privs.
  if (plan.landlock)
    if (int e = apply_landlock_in_child(*plan.landlock)) return fail_in_child(a, SpawnStage::landlock, e);
  if (int e = install_fds_in_child(a)) return fail_in_child(a, SpawnStage::fds, e);
  if (plan.rlimits)
    if (int e = apply_rlimits_in_child(*plan.rlimits)) return fail_in_child(a, SpawnStage::rlimits, e);
  // The inside uid 0 is unmapped, so the uid switch kept our capabilities in
  // the namespace (only a move away from the namespace's root clears them):
  // empty the bounding and ambient sets while CAP_SETPCAP is still ours, then
  // permitted/effective/inheritable, then no_new_privs.
  if (int e = drop_all_capabilities_now()) return fail_in_child(a, SpawnStage::capabilities, e);
  if (plan.seccomp)
    if (int e = apply_seccomp_in_child(*plan.seccomp)) return fail_in_child(a, SpawnStage::seccomp, e);

  // The set-up time, as a record of its own: nobody polls this pipe while
  // the run goes on, so the write wakes no one; a failed execve adds the
  // record that counts (the last one).
  a->record.setup_ns = sys::monotonic_ns() - a->start_ns;
  sys::write_all(a->error_fd, &a->record, sizeof a->record);
  return fail_in_child(a, SpawnStage::execve, exec_plan_in_child(plan));
}

// Template mode's stacks: pid 1 sets up the namespaces and the mount tree
// on one, the program takes its last steps on the other. 128 KiB each, as
// pid 1's own mapping for the program was; only touched pages cost.
constexpr std::size_t kBorrowedStackBytes = 128 * 1024;

// Template mode: pid 1 cloned with CLONE_VM on a stack of the run's
// (BorrowedStacks), so nothing of our address space is copied. Every
// signal is blocked by the caller around the call.
Expected<Pidfd> clone_on_our_memory(std::uint64_t flags, int cgroup_fd, BorrowedStacks& stacks, ChildArgs* args) {
  int pidfd = -1;
  struct clone_args ca;
  std::memset(&ca, 0, sizeof ca);
  ca.flags = flags | CLONE_PIDFD | CLONE_VM;
  ca.pidfd = reinterpret_cast<std::uint64_t>(&pidfd);
  ca.exit_signal = SIGCHLD;
  ca.stack = reinterpret_cast<std::uint64_t>(stacks.pid1.base());
  ca.stack_size = stacks.pid1.size();
  if (cgroup_fd >= 0) {
    ca.flags |= CLONE_INTO_CGROUP;
    ca.cgroup = static_cast<std::uint64_t>(cgroup_fd);
  }
  long pid = corral_clone3_raw(&ca, sizeof ca, container_child, args);
  if (pid < 0) return Error::from_errno(sys::error_of(pid), "clone3 (CLONE_VM)");
  return Pidfd(static_cast<pid_t>(pid), UniqueFd(pidfd));
}

// Until the program has exec'd (the pipe's CLOEXEC write end closes) or
// the child has failed and exited, it reads our memory: wait for EOF,
// keeping what it wrote for read_container_exec_report. pid 1 closes its
// copy of the pipe as soon as it lets the program go (harden_pid1).
void wait_for_exec(int fd, std::string& records) {
  char buf[4 * sizeof(ChildRecord)];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      records.append(buf, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return;  // EOF (or a read error: nothing more will come)
  }
}

}  // namespace

BorrowedStacks::~BorrowedStacks() {
  if (!pid1_pidfd) return;  // no child was ever made on them
  // A pidfd turns readable once its process has exited; after that nothing
  // runs on these stacks (the program went with pid 1's namespace).
  struct pollfd p = {pid1_pidfd.get(), POLLIN, 0};
  if (::poll(&p, 1, 0) == 1) return;
  (void)sys::call(SYS_pidfd_send_signal, pid1_pidfd.get(), SIGKILL, 0, 0);
  while (::poll(&p, 1, -1) < 0 && errno == EINTR) {
  }
}

Expected<Spawner::Child> spawn_container(ChildPlan& plan, ContainerRun& c) {
  return spawn_container(plan, c, ignored_signal_mask());
}

Expected<Spawner::Child> spawn_container(ChildPlan& plan, ContainerRun& c, std::uint64_t ignored_signals) {
  if (c.session) return spawn_session_exec(plan, c, ignored_signals);  // joins a live session (session_join.hpp)
  Spawner::Child child;
  UniqueFd out_write, err_write, error_read, error_write, report_write;
  // Our read ends stay blocking: the supervisor reads them with RWF_NOWAIT
  // (and makes them O_NONBLOCK itself where the kernel lacks it).
  if (auto st = make_child_pipe(child.stdout_read, out_write, "stdout", false); !st) return std::move(st).error();
  if (!plan.merge_output)
    if (auto st = make_child_pipe(child.stderr_read, err_write, "stderr", false); !st) return std::move(st).error();
  if (auto st = make_child_pipe(error_read, error_write, "the exec report", false); !st) return std::move(st).error();
  if (auto st = make_child_pipe(c.pid1_report, report_write, "pid 1's report", true); !st) return std::move(st).error();

  ChildArgs args{};
  args.plan = &plan;
  args.ns = &c.ns;
  args.join_cgroup = (c.cgroup && c.join_in_child) ? &*c.cgroup : nullptr;
  args.unshare_cgroup_ns = c.join_in_child;
  args.sources[0] = plan.stdin_fd ? plan.stdin_fd.get() : c.devnull.get();
  args.sources[1] = out_write.get();
  args.sources[2] = plan.merge_output ? out_write.get() : err_write.get();
  args.error_fd = error_write.get();
  args.report_fd = report_write.get();
  args.reset_mask = ignored_signals;

  CloneSpec spec;
  spec.flags = c.ns.clone_flags() | CLONE_CLEAR_SIGHAND;
  if (c.cgroup && !c.join_in_child) spec.cgroup_fd = c.cgroup->cgroup_fd();
  // In a template the program's Landlock domain (the template's scoping)
  // keeps it from pid 1, so from our memory, whatever our dumpable flag
  // says (pid1.cpp): the child may share ours (see spawn_container in
  // container.hpp). Built per run,
  // pid 1 and the program share one user namespace and one uid, and only
  // pid 1's own dumpable flag keeps the program out: a fork-like copy.
  // Under a memory ceiling pid 1 sits in a group whose OOM killer may
  // choose it (its mm's pages are ours: often the most in the group when
  // the program's memory is page cache or tmpfs), and killing it would kill
  // every process of that mm: a copy then too (ContainerRun::memory_ceiling).
  const bool share = c.ns.in_template() && !c.memory_ceiling;
  if (share) {
    auto pid1_stack = ChildStack::allocate(kBorrowedStackBytes);
    if (!pid1_stack) return std::move(pid1_stack).error().context("container: pid 1's stack");
    auto program_stack = ChildStack::allocate(kBorrowedStackBytes);
    if (!program_stack) return std::move(program_stack).error().context("container: the program's stack");
    c.stacks.emplace();
    c.stacks->pid1 = std::move(*pid1_stack);
    c.stacks->program = std::move(*program_stack);
    c.ns.share_spawner_memory(c.stacks->program.base(), c.stacks->program.size());
  }
  // No handler of ours may run in the child before it resets them; the
  // child sets its own mask.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  auto t0 = std::chrono::steady_clock::now();
  args.start_ns = sys::monotonic_ns();
  auto pidfd = share ? clone_on_our_memory(spec.flags, spec.cgroup_fd, *c.stacks, &args)
                     : clone_child(spec, container_child, &args);
  child.clone_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (share && pidfd) {
    // Before anything of ours that the child reads changes (the plan, `c`,
    // `args` on this stack): the stacks' keeper first, then the wait.
    c.stacks->pid1_pidfd.reset(::fcntl(pidfd->fd(), F_DUPFD_CLOEXEC, 0));
    if (!c.stacks->pid1_pidfd) {
      // Without it the stacks could not be kept safely: end the child now.
      (void)pidfd->send_signal(SIGKILL);
      error_write.reset();
      wait_for_exec(error_read.get(), c.exec_records);
      (void)wait_exit(*pidfd, true);
      c.ns.abandon();
      return Error::from_errno(errno, "container: copy pid 1's pidfd");
    }
    error_write.reset();
    wait_for_exec(error_read.get(), c.exec_records);
  }

  // Our copies of the child's ends: holding them would keep EOF from ever
  // coming on stdout, the error pipe and pid 1's report. Those of stdout
  // and stderr go back to the caller, whose ring closes them (Spawner::Child).
  child.stdout_write = std::move(out_write);
  child.stderr_write = std::move(err_write);
  error_write.reset();
  report_write.reset();
  plan.stdin_fd.reset();
  c.devnull.reset();
  if (!pidfd) {
    c.ns.abandon();
    return std::move(pidfd).error().context("container: spawn");
  }
  child.pidfd = std::move(*pidfd);

  auto fail = [&](SpawnStage stage, int err, std::string message) {
    child.report.stage = stage;
    child.report.error = err;
    c.failure = std::move(message);
    kill_group(child.pidfd, SIGKILL);
    (void)wait_exit(child.pidfd, true);
    return std::move(child);
  };
  if (auto st = c.ns.finish_in_parent(child.pidfd.pid()); !st)
    return fail(SpawnStage::namespaces, st.error().code(), st.error().message());
  c.ns.release_child_fds();
  c.exec_report = std::move(error_read);
  return child;
}

void read_container_exec_report(ContainerRun& c, RunEnd& end) {
  // Non-blocking: the child, pid 1 and the program are gone, so what they
  // wrote is all there, then EOF. A record is one atomic write; the last
  // one is the step that ended the set-up (stage none: it reached execve).
  ChildRecord failure, rec;
  auto take = [&](const ChildRecord& r) {
    failure = r;
    if (r.stage == SpawnStage::none) c.setup_ns = r.setup_ns;
    // The child's reading beats ours (clone3's return in the parent says
    // nothing of when the child first ran).
    if (r.clone_ns) end.clone_seconds = static_cast<double>(r.clone_ns) / 1e9;
  };
  // What the spawn already read while it waited for the exec (template mode).
  for (std::size_t at = 0; at + sizeof rec <= c.exec_records.size(); at += sizeof rec) {
    std::memcpy(&rec, c.exec_records.data() + at, sizeof rec);
    take(rec);
  }
  c.exec_records.clear();
  while (c.exec_report) {
    ssize_t n = ::read(c.exec_report.get(), &rec, sizeof rec);
    if (n < 0 && errno == EINTR) continue;
    if (n != static_cast<ssize_t>(sizeof rec)) break;
    take(rec);
  }
  c.exec_report.reset();
  end.report.setup_ns = c.setup_ns;
  if (failure.stage == SpawnStage::none) {
    // Killed in its set-up by the deadline or a cancel: the outcome says so.
    if (c.setup_ns == 0 && end.status && !end.timed_out && !end.cancelled)
      c.failure = "container: the child ended before it reached exec, with no record of why";
    return;
  }
  end.report.stage = failure.stage;
  end.report.error = failure.err;
  c.failure = failure.stage == SpawnStage::namespaces && failure.ns.stage != NsStage::none
                  ? c.ns.error_for(failure.ns).message()
                  : Error::from_errno(failure.err, "container: " + std::string(to_string(failure.stage))).message();
}

void kill_container(ContainerRun& c, const Pidfd& pid1, int sig) {
  if (sig != SIGKILL) {
    // pid 1 forwards it; sent to the program's group directly it would
    // arrive twice.
    (void)pid1.send_signal(sig);
    // A session exec has no pid 1 of its own to forward it (`pid1` is the
    // exec's leader): every process of the exec's cgroup gets it, a setsid
    // one too, so each may end cleanly within the grace before the SIGKILL.
    if (c.session && c.cgroup) (void)c.cgroup->signal_all(sig, pid1.pid());
    return;
  }
  // The namespace ends with its init; the cgroup kill catches anything
  // caught mid-fork and waits (bounded) until the group is empty.
  (void)pid1.send_signal(SIGKILL);
  if (c.cgroup) (void)c.cgroup->kill_all();
}

}  // namespace corral
