// The process tiers' runner (tier_runner.hpp): tier none (the program as
// we are, in a workspace, under rlimits) and tier os_process (a uid of its
// own when root, every capability dropped, seccomp `default` plus the
// network's profile, Landlock confining its writes and TCP, SysV IPC and
// /dev/shm of its own). The program is the Spawner's vfork child, leader of
// its own process group.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <charconv>

#include "corral/capabilities.hpp"
#include "corral/landlock.hpp"
#include "corral/private_tmpfs.hpp"
#include "corral/tier_limits.hpp"
#include "corral/tier_runner.hpp"
#include "corral/workspace_base.hpp"

namespace corral {
namespace {

// Whether a tier process run as root may get its tmpfs workspace in a
// mount namespace of its own (ProcessRunner::workspace), which holds one
// fd more: --confine-writes, or a size outside corral's own base.
bool may_have_namespaced_workspace(const Request& req) {
  return req.confine_writes || req.limits.has(Limit::workspace_bytes);
}

// The fds a run holds while its child runs: the pidfd and the stdout and
// stderr read ends. The workspace holds none (its root fd is released after
// the spawn and reopened for collection; the base fd is shared), the plan's
// fds (stdin memfd, Landlock ruleset) are closed once the child has them.
// Tier process holds one more, its IPC namespace (kept for a later run:
// spawn_thread.hpp), and with --net none another: its seccomp filter's
// listener (the socket refusals the supervisor answers).
constexpr std::size_t kFdsPerProcessRun = 3;

// uid's name in /etc/passwd, read directly (the first line with that uid,
// as NSS's files source answers): a static glibc's getpwuid_r parses
// nsswitch.conf and tries nscd's socket twice before it reads the file, ~17
// system calls and the page faults of that code, ~0.2 ms of a one-run CLI.
// Empty when the file has no such line (LDAP, sssd, userdb users, NIS '+'
// lines).
std::string passwd_file_name(uid_t uid) {
  UniqueFd fd(::open("/etc/passwd", O_RDONLY | O_CLOEXEC));
  if (!fd) return {};
  std::string text;
  char buf[4096];
  for (ssize_t n; text.size() < (1u << 22) && (n = ::read(fd.get(), buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return {};
    text.append(buf, static_cast<std::size_t>(n));
  }
  std::string_view rest = text;
  while (!rest.empty()) {
    std::string_view line = rest.substr(0, rest.find('\n'));
    rest.remove_prefix(std::min(rest.size(), line.size() + 1));
    // name:password:uid:...
    auto c1 = line.find(':');
    auto c2 = c1 == std::string_view::npos ? c1 : line.find(':', c1 + 1);
    auto c3 = c2 == std::string_view::npos ? c2 : line.find(':', c2 + 1);
    if (c3 == std::string_view::npos || c1 == 0 || line[0] == '+' || line[0] == '-') continue;
    std::uint64_t id = 0;
    auto [end, ec] = std::from_chars(line.data() + c2 + 1, line.data() + c3, id);
    if (ec == std::errc() && end == line.data() + c3 && id == uid) return std::string(line.substr(0, c1));
  }
  return {};
}

// uid's name in /etc/passwd, else the number. Never NSS: the corral CLI
// is linked statically, and a static glibc's getpwuid_r dlopens the host's
// NSS modules (built for its shared glibc); libnss_systemd crashed corral
// with SIGSEGV for every uid /etc/passwd lacks (--user 5000). A supervisor
// should not load the host's plugins into itself anyway.
std::string passwd_name(uid_t uid) {
  if (std::string name = passwd_file_name(uid); !name.empty()) return name;
  return std::to_string(uid);
}

// USER and LOGNAME for the clean environment (getpass.getuser(), many
// shells and tools read them before any passwd lookup). A run on a uid of
// its own (tier process as root) has no passwd entry on the host, so the
// name says which uid it is; otherwise the program runs as us, under our
// name (our USER, else our passwd entry, looked up once per process).
std::string run_user_name(const std::optional<WorkspaceOwner>& owner, bool own_uid) {
  if (owner && own_uid) return "corral-" + std::to_string(owner->uid);
  static const std::string ours = [] {
    if (const char* v = find_env("USER"); v && *v) return std::string(v);
    return passwd_name(::geteuid());
  }();
  if (owner) return passwd_name(owner->uid);
  return ours;
}

bool beneath(const std::string& path, std::string_view dir) {
  return path.size() >= dir.size() && path.compare(0, dir.size(), dir) == 0 &&
         (path.size() == dir.size() || path[dir.size()] == '/');
}

// Confined writes in tier process: /dev/shm (POSIX semaphores and shared
// memory: Python's multiprocessing locks, ProcessPoolExecutor,
// compileall -j) is the run's own, a tmpfs of shm_bytes (default 256 MiB,
// the container's) over the host's in a mount namespace of the run's own,
// in the write set: what the run leaves there dies with it, no other run
// and not the host sees it. Needs root (fsopen, mount namespaces); without,
// the host's /dev/shm stays outside the write set (`corral enforcement`
// says so). Not when the run names the host's (a write path, its cwd, its
// workspace or its program under /dev/shm): that covers it with its own.
Status add_private_shm(PreparedRun& run, const HostFacts& host, LandlockSpec& spec) {
  constexpr std::string_view kShm = "/dev/shm";
  if (!host.root || !host.cap_sys_admin || ::access(kShm.data(), F_OK) != 0) return {};
  const Request& req = run.request;
  ChildPlan& plan = *run.plan;
  std::vector<std::string> named = req.write_paths;
  named.push_back(run.workspace->path());
  named.push_back(plan.cwd);
  named.insert(named.end(), plan.exec_paths.begin(), plan.exec_paths.end());
  for (const auto& path : named)
    if (beneath(path, kShm)) return {};
  auto shm = PrivateTmpfs::prepare(std::string(kShm), run.limits.get(Limit::shm_bytes).value_or(kDefaultShmBytes));
  if (!shm) return std::move(shm).error();
  plan.private_shm.emplace(std::move(*shm));
  plan.clone_namespaces |= CLONE_NEWNS;
  spec.allow_writes_beneath(plan.private_shm->fd(), "/dev/shm (the run's own tmpfs)");
  return {};
}

// The Landlock ruleset: writes confined to the workspace, the run's write
// paths and the terminals; TCP restricted when the network is closed.
Status add_landlock(PreparedRun& run, const HostFacts& host, bool allow_tcp) {
  const Request& req = run.request;
  bool confine = req.confine_writes || !req.write_paths.empty();
  bool tcp = req.net == NetworkAccess::none && (host.landlock_abi >= 4 || allow_tcp);
  // Abstract unix sockets have no file and no owner check: without the
  // scope a --net none run connected to one of a --net host neighbour (or
  // any host daemon) and was handed a connected TCP socket over
  // SCM_RIGHTS. Scoped, it reaches only its own run's (ABI 6).
  bool scope = req.net == NetworkAccess::none && host.landlock_abi >= 6;
  if (!confine && !tcp && !scope) return {};
  LandlockSpec spec;
  if (confine) {
    spec.confine_writes(true);
    // A tmpfs workspace covers its directory: name the tmpfs (private_tmpfs.hpp).
    if (run.workspace->on_tmpfs())
      spec.allow_writes_beneath(run.workspace->dirfd(), "the workspace (the run's own tmpfs)");
    else
      spec.allow_writes(run.workspace->path());
    spec.allow_writes("/dev/null");
    // Pseudo-terminals are not the host's files to protect: opening
    // /dev/ptmx makes a new pty, and its slave under /dev/pts belongs to
    // the run's uid (another uid's terminal stays closed to it by its
    // 0620 mode). Shells, `script`, expect and REPL drivers need them.
    // /dev/tty is the caller's controlling terminal: a run has none (its
    // own session) unless it made a pty its terminal.
    for (const char* pty : {"/dev/ptmx", "/dev/pts", "/dev/tty"})
      if (::access(pty, F_OK) == 0) spec.allow_writes(pty);
    if (req.cwd) spec.allow_writes(*req.cwd);
    for (const auto& p : req.write_paths) spec.allow_writes(p);
    if (auto st = add_private_shm(run, host, spec); !st) return st;
  } else {
    // A LandlockSpec confines writes by default (to an empty set): a
    // ruleset made only for the TCP rules must leave the filesystem alone.
    spec.confine_writes(false);
  }
  if (tcp) spec.restrict_tcp(true);
  if (scope) spec.scope_abstract_unix(true);
  if (allow_tcp)
    for (auto port : req.tcp_connect_ports) spec.tcp_connect_allow(port);
  auto ruleset = prepare(spec);
  if (!ruleset) return std::move(ruleset).error();
  run.plan->landlock.emplace(std::move(*ruleset));
  return {};
}

class ProcessRunner final : public TierRunner {
 public:
  Status check(const Request& req) const override {
    if (req.rootfs || !req.binds.empty() || !req.tmpfs.empty() || !req.dev_binds.empty())
      return Error::invalid("rootfs, binds, tmpfs and dev_binds need tier container (tier " +
                            std::string(to_string(req.tier)) + ")");
    return {};
  }

  Expected<std::optional<WorkspaceOwner>> owner(PreparedRun& run, const HostFacts& host,
                                                RunContext& ctx) const override {
    const Request& req = run.request;
    if (!req.session.empty()) return Error::invalid("session " + req.session + ": an exec is tier container");
    if (req.tier != Tier::os_process || !host.root) return std::optional<WorkspaceOwner>{};
    if (req.user) return std::optional<WorkspaceOwner>(WorkspaceOwner{*req.user, *req.user});
    if (!ctx.uids) return std::optional<WorkspaceOwner>{};
    // The program is the uid's first process here: it reaps what a dead
    // holder of the uid left (spawn.cpp), saving a helper process a run.
    auto lease = ctx.uids->acquire(UidPool::Reap::by_first_process);
    if (!lease) return std::move(lease).error();
    WorkspaceOwner owner{lease->uid(), lease->gid()};
    // Files it makes in /tmp, /var/tmp, /dev/shm or /run/lock outlive it:
    // the uid waits for a sweep of them before another run has it
    // (uid_sweep.hpp). Not when Landlock confines its writes to the
    // workspace and a /dev/shm of its own (add_landlock); a write path or
    // --cwd is writable too, and may be one of those.
    if (!req.confine_writes || !req.write_paths.empty() || req.cwd || host.landlock_abi < 1)
      lease->leaves_host_files();
    run.uid_lease.emplace(std::move(*lease));
    return std::optional<WorkspaceOwner>(owner);
  }

  // Tier process as root: the workspace is a tmpfs of the run's own
  // (workspace_bytes, by default the container's 1 GiB) over its directory
  // under the base. A write past the size fails with ENOSPC, and a run
  // cannot fill the base its neighbours' workspaces share (corral's tmpfs,
  // half of RAM). With --confine-writes it is mounted in the run's own
  // mount namespace (made anyway, for a private /dev/shm); otherwise on the
  // host, for the run's time: a mount namespace a run costs ~0.2 ms, the
  // mount ~0.05 (README, "Where workspaces live"). On the host only in
  // corral's own base (root's, private): a base the caller chose (a disk,
  // TMPDIR) keeps a directory unless the run is sized or confined.
  Status workspace(PreparedRun& run, const HostFacts& host, RunContext&, WorkspaceOptions opts) const override {
    opts.make_tmp = true;  // TMPDIR
    const Request& req = run.request;
    const bool own_base = opts.base && opts.base->path() == kRootWorkspaceMount;
    const bool sized = req.limits.has(Limit::workspace_bytes);
    const bool own_namespace = req.confine_writes || (sized && !own_base);
    if (req.tier == Tier::os_process && process_workspace_tmpfs_possible(host) && (own_namespace || own_base)) {
      if (!run.limits.has(Limit::workspace_bytes)) run.limits.set(Limit::workspace_bytes, kDefaultWorkspaceBytes);
      opts.tmpfs_bytes = run.limits.get(Limit::workspace_bytes);
      opts.tmpfs_mount_point = true;
      opts.tmpfs_on_host = !own_namespace;
    }
    auto ws = Workspace::create(opts);
    if (!ws) return std::move(ws).error();
    run.workspace.emplace(std::move(*ws));
    return {};
  }

  void environment(const PreparedRun& run, const std::optional<WorkspaceOwner>& owner,
                   std::map<std::string, std::string>& env) const override {
    env["HOME"] = run.workspace->home();
    env["TMPDIR"] = run.workspace->tmp();
    env["USER"] = env["LOGNAME"] = run_user_name(owner, run.uid_lease.has_value());
  }

  Status place_program(PreparedRun& run) const override {
    const Request& req = run.request;
    ChildPlan& plan = *run.plan;
    const std::string& argv0 = plan.argv_storage.front();
    // The child searches PATH untested; a failed exec redoes the search
    // (explain_exec_failure).
    plan.exec_paths = exec_candidates(argv0, run.env_path, /*existing=*/false);
    if (argv0.find('/') == std::string::npos) run.searched_name = argv0;
    else run.program = tried_program(plan);  // the plan's strings are released after the spawn
    if (req.tier != Tier::none)
      if (auto st = refuse_32bit_program(plan.exec_paths); !st) return st;
    plan.cwd = req.chdir ? *req.chdir : req.cwd ? *req.cwd : run.workspace->path();
    return {};
  }

  Status prepare(PreparedRun& run, const HostFacts& host, const std::optional<WorkspaceOwner>& owner,
                 MechanismCache* cache) const override {
    const Request& req = run.request;
    ChildPlan& plan = *run.plan;
    if (req.tier == Tier::none) return {};

    // Not root: there is nothing to drop and the bounding set cannot shrink;
    // no_new_privs (set by the seccomp and Landlock steps) keeps exec from
    // gaining anything through it.
    if (host.root) {
      if (cache && cache->capabilities) {
        plan.capabilities = cache->capabilities;
      } else {
        auto caps = prepare_capability_drop();
        if (!caps) return std::move(caps).error();
        plan.capabilities.emplace(std::move(*caps));
        if (cache) cache->capabilities = plan.capabilities;
      }
    }

    // SysV IPC and POSIX message queues of the run's own: nothing it makes
    // there outlives it or is seen by another run, and it sees none of the
    // host's. The namespace needs CAP_SYS_ADMIN (without it the map says
    // `ipc shared`); the kernel frees it from a workqueue once its last
    // process is gone, off the supervisor's path. The Spawner's spawn thread
    // has it ready ahead: one a finished run left empty, or a new one
    // (spawn_thread.hpp, ipc_namespace.hpp); else clone3 makes it.
    // Cost measured in README.
    if (host.root && host.cap_sys_admin) plan.clone_namespaces |= CLONE_NEWIPC;

    if (owner) {
      // Our ids, maps and capabilities, read once per supervisor (ten system
      // calls and two /proc reads a run otherwise).
      if (cache && !cache->privilege) cache->privilege = read_privilege_facts();
      auto drop = cache ? prepare_privilege_drop(owner->uid, owner->gid, *cache->privilege)
                        : prepare_privilege_drop(owner->uid, owner->gid);
      if (!drop) return std::move(drop).error();
      plan.privilege.emplace(std::move(*drop));
      plan.reap_uid_first = run.uid_lease && run.uid_lease->first_process_reaps();
    }

    // The filter: `default` plus the profile whose socket families the
    // network policy allows (seccomp.hpp): `no-network` when the network is
    // closed, `tcp-only` when it is closed but for an allow-list of ports
    // (plus Landlock's connect rules; without ABI 4 Landlock's prepare
    // refuses it), `host-network` on the host's network.
    const bool allow_tcp = req.net == NetworkAccess::none && !req.tcp_connect_ports.empty();
    const char* net = req.net == NetworkAccess::host ? "host-network" : allow_tcp ? "tcp-only" : "no-network";
    // --net none: the refused socket calls are counted (the supervisor answers
    // them), so a program's EACCES can be told to be corral's. Not with the
    // host's network, whose refusals (packet, vsock, ...) no flag lifts: a
    // listener per run would cost every run for them.
    const bool notify = req.net == NetworkAccess::none;
    auto program = tier_seccomp(net, cache, notify);
    if (!program) return std::move(program).error();
    if ((*program)->notifies()) {
      auto plain = tier_seccomp(net, cache);
      if (!plain) return std::move(plain).error();
      plan.seccomp_fallback = std::move(*plain);
    }
    plan.seccomp = std::move(*program);
    if (run.workspace->on_tmpfs() && !run.workspace->tmpfs_on_host()) {
      auto tmpfs = PrivateTmpfs::adopt(run.workspace->path(), run.workspace->dirfd(), run.workspace->tmpfs_bytes());
      if (!tmpfs) return std::move(tmpfs).error();
      plan.private_workspace.emplace(std::move(*tmpfs));
      plan.clone_namespaces |= CLONE_NEWNS;
    }
    return add_landlock(run, host, allow_tcp);
  }

  std::size_t fds_while_running(const Request& req) const override {
    // Tier process: its IPC namespace and that namespace's mqueue mount,
    // held for a later run (ipc_namespace.hpp); with --net none, the
    // seccomp listener too.
    if (req.tier != Tier::os_process) return kFdsPerProcessRun;
    // A tmpfs workspace in the run's own mount namespace keeps its fd: it
    // has no name to be found again by. One mounted on the host is released
    // as a directory is.
    return kFdsPerProcessRun + 2 + (may_have_namespaced_workspace(req) ? 1 : 0) +
           (req.net == NetworkAccess::none ? 1 : 0);
  }

  Expected<Spawner::Child> spawn(PreparedRun& run, Spawner& spawner) const override {
    return spawner.spawn(*run.plan);
  }

  bool needs_guardian(const PreparedRun&) const override { return true; }
  int oom_event_fd(const PreparedRun&) const override { return -1; }

  void kill(PreparedRun& run, const Pidfd& leader, int sig) const override {
    kill_group(leader, sig);
    // As root everything of the run's uid: the deadline's SIGTERM too, so
    // the escapees of the group get the same grace.
    if (run.uid_lease && run.uid_lease->host_wide()) (void)run.uid_lease->signal_processes(sig);
  }

  // The program's process CPU clock (the leader's threads, as RLIMIT_CPU
  // counts them).
  std::string cpu_enforcer(const PreparedRun&) const override { return "supervisor_cpu_clock"; }
  Expected<double> cpu_seconds(const PreparedRun&, const Pidfd& leader) const override {
    return process_cpu_seconds(leader.pid());
  }
  bool leader_is_program() const override { return true; }

  void ended(PreparedRun&, RunEnd&) const override {}
  TierFacts finish(PreparedRun&, const RunEnd&) const override { return {}; }

  // `host` (the host's), `none` (tier process --net none: sockets but
  // AF_UNIX refused), `tcp_allowlist` (--net none with TCP ports allowed).
  std::string network(const PreparedRun& run) const override {
    const Request& req = run.request;
    if (req.tier == Tier::none || req.net == NetworkAccess::host) return "host";
    return req.tcp_connect_ports.empty() ? "none" : "tcp_allowlist";
  }
};

}  // namespace

bool process_workspace_tmpfs_possible(const HostFacts& host) { return host.root && host.cap_sys_admin; }

const TierRunner& process_runner() {
  static const ProcessRunner runner;
  return runner;
}

}  // namespace corral
