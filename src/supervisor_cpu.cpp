// The supervisor's CPU watch: a cpu_seconds limit with a fraction
// (cpu_seconds=0.25) enforced to the millisecond, and in tier container
// any cpu_seconds for the run's whole tree. RLIMIT_CPU counts whole
// seconds (the kernel checks it at tick granularity against a limit in
// seconds), so it holds 0.25 only as 1: it stays, rounded up, as a
// backstop, and the supervisor reads the run's CPU time on a timer of the
// run's own and kills the run (SIGKILL to the group, as the output-limit
// kill does) once it reaches the limit.
//
// What is read is the run's runner's (TierRunner::cpu_seconds): in the
// process tiers the program's process CPU clock (the leader's threads, as
// RLIMIT_CPU counts them; clock_getcpuclockid); in tier container the
// run's cgroup CPU usage (v1 cpuacct.usage, v2 cpu.stat:
// the whole tree, as the Result's cpu_seconds counts it there). A container
// without a cgroup has no watch: RLIMIT_CPU rounded up is what holds, and
// the Result's enforcement map says so.
//
// When to look: CPU time grows at most as fast as wall time times the CPUs
// the host has, so the next look is the remaining CPU time divided by the
// CPU count (never sooner than kMinLook): a few looks per run, geometric
// towards the limit, and an overshoot of at most kMinLook per CPU.
#include <unistd.h>

#include "supervisor_impl.hpp"

namespace corral {
namespace {

constexpr double kMinLook = 0.002;  // seconds between looks near the limit

double online_cpus() {
  static const double cpus = [] {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? static_cast<double>(n) : 1.0;
  }();
  return cpus;
}

}  // namespace

void Supervisor::Impl::start_cpu_watch(std::uint32_t slot, Run& run) {
  const Limits& limits = run.prep.limits;
  if (!limits.has(Limit::cpu_seconds)) return;
  // Whole seconds of one process RLIMIT_CPU holds exactly; of a tree it
  // holds each process to them, so a program forking N children had N
  // budgets. A runner that reads the whole tree watches those too.
  if (!limits.fractional(Limit::cpu_seconds) && !run.prep.runner->cpu_seconds_cover_the_tree()) return;
  std::string enforcer = run.prep.runner->cpu_enforcer(run.prep);
  if (enforcer.empty()) return;  // nothing to read: RLIMIT_CPU rounded up
  run.prep.cpu_enforcer = std::move(enforcer);
  run.cpu_limit = *limits.seconds(Limit::cpu_seconds);
  arm_cpu_check(slot, run, run.cpu_limit / online_cpus());
}

void Supervisor::Impl::arm_cpu_check(std::uint32_t slot, Run& run, double seconds) {
  run.cpu_ts = to_timespec(seconds < kMinLook ? kMinLook : seconds);
  io_uring_sqe* e = sqe();
  io_uring_prep_timeout(e, &run.cpu_ts, 0, 0);
  io_uring_sqe_set_data64(e, user_data(slot, run.gen, kOpCpu));
  run.cpu_armed = true;
  (void)submit("arm a run's CPU watch");  // the kernel reads cpu_ts at submission; a failure is in ring_error
}

Expected<double> Supervisor::Impl::run_cpu_seconds(Run& run) {
  return run.prep.runner->cpu_seconds(run.prep, run.pidfd);
}

void Supervisor::Impl::on_cpu_check(std::uint32_t slot, Run& run, int res) {
  run.cpu_armed = false;
  if (res != -ETIME) return;  // removed (the run is retiring)
  // Over already (exited, or a deadline, cancel or other limit decided it):
  // nothing left to watch, and the pid may no longer name the leader.
  if (run.exited || run.end.timed_out || run.end.cancelled || !run.end.output_limit.empty() ||
      run.end.oom_notified || run.end.cpu_limit_hit)
    return;
  auto used = run_cpu_seconds(run);
  if (!used) {
    // Unreadable (a process that just exited): look again soon; the
    // pidfd's exit completion ends the watch.
    arm_cpu_check(slot, run, kMinLook);
    return;
  }
  double left = run.cpu_limit - *used;
  if (left > 0) {
    arm_cpu_check(slot, run, left / online_cpus());
    return;
  }
  run.end.cpu_limit_hit = true;
  request_kill(slot, run, SIGKILL);
}

void Supervisor::Impl::note_runqueue_wait(Run& run) {
  if (!run.prep.runner->leader_is_program() || !run.pidfd.valid()) return;  // a container's pid 1 is not the program
  if (auto wait = runqueue_wait_seconds(run.pidfd.pid())) run.end.runqueue_seconds = *wait;
}

}  // namespace corral
