// run_setup: a Request becomes a PreparedRun (workspace, resolved secrets,
// effective limits, the tier's mechanisms prepared, the child plan), and a
// finished run becomes a Result (outcome, captured streams, collected
// outputs, cleanup). The supervisor sits between the two. The first half
// is src/run_setup.cpp, the second src/run_result.cpp.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "corral/capabilities.hpp"
#include "corral/capture.hpp"
#include "corral/seccomp.hpp"
#include "corral/host.hpp"
#include "corral/privilege.hpp"
#include "corral/process.hpp"
#include "corral/request.hpp"
#include "corral/result.hpp"
#include "corral/rlimits.hpp"
#include "corral/run_policy.hpp"
#include "corral/spawn.hpp"
#include "corral/workspace.hpp"

namespace corral {

// What every run of a supervisor shares and is costly to rebuild: compiled
// seccomp programs by profile set, the capability drop, the enforcement map
// per tier (immutable once made: every run of the tier shares it). Filled
// on first use.
struct MechanismCache {
  std::map<std::string, std::shared_ptr<const SeccompProgram>> seccomp;
  std::optional<CapabilityDrop> capabilities;
  std::optional<PrivilegeFacts> privilege;  // our ids, maps and set*id capabilities
  std::map<Tier, std::shared_ptr<const std::map<std::string, std::string>>> enforcement;
  OwnHardLimits hard_limits;  // what each run's rlimits are checked against (rlimits.hpp)
};

struct ContainerRun;  // container.hpp
class TierRunner;    // tier_runner.hpp
struct SessionTarget;  // session_join.hpp
class KernelOomLog;    // kernel_oom_log.hpp

struct RunContext {
  UidPool* uids = nullptr;          // per-run uids when root; may be null
  std::string workspace_base;       // "" → choose_workspace_base("") (workspace.hpp)
  const HostFacts* host = nullptr;  // probes; null → probe_host()
  MechanismCache* cache = nullptr;  // may be null: everything is prepared afresh
  // Shared base (the supervisor's): workspaces then hold no base fd and
  // may release their root fd while the child runs. Overrides workspace_base.
  std::shared_ptr<const WorkspaceBase> base;
  // The supervisor's token: workspaces are corral-<tag>-<hex>, so a dead
  // supervisor's are found (leftovers.hpp). "" for corral-<hex>.
  std::string workspace_tag;
  // What decides enforceability and the Result's enforcement map
  // (run_policy.hpp); null: default_run_policy(), the policy layer's.
  const RunPolicy* policy = nullptr;
  // A session exec's live session (session_join.hpp), read from its host
  // state by the caller (the Supervisor: session_target()); required when
  // the request names a session.
  const SessionTarget* session = nullptr;
};

struct PreparedRun {
  std::string run_id;
  Request request;
  std::string program;                         // what execve was given, for a spawn failure's detail
  // argv[0] when the child searches PATH for it untested (a process tier):
  // a failed exec redoes the search here to name what exists and why.
  std::string searched_name;
  std::string env_path;                        // the PATH the program got (Result::env_path)
  Limits limits;                               // effective: defaults + request
  // What the child needs (argv/env copies, BPF, rlimits, the ruleset): made
  // by prepare_run, released once the child has it. Out of line: ~800 bytes
  // a run in flight would otherwise hold for nothing (a slot per live run).
  std::unique_ptr<ChildPlan> plan;
  std::shared_ptr<const SecretSet> secrets;    // values masked in every output byte
  std::optional<Workspace> workspace;
  std::optional<UidPool::Lease> uid_lease;
  // What differs between the tiers (tier_runner.hpp): set by prepare_run,
  // asked by the supervisor and finish_run. Never null once prepared.
  const TierRunner* runner = nullptr;
  std::shared_ptr<ContainerRun> container;     // tier container only: the container runner's (container.hpp)
  // The tier's host enforcement (RunPolicy::host_enforcement), shared with
  // every other run of the tier through the cache, never copied per run
  // (about 30 string pairs); never null once prepared.
  std::shared_ptr<const std::map<std::string, std::string>> enforcement;
  const RunPolicy* policy = nullptr;           // RunContext::policy, or the default (never null once prepared)
  std::vector<std::string> warnings;           // defaults this host cannot enforce
  // What enforces a fractional cpu_seconds (the supervisor's CPU watch:
  // "supervisor_cpu_clock", "supervisor_cgroup_cpu"); "" when RLIMIT_CPU
  // holds the limit as it is. The Result's enforcement map says it.
  std::string cpu_enforcer;
  std::chrono::steady_clock::time_point started;
  double plan_seconds = 0;
  // Set when an input (or a payload) could not be staged into the
  // workspace: missing, over a cap, a symlink refused, not a file. Nothing
  // is spawned; the run's Result is spawn_failed, spawn_stage "inputs",
  // this error's errno and message (unstarted_result), delivered and
  // audited like every other Result. The rest of the plan is not made.
  std::optional<Error> unstaged;
};

// Build everything the child needs. An Error means corral refuses or
// cannot run this request; nothing was spawned and nothing is left behind.
// An input that cannot be staged is not an Error but a run that will not
// start (PreparedRun::unstaged): its caller gets a Result that says so.
// The request's id has each of its secrets' values masked once they are
// resolved (the Result and the audit line echo it).
Expected<PreparedRun> prepare_run(Request request, RunContext& ctx, std::string run_id);

// The Result of a run whose inputs could not be staged (run.unstaged):
// spawn_failed, spawn_stage "inputs", the error's errno, its message first
// in the detail (then the limits, as every detail); no output (the empty
// streams' hashes), no enforcement (nothing ran, nothing was enforced).
// Removes the workspace and returns the uid lease.
Result unstarted_result(PreparedRun& run);

// What every end of a run does, started or not: the workspace removed (a
// failure to remove it is added to `detail`) and the uid given back, after
// the workspace, whose files are the uid's.
void release_workspace_and_uid(PreparedRun& run, std::string& detail);

// A secret's value as prepare_run resolves it: the file from_file names
// (read_secret_file), else corral's variable from_env (default: name). An
// empty value is refused: it could not be masked.
Expected<std::string> resolve_secret(const SecretRef& ref);

// The values of `refs` that resolve (the others left out): what a front end
// masks in what it echoes of a request that may never reach prepare_run (a
// refusal's id, reason and audit line).
std::vector<std::string> secret_values(const std::vector<SecretRef>& refs);

// After a spawn failed at execve: a process-tier child searched PATH
// untested (PreparedRun::searched_name), so the candidates that exist are
// found now to name them in run.program, and an EACCES that came only from
// directories holding no such program becomes the truth, ENOENT.
void explain_exec_failure(PreparedRun& run, int& spawn_errno);

// How the supervisor saw the run end.
struct RunEnd {
  std::optional<ExitStatus> status;   // absent: never started (spawn failure)
  ChildReport report;                 // stage != none: exec never happened
  bool timed_out = false;
  bool cancelled = false;
  // "stdout_bytes"/"stderr_bytes": the stream passed its cap under
  // OutputLimitPolicy::kill and the supervisor killed the run for it.
  std::string output_limit;
  // The run's OOM eventfd fired (cgroup v1, RunCgroup::oom_notifier): set
  // by the supervisor before it kills the run for it. A deadline or a
  // cancel that comes after it does not set timed_out or cancelled.
  bool oom_notified = false;
  // The memory ceiling's OOM path ended the run: set by finish_run from the
  // tier's evidence (TierFacts::oom_killed; the container's:
  // CgroupStats::ceiling_oom). classify_outcome
  // makes a SIGKILL death killed_oom only with it.
  bool oom_killed = false;
  // The kernel's log names the SIGKILL that ended the run an OOM kill
  // outside any ceiling of the run's own (the host's memory, or an
  // enclosing cgroup's, ran out): set by finish_run from KernelOomLog, for
  // a SIGKILL nothing above explains. classify_outcome makes it killed_oom
  // with no resource.
  bool host_oom_killed = false;
  // The run's first process (its program, or a container's pid 1), in our
  // pid namespace, and the kernel log's mark taken right before it started
  // (KernelOomLog::mark): what finish_run looks the log up by.
  pid_t leader = 0;
  std::uint64_t kernel_log_mark = 0;
  // The supervisor's CPU watch found the run at its cpu_seconds and killed
  // it (SIGKILL): killed_resource, resource cpu_seconds.
  bool cpu_limit_hit = false;
  // A SIGXFSZ death with evidence of the file_bytes limit: a file in the
  // workspace at least file_bytes long (workspace_has_file_of), set by
  // finish_run. The kernel's SIGXFSZ and one a program sends itself carry
  // the same siginfo (SI_USER, its own pid), so without it classify_outcome
  // says `signaled`.
  bool file_limit_reached = false;
  // At a wall_seconds kill, how long the program had waited for a CPU
  // (runqueue_wait_seconds; process tiers): a run starved by the host's
  // load, not one that hung.
  std::optional<double> runqueue_seconds;
  // Calls the seccomp filter refused and the supervisor answered (tier
  // process, --net none: socket/socketpair), by syscall name.
  std::map<std::string, std::uint64_t> refused_syscalls;
  // Set when the supervisor stopped answering them (the listener failed):
  // from then on the kernel failed those calls with ENOSYS.
  std::string refusal_failure;
  double clone_seconds = 0;                 // Spawner::Child's (the container's: its exec report's)
  std::optional<double> exec_seconds;       // Spawner::Child's; unknown in tier container
  std::chrono::steady_clock::time_point spawned;  // the spawn returned (the program running, or on its way)
};

// Outcome, streams, outputs, timings; removes the workspace and returns the
// uid lease. `out`/`err` are the run's captures (finished here).
// `kernel_oom_log`: the supervisor's, when it can read one; the OOM kills
// it logged of the run's processes since end.kernel_log_mark are taken out
// of it here.
Result finish_run(PreparedRun& run, const RunEnd& end, StreamCapture& out, StreamCapture* err,
                  KernelOomLog* kernel_oom_log = nullptr);

// The outcome of an ended program, given the limits it ran under. Pure.
void classify_outcome(const RunEnd& end, const Limits& limits, Result& result);

}  // namespace corral
