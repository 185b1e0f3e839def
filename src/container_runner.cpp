// The container tier's runner (tier_runner.hpp): the run layer's view of
// container.hpp. The workspace at /workspace (a tmpfs of its own as root),
// the environment the sandbox's /etc/passwd and PATH give, the program
// found inside, namespaces + mount tree + cgroup prepared by
// prepare_container and spawned by spawn_container, the group kill through
// pid 1 and the cgroup, and the cgroup's evidence at the end. A session
// exec (session_join.hpp) is its variant: it joins a live session's
// sandbox instead of building one.
#include <signal.h>
#include <unistd.h>

#include "corral/container.hpp"
#include "corral/session_join.hpp"
#include "corral/tier_runner.hpp"

namespace corral {
namespace {

// A container run holds more while it runs than the process tiers' three:
// pid 1's report pipe, the exec report pipe (read when the run ends),
// /dev/null, the cgroup's directory and procs fds (up to four hierarchies
// on v1), the OOM eventfd, the tmpfs workspace (kept: it has no name to
// reopen it by). Counted generously so the budget stays honest.
constexpr std::size_t kFdsPerContainerRun = 14;

bool session_exec(const PreparedRun& run) { return !run.request.session.empty(); }

class ContainerRunner final : public TierRunner {
 public:
  Status check(const Request&) const override { return {}; }

  Expected<std::optional<WorkspaceOwner>> owner(PreparedRun& run, const HostFacts& host,
                                                RunContext& ctx) const override {
    // A session exec runs as the session's uid, in its workspace; rootless,
    // a container's host id is ours.
    if (!host.root || session_exec(run)) return std::optional<WorkspaceOwner>{};
    // The host id the sandbox's uid maps to (request.user is the inside uid).
    if (!ctx.uids) return Error::invalid("tier container as root needs a uid pool for the runs' host ids");
    auto lease = ctx.uids->acquire();
    if (!lease) return std::move(lease).error();
    WorkspaceOwner owner{lease->uid(), lease->gid()};
    run.uid_lease.emplace(std::move(*lease));
    return std::optional<WorkspaceOwner>(owner);
  }

  Status workspace(PreparedRun& run, const HostFacts& host, RunContext& ctx, WorkspaceOptions opts) const override {
    opts.make_tmp = false;  // /tmp is a tmpfs of the sandbox's own
    if (container_workspace_on_tmpfs(host)) {
      // The run's own tmpfs (container.hpp, kContainerWorkspaceBytes); the
      // size is in the result's limits whether asked for or not.
      if (!run.limits.has(Limit::workspace_bytes)) run.limits.set(Limit::workspace_bytes, kContainerWorkspaceBytes);
      opts.tmpfs_bytes = run.limits.get(Limit::workspace_bytes);
    }
    if (session_exec(run)) {
      // The session's /workspace; inputs, outputs and a payload are refused there.
      const Request& req = run.request;
      if (!ctx.session || ctx.session->id != req.session)
        return Error::invalid("session " + req.session +
                              ": no live session given to the run (RunContext::session; submit the exec to a "
                              "Supervisor)");
      return prepare_session_exec(run, host, *ctx.session);
    }
    auto ws = Workspace::create(opts);
    if (!ws) return std::move(ws).error();
    run.workspace.emplace(std::move(*ws));
    return {};
  }

  // The workspace is at /workspace and /tmp is a private tmpfs; USER is the
  // name the generated /etc/passwd gives the run's uid. The host's PATH
  // names the host's directories (~/.pyenv/shims, ...): a container gets
  // its own unless the request sets PATH.
  void environment(const PreparedRun&, const std::optional<WorkspaceOwner>&,
                   std::map<std::string, std::string>& env) const override {
    env["HOME"] = std::string(kContainerWorkspace) + "/home";
    env["TMPDIR"] = "/tmp";
    env["USER"] = env["LOGNAME"] = EtcIdentity{}.user;
    env["PATH"] = std::string(kContainerPath);
  }

  Status place_program(PreparedRun& run) const override {
    const Request& req = run.request;
    ChildPlan& plan = *run.plan;
    // Only candidates that exist: the child's uid may not search them all.
    plan.exec_paths = exec_candidates(plan.argv_storage.front(), run.env_path, /*existing=*/true);
    run.program = tried_program(plan);  // the plan's strings are released after the spawn
    // A session exec runs the session's files, and a rootfs or /workspace
    // holds files the host does not see: not checked.
    if (session_exec(run)) return {};  // its cwd is the session's (prepare_session_exec)
    if (!req.rootfs && plan.exec_paths.front().rfind(std::string(kContainerWorkspace) + "/", 0) != 0)
      if (auto st = refuse_32bit_program(plan.exec_paths); !st) return st;
    plan.cwd = "";  // the mount tree's chdir
    return {};
  }

