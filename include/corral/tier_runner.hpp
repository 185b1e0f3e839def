// tier_runner: what differs between the tiers, behind one interface, so the
// run layer (run_setup.cpp, run_result.cpp) and the supervisor never branch
// on the tier. Two families:
//   process   (none, os_process; process_runner.cpp): the program is the
//             Spawner's vfork child on the host, confined by rlimits,
//             capabilities, seccomp, Landlock and a uid of its own.
//   container (container_runner.cpp): namespaces, a mount tree, a cgroup
//             (container.hpp); a session exec is its variant, joining a
//             live session's sandbox (session_join.hpp).
// A runner is stateless and shared (tier_runner(tier)); what one run holds
// stays in its PreparedRun (the container's in PreparedRun::container).
//
// A run's life through its runner:
//   prepare_run    check, owner, workspace, environment, place_program,
//                  prepare (the tier's mechanisms into the child plan)
//   supervisor     spawn; kill for a deadline, grace, cancel or limit;
//                  oom_event_fd, cpu_* for its watches
//   finish_run     ended (what the spawn left to read once the run is
//                  over), finish (the tier's facts: the program's own end,
//                  OOM evidence, whole-tree counters, notes). The run layer
//                  classifies the outcome once, from those facts.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "corral/process.hpp"
#include "corral/run_setup.hpp"
#include "corral/seccomp.hpp"
#include "corral/spawn.hpp"
#include "corral/status.hpp"

namespace corral {

// What a tier found out about a run once it ended, for finish_run to apply
// before it classifies the outcome.
struct TierFacts {
  // The program's own end where the leader is not the program (a
  // container's pid 1 reports its child's wait status).
  std::optional<ExitStatus> program_status;
  // RunEnd::oom_killed from the tier's evidence (the cgroup's counters and
  // OOM eventfd); unset: the tier has none.
  std::optional<bool> oom_killed;
  std::uint64_t oom_kills = 0;                 // processes the kernel OOM-killed in the run's cgroup
  // What the cgroup says of OOM kills that were not at the run's own
  // ceiling (an ancestor's or the host's ran out): finish_run adds it to
  // the detail unless the kernel's log named the kills (KernelOomLog).
  std::string oom_outside_ceiling;
  std::optional<double> cpu_seconds;           // the whole tree's, as the cgroup counted it
  std::optional<std::uint64_t> max_rss_bytes;  // the cgroup's peak
  // After a kill: whether nothing of the run is left (the cgroup removed).
  std::optional<bool> kill_confirmed;
  std::vector<std::string> notes;  // for the result's detail
};

class TierRunner {
 public:
  virtual ~TierRunner() = default;

  // --- prepare_run, in this order ---
  // The request's fields this tier cannot honour (a process tier has no
  // rootfs, binds, tmpfs or devices). Before the policy's check.
  virtual Status check(const Request& req) const = 0;
  // The host ids the run's files and processes get: a uid of the run's own
  // (leased into run.uid_lease) when root, nullopt for ours. Refuses what
  // the tier cannot run as (a session exec outside the container tier).
  virtual Expected<std::optional<WorkspaceOwner>> owner(PreparedRun& run, const HostFacts& host,
                                                        RunContext& ctx) const = 0;
  // run.workspace from `opts` (base, owner, tag already set), or the live
  // session's for a session exec (run.workspace stays empty).
  virtual Status workspace(PreparedRun& run, const HostFacts& host, RunContext& ctx,
                           WorkspaceOptions opts) const = 0;
  // HOME, TMPDIR, USER, LOGNAME and PATH as the tier places them, before
  // the request's own variables and the secrets.
  virtual void environment(const PreparedRun& run, const std::optional<WorkspaceOwner>& owner,
                           std::map<std::string, std::string>& env) const = 0;
  // plan.exec_paths (from plan.argv_storage and run.env_path), run.program
  // or run.searched_name, plan.cwd; refuses a 32-bit program it can see.
  virtual Status place_program(PreparedRun& run) const = 0;
  // The tier's mechanisms into run.plan (and run.container): everything but
  // the rlimits, which prepare_run sets for every tier (tier_limits.hpp).
  virtual Status prepare(PreparedRun& run, const HostFacts& host, const std::optional<WorkspaceOwner>& owner,
                         MechanismCache* cache) const = 0;

