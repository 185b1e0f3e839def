// The container tier's parent side around the spawn (container.hpp):
// preparing a run's namespaces, mount tree and cgroup from its Request, and
// turning how pid 1 ended plus the cgroup's counters into the tier's facts
// (tier_runner.hpp), which the run layer classifies.
#include "corral/container.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "corral/host.hpp"
#include "corral/landlock.hpp"
#include "corral/names.hpp"
#include "corral/run_setup.hpp"
#include "corral/seccomp.hpp"
#include "corral/session_join.hpp"
#include "corral/tier_limits.hpp"
#include "corral/tier_runner.hpp"

namespace corral {

bool container_workspace_on_tmpfs(const HostFacts& host) { return host.root; }

namespace {

Status check_container_request(const Request& req, uid_t inside) {
  if (inside == 0)
    return Error::invalid("user 0: tier container runs the program as a non-root uid inside (default " +
                          std::to_string(kContainerDefaultUid) + ")");
  if (inside == static_cast<uid_t>(-1)) return Error::invalid("user -1 is not a uid");
  if (!req.write_paths.empty())
    return Error::invalid("write_paths: in tier container the root is read-only but for /workspace and /tmp; "
                          "bind a host directory with --bind SRC[:DST] instead");
  return {};
}

// The run's cgroup, when the host lets us make one. Ceilings the host cannot
// give were refused by check_enforceable unless acknowledged; the
// acknowledgement's warning is already in run.warnings.
Status add_cgroup(PreparedRun& run, const HostFacts& host, ContainerRun& c) {
  if (host.cgroups.backend == CgroupVersion::none) return {};
  CgroupSpec spec;
  // The limits this tier enforces with the cgroup (tier_limits.hpp).
  auto ceiling = [&](Limit limit) -> std::optional<std::uint64_t> {
    if (limit_mechanism(limit, Tier::container) != LimitMechanism::cgroup) return std::nullopt;
    return run.limits.get(limit);
  };
  if (host.cgroup_memory) spec.memory_bytes = ceiling(Limit::memory_bytes);
  if (host.cgroup_pids) spec.pids_max = ceiling(Limit::process_count);
  // v1 hierarchies the run does without (each costs a mkdir, a join and an
  // rmdir): the pid namespace kills the run as a whole, so no freezer; no
  // pids hierarchy unless there is a ceiling to keep.
  spec.freezer_kill = false;
  spec.pids_accounting = false;
  // v1: nor a cpuacct hierarchy (v2's one group has cpu.stat anyway) unless
  // a cpu_seconds limit is watched through it
  // (ContainerRunner::cpu_seconds; the CPU watch and the Result's count of a
  // limited run). Without a limit the Result's cpu_seconds is pid 1's
  // rusage, which counts the same processes: pid 1 reaps every process of
  // its pid namespace, and its exit kills and reaps whatever is left before
  // the supervisor reaps it (kernel/pid_namespace.c, zap_pid_ns_processes),
  // so their times are in its children's. Saves a mkdir, a join, a read and
  // an rmdir per run.
  spec.cpu_accounting = run.limits.has(Limit::cpu_seconds);
  if (!run.request.dev_binds.empty() && host.cgroups.has("devices")) {
    // Exactly the standard nodes (the mount tree binds null, zero, full,
    // random, urandom; tty, ptmx and pts for a terminal) and the operator's.
    std::vector<DeviceRule> rules = {{'c', 1, 3}, {'c', 1, 5}, {'c', 1, 7}, {'c', 1, 8},
                                     {'c', 1, 9}, {'c', 5, 0}, {'c', 5, 2}, {'c', 136, -1}};
    for (const auto& path : run.request.dev_binds) {
      struct stat st;
      if (::stat(path.c_str(), &st) != 0) return Error::from_errno(errno, "container: dev_bind '" + path + "'");
      if (!S_ISCHR(st.st_mode)) return Error::invalid("container: dev_bind '" + path + "': not a character device");
      rules.push_back({'c', major(st.st_rdev), static_cast<int>(minor(st.st_rdev))});
    }
    spec.devices = std::move(rules);
  }
  auto cg = create_run_cgroup(host.cgroups, spec, run.run_id);
  if (!cg) return std::move(cg).error().context("container");
  c.join_in_child = cg->version() == CgroupVersion::v1;
  c.memory_ceiling = spec.memory_bytes.has_value();
  if (spec.memory_bytes) {
    // v1 kills one victim and lets the run go on; the supervisor watches
    // this fd and ends the whole run, as v2's memory.oom.group does.
    auto oom = cg->oom_notifier();
    if (!oom) return std::move(oom).error().context("container");
    c.oom_event = std::move(*oom);
  }
  c.cgroup.emplace(std::move(*cg));
  return {};
}

}  // namespace

Status prepare_container(PreparedRun& run, const HostFacts& host, uid_t outside_uid, gid_t outside_gid) {
  const Request& req = run.request;
  const uid_t inside = req.user.value_or(kContainerDefaultUid);
  if (auto st = check_container_request(req, inside); !st) return st;

  MountTreeSpec tree;
  // Ceilings, not reservations: a tmpfs takes pages as files are written,
  // and they count against the run's memory cgroup. Sized for ordinary work
  // (CPython's suite: test_venv copies a standard library and pip into
  // /tmp, ENOSPC at 64 MiB; a 64 MiB multiprocessing shared_memory segment
  // died with SIGBUS at 16 MiB): /tmp as large as the default workspace,
  // /dev/shm a quarter of it.
  tree.tmp_bytes(kContainerWorkspaceBytes).shm_bytes(kContainerWorkspaceBytes / 4);
  if (run.workspace->on_tmpfs())
    tree.workspace_mount(run.workspace->dirfd(), std::string(kContainerWorkspace));
  else
    tree.workspace(run.workspace->path(), std::string(kContainerWorkspace));
  if (req.rootfs) tree.rootfs(*req.rootfs);
  auto c = std::make_shared<ContainerRun>();
  if (auto st = add_container_mounts(run, host, outside_uid, outside_gid, tree, *c); !st) return st;
  if (req.cwd) {
    // A project tree to run in: bound read-write at the same path.
    tree.bind(*req.cwd, *req.cwd);
    tree.cwd(*req.cwd);
  } else if (req.chdir) {
    // Only the working directory: a path inside, nothing mounted for it.
    tree.cwd(*req.chdir);
  }

  if (auto st = add_cgroup(run, host, *c); !st) return st;

  NamespaceSpec spec;
  spec.map(UserNsMap{inside, inside, outside_uid, outside_gid});
  spec.mounts(std::move(tree));
  // v1: the child joins the cgroup after clone and unshares the cgroup
  // namespace itself, so its root is the run's group.
  spec.cgroup(!c->join_in_child);
  // A killed supervisor takes its sandboxes with it (the Supervisor is
  // single-threaded: the cloning thread lives as long as its runs).
  spec.die_with_parent(true);
  // The shared template needs Landlock's abstract-unix scoping (ABI 6) to
  // keep runs in one network namespace from reaching each other's sockets;
  // prepare_namespaces takes it only as root and for a tree without binds
  // (a --cwd is one).
  spec.use_template(!req.loopback && host.landlock_abi >= 6);
  auto ns = prepare_namespaces(spec);
  if (!ns) return std::move(ns).error().context("container");
  c->ns = std::move(*ns);

  c->devnull.reset(::open("/dev/null", O_RDWR | O_CLOEXEC));
  if (!c->devnull) return Error::from_errno(errno, "container: open /dev/null");

  if (c->ns.in_template()) {
    // Runs share the template's network namespace: an abstract unix socket
    // of one must be out of another's reach. The domain also keeps the
    // program from pid 1, which runs on our memory with the program's host
    // ids (pid1.cpp): Landlock refuses ptrace and /proc/<pid>/mem of any
    // process outside the domain whatever the dumpable flag says.
    LandlockSpec scope;
    scope.confine_writes(false).scope_abstract_unix(true);
    auto ruleset = prepare(scope);
    if (!ruleset) return std::move(ruleset).error().context("container: landlock scope for the shared network namespace");
    run.plan->landlock.emplace(std::move(*ruleset));
  } else if (!c->ns.template_error().empty()) {
    run.warnings.push_back("container: built per run, the namespace template failed: " + c->ns.template_error());
  }
  run.container = std::move(c);
  return {};
}

namespace {

// The program's own end from pid 1's report: pid 1 exits 128+N for signal
// N, which a program can also exit with; the record is exact. No record:
// pid 1 itself was killed (a deadline, a cancel, an OOM kill of pid 1).
std::optional<ExitStatus> program_status(ContainerRun& c, const ExitStatus& pid1) {
  Pid1Report report;
  if (!c.pid1_report) return std::nullopt;
  ssize_t n = ::read(c.pid1_report.get(), &report, sizeof report);
  c.pid1_report.reset();
  if (n != static_cast<ssize_t>(sizeof report) || report.magic != kPid1ReportMagic) return std::nullopt;
  ExitStatus st = pid1;  // rusage: pid 1 and every process it reaped
  st.exited = WIFEXITED(report.wait_status);
  st.exit_code = st.exited ? WEXITSTATUS(report.wait_status) : -1;
  st.signal = WIFSIGNALED(report.wait_status) ? WTERMSIG(report.wait_status) : 0;
  st.core_dumped = WIFSIGNALED(report.wait_status) && WCOREDUMP(report.wait_status);
  return st;
}

// The v1 OOM eventfd's count, read (and so reset) before the cgroup is
// removed, since removal signals it too. It covers an OOM whose completion the
// supervisor had not seen yet when the run ended.
bool oom_event_fired(ContainerRun& c) {
  std::uint64_t count = 0;
  return c.oom_event && ::read(c.oom_event.get(), &count, sizeof count) == sizeof count && count > 0;
}

}  // namespace

TierFacts finish_container(ContainerRun& c, const RunEnd& end) {
  TierFacts facts;
  std::vector<std::string>& notes = facts.notes;
  notes = c.notes;
  if (!c.failure.empty()) notes.push_back(c.failure);
  c.bind_mounts.clear();  // attached by now, or never to be

  if (end.status && end.report.stage == SpawnStage::none) facts.program_status = program_status(c, *end.status);

  if (c.cgroup) {
    const bool notified = end.oom_notified || oom_event_fired(c);
    auto stats = c.cgroup->stats();
    if (!stats) {
      notes.push_back("cgroup stats: " + stats.error().message());
    } else {
      // The whole tree, pid 1 and escapees included, as the cgroup counted it.
      if (stats->cpu_usage_ns) facts.cpu_seconds = static_cast<double>(*stats->cpu_usage_ns) / 1e9;
      if (stats->memory_peak_bytes) facts.max_rss_bytes = *stats->memory_peak_bytes;
      // The run layer makes it killed_oom only for a SIGKILL death that no
      // deadline or cancel came before (classify_outcome). A session exec
      // also has its session's ceiling above it (session_join.hpp).
      if (c.session) {
        finish_session_exec_oom(c, *stats, notified, facts);
      } else {
        const bool ceiling = stats->ceiling_oom(notified);
        const std::uint64_t ooms = stats->oom_kills.value_or(0);
        facts.oom_killed = ceiling;
        facts.oom_kills = ooms;
        if (!ceiling && (ooms > 0 || notified))
          facts.oom_outside_ceiling =
              std::string(ooms > 0 ? "the kernel OOM-killed " + std::to_string(ooms) + " process(es) of the run"
                                   : "the memory controller signalled an OOM to the run's cgroup") +
              ", but not at its memory_bytes ceiling (the host or an ancestor cgroup ran out)";
      }
      if (stats->pids_limit_hits.value_or(0) > 0)
        notes.push_back("process_count: pids.max refused " + std::to_string(*stats->pids_limit_hits) + " fork(s)");
    }
    // remove() kills what is left and waits until the group is empty before
    // its rmdir (a v1 group with a task refuses one): success is the
    // evidence that nothing of the run lives on.
    auto removed = c.cgroup->remove();
    if (!removed) notes.push_back("cgroup not fully removed: " + removed.error().message());
    const bool killed = end.timed_out || end.cancelled || !end.output_limit.empty() || end.cpu_limit_hit ||
                        end.oom_notified;
    if (killed) facts.kill_confirmed = static_cast<bool>(removed);
  }
  return facts;
}

}  // namespace corral
