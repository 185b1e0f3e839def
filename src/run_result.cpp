// The second half of a run (run_setup.hpp): a finished run becomes a
// Result. Its outcome classified from the evidence the supervisor and the
// tier gathered, what this run had applied (the run policy: run_policy.hpp), the
// captured streams, the declared outputs collected and delivered, the
// workspace removed and the uid returned. Parent side.
#include "corral/run_setup.hpp"

#include <signal.h>
#include <sys/prctl.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "corral/kernel_oom_log.hpp"
#include "corral/names.hpp"
#include "corral/output_collect.hpp"
#include "corral/tier_limits.hpp"
#include "corral/tier_runner.hpp"

namespace corral {

namespace {
// Whether a run that RLIMIT_CPU's signal ended spent enough CPU for the
// limit to be what sent it. The kernel checks RLIMIT_CPU against CPU time
// sampled at scheduler ticks; the rusage we read is the exact runtime.
// They part under contention: a spinner pinned beside two others got
// SIGXCPU at cpu_seconds=1 with 0.81-0.97 s in its rusage (10 of 12 below
// 0.95). Half the limit keeps that a limit kill, and a program that raised
// the signal itself early (after 3 ms) `signaled`.
bool spent_half_of(double cpu_seconds, double limit) { return cpu_seconds >= limit / 2; }
}  // namespace

void classify_outcome(const RunEnd& end, const Limits& limits, Result& r) {
  r.resource.clear();
  if (end.report.stage != SpawnStage::none) {
    r.outcome = Outcome::spawn_failed;
    r.spawn_stage = std::string(to_string(end.report.stage));
    r.spawn_errno = end.report.error;
    return;
  }
  if (end.status) {
    r.exit_code = end.status->exited ? end.status->exit_code : -1;
    r.signal = end.status->exited ? 0 : end.status->signal;
  }
  if (end.cancelled) {
    r.outcome = Outcome::cancelled;
    return;
  }
  if (!end.output_limit.empty()) {
    // The overrun is the verdict whether the kill or the program's own exit
    // came first (a program that printed too much and exited is not
    // `exited`): the same output always gets the same outcome, 137.
    r.outcome = Outcome::killed_resource;
    r.resource = end.output_limit;
    r.exit_code = -1;
    r.signal = SIGKILL;
    return;
  }
  if (end.cpu_limit_hit) {
    // The supervisor's CPU watch (a fractional cpu_seconds) killed it.
    r.outcome = Outcome::killed_resource;
    r.resource = "cpu_seconds";
    r.exit_code = -1;
    r.signal = SIGKILL;
    return;
  }
  if (end.timed_out) {
    r.outcome = Outcome::killed_timeout;
    r.cpu_wait_seconds = end.runqueue_seconds;
    return;
  }
  if (!end.status || end.status->exited) {
    r.outcome = Outcome::exited;
    return;
  }
  int sig = end.status->signal;
  auto cpu_limit = limits.seconds(Limit::cpu_seconds);
  if (sig == SIGKILL && end.oom_killed) {
    // Evidence from the tier (the cgroup's counters, the OOM eventfd), not a
    // guess from the signal: a plain SIGKILL stays `signaled`.
    r.outcome = Outcome::killed_oom;
    r.resource = "memory_bytes";
  } else if (sig == SIGKILL && end.host_oom_killed) {
    // The kernel's own log names the kill (KernelOomLog): its OOM killer,
    // for the host's memory or an enclosing cgroup's, no limit of the run's.
    r.outcome = Outcome::killed_oom;
  } else if (sig == SIGXCPU && cpu_limit && spent_half_of(end.status->cpu_seconds(), *cpu_limit)) {
    // With the CPU time to show for it: a program that raised SIGXCPU
    // itself after 3 ms is `signaled`, not a limit the run met.
    r.outcome = Outcome::killed_resource;
    r.resource = "cpu_seconds";
  } else if (sig == SIGXFSZ && limits.has(Limit::file_bytes) && end.file_limit_reached) {
    // With a file at the limit to show for it: the kernel's SIGXFSZ looks
    // like one the program sent itself, so the signal alone proves nothing.
    r.outcome = Outcome::killed_resource;
    r.resource = "file_bytes";
  } else if (sig == SIGKILL && cpu_limit && spent_half_of(end.status->cpu_seconds(), *cpu_limit)) {
    // The hard RLIMIT_CPU (soft + 1) ends a program that ignored SIGXCPU.
    r.outcome = Outcome::killed_resource;
    r.resource = "cpu_seconds";
  } else {
    r.outcome = Outcome::signaled;
  }
}

namespace {

std::string describe_end(const Result& r, const std::string& program) {
  switch (r.outcome) {
    case Outcome::exited: return "exited with " + std::to_string(r.exit_code);
    case Outcome::signaled: return std::string("killed by signal ") + sigabbrev_np(r.signal);
    case Outcome::killed_timeout:
      // A quarter of the deadline spent waiting for a CPU: the host's load
      // (more runs than CPUs), not the program, used up the wall time.
      if (r.cpu_starved()) {
        char waited[32];
        std::snprintf(waited, sizeof waited, "%.2f", *r.cpu_wait_seconds);
        return std::string("killed: wall_seconds deadline passed while the program waited ") + waited +
               " s of it for a CPU (cpu_starved: more runs than CPUs; lower --parallel or raise wall_seconds)";
      }
      return "killed: wall_seconds deadline passed";
    case Outcome::killed_oom:
      return r.resource.empty() ? "killed: out of memory (the kernel's OOM killer, not at a ceiling of the run's own)"
                                : "killed: out of memory under memory_bytes";
    case Outcome::killed_resource:
      return "killed: " + r.resource + " limit (SIG" + (sigabbrev_np(r.signal) ? sigabbrev_np(r.signal) : "?") + ")";
    case Outcome::spawn_failed: {
      const char* name = strerrorname_np(r.spawn_errno);
      // "execve '/usr/bin/x': ENOENT": the reader sees which program was not found.
      std::string what = r.spawn_stage == "execve" ? "execve '" + program + "'" : "'" + program + "': " + r.spawn_stage;
      std::string text = "could not start: " + what + ": " + (name ? name : std::to_string(r.spawn_errno)) + " (" +
                         std::strerror(r.spawn_errno) + ")";
      // A process that changed its uid without an exec is not dumpable,
      // and the kernel then makes its /proc/self files root's: a child
      // cloned from it (ours, before its exec) cannot write its own
      // oom_score_adj. Every run fails so; say why, and what fixes it.
      if (r.spawn_stage == "oom_score" && r.spawn_errno == EACCES && ::prctl(PR_GET_DUMPABLE) == 0)
        text += ": this process is not dumpable (it changed its uid without an exec), so its /proc/self files are "
                "root's; start it as that user, or call prctl(PR_SET_DUMPABLE, 1) after the change";
      return text;
    }
    case Outcome::cancelled: return "cancelled";
  }
  return "";
}

// What ran out, in the words of the kernel's record of the kill.
std::string oom_cause(const std::string& constraint) {
  if (constraint.rfind("Memory cgroup", 0) == 0)
    return "a memory cgroup that holds the run reached its limit (the supervisor's own, a service's MemoryMax, a "
           "pod's limit), not a memory_bytes ceiling of the run";
  return "the host ran out of memory";
}

// OOM kills of the run's processes that no ceiling of the run's own made:
// the kernel's log of them since the run started (KernelOomLog), and a
// cgroup of the run's own that counted kills (a container's) while it
// stayed under its ceiling. A SIGKILL that nothing else explains (a
// deadline, a cancel, a limit the supervisor enforced) is the OOM killer's
// when the log names the run's leader, or the cgroup or a process of the
// run's own uid in a container, whose program is not its leader (pid 1
// is). The kills are named in the detail either way.
void find_oom_kills_outside_ceiling(KernelOomLog* log, const PreparedRun& run, const TierFacts& facts, RunEnd& end,
                                    std::vector<std::string>& notes) {
  if (end.leader <= 0) return;  // never started
  const bool sigkilled = end.status && !end.status->exited && end.status->signal == SIGKILL;
  const bool explained =
      end.oom_killed || end.timed_out || end.cancelled || !end.output_limit.empty() || end.cpu_limit_hit;
  std::vector<OomKillRecord> kills;
  if (log) {
    // As root a run's uid is its alone on the host: the kernel's UID names the run.
    std::optional<uid_t> own_uid;
    if (run.uid_lease && run.uid_lease->host_wide()) own_uid = run.uid_lease->uid();
    const bool counted = facts.oom_kills > 0;  // the cgroup already says it happened
    kills = log->take_kills(end.kernel_log_mark, end.leader, own_uid, sigkilled && !explained && !counted);
  }
  if (end.oom_killed) return;  // the ceiling's own kills: the cgroup said so
  const bool container = run.request.tier == Tier::container;
  const bool leader = std::any_of(kills.begin(), kills.end(), [&](const OomKillRecord& k) { return k.pid == end.leader; });
  if (sigkilled && !explained && (leader || (container && (!kills.empty() || facts.oom_kills > 0))))
    end.host_oom_killed = true;
  if (kills.empty()) {
    if (!facts.oom_outside_ceiling.empty()) notes.push_back(facts.oom_outside_ceiling);
    return;
  }
  std::string who;
  for (const auto& k : kills)
    who += (who.empty() ? "" : ", ") + quote_input(k.comm) + " (pid " + std::to_string(k.pid) + ")";
  notes.push_back("the kernel's OOM killer took " + who + " of the run: " + oom_cause(kills.back().constraint));
}

// Secrets are masked in whatever the Result says about files, since a
// program can put a secret's value into a file's name: artifact names and
// paths, notes and detail (captured output is masked as it streams).
void mask_names(const SecretSet& secrets, Result& r) {
  if (secrets.empty()) return;
  auto mask = [&](std::string& text) { text = scrub_secrets(text, secrets.values()); };
  for (auto& a : r.artifacts) {
    mask(a.name);
    mask(a.path);
  }
  for (auto& note : r.artifact_notes) mask(note);
  mask(r.detail);
}

}  // namespace

Result finish_run(PreparedRun& run, const RunEnd& ended, StreamCapture& out, StreamCapture* err,
                  KernelOomLog* kernel_oom_log) {
  const auto collect_started = std::chrono::steady_clock::now();
  // What the tier's spawn left to be read once the run is over (a
  // container's: whether its set-up failed, and how long it took).
  RunEnd end = ended;
  const TierRunner& runner = *run.runner;
  runner.ended(run, end);
  Result r;
  r.id = run.request.id;
  r.run_id = run.run_id;
  r.tier = std::string(to_string(run.request.tier));
  r.env_path = run.env_path;
  r.limits = run.limits;
  r.binary_output = run.request.binary_output;
  const RunPolicy& policy = run.policy ? *run.policy : default_run_policy();
  static const std::map<std::string, std::string> kNoEnforcement;
  r.enforcement = policy.run_enforcement(run.enforcement ? *run.enforcement : kNoEnforcement, run.request, run.limits);
  r.enforcement["network"] = runner.network(run);
  if (!run.cpu_enforcer.empty()) r.enforcement["cpu_seconds"] = run.cpu_enforcer;
  else if (run.limits.fractional(Limit::cpu_seconds) && r.enforcement.count("cpu_seconds"))
    r.enforcement["cpu_seconds"] += "_rounded_up";  // RLIMIT_CPU alone: whole seconds
  auto fill = [](CapturedStream& c, StreamCapture& cap) {
    c.text = cap.take_kept();
    c.bytes = cap.total_bytes();
    c.truncated = cap.truncated();
    c.sha256 = cap.sha256_hex();
  };
  fill(r.stdout_capture, out);
  if (err) fill(r.stderr_capture, *err);
  else r.stderr_capture.sha256 = Sha256::hex_of("");
  if (end.status) {
    r.cpu_seconds = end.status->cpu_seconds();
    r.max_rss_bytes = end.status->max_rss_bytes();
  }
  r.timings.plan = run.plan_seconds;
  r.timings.clone = end.clone_seconds;
  r.timings.child_setup = static_cast<double>(end.report.setup_ns) / 1e9;
  r.timings.exec = end.exec_seconds;
  if (end.spawned != std::chrono::steady_clock::time_point{} && end.report.stage == SpawnStage::none)
    r.timings.run = std::chrono::duration<double>(collect_started - end.spawned).count();

  // Nothing of the run may write into the workspace while it is collected
  // and removed, or hold its uid once it is returned: as root, every
  // process of the run's uid is killed now, unless the supervisor did at
  // the leader's exit (the lease says so).
  if (run.uid_lease && run.uid_lease->host_wide() && !run.uid_lease->reaped())
    if (auto st = run.uid_lease->signal_processes(SIGKILL); !st) r.warnings.push_back(st.error().message());

  // The tier's facts, then the outcome, classified once from them.
  TierFacts facts = runner.finish(run, end);
  if (facts.program_status) end.status = *facts.program_status;
  if (facts.oom_killed) end.oom_killed = *facts.oom_killed;
  if (facts.cpu_seconds) r.cpu_seconds = *facts.cpu_seconds;
  if (facts.max_rss_bytes) r.max_rss_bytes = *facts.max_rss_bytes;
  if (facts.kill_confirmed) r.kill_confirmed = facts.kill_confirmed;
  find_oom_kills_outside_ceiling(kernel_oom_log, run, facts, end, facts.notes);
  auto file_cap = run.limits.get(Limit::file_bytes);
  const bool sigxfsz = end.status && !end.status->exited && end.status->signal == SIGXFSZ;
  // Found again by name when it is released (a rare path: SIGXFSZ).
  if (sigxfsz && file_cap && run.workspace && run.workspace->reacquire().ok())
    end.file_limit_reached = workspace_has_file_of(*run.workspace, *file_cap);
  classify_outcome(end, run.limits, r);
  if (r.outcome == Outcome::spawn_failed && end.report.stage == SpawnStage::execve) explain_exec_failure(run, r.spawn_errno);
  if (facts.oom_killed.value_or(false) && r.outcome != Outcome::killed_oom)
    facts.notes.push_back("the run reached its memory_bytes ceiling and the kernel's OOM path ran (" +
                          std::to_string(facts.oom_kills) + " process(es) OOM-killed), but the run ended otherwise");

  std::string detail = describe_end(r, run.program);
  // The supervisor checked the rlimits against our hard limits as it
  // remembered them (OwnHardLimits): one lowered since fails here, in the
  // child. Checked again, uncached, to name the limit.
  if (r.outcome == Outcome::spawn_failed && end.report.stage == SpawnStage::rlimits)
    if (auto again = rlimits_from_limits(rlimit_limits(run.limits, run.request.tier)); !again)
      detail += "; " + again.error().message();
  // The program is named, but a chdir failure is about the directory.
  if (r.outcome == Outcome::spawn_failed && end.report.stage == SpawnStage::chdir) {
    const auto& req = run.request;
    if (req.chdir || req.cwd)
      detail += "; the working directory " + quote_input(req.chdir ? *req.chdir : *req.cwd) +
                (req.chdir ? " (chdir)" : " (cwd)") + " could not be entered";
  }
  if (sigxfsz && file_cap && r.outcome == Outcome::signaled)
    detail += "; no file in the workspace reached file_bytes (" + std::to_string(*file_cap) +
              " bytes): the limit may have stopped a write or truncate past it elsewhere (outside the workspace, or "
              "at an offset past the limit), or the program raised SIGXFSZ itself; corral cannot tell which";
  for (const auto& note : facts.notes) detail += "; " + note;
  r.refused_syscalls = end.refused_syscalls;
  for (const auto& [name, count] : r.refused_syscalls)
    detail += "; " + std::to_string(count) + " " + name + "() call" + (count == 1 ? "" : "s") +
              " refused by corral (network " + r.enforcement["network"] + ")";
  if (!end.refusal_failure.empty()) detail += "; " + end.refusal_failure;
  // --output globs and a route's declared outputs: one collector.
  if (run.workspace) collect_run_outputs(run.request, run.limits, *run.workspace, r, run.secrets.get());
  release_workspace_and_uid(run, detail);
  std::string limits = run.limits.describe();
  if (!limits.empty()) detail += "; limits: " + limits;
  for (const auto& w : run.warnings) detail += "; not enforced: " + w;
  r.warnings = run.warnings;
  r.detail = std::move(detail);
  if (run.secrets) mask_names(*run.secrets, r);
  const auto now = std::chrono::steady_clock::now();
  r.timings.collect = std::chrono::duration<double>(now - collect_started).count();
  r.wall_seconds = std::chrono::duration<double>(now - run.started).count();
  return r;
}

}  // namespace corral
