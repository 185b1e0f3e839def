// A Result: how a run ended. A program that failed is a Result, not an
// error; only corral's own failures are Errors.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "corral/limits.hpp"

namespace corral {

enum class Outcome {
  exited,           // exit_code
  signaled,         // signal
  killed_timeout,   // wall_seconds
  killed_oom,       // memory cgroup OOM kill (container tier)
  killed_resource,  // `resource` names the limit: cpu_seconds, file_bytes, process_count,
                    // stdout_bytes/stderr_bytes (Request::on_output_limit kill)
  spawn_failed,     // `spawn_stage` + `spawn_errno`
  cancelled,
};
std::string_view to_string(Outcome outcome);

struct CapturedStream {
  std::string text;          // masked, at most the cap, UTF-8 not guaranteed
  std::uint64_t bytes = 0;   // total bytes the program wrote
  bool truncated = false;
  std::string sha256;        // hex, of the whole masked stream
};

struct ArtifactInfo {
  std::string name;
  std::uint64_t bytes = 0;
  std::string sha256;
  std::string path;          // where it was copied (artifact root), if anywhere
};

// Where a run's time went, in seconds, phase by phase, each measured on its
// own (README "Timings"): the same names in the Result's JSON and the audit
// line (timing_fields).
struct SetupTimings {
  double plan = 0;           // parent: the request → the child plan (prepare_run)
  double clone = 0;          // our clone3 call → the child's first instruction (its CLOCK_MONOTONIC reading)
  double child_setup = 0;    // in the child: its first instruction → just before execve
  // The child's execve → the program's image in place (the CLONE_VFORK
  // parent released). Tier container: nobody waits for its exec, absent.
  std::optional<double> exec;
  double run = 0;            // the spawn returned → the supervisor saw the end (exit, output at EOF)
  double collect = 0;        // the end → the Result: outputs collected, workspace removed
};

// The timings as (name, seconds), in phase order; a phase not measured is
// left out.
std::vector<std::pair<std::string, double>> timing_fields(const SetupTimings& timings);

// The version of the Result's JSON shape (schema/result.schema.json), in
// every Result and batch error line as "schema_version". It goes up when a
// key is removed, renamed or changes its type; a key added is not a new
// version (readers ignore keys they do not know).
inline constexpr int kResultSchemaVersion = 1;

struct Result {
  std::string id;
  std::string run_id;
  Outcome outcome = Outcome::spawn_failed;
  int exit_code = -1;
  int signal = 0;
  std::string resource;      // killed_resource: which limit
  std::string spawn_stage;   // spawn_failed: "chdir", "landlock", "execve", ...
  int spawn_errno = 0;
  CapturedStream stdout_capture, stderr_capture;
  double wall_seconds = 0;
  double cpu_seconds = 0;
  // killed_timeout in the process tiers: how long the program's main thread
  // had been runnable but waiting for a CPU when the deadline passed
  // (/proc/PID/schedstat). Unset otherwise.
  std::optional<double> cpu_wait_seconds;
  // A wall kill of a run that spent at least a quarter of its wall_seconds
  // waiting for a CPU: the host was oversubscribed (more runs than CPUs),
  // the program may well have been within its limits.
  bool cpu_starved() const {
    auto wall = limits.seconds(Limit::wall_seconds);
    return outcome == Outcome::killed_timeout && cpu_wait_seconds && wall && *cpu_wait_seconds >= 0.25 * *wall;
  }
  // A run corral killed (its deadline, a cancel, an output or CPU limit, an
  // OOM it ended the run for): whether every process of the run was seen
  // gone afterwards — true when the run's cgroup was found empty and
  // removed, so nothing it started (setsid or not) lives on; false when
  // that could not be confirmed (the detail says why). Unset when corral
  // killed nothing, or the tier has no group to look at (tiers none and
  // process, whose kill is the process group's and the uid's).
  std::optional<bool> kill_confirmed;
  // System calls corral's seccomp filter refused, by name, counted by the
  // supervisor (tier process with --net none: "socket", "socketpair"): a
  // program that reports EACCES from socket() was refused by corral, not by
  // the host. Empty when nothing was refused or the tier does not count.
  std::map<std::string, std::uint64_t> refused_syscalls;
  std::uint64_t max_rss_bytes = 0;
  std::vector<ArtifactInfo> artifacts;
  std::vector<std::string> artifact_notes;  // skipped outputs and why
  Limits limits;                             // the limits in force
  bool binary_output = false;                // Request::binary_output: JSON adds stdout_b64/stderr_b64
  std::map<std::string, std::string> enforcement;  // limit/guarantee -> how
  std::string tier;
  std::string env_path;      // the PATH the program got ("" when none)
  std::string detail;        // one line a reader of exit 1 can use
  std::vector<std::string> warnings;  // defaults this host could not enforce
  SetupTimings timings;
};

// The CLI's exit code for a result: the program's own; 128+signal; 124
// timeout; 125 when exec never happened; 130 cancelled.
int cli_exit_code(const Result& result);

}  // namespace corral
