#include "corral/spawn.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "corral/spawn_thread.hpp"
#include "corral/syscalls.hpp"

namespace corral {

std::string_view to_string(SpawnStage stage) {
  switch (stage) {
    case SpawnStage::none: return "none";
    case SpawnStage::signals: return "signals";
    case SpawnStage::setsid: return "setsid";
    case SpawnStage::landlock: return "landlock";
    case SpawnStage::fds: return "fds";
    case SpawnStage::rlimits: return "rlimits";
    case SpawnStage::bounding_set: return "bounding_set";
    case SpawnStage::privilege: return "privilege";
    case SpawnStage::capabilities: return "capabilities";
    case SpawnStage::chdir: return "chdir";
    case SpawnStage::seccomp: return "seccomp";
    case SpawnStage::execve: return "execve";
    case SpawnStage::namespaces: return "namespaces";
    case SpawnStage::cgroup: return "cgroup";
    case SpawnStage::parent_death: return "parent_death";
    case SpawnStage::mounts: return "mounts";
    case SpawnStage::oom_score: return "oom_score";
  }
  return "unknown";
}

void ChildPlan::finalize() {
  argv.clear();
  for (auto& s : argv_storage) argv.push_back(s.data());
  argv.push_back(nullptr);
  envp.clear();
  for (auto& s : env_storage) envp.push_back(s.data());
  envp.push_back(nullptr);
  exec_path_ptrs.clear();
  for (auto& s : exec_paths) exec_path_ptrs.push_back(s.c_str());
}

namespace {

// Our pid, for the child's check that we still live (getppid), without a
// getpid(2) a spawn: read once, and forgotten in the child of a fork (an
// atfork handler). glibc runs it for fork(), not for _Fork() or a raw
// clone; a process made so that spawns with a stale value fails closed,
// never the other way: its children see another parent and stop at stage
// parent_death (ESRCH).
std::atomic<pid_t> g_self_pid{0};

pid_t self_pid() {
  pid_t pid = g_self_pid.load(std::memory_order_relaxed);
  if (pid != 0) return pid;
  static const bool registered = [] {
    return ::pthread_atfork(nullptr, nullptr, [] { g_self_pid.store(0, std::memory_order_relaxed); }) == 0;
  }();
  pid = ::getpid();
  if (registered) g_self_pid.store(pid, std::memory_order_relaxed);
  return pid;
}

// What the child reads. Lives on the parent's stack during spawn; the
// CLONE_VM child sees it directly.
struct ChildArgs {
  const ChildPlan* plan;
  const int* slots;          // stdin, stdout, stderr sources in the shared table
  int max_slot;
  std::uint64_t reset_mask;  // signals 1..63 the parent ignores: back to SIG_DFL
  ChildReport* report;
  long parent_pid;           // ours: the child's check that we still live
  // What the bounding set of the thread that clones still holds: all the
  // child's can hold. 0 from the SpawnThread, which emptied its own.
  std::uint64_t bounding_set;
};

// Runs in the child (CLONE_VM|CLONE_VFORK: on the Spawner's stack, sharing
// the parent's memory and, until the fds step, its fd table). Raw syscalls
// only; the report is the only memory it writes outside its own stack.
int run_plan_in_child(void* p) noexcept {
  auto* a = static_cast<ChildArgs*>(p);
  const ChildPlan& plan = *a->plan;
  const std::uint64_t start = sys::monotonic_ns();
  a->report->entry_ns = start;
  auto fail = [a](SpawnStage stage, int err) noexcept {
    a->report->stage = stage;
    a->report->error = err;
    return 127;
  };

  // CLONE_CLEAR_SIGHAND reset every handler; what the parent ignored stays
  // ignored across exec unless we reset it (an ignored SIGPIPE or SIGXFSZ
  // would change how the program and our limits behave).
  sys::reset_signals_to_default(a->reset_mask);
  if (int e = sys::unblock_all_signals())
    return fail(SpawnStage::signals, e);

  if (int e = become_session_leader_in_child()) return fail(SpawnStage::setsid, e);
  if (plan.first_oom_victim)
    if (int e = make_first_oom_victim_in_child()) return fail(SpawnStage::oom_score, e);

  // Mounts before Landlock (a Landlock domain may not mount) and before
  // seccomp (the default profile denies the mount family); still root.
  if (plan.private_workspace)
    if (int e = attach_private_tmpfs_in_child(*plan.private_workspace)) return fail(SpawnStage::mounts, e);
  if (plan.private_shm)
    if (int e = attach_private_tmpfs_in_child(*plan.private_shm)) return fail(SpawnStage::mounts, e);

  // Landlock first: its ruleset fd lives in the table we still share.
  if (plan.landlock)
    if (int e = apply_landlock_in_child(*plan.landlock)) return fail(SpawnStage::landlock, e);

  // A notifying filter goes on here, not last: the kernel puts its
  // listener into the fd table we still share with the parent, which is
  // how the supervisor gets it (no SCM_RIGHTS round trip, no pidfd_getfd
  // after an exec that would have closed it); the private copy taken next
  // drops it, so the program never holds it. The steps between here and
  // exec (close_range, fcntl, dup3, prlimit64, prctl, capset, setgroups,
  // setres[ug]id, kill, chdir, getppid) are none the filter refuses.
  bool filtered = false;
  if (plan.seccomp && plan.seccomp->notifies()) {
    int listener = -1;
    int e = apply_seccomp_in_child(*plan.seccomp, &listener);
    if (e == 0) {
      a->report->seccomp_listener = listener;
      filtered = true;
    } else if (e != EBUSY || !plan.seccomp_fallback) {
      return fail(SpawnStage::seccomp, e);
    }
  }

  // Take a private copy of the table holding only the low slots, lift the
  // three sources above them, install them as 0/1/2, close everything else.
  const long above = a->max_slot + 1;
  if (int e = sys::error_of(sys::call(SYS_close_range, above, ~0u, CLOSE_RANGE_UNSHARE)))
    return fail(SpawnStage::fds, e);
  long lifted[3];
  for (int i = 0; i < 3; ++i) {
    int src = a->slots[(i == 2 && plan.merge_output) ? 1 : i];
    lifted[i] = sys::call(SYS_fcntl, src, F_DUPFD, above);
    if (lifted[i] < 0) return fail(SpawnStage::fds, sys::error_of(lifted[i]));
  }
  for (int i = 0; i < 3; ++i)
    if (int e = sys::error_of(sys::call(SYS_dup3, lifted[i], i, 0))) return fail(SpawnStage::fds, e);
  if (int e = sys::error_of(sys::call(SYS_close_range, 3, ~0u, 0))) return fail(SpawnStage::fds, e);

  if (plan.rlimits)
    if (int e = apply_rlimits_in_child(*plan.rlimits)) return fail(SpawnStage::rlimits, e);
  // The bounding set needs CAP_SETPCAP, which the uid change takes away:
  // what the cloning thread still held of it (nothing from the
  // SpawnThread). The ambient set needs no call of its own: the uid change
  // and the capset below both empty it (clear_capabilities_in_child).
  if (plan.capabilities && plan.privilege && plan.privilege->changes_identity())
    if (int e = drop_bounding_set_in_child(*plan.capabilities, a->bounding_set))
      return fail(SpawnStage::bounding_set, e);
  if (plan.privilege)
    if (int e = apply_privilege_drop_in_child(*plan.privilege)) return fail(SpawnStage::privilege, e);
  // The first process of a uid freshly locked for this run: anything else
  // of the uid is a dead holder's leftover. Only with a real drop (never as
  // root: kill(-1) would reach the whole host).
  if (plan.reap_uid_first && plan.privilege && plan.privilege->changes_identity() && plan.privilege->uid() != 0) {
    long r = sys::call(SYS_kill, -1, SIGKILL);
    if (r < 0 && r != -ESRCH) return fail(SpawnStage::privilege, sys::error_of(r));
  }
  if (plan.capabilities)
    if (int e = clear_capabilities_in_child(*plan.capabilities)) return fail(SpawnStage::capabilities, e);
  if (!plan.cwd.empty())
    if (int e = sys::error_of(sys::call(SYS_chdir, reinterpret_cast<long>(plan.cwd.c_str()))))
      return fail(SpawnStage::chdir, e);
  // Dies with the supervisor: SIGKILL when the thread that spawned it
  // exits. After the id and capability changes, which clear it (PR_SET_PDEATHSIG
  // in prctl(2)); kept across the execve (no set-id gain under no_new_privs).
  // Then make sure we did not lose the parent before it was set: a
  // CLONE_VFORK parent can still be SIGKILLed while it waits for us. This
  // reaches the program only; the guardian (guardian.hpp) reaches what it
  // starts.
  if (int e = sys::error_of(sys::call(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0)))
    return fail(SpawnStage::parent_death, e);
  if (sys::call(SYS_getppid) != a->parent_pid) return fail(SpawnStage::parent_death, ESRCH);
  // Last: the filter may deny what the steps above needed. A notifying
  // one that got no listener above: its plain twin. no_new_privs is set
  // already when the capability or Landlock step ran (each sets it).
  if (plan.seccomp && !filtered) {
    const SeccompProgram& prog = plan.seccomp->notifies() ? *plan.seccomp_fallback : *plan.seccomp;
    int e = plan.capabilities || plan.landlock ? install_seccomp_in_child(prog) : apply_seccomp_in_child(prog);
    if (e) return fail(SpawnStage::seccomp, e);
  }

  a->report->setup_ns = sys::monotonic_ns() - start;
  return fail(SpawnStage::execve, exec_plan_in_child(plan));
}

}  // namespace

int exec_plan_in_child(const ChildPlan& plan) noexcept {
  int err = ENOENT;
  for (const char* path : plan.exec_path_ptrs) {
    long r = sys::call(SYS_execve, reinterpret_cast<long>(path), reinterpret_cast<long>(plan.argv.data()),
                       reinterpret_cast<long>(plan.envp.data()));
    int e = sys::error_of(r);
    if (e == EACCES) err = EACCES;
    else if (e != ENOENT && e != ENOTDIR) return e;
  }
  return err;
}

namespace {

// CLOCK_MONOTONIC in the parent: clock_gettime(3) answers from the vDSO
// without entering the kernel (two system calls a spawn saved). The child
// keeps sys::monotonic_ns, the raw syscall; both read the same clock.
std::uint64_t parent_monotonic_ns() noexcept {
  struct timespec ts {};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

}  // namespace

std::uint64_t ignored_signal_mask() {
  // Signals 1..31 as bits 1..31 of the mask; KILL and STOP cannot be
  // ignored. 29 sigaction calls, not the SigIgn word of /proc/self/status:
  // cold in a fresh process (a one-run `corral run`) the /proc open, read
  // and close took 26-41 us here against 8-10 us for the 29 calls.
  std::uint64_t mask = 0;
  for (int sig = 1; sig < 32; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    struct sigaction sa;
    if (sigaction(sig, nullptr, &sa) == 0 && sa.sa_handler == SIG_IGN) mask |= std::uint64_t{1} << sig;
  }
  return mask;
}

Status make_child_pipe(UniqueFd& read_end, UniqueFd& write_end, const std::string& what, bool nonblocking_read) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return Error::from_errno(errno, "pipe for " + what);
  read_end.reset(fds[0]);
  write_end.reset(fds[1]);
  if (nonblocking_read) {
    // Only our end: the program gets an ordinary blocking pipe. A fresh
    // read end has no other status flag F_SETFL could clear, so no F_GETFL.
    if (fcntl(fds[0], F_SETFL, O_NONBLOCK) != 0) return Error::from_errno(errno, "fcntl O_NONBLOCK on " + what);
  }
  return {};
}

Spawner::Spawner(Spawner&&) noexcept = default;
Spawner& Spawner::operator=(Spawner&&) noexcept = default;
Spawner::~Spawner() = default;

SpawnThread* Spawner::thread_for(const ChildPlan& plan) {
  // Only a child that empties its bounding set: any other (tier none, a
  // run without a uid of its own) must keep this thread's credentials.
  if (!plan.capabilities || !plan.privilege || !plan.privilege->changes_identity()) return nullptr;
  const bool ipc = (plan.clone_namespaces & CLONE_NEWIPC) != 0;
  if (!thread_) {
    if (thread_failed_ || ++thread_worthy_spawns_ < 2) return nullptr;
    auto started = SpawnThread::start(*plan.capabilities, ipc);
    if (!started) {
      thread_failed_ = true;  // this thread clones them all, as it always could
      return nullptr;
    }
    thread_ = std::move(*started);
  }
  // A namespace the plan did not ask for would be a guarantee the Result
  // does not name: only a plan that asks for the thread's kind.
  if (!thread_->ready() || thread_->fresh_ipc() != ipc) return nullptr;
  return thread_.get();
}

Expected<Spawner> Spawner::create() {
  Spawner s;
  auto stack = ChildStack::allocate();
  if (!stack) return std::move(stack).error().context("spawner");
  s.stack_ = std::move(*stack);
  s.devnull_.reset(open("/dev/null", O_RDWR | O_CLOEXEC));
  if (!s.devnull_) return Error::from_errno(errno, "spawner: open /dev/null");
  // Reserve three slots, as low in the table as they can be had: the child
  // copies every fd up to the highest slot.
  for (UniqueFd& slot : s.slots_) {
    slot.reset(fcntl(s.devnull_.get(), F_DUPFD_CLOEXEC, 0));
    if (!slot) return Error::from_errno(errno, "spawner: reserve fd slot");
    if (slot.get() > s.max_slot_) s.max_slot_ = slot.get();
  }
  s.refresh_ignored_signals();
  return s;
}

void Spawner::refresh_ignored_signals() { ignored_signals_ = ignored_signal_mask(); }

void Spawner::recycle_ipc_namespace(HeldIpcNamespace ipc_namespace) {
  if (thread_) thread_->recycle(std::move(ipc_namespace));
}

Expected<Spawner::Child> Spawner::spawn(ChildPlan& plan) {
  Child child;
  UniqueFd& out_write = child.stdout_write;
  UniqueFd& err_write = child.stderr_write;
  if (auto st = make_child_pipe(child.stdout_read, out_write, "stdout", false); !st) return std::move(st).error();
  if (!plan.merge_output)
    if (auto st = make_child_pipe(child.stderr_read, err_write, "stderr", false); !st) return std::move(st).error();

  const int sources[3] = {plan.stdin_fd ? plan.stdin_fd.get() : devnull_.get(), out_write.get(),
                          plan.merge_output ? out_write.get() : err_write.get()};
  // The slots hold /dev/null between spawns: stdin's is already right
  // unless the plan gives one (two dup3 calls a run saved).
  const int first = plan.stdin_fd ? 0 : 1;
  for (int i = first; i < 3; ++i)
    if (dup3(sources[i], slots_[i].get(), O_CLOEXEC) < 0) return Error::from_errno(errno, "spawn: fill fd slot");

  const int slot_fds[3] = {slots_[0].get(), slots_[1].get(), slots_[2].get()};
  SpawnThread* via = thread_for(plan);
  ChildArgs args{&plan, slot_fds, max_slot_, ignored_signals_, &child.report, static_cast<long>(self_pid()),
                 via ? via->bounding_set() : ~std::uint64_t{0}};
  CloneSpec spec;
  spec.flags = CLONE_FILES | CLONE_CLEAR_SIGHAND | plan.clone_namespaces;
  spec.share_memory = true;
  spec.stack = &stack_;
  // CLONE_VFORK: we resume once the child has exec'd (or exited), so the
  // time we were away splits, by the child's own clock readings (the same
  // CLOCK_MONOTONIC), into clone (until its first instruction), its set-up
  // (report.setup_ns) and the execve until the kernel released us. From
  // the spawn thread, the readings are its own around its clone.
  std::uint64_t t0, resumed;
  std::optional<Expected<Pidfd>> cloned;
  if (via) {
    auto c = via->clone(spec, run_plan_in_child, &args);
    t0 = c.t0_ns;
    resumed = c.resumed_ns;
    cloned.emplace(std::move(c.pidfd));
    child.ipc_namespace = std::move(c.ipc_namespace);
  } else {
    t0 = parent_monotonic_ns();
    cloned.emplace(clone_child(spec, run_plan_in_child, &args));
    resumed = parent_monotonic_ns();
  }
  Expected<Pidfd>& pidfd = *cloned;
  const ChildReport& rep = child.report;
  if (rep.entry_ns >= t0) child.clone_seconds = static_cast<double>(rep.entry_ns - t0) / 1e9;
  if (pidfd && rep.stage == SpawnStage::none && rep.entry_ns && resumed >= rep.entry_ns + rep.setup_ns)
    child.exec_seconds = static_cast<double>(resumed - rep.entry_ns - rep.setup_ns) / 1e9;

  // Give the slots back to /dev/null: holding a pipe's write end open here
  // would keep the program's stdout from ever reaching EOF.
  for (int i = first; i < 3; ++i) dup3(devnull_.get(), slots_[i].get(), O_CLOEXEC);
  plan.stdin_fd.reset();
  // Ours from the moment the child's seccomp(2) returned, whatever came after.
  if (child.report.seccomp_listener >= 0) child.seccomp_listener.reset(child.report.seccomp_listener);
  if (!pidfd) return std::move(pidfd).error().context("spawn");
  child.pidfd = std::move(*pidfd);
  if (child.report.stage != SpawnStage::none) {
    // Exec never happened; the child has exited with 127. Reap it here so a
    // spawn failure leaves no zombie and needs no supervision.
    (void)wait_exit(child.pidfd, true);
  }
  return child;
}

}  // namespace corral
