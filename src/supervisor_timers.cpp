// Out-of-line members of Supervisor::Impl (supervisor_impl.hpp): the runs'
// timers. Each run has at most one (its deadline, then the grace before
// the SIGKILL, or the drain after the leader's exit); they wait in one
// heap by due time, and the ring holds a single timeout, for the earliest.
// A run's timer costs no ring operation of its own: arming, replacing or
// dropping it (a run that ends before its deadline, nearly all of them)
// is a heap operation, and the ring's timeout is moved only when a timer
// due sooner than every other arrives. At 5,000 runs in flight a
// timeout per run was two SQEs and two CQEs each (add and remove), and an
// io_uring_enter of its own at arming (the kernel read the run's
// timespec at submission).
#include "supervisor_impl.hpp"

namespace corral {
namespace {

__kernel_timespec absolute(std::chrono::steady_clock::time_point due) {
  // steady_clock is CLOCK_MONOTONIC, the clock of an IORING_TIMEOUT_ABS timeout.
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(due.time_since_epoch()).count();
  __kernel_timespec ts;
  ts.tv_sec = ns / 1'000'000'000;
  ts.tv_nsec = ns % 1'000'000'000;
  return ts;
}

}  // namespace

bool Supervisor::Impl::timer_before(std::uint32_t a, std::uint32_t b) const {
  return slots[a]->timer_due < slots[b]->timer_due;
}

void Supervisor::Impl::timer_place(std::size_t pos, std::uint32_t slot) {
  timer_heap[pos] = slot;
  slots[slot]->timer_pos = pos;
}

void Supervisor::Impl::timer_sift(std::size_t pos) {
  const std::uint32_t slot = timer_heap[pos];
  // Up while the parent is due later.
  while (pos > 0) {
    const std::size_t parent = (pos - 1) / 2;
    if (!timer_before(slot, timer_heap[parent])) break;
    timer_place(pos, timer_heap[parent]);
    pos = parent;
  }
  // Down while a child is due sooner.
  for (;;) {
    std::size_t child = 2 * pos + 1;
    if (child >= timer_heap.size()) break;
    if (child + 1 < timer_heap.size() && timer_before(timer_heap[child + 1], timer_heap[child])) ++child;
    if (!timer_before(timer_heap[child], slot)) break;
    timer_place(pos, timer_heap[child]);
    pos = child;
  }
  timer_place(pos, slot);
}

void Supervisor::Impl::arm_timer(std::uint32_t slot, Run& run, TimerPhase phase, double seconds) {
  if (seconds < 0) seconds = 0;
  run.phase = phase;
  run.timer_due = std::chrono::steady_clock::now() +
                  std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds));
  if (!run.timer_armed) {
    run.timer_armed = true;
    timer_heap.push_back(slot);
    run.timer_pos = timer_heap.size() - 1;
  }
  timer_sift(run.timer_pos);  // a replaced timer moves either way
  arm_wheel();
}

void Supervisor::Impl::drop_timer(Run& run) {
  if (!run.timer_armed) return;
  run.timer_armed = false;
  run.phase = TimerPhase::none;
  const std::size_t pos = run.timer_pos;
  const std::uint32_t last = timer_heap.back();
  timer_heap.pop_back();
  if (pos < timer_heap.size()) {
    timer_place(pos, last);
    timer_sift(pos);
  }
  // The ring's timeout stays: when it fires early it finds nothing due
  // and is set again for what is.
}

void Supervisor::Impl::arm_wheel() {
  if (timer_heap.empty() && !leftover_scan_owed) return;
  auto due = timer_heap.empty() ? next_leftover_scan : slots[timer_heap.front()]->timer_due;
  if (leftover_scan_owed) due = std::min(due, next_leftover_scan);
  if (wheel_armed && due >= wheel_due) return;
  // The kernel reads wheel_ts when the SQE is submitted (at the end of
  // this submit or loop turn); a second arming before then only moves it
  // sooner, which both SQEs then read.
  wheel_ts = absolute(due);
  io_uring_sqe* e = sqe();
  if (wheel_armed) {
    // Moved sooner in place. If it fired meanwhile (its completion not
    // handled yet) this fails with ENOENT, and that completion arms it
    // again for what is due then.
    io_uring_prep_timeout_update(e, &wheel_ts, kWheelData, IORING_TIMEOUT_ABS);
    io_uring_sqe_set_data64(e, 0);
  } else {
    io_uring_prep_timeout(e, &wheel_ts, 0, IORING_TIMEOUT_ABS);
    io_uring_sqe_set_data64(e, kWheelData);
  }
  wheel_armed = true;
  wheel_due = due;
}

void Supervisor::Impl::on_wheel() {
  wheel_armed = false;
  const auto now = std::chrono::steady_clock::now();
  while (!timer_heap.empty()) {
    const std::uint32_t slot = timer_heap.front();
    Run& run = *slots[slot];
    if (run.timer_due > now) break;
    const TimerPhase fired = run.phase;
    drop_timer(run);
    on_timer(slot, run, fired);  // may arm the run's next timer
    maybe_finish(slot, run);
  }
  if (leftover_scan_owed && now >= next_leftover_scan) kill_leftovers_of_ended_runs();
  arm_wheel();
}

void Supervisor::Impl::on_timer(std::uint32_t slot, Run& run, TimerPhase fired) {
  switch (fired) {
    case TimerPhase::deadline:
      if (run.exited || run.end.oom_notified) break;  // already killed for the OOM
      if (!run.end.cpu_limit_hit) note_runqueue_wait(run);
      run.end.timed_out = true;
      request_kill(slot, run, SIGTERM);
      arm_timer(slot, run, TimerPhase::grace, run.prep.request.grace_seconds);
      break;
    case TimerPhase::grace:
      request_kill(slot, run, SIGKILL);
      break;
    case TimerPhase::drain:
      // Something outside the group (a setsid escapee) holds the pipes.
      close_pipe(slot, run, run.out, kOpOut);
      if (run.err_capture) close_pipe(slot, run, run.err, kOpErr);
      break;
    case TimerPhase::none:
      break;
  }
}

}  // namespace corral