  Status prepare(PreparedRun& run, const HostFacts& host, const std::optional<WorkspaceOwner>& owner,
                 MechanismCache* cache) const override {
    // Namespaces, mount tree, cgroup; the host id is the run's own uid when
    // root, ours when rootless. A session exec's container part was made
    // with its workspace (prepare_session_exec).
    auto st = run.container ? Status{}
              : owner       ? prepare_container(run, host, owner->uid, owner->gid)
                            : prepare_container(run, host, geteuid(), getegid());
    if (!st) return st;
    // `default` (io_uring, namespace creation, mount and the other host-wide
    // calls denied) and `inet-only`, in the template's namespace too: IP
    // reaches only the namespace's lo, and a namespace does not isolate
    // vsock, so the families still need the allow-list. In the template's
    // shared namespace, where lo is down, a program's socket(AF_INET)
    // succeeds and the network answers as one with no interface up (connect
    // and sendto: ENETUNREACH): "no network", not a refusal it cannot
    // explain. A port bound on 0.0.0.0 there occupies it for the other runs
    // of the template, but no packet can pass between them.
    auto program = tier_seccomp("inet-only", cache);
    if (!program) return std::move(program).error();
    run.plan->seccomp = std::move(*program);
    return {};
  }

  std::size_t fds_while_running(const Request&) const override { return kFdsPerContainerRun; }

  Expected<Spawner::Child> spawn(PreparedRun& run, Spawner& spawner) const override {
    return spawn_container(*run.plan, *run.container, spawner.ignored_signals());
  }

  // pid 1 dies with us (PDEATHSIG) and takes its pid namespace along. A
  // session exec's own cgroup, below its session's, holds everything it
  // starts, its leader dies with us, and the session's keeper kills what an
  // exec whose owner is gone left.
  bool needs_guardian(const PreparedRun& run) const override { return !run.container; }

  int oom_event_fd(const PreparedRun& run) const override {
    return run.container && run.container->oom_event ? run.container->oom_event.get() : -1;
  }
  // A session exec's eventfd fires for its session's OOMs too (session_join.hpp).
  bool oom_is_the_runs_own(PreparedRun& run) const override {
    return !run.container || session_oom_is_the_execs_own(*run.container);
  }

  void kill(PreparedRun& run, const Pidfd& leader, int sig) const override {
    kill_container(*run.container, leader, sig);  // pid 1 + cgroup
  }

  // The run's cgroup CPU usage (the whole tree, as the Result's cpu_seconds
  // counts it here). Without a cgroup, RLIMIT_CPU rounded up holds alone.
  std::string cpu_enforcer(const PreparedRun& run) const override {
    return run.container && run.container->cgroup ? "supervisor_cgroup_cpu" : "";
  }
  bool cpu_seconds_cover_the_tree() const override { return true; }
  Expected<double> cpu_seconds(const PreparedRun& run, const Pidfd&) const override {
    auto stats = run.container->cgroup->stats();
    if (!stats) return std::move(stats).error();
    if (!stats->cpu_usage_ns) return Error(ENOTSUP, "the run's cgroup has no CPU accounting");
    return static_cast<double>(*stats->cpu_usage_ns) / 1e9;
  }
  bool leader_is_program() const override { return false; }  // pid 1 is not the program

  // The spawn did not wait for the exec: whether the set-up failed, and how
  // long it took, is known only now.
  void ended(PreparedRun& run, RunEnd& end) const override {
    if (run.container) read_container_exec_report(*run.container, end);
  }
  TierFacts finish(PreparedRun& run, const RunEnd& end) const override {
    if (!run.container) return {};
    return finish_container(*run.container, end);
  }

  // `empty_namespace` (the template's shared namespace: no interface up,
  // socket() works, connect ENETUNREACH), `loopback` (a namespace of its
  // own, lo up).
  std::string network(const PreparedRun& run) const override {
    return run.container && run.container->ns.in_template() ? "empty_namespace" : "loopback";
  }
};

}  // namespace

const TierRunner& container_runner() {
  static const ContainerRunner runner;
  return runner;
}

}  // namespace corral
