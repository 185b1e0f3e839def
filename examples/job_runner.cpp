// job_runner.cpp: many sandboxed jobs from one thread, on corral's supervisor.
//
// What it shows: the Supervisor API. It submits N jobs (default 1,000)
// while keeping at most P in flight (default 64), streams one job's output
// live through on_output, cancels another once it has started, collects
// every Result through on_result, and prints a table of outcomes. One
// thread, one io_uring: no thread per job, no polling loop. SIGINT/SIGTERM
// cancel everything in flight (watch_signals) and the table still prints.
//
// Each job runs PROGRAM with JOB_INDEX=<i> in its environment, in its own
// workspace, in tier `process` (as root: a uid of its own per job in
// flight, no capabilities, seccomp, no_new_privs) with wall_seconds=2. With
// no PROGRAM it runs a built-in workload that produces every common
// outcome: most jobs succeed, some exit 3, some die of SIGSEGV, some
// overstay the deadline.
//
// Build and run against an installed corral (the C++ API is in libcorral.a):
//   c++ -std=c++20 -O2 -o job_runner job_runner.cpp $(pkg-config --cflags --libs corral-static)
//   ./job_runner                         # the built-in workload, 1,000 jobs
//   ./job_runner --jobs 200 --parallel 16 -- python3 -c 'import os; print(os.environ["JOB_INDEX"])'
// Options: --jobs N (default 1000), --parallel P (default 64), --tier
// none|process (default process), --stream I (job whose output is shown
// live; default 0), --cancel I (job cancelled after its first output;
// default 1; -1 for none). Exit: 0 when every job produced a result (what
// the jobs did is data, in the table), 1 when corral refused or failed one.
#include <signal.h>

#include <corral/supervisor.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

using namespace corral;

// The built-in workload: JOB_ROLE is "stream", "cancel" or "job".
const char kWorkload[] = R"(
case "$JOB_ROLE" in
  stream) for i in 1 2 3; do echo "step $i of 3"; sleep 0.1; done; exit 0 ;;
  cancel) echo "started, waiting to be cancelled"; exec sleep 60 ;;
esac
case $((JOB_INDEX % 100)) in
  7)  echo "job $JOB_INDEX: bad input" >&2; exit 3 ;;
  13) kill -SEGV $$ ;;
  42) exec sleep 60 ;;
  *)  echo "job $JOB_INDEX ok" ;;
esac)";

struct Row {  // one line of the outcome table
  int jobs = 0;
  long example = -1;
  std::string detail;
};

