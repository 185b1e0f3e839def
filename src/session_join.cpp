// A session exec's run-layer part (session_join.hpp): the parent side that
// opens the live session's pid 1 and claims the exec's cgroup below the
// session's (session_cgroup.hpp), from the SessionTarget the supervisor layer read, and the spawn
// of a child that joins the session's namespaces. Everything named *_in_child runs in
// the cloned process and is async-signal-safe: raw syscalls only. The child
// is cloned CLONE_VM|CLONE_VFORK on a stack of its own (a fork-like clone
// would copy our page tables, then fault page by page until the exec): it
// borrows our memory and writes none of it but its stack and its ExecArgs
// (which we no longer read), and we sleep until it has exec'd or failed. setns into the session's user namespace
// is allowed there: the kernel asks that the joiner share no thread group
// and no fs_struct (userns_install), not that it own its mm.
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "corral/container.hpp"
#include "corral/host.hpp"
#include "corral/landlock.hpp"
#include "corral/run_setup.hpp"
#include "corral/session_join.hpp"
#include "corral/tier_runner.hpp"
#include "corral/syscalls.hpp"
#include "session_cgroup.hpp"

namespace corral {

namespace {

// The session's last use is now (SessionTarget::active_file's mtime; the
// keeper made the file). The keeper watches it: a touch wakes it.
void touch_active(const std::string& active_file) {
  (void)::utimensat(AT_FDCWD, active_file.c_str(), nullptr, AT_SYMLINK_NOFOLLOW);
}

// What every exec of this thread shares, made at its first exec: the
// child's stack (a CLONE_VFORK parent sleeps until its child execs or
// exits, so one per spawning thread is enough), our own pid namespace (to
// come back to after the clone), our pidfd (the child's check that we
// live), /dev/null (stdin when the request gives none). Keyed by our pid:
// a forked child of ours makes its own.
struct ThreadKit {
  pid_t pid = 0;
  ChildStack stack;
  UniqueFd own_pidns, devnull;
  Pidfd self;
};

Expected<ThreadKit*> thread_kit() {
  thread_local ThreadKit kit;
  const pid_t pid = ::getpid();
  if (kit.pid == pid) return &kit;
  kit = ThreadKit{};
  auto stack = ChildStack::allocate();
  if (!stack) return std::move(stack).error().context("session exec");
  kit.stack = std::move(*stack);
  // The active pid namespace is the process's (every thread's), not the
  // one this thread's children go to.
  kit.own_pidns.reset(::open("/proc/thread-self/ns/pid", O_RDONLY | O_CLOEXEC));
  if (!kit.own_pidns) return Error::from_errno(errno, "session exec: open our pid namespace");
  kit.devnull.reset(::open("/dev/null", O_RDWR | O_CLOEXEC));
  if (!kit.devnull) return Error::from_errno(errno, "session exec: open /dev/null");
  auto self = Pidfd::open(pid);
  if (!self) return std::move(self).error().context("session exec");
  kit.self = std::move(*self);
  kit.pid = pid;
  return &kit;
}

}  // namespace

// What an exec holds of its session while it runs. Its end counts as use
// (the idle clock starts again from there).
struct SessionJoin {
  std::string active_file;
  Pidfd pid1;
  long inside_uid = 0, inside_gid = 0;
  // OOMs at the session's own ceiling since the exec began (session_join.hpp).
  // v1: the session group's OOM eventfd and what it counted so far. v2: the
  // session group's memory.events.local `oom` (the group's own ceiling only;
  // memory.events adds its children's) and its value at the exec's start.
  UniqueFd session_oom;
  std::uint64_t session_ooms = 0;
  std::string session_events_local;
  std::uint64_t session_oom_base = 0;
  // What the exec's own eventfd (ContainerRun::oom_event) counted so far:
  // the session's OOMs and the exec's (session_oom_is_the_execs_own).
  std::uint64_t exec_notifications = 0;
  std::optional<std::uint64_t> session_memory_bytes;  // for the notes
  std::uint64_t drain_session_ooms() {
    std::uint64_t n = 0;
    if (session_oom && ::read(session_oom.get(), &n, sizeof n) == sizeof n) session_ooms += n;
    if (!session_events_local.empty()) {
      const std::uint64_t now = local_ooms();
      session_ooms = now > session_oom_base ? now - session_oom_base : 0;
    }
    return session_ooms;
  }
  std::uint64_t local_ooms() const {
    char buf[512];
    UniqueFd fd(::open(session_events_local.c_str(), O_RDONLY | O_CLOEXEC));
    ssize_t n = fd ? ::read(fd.get(), buf, sizeof buf) : -1;
    return n > 0 ? cgroupfs::keyed_value(std::string_view(buf, static_cast<std::size_t>(n)), "oom").value_or(0) : 0;
  }
  ~SessionJoin() {
    if (!active_file.empty()) touch_active(active_file);
  }
};

namespace {

constexpr std::uint64_t kJoinFlags =
    CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP;

// The per-exec ceiling: the exec's own limit, never above the session's.
std::optional<std::uint64_t> tighter(std::optional<std::uint64_t> a, std::optional<std::uint64_t> b) {
  if (a && b) return std::min(*a, *b);
  return a ? a : b;
}

// pid 1 of the session, checked against pid reuse: its pid namespace is
// the one the keeper recorded, and it was still alive after we opened it.
Expected<Pidfd> open_pid1(const SessionTarget& info) {
  auto pidfd = Pidfd::open(info.pid1);
  if (!pidfd) return std::move(pidfd).error().context("session " + info.id + ": pid 1");
  struct stat st {};
  if (::stat(("/proc/" + std::to_string(info.pid1) + "/ns/pid").c_str(), &st) != 0 || st.st_ino != info.pidns_inode)
    return Error(ESRCH, "session " + info.id + ": its pid 1 is gone");
  struct pollfd p = {pidfd->fd(), POLLIN, 0};
  if (::poll(&p, 1, 0) != 0) return Error(ESRCH, "session " + info.id + ": its pid 1 is gone");
  return pidfd;
}

// ---- the child

struct ExecRecord {
  SpawnStage stage = SpawnStage::none;
  std::int32_t err = 0;
};

constexpr int kProgramErrorFd = 3;
constexpr long kLiftAbove = 10;

struct ExecArgs {
  const ChildPlan* plan;
  const RunCgroup* cgroup;
  int pid1_fd;
  int parent_pidfd;
  long inside_uid, inside_gid;
  int sources[3];
  int error_fd;
  std::uint64_t reset_mask;
};

int fail_in_child(ExecArgs* a, SpawnStage stage, int err) noexcept {
  ExecRecord rec{stage, err};
  sys::write_all(a->error_fd, &rec, sizeof rec);
  return 127;
}

int install_fds_in_child(ExecArgs* a) noexcept {
  return sys::install_program_fds(a->sources, a->error_fd, kProgramErrorFd, kLiftAbove);
}

// Entry of the cloned child, already in the session's pid namespace (the
// parent's thread was in it for the clone).
int session_exec_child(void* p) noexcept {
  auto* a = static_cast<ExecArgs*>(p);
  const ChildPlan& plan = *a->plan;
  sys::reset_signals_to_default(a->reset_mask);
  if (int e = sys::unblock_all_signals()) return fail_in_child(a, SpawnStage::signals, e);
  // Its own process group and session: the supervisor's killpg reaches it
  // and what stays in its group; the cgroup reaches the rest.
  if (int e = become_session_leader_in_child()) return fail_in_child(a, SpawnStage::setsid, e);
  if (plan.first_oom_victim)
    if (int e = make_first_oom_victim_in_child()) return fail_in_child(a, SpawnStage::oom_score, e);
  // v1 (v2 placed it at clone): before the cgroup namespace is entered
  // (then the path would be the session's view); the fds were opened by the
  // parent.
  if (a->cgroup)
    if (int e = join_cgroup_in_child(*a->cgroup)) return fail_in_child(a, SpawnStage::cgroup, e);
  // Still host root: CAP_SYS_ADMIN over the session's user namespace.
  if (int e = sys::error_of(sys::call(SYS_setns, a->pid1_fd, static_cast<long>(kJoinFlags))))
    return fail_in_child(a, SpawnStage::namespaces, e);
  // Host root's supplementary groups would still grant group access to
  // host files (unmapped ids are still checked); the keeper's maps allow setgroups.
  if (int e = sys::error_of(sys::call(SYS_setgroups, 0, 0))) return fail_in_child(a, SpawnStage::privilege, e);
  NsFailure f;
  if (int e = switch_ids_in_child(a->inside_gid, a->inside_uid, &f)) return fail_in_child(a, SpawnStage::privilege, e);
  // After the id switch, which clears it.
  if (int e = die_with_parent_in_child(a->parent_pidfd)) return fail_in_child(a, SpawnStage::parent_death, e);
  // Other execs of the session run with our uid in our pid namespace: its
  // signal scoping keeps them from stopping this child (the caller sleeps
  // until it execs) and from any process of this exec. Before the fds go:
  // the ruleset is one of them.
  if (plan.landlock)
    if (int e = apply_landlock_in_child(*plan.landlock)) return fail_in_child(a, SpawnStage::landlock, e);
  if (int e = install_fds_in_child(a)) return fail_in_child(a, SpawnStage::fds, e);
  // With only the program's fds left, and through no magic link: the
  // session's /workspace is the programs' to fill with links.
  if (int e = sys::chdir_no_magiclinks(plan.cwd.c_str())) return fail_in_child(a, SpawnStage::chdir, e);
  if (plan.rlimits)
    if (int e = apply_rlimits_in_child(*plan.rlimits)) return fail_in_child(a, SpawnStage::rlimits, e);
  // Caps in the session's user namespace: bounding and ambient emptied,
  // then the rest, then no_new_privs.
  if (int e = drop_all_capabilities_now()) return fail_in_child(a, SpawnStage::capabilities, e);
  if (plan.seccomp)
    if (int e = apply_seccomp_in_child(*plan.seccomp)) return fail_in_child(a, SpawnStage::seccomp, e);
  return fail_in_child(a, SpawnStage::execve, exec_plan_in_child(plan));
}

}  // namespace

Status prepare_session_exec(PreparedRun& run, const HostFacts& host, const SessionTarget& target) {
  const Request& req = run.request;
  if (!req.inputs.empty() || !req.outputs.empty() || !req.declared_outputs.empty() || req.payload)
    return Error::invalid("session " + req.session +
                          ": inputs, outputs and a payload are not for an exec; put and get files instead");
  if (req.rootfs || !req.binds.empty() || req.loopback)
    return Error::invalid("session " + req.session + ": rootfs, binds and loopback are the session's, given when it was opened");
  const SessionTarget* info = &target;
  auto pid1 = open_pid1(*info);
  if (!pid1) return std::move(pid1).error();

  auto c = std::make_shared<ContainerRun>();
  // Held while the exec runs (the keeper sweeps the groups nobody holds).
  auto cg = claim_exec_cgroup(host.cgroups, info->cgroup_dirs,
                              tighter(run.limits.get(Limit::memory_bytes), info->memory_bytes),
                              tighter(run.limits.get(Limit::process_count), info->process_count), run.run_id);
  if (!cg) return std::move(cg).error().context("session " + info->id + ": the exec's cgroup");
  // v2: CLONE_INTO_CGROUP places the child at clone time.
  c->join_in_child = cg->cgroup_fd() < 0;
  // v1, a session with a memory ceiling: its group's eventfd too (the
  // exec's fires for the session's OOMs as well; session_join.hpp),
  // registered before the exec's. An OOM of the session's between the two
  // is then counted by the session's alone, and can only hide one of the
  // exec's own, never pass for one (session_oom_is_the_execs_own).
  UniqueFd session_oom;
  if (info->memory_bytes && cg->version() == CgroupVersion::v1) {
    auto event = cgroup_v1_oom_notifier(info->cgroup_dirs);
    if (!event) return std::move(event).error().context("session exec: the session's OOM events");
    session_oom = std::move(*event);
  }
  if (run.limits.get(Limit::memory_bytes) || info->memory_bytes) {
    auto oom = cg->oom_notifier();
    if (!oom) return std::move(oom).error().context("session exec");
    c->oom_event = std::move(*oom);
  }
  c->cgroup.emplace(std::move(*cg));
  auto join = std::make_shared<SessionJoin>();
  if (c->oom_event) join->session_oom = std::move(session_oom);
  join->active_file = info->active_file;
  join->pid1 = std::move(*pid1);
  join->inside_uid = info->inside_uid;
  join->inside_gid = info->inside_uid;
  join->session_memory_bytes = info->memory_bytes;
  if (info->memory_bytes && c->cgroup->version() == CgroupVersion::v2 && !info->cgroup_dirs.empty()) {
    join->session_events_local = info->cgroup_dirs.front() + "/memory.events.local";
    join->session_oom_base = join->local_ooms();
  }
  c->session = std::move(join);
  // cwd or chdir: either is a path inside here (nothing is bound for an exec).
  run.plan->cwd = req.cwd ? *req.cwd : req.chdir ? *req.chdir : std::string(kContainerWorkspace);
  // Every exec of a session has the session's uid in its pid namespace, and
  // each is a Landlock domain of its own (any ABI): from inside one, the
  // kernel refuses ptrace-style access (/proc/PID/mem, environ) to every
  // process outside it — another exec's program, pid 1, and an exec's
  // child before its execve, which runs on its caller's memory (with
  // fs.suid_dumpable=1 that memory stays dumpable across the child's id
  // switch, and the caller may be a root supervisor). From ABI 6 an exec
  // may also signal only its own processes: a SIGSTOP to a child before
  // its execve would hold the caller until the session ends.
  if (host.landlock_abi >= 1) {
    LandlockSpec domain;
    domain.confine_writes(false).own_domain(true).scope_signals(host.landlock_abi >= 6);
    auto ruleset = prepare_for_abi(domain, host.landlock_abi);
    if (!ruleset) return std::move(ruleset).error().context("session exec: its own Landlock domain");
    run.plan->landlock.emplace(std::move(*ruleset));
  }
  if (host.landlock_abi < 1)
    run.warnings.push_back("session " + info->id + ": no Landlock on this kernel: an exec of the session is no "
                           "domain of its own, so another exec's program may read its memory where the "
                           "kernel's ptrace checks allow it (same uid)");
  if (host.landlock_abi < 6)
    run.warnings.push_back("session " + info->id + ": Landlock ABI " + std::to_string(host.landlock_abi) +
                           " has no signal scoping (ABI 6): another exec of the session may signal this one's "
                           "processes, and stop its child before the exec");
  touch_active(info->active_file);
  run.container = std::move(c);
  return {};
}

Expected<Spawner::Child> spawn_session_exec(ChildPlan& plan, ContainerRun& c, std::uint64_t ignored_signals) {
  SessionJoin& join = *c.session;
  Spawner::Child child;
  UniqueFd out_write, err_write, error_read, error_write;
  // Our read ends stay blocking: the supervisor reads them with RWF_NOWAIT
  // (and makes them O_NONBLOCK itself where the kernel lacks it).
  if (auto st = make_child_pipe(child.stdout_read, out_write, "stdout", false); !st) return std::move(st).error();
  if (!plan.merge_output)
    if (auto st = make_child_pipe(child.stderr_read, err_write, "stderr", false); !st) return std::move(st).error();
  if (auto st = make_child_pipe(error_read, error_write, "the exec report", false); !st) return std::move(st).error();
  auto kit = thread_kit();
  if (!kit) return std::move(kit).error();

  ExecArgs args{};
  args.plan = &plan;
  args.cgroup = c.join_in_child ? &*c.cgroup : nullptr;
  args.pid1_fd = join.pid1.fd();
  args.parent_pidfd = (*kit)->self.fd();
  args.inside_uid = join.inside_uid;
  args.inside_gid = join.inside_gid;
  args.sources[0] = plan.stdin_fd ? plan.stdin_fd.get() : (*kit)->devnull.get();
  args.sources[1] = out_write.get();
  args.sources[2] = plan.merge_output ? out_write.get() : err_write.get();
  args.error_fd = error_write.get();
  args.reset_mask = ignored_signals;

  // This thread's children go to the session's pid namespace for the one
  // clone, then back to our own (the active one, which setns allows).
  if (::setns(join.pid1.fd(), CLONE_NEWPID) != 0)
    return Error::from_errno(errno, "session exec: enter the session's pid namespace");
  CloneSpec spec;
  spec.flags = CLONE_CLEAR_SIGHAND;
  // Borrowing our memory (CLONE_CLEAR_SIGHAND: no handler of ours can run
  // in the child; it sets its own mask); we resume once it has exec'd or
  // failed.
  spec.share_memory = true;
  spec.stack = &(*kit)->stack;
  if (!c.join_in_child) spec.cgroup_fd = c.cgroup->cgroup_fd();
  const auto t0 = std::chrono::steady_clock::now();
  auto pidfd = clone_child(spec, session_exec_child, &args);
  child.clone_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int back = ::setns((*kit)->own_pidns.get(), CLONE_NEWPID) == 0 ? 0 : errno;

  child.stdout_write = std::move(out_write);  // closed by the caller's ring (Spawner::Child)
  child.stderr_write = std::move(err_write);
  error_write.reset();
  plan.stdin_fd.reset();
  if (!pidfd) return std::move(pidfd).error().context("session exec: spawn");
  child.pidfd = std::move(*pidfd);
  if (back) {
    kill_group(child.pidfd, SIGKILL);
    (void)wait_exit(child.pidfd, true);
    return Error::from_errno(back, "session exec: leave the session's pid namespace");
  }

  // The child has exec'd (the pipe is at EOF: its end was CLOEXEC) or
  // written why not and exited: the read does not wait.
  ExecRecord rec;
  ssize_t n;
  while ((n = ::read(error_read.get(), &rec, sizeof rec)) < 0 && errno == EINTR) {
  }
  c.setup_ns = static_cast<std::uint64_t>(
      std::max<std::int64_t>(1, std::chrono::duration_cast<std::chrono::nanoseconds>(
                                    std::chrono::steady_clock::now() - t0).count()));
  if (n == static_cast<ssize_t>(sizeof rec) && rec.stage != SpawnStage::none) {
    child.report.stage = rec.stage;
    child.report.error = rec.err;
    c.failure = Error::from_errno(rec.err, "session exec: " + std::string(to_string(rec.stage))).message();
    kill_group(child.pidfd, SIGKILL);
    (void)wait_exit(child.pidfd, true);
  }
  return child;
}

namespace {

std::string mib(std::uint64_t bytes) {
  return bytes % (1u << 20) == 0 ? std::to_string(bytes >> 20) + " MiB" : std::to_string(bytes) + " bytes";
}

}  // namespace

bool session_oom_is_the_execs_own(ContainerRun& c) {
  // The kernel signals the group that ran out first, then the groups below
  // it (mm/memcontrol-v1.c mem_cgroup_oom_notify, a pre-order walk). So,
  // with the exec's eventfd read before the session's, every OOM of the
  // session's that the exec's count holds is in the session's count too:
  // a count above the session's is an OOM of the exec's own ceiling, also
  // when both ran out between two looks (one notification for both). The
  // counts are kept from the exec's start, so an OOM of the session's seen
  // earlier does not make a later one of the exec's the session's either.
  if (!c.session) return true;
  std::uint64_t n = 0;
  if (c.oom_event && ::read(c.oom_event.get(), &n, sizeof n) == sizeof n) c.session->exec_notifications += n;
  return c.session->exec_notifications > c.session->drain_session_ooms();
}

void finish_session_exec_oom(ContainerRun& c, const CgroupStats& stats, bool notified, TierFacts& facts) {
  const std::uint64_t ooms = stats.oom_kills.value_or(0);
  facts.oom_kills = ooms;
  // The exec's own ceiling (its memory_bytes, or the session's when the
  // exec has none of its own or a higher one): the container tier's rule.
  if (stats.ceiling_oom(notified)) {
    facts.oom_killed = true;
    return;
  }
  const std::uint64_t session_ooms = c.session ? c.session->drain_session_ooms() : 0;
  const std::string ceiling =
      c.session && c.session->session_memory_bytes ? " (" + mib(*c.session->session_memory_bytes) + ")" : "";
  if (session_ooms > 0 && ooms > 0) {
    // The session's group ran out while this exec ran, and the kernel's OOM
    // killer chose a process of this exec (v1 counts a kill in the victim's
    // own group only).
    facts.oom_killed = true;
    facts.notes.push_back("out of memory under the session's memory_bytes ceiling" + ceiling +
                          ", which every exec of the session and the files they left on its tmpfs share: the "
                          "kernel's OOM killer took " + std::to_string(ooms) + " process(es) of this exec");
    return;
  }
  facts.oom_killed = false;
  if (session_ooms > 0)
    facts.notes.push_back("the session's memory_bytes ceiling" + ceiling + " ran out during this exec; the "
                          "kernel's OOM killer took no process of this exec (its victim was another exec's)");
  else if (ooms > 0 || notified)
    facts.oom_outside_ceiling =
        std::string(ooms > 0 ? "the kernel OOM-killed " + std::to_string(ooms) + " process(es) of the exec"
                             : "the memory controller signalled an OOM to the exec's cgroup") +
        ", but not at its memory_bytes ceiling nor the session's (the host or an ancestor cgroup ran out)";
}

}  // namespace corral