  // --- the supervisor ---
  // The fds a run holds while its child runs (the supervisor's fd budget).
  virtual std::size_t fds_while_running(const Request& req) const = 0;
  // Start the child. An Error is corral's own failure; a child whose exec
  // never happened is a Child with report.stage set.
  virtual Expected<Spawner::Child> spawn(PreparedRun& run, Spawner& spawner) const = 0;
  // Whether the guardian (guardian.hpp) must kill the run if we die; a
  // container's pid 1 dies with us and takes its namespace along.
  virtual bool needs_guardian(const PreparedRun& run) const = 0;
  // Readable once the run's memory ceiling is in the OOM path (cgroup v1's
  // eventfd); -1 for none.
  virtual int oom_event_fd(const PreparedRun& run) const = 0;
  // When that eventfd fired: whether the OOM is the run's own, so the whole
  // run is killed (false: an OOM of a ceiling shared with others, such as a
  // session's, where the kernel's OOM killer alone picks who dies). A
  // runner that can say false reads the eventfd's count here: the loop
  // watches it again after a false without reading it.
  virtual bool oom_is_the_runs_own(PreparedRun&) const { return true; }
  // The group kill: `sig` to everything of the run (leader = the spawned
  // child's pidfd).
  virtual void kill(PreparedRun& run, const Pidfd& leader, int sig) const = 0;
  // The CPU watch of cpu_seconds: what reads it (the Result's
  // enforcement["cpu_seconds"]), "" when this run has nothing to read.
  virtual std::string cpu_enforcer(const PreparedRun& run) const = 0;
  virtual Expected<double> cpu_seconds(const PreparedRun& run, const Pidfd& leader) const = 0;
  // Whether cpu_seconds() counts every process of the run (a cgroup), not
  // only the leader's: then the watch holds whole seconds too, which
  // RLIMIT_CPU holds per process only.
  virtual bool cpu_seconds_cover_the_tree() const { return false; }
  // Whether the leader is the program (its run-queue wait is the program's).
  virtual bool leader_is_program() const = 0;

  // --- finish_run ---
  // First: what the spawn left to be read once the run is over (a
  // container's exec report: a set-up failure, the set-up time) into `end`.
  virtual void ended(PreparedRun& run, RunEnd& end) const = 0;
  // After the run's uid was cleared: the tier's facts; its own resources
  // (the cgroup) are released.
  virtual TierFacts finish(PreparedRun& run, const RunEnd& end) const = 0;
  // enforcement["network"]: which network the run had.
  virtual std::string network(const PreparedRun& run) const = 0;
};

// The runner of a tier (process_runner.cpp, container_runner.cpp).
const TierRunner& tier_runner(Tier tier);
const TierRunner& process_runner();
// Whether tier process can give a run a tmpfs workspace of its own on this
// host (fsopen, and the mount namespace it goes over the workspace's
// directory in, need CAP_SYS_ADMIN: root). When it does is the process
// runner's (process_runner.cpp: workspace_bytes set, or --confine-writes).
bool process_workspace_tmpfs_possible(const HostFacts& host);
const TierRunner& container_runner();

// --- shared by the runners (tier_runner.cpp) ---

// The value of `name` in our environment, or null.
const char* find_env(const char* name);

// execvp's candidates for `program` under the child's PATH (see the .cpp);
// with `existing`, only those where something by that name exists.
std::vector<std::string> exec_candidates(const std::string& program, const std::string& child_path, bool existing);
// The program a spawn tried: the path execve was given, or every candidate.
std::string tried_program(const ChildPlan& plan);
// Refuses a 32-bit program the host can read (the tiers' seccomp filters
// are for x86_64): the first of the candidates that exists.
Status refuse_32bit_program(const std::vector<std::string>& candidates);

// The seccomp filter `default` plus the network profile `net`, from the
// cache when there. `notify`: the socket refusals go to the supervisor;
// where this host cannot, the plain filter.
Expected<std::shared_ptr<const SeccompProgram>> tier_seccomp(const char* net, MechanismCache* cache,
                                                             bool notify = false);

}  // namespace corral