int main(int argc, char** argv) {
  long jobs = 1000, parallel = 64, stream_job = 0, cancel_job = 1;
  Tier tier = Tier::os_process;
  std::vector<std::string> program = {"/bin/sh", "-c", kWorkload, "workload"};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--" && i + 1 < argc) {
      program.assign(argv + i + 1, argv + argc);
      break;
    }
    if (i + 1 >= argc) return std::fprintf(stderr, "job_runner: %s needs a value\n", a.c_str()), 2;
    const char* v = argv[++i];
    if (a == "--jobs") jobs = std::atol(v);
    else if (a == "--parallel") parallel = std::atol(v);
    else if (a == "--stream") stream_job = std::atol(v);
    else if (a == "--cancel") cancel_job = std::atol(v);
    else if (a == "--tier" && parse_tier(v)) tier = *parse_tier(v);
    else return std::fprintf(stderr, "job_runner: bad option %s %s\n", a.c_str(), v), 2;
  }
  if (jobs < 1 || parallel < 1) return std::fprintf(stderr, "job_runner: --jobs and --parallel must be >= 1\n"), 2;

  auto created = Supervisor::create();
  if (!created) return std::fprintf(stderr, "job_runner: %s\n", created.error().message().c_str()), 1;
  Supervisor& sup = **created;
  // The fd limit bounds how many runs can be in flight (pipes, pidfds).
  parallel = std::min<long>(parallel, static_cast<long>(sup.capacity()));
  bool interrupted = false;
  (void)sup.watch_signals({SIGINT, SIGTERM}, [&](int) { interrupted = true, sup.cancel_all(); });

  std::vector<RunHandle> handles(static_cast<std::size_t>(jobs));
  std::map<std::string, Row> table;
  long next = 0, finished = 0, refused = 0, peak = 0;
  bool cancel_now = false;
  auto start = std::chrono::steady_clock::now();

  auto record = [&](long i, const Result& r) {
    std::string key(to_string(r.outcome));
    std::string detail = r.detail.substr(0, r.detail.find("; limits:"));  // the limits are the same for all
    if (r.outcome == Outcome::exited) {
      key += r.exit_code == 0 ? " 0" : " non-zero";
      detail = r.exit_code == 0 ? "" : "exit " + std::to_string(r.exit_code) + ": " + r.stderr_capture.text;
    }
    Row& row = table[key];
    if (row.jobs++ == 0) row.example = i, row.detail = detail.substr(0, detail.find('\n'));
    ++finished;
  };

  while (finished < jobs) {
    // Top up to the cap. submit() only spawns; results come from run_once().
    while (next < jobs && !interrupted && static_cast<long>(sup.in_flight()) < parallel) {
      long i = next++;
      Request req;
      req.id = "job-" + std::to_string(i);
      req.argv = program;
      req.tier = tier;
      req.env["JOB_INDEX"] = std::to_string(i);
      req.env["JOB_ROLE"] = i == stream_job ? "stream" : i == cancel_job ? "cancel" : "job";
      // The deadline ends the sleepers (job 42, 142, ...); the streamed and the
      // cancelled job get time enough that only the cancel can end the latter.
      req.limits.set(Limit::wall_seconds, i == stream_job || i == cancel_job ? 30 : 2);
      req.grace_seconds = 0.2;
      RunCallbacks cb;
      if (i == stream_job)
        cb.on_output = [i, line_start = true](StreamId s, std::string_view chunk) mutable {
          for (char c : chunk) {  // chunks are not lines: prefix each line as it starts
            if (line_start) std::printf("[job %ld %s] ", i, s == StreamId::stdout_stream ? "out" : "err");
            std::putchar(c);
            line_start = c == '\n';
          }
          std::fflush(stdout);
        };
      else if (i == cancel_job)
        cb.on_output = [&](StreamId, std::string_view) { cancel_now = true; };  // it has started
      cb.on_result = [&record, i](const Result& r) { record(i, r); };
      auto h = sup.submit(std::move(req), std::move(cb));
      if (!h) {  // corral refused the request: nothing runs, no result will come
        std::fprintf(stderr, "job_runner: job %ld: %s\n", i, h.error().message().c_str());
        ++refused, ++finished;
        continue;
      }
      handles[static_cast<std::size_t>(i)] = std::move(*h);
    }
    peak = std::max(peak, static_cast<long>(sup.in_flight()));
    if (sup.in_flight() == 0 && (next >= jobs || interrupted)) break;
    auto turned = sup.run_once();  // waits for completions and runs the callbacks
    if (!turned) return std::fprintf(stderr, "job_runner: %s\n", turned.error().message().c_str()), 1;
    if (cancel_now) {
      std::printf("[job %ld] cancelling after its first output\n", cancel_job);
      handles[static_cast<std::size_t>(cancel_job)].cancel();
      cancel_now = false;
    }
  }

  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("\n%-22s %6s  %s\n", "outcome", "jobs", "example");
  for (const auto& [key, row] : table)
    std::printf("%-22s %6d  job %ld%s%s\n", key.c_str(), row.jobs, row.example, row.detail.empty() ? "" : ": ",
                row.detail.c_str());
  if (refused) std::printf("%-22s %6ld\n", "refused by corral", refused);
  std::printf("%ld jobs in %.1f s (%.0f jobs/s), at most %ld in flight, tier %s%s\n", finished, secs,
              finished / secs, peak, std::string(to_string(tier)).c_str(), interrupted ? " (interrupted)" : "");
  return refused ? 1 : 0;
}
