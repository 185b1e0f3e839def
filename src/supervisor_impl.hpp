// Internal to the supervisor's two sources: the per-run state and the
// io_uring loop (Supervisor::Impl). supervisor.cpp has the submit path and
// the loop turn; supervisor_api.cpp the handles, streams and watches built
// on them. Not installed.
#pragma once

#include "corral/supervisor.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <liburing.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <map>
#include <unordered_map>

#include "corral/audit.hpp"
#include "corral/container.hpp"
#include "corral/guardian.hpp"
#include "corral/leftovers.hpp"
#include "corral/reaper.hpp"
#include "corral/run_setup.hpp"

namespace corral {

// Events of a streamed run, filled by callbacks, drained by Stream::next().
struct StreamQueue {
  std::deque<RunEvent> events;
  bool done = false;
};

namespace supervision {

enum Op : std::uint8_t {
  kOpPid = 1, kOpOut = 2, kOpErr = 3, kOpTimer = 4, kOpWatch = 5, kOpOom = 6, kOpWrite = 7,
  kOpCpu = 8,  // the CPU watch's next look (supervisor_cpu.cpp)
};
// What a run holds while its child runs: the pidfd and the stdout/stderr
// read ends. The workspace holds none (its root fd is released after the
// spawn and reopened for collection; the base fd is shared), the plan's
// fds (stdin memfd, Landlock ruleset) are closed once the child has them.
constexpr std::size_t kFdsPerRun = 3;
// A container run holds more while it runs: pid 1's report pipe, the exec
// report pipe (read when the run ends), /dev/null,
// the cgroup's directory and procs fds (up to four hierarchies on v1), the
// OOM eventfd, the tmpfs workspace (kept: it has no name to reopen it by).
// Counted generously so the budget stays honest.
constexpr std::size_t kFdsPerContainerRun = 14;
inline std::size_t fds_per_run(Tier tier) { return tier == Tier::container ? kFdsPerContainerRun : kFdsPerRun; }
// Above the fds open when the supervisor was made: what one submit or one
// collection holds for a moment (workspace, staging, pipe write ends,
// memfd, ruleset, the collection walk: about ten), the signalfd, and room
// for the host to open a few more of its own.
constexpr std::size_t kFdReserve = 64;
constexpr std::size_t kReadBudget = 16;     // reads per wakeup before yielding to others
constexpr std::size_t kScratchBytes = 256 * 1024;

enum class TimerPhase { none, deadline, grace, drain };

// A non-run fd watched through the ring (Supervisor::watch_fd).
struct FdWatch {
  int fd = -1;
  std::uint32_t gen = 0;
  bool armed = false;
  std::function<void()> on_ready;
};

struct FdWrite {  // a caller's write through the ring (Supervisor::write_fd)
  int fd = -1;
  std::uint32_t gen = 0;
  bool pending = false;
  std::function<void(int)> on_done;
};

inline std::size_t count_open_fds() {
  std::size_t n = 0;
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return 0;
  while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
  closedir(d);
  return n > 0 ? n - 1 : 0;  // not the one opendir holds
}

struct Pipe {
  UniqueFd fd;
  bool armed = false;   // a one-shot poll is in the ring
  bool eof = false;     // no more data will be read
  bool removing = false;
  bool ready = false;   // data left after the read budget
  bool held = false;    // not read while the run's output is paused
};

struct Run {
  std::uint32_t gen = 0;
  bool active = false;
  std::size_t fd_weight = 0;  // fds_per_run(tier), counted in held_fds while active
  PreparedRun prep;
  RunCallbacks callbacks;
  Pidfd pidfd;
  Pipe out, err;
  std::unique_ptr<StreamCapture> out_capture, err_capture;
  bool pid_armed = false;
  bool oom_armed = false;  // container on cgroup v1: the OOM eventfd
  bool exited = false;
  bool timer_armed = false;
  TimerPhase phase = TimerPhase::none;
  TimerPhase next_phase = TimerPhase::none;  // armed when the current timer's CQE arrives
  __kernel_timespec ts{};
  RunEnd end;
  bool delivered = false;
  bool retiring = false;  // delivered; its slot is freed at the end of the loop turn
  bool cancel_requested = false;
  bool output_paused = false;  // RunHandle::pause_output: pipes not read while the leader lives
  // The CPU watch (supervisor_cpu.cpp): a fractional cpu_seconds, which
  // RLIMIT_CPU's whole seconds cannot hold, enforced by reading the run's
  // CPU time on a timer of its own.
  bool cpu_armed = false;
  double cpu_limit = 0;
  __kernel_timespec cpu_ts{};
};

inline __kernel_timespec to_timespec(double seconds) {
  if (seconds < 0) seconds = 0;
  __kernel_timespec ts;
  ts.tv_sec = static_cast<long long>(seconds);
  ts.tv_nsec = static_cast<long long>((seconds - static_cast<double>(ts.tv_sec)) * 1e9);
  return ts;
}

}  // namespace supervision

using namespace supervision;

struct Supervisor::Impl {
  SupervisorOptions options;
  io_uring ring{};
  bool ring_ready = false;
  std::optional<Spawner> spawner;
  UidPool uids;
  // Kills the runs' groups and uids if this process dies (guardian.hpp);
  // started at the first submit.
  std::unique_ptr<Guardian> guardian;
  std::string owner_token;  // 12 hex digits, random: this supervisor in run ids
  std::optional<OwnerRecord> owner;  // as root: /run/corral/owners/<token> (leftovers.hpp)
  HostFacts host;
  MechanismCache cache;
  std::vector<std::unique_ptr<Run>> slots;
  std::vector<std::uint32_t> free_slots;
  std::unordered_map<pid_t, std::uint32_t> by_pid;
  std::vector<std::uint64_t> to_cancel;  // tokens: a slot reused meanwhile is not cancelled
  std::vector<std::uint32_t> ready_pipes;
  std::vector<std::uint32_t> to_deliver;
  std::size_t in_flight = 0;
  std::size_t active = 0;    // slots holding a run's fds (in flight, or finishing)
  std::size_t capacity = 0;  // runs of kFdsPerRun fds the budget allows
  std::size_t fd_budget = 0; // fds the runs may hold in all
  std::size_t held_fds = 0;  // what the active runs hold (fds_per_run of each)
  std::shared_ptr<const WorkspaceBase> base;
  std::vector<FdWatch> watches;
  std::size_t armed_watches = 0;
  std::vector<FdWrite> writes;
  std::size_t pending_writes = 0;
  std::uint64_t run_counter = 0;
  // Where pipe reads land. Allocated uninitialised (new char[], not a
  // zero-filled string): zeroing 256 KiB faulted in 64 pages, ~0.2 ms of a
  // one-run process, for reads that mostly use a few bytes of it.
  std::unique_ptr<char[]> scratch;
  UniqueFd signal_fd;
  bool signal_armed = false;
  std::function<void(int)> signal_handler;
  static constexpr std::uint64_t kSignalData = ~std::uint64_t{0};

  void arm_signals() {
    io_uring_sqe* e = sqe();
    io_uring_prep_poll_add(e, signal_fd.get(), POLLIN);
    io_uring_sqe_set_data64(e, kSignalData);
    signal_armed = true;
  }
  void on_signal_ready() {
    signal_armed = false;
    signalfd_siginfo info;
    while (::read(signal_fd.get(), &info, sizeof info) == static_cast<ssize_t>(sizeof info))
      if (signal_handler) signal_handler(static_cast<int>(info.ssi_signo));
    arm_signals();
  }

  ~Impl() {
    // Kill what is still running; results are not delivered any more.
    for (auto& run : slots)
      if (run && run->active && !run->exited && run->pidfd.valid()) {
        kill_group(run->pidfd, SIGKILL);
        kill_uid_of(*run, SIGKILL);
        (void)wait_exit(run->pidfd, true);
      }
    slots.clear();  // leases not reaped yet are reaped as they go
    guardian.reset();  // nothing of ours runs any more: it exits, killing nothing
    if (ring_ready) io_uring_queue_exit(&ring);
  }

  // As root, a run's uid is its own on the host (UidPool host-wide): every
  // process of it is the run's, in its process group or not (a setsid or
  // setpgid escapee). Nothing to do without such a lease. A failure leaves
  // the lease unclean: its release tries again, and keeps the uid out of
  // circulation if that fails too.
  static void kill_uid_of(Run& run, int sig) {
    if (run.prep.uid_lease && run.prep.uid_lease->host_wide()) (void)run.prep.uid_lease->signal_processes(sig);
  }

  // Whether our children (every thread's: /proc/self/task/*/children) are
  // only runs' leaders and the guardian. As a subreaper every live process
  // of a run has an ancestor-or-self among our children that is the run's
  // (the leader, or an orphan reparented to us, alive or a zombie until we
  // reap it, which only this thread does): none unknown means nothing of
  // any run outlived its leader. Reading it costs a few syscalls; the uid
  // kill it spares costs a process (and a scheduling round trip, tens of
  // ms on a loaded host). Anything unreadable or unknown: false.
  bool only_known_children();

  // At the leader's exit (its group just got SIGKILL): as root, every
  // process of the run's uid dies too, unless none can be left.
  void reap_uid_at_exit(Run& run) {
    if (!run.prep.uid_lease || !run.prep.uid_lease->host_wide()) return;
    if (only_known_children()) run.prep.uid_lease->mark_reaped();
    else kill_uid_of(run, SIGKILL);
  }

  static std::uint64_t token(std::uint32_t slot, std::uint32_t gen) {
    return (static_cast<std::uint64_t>(slot) << 32) | gen;
  }
  static std::uint64_t user_data(std::uint32_t slot, std::uint32_t gen, Op op) {
    return (static_cast<std::uint64_t>(slot) << 32) | (static_cast<std::uint64_t>(gen & 0xffffff) << 8) | op;
  }
  Run* lookup(std::uint64_t tok) const {
    std::uint32_t slot = static_cast<std::uint32_t>(tok >> 32);
    if (slot >= slots.size() || !slots[slot]) return nullptr;
    Run* run = slots[slot].get();
    return (run->active && run->gen == static_cast<std::uint32_t>(tok)) ? run : nullptr;
  }

  io_uring_sqe* sqe() {
    io_uring_sqe* e = io_uring_get_sqe(&ring);
    if (e == nullptr) {
      io_uring_submit(&ring);
      e = io_uring_get_sqe(&ring);
    }
    return e;  // non-null: the ring was just flushed
  }

  void arm_poll(std::uint32_t slot, Run& run, Pipe& pipe, Op op) {
    io_uring_sqe* e = sqe();
    io_uring_prep_poll_add(e, pipe.fd.get(), POLLIN);
    io_uring_sqe_set_data64(e, user_data(slot, run.gen, op));
    pipe.armed = true;
  }
  void arm_pid(std::uint32_t slot, Run& run) {
    io_uring_sqe* e = sqe();
    io_uring_prep_poll_add(e, run.pidfd.fd(), POLLIN);
    io_uring_sqe_set_data64(e, user_data(slot, run.gen, kOpPid));
    run.pid_armed = true;
  }
  void arm_timer(std::uint32_t slot, Run& run, TimerPhase phase, double seconds) {
    if (run.timer_armed) {
      // One timer per run: replace the running one when its CQE arrives.
      run.next_phase = phase;
      run.ts = to_timespec(seconds);
      io_uring_sqe* e = sqe();
      io_uring_prep_timeout_remove(e, user_data(slot, run.gen, kOpTimer), 0);
      io_uring_sqe_set_data64(e, 0);
      return;
    }
    run.phase = phase;
    run.ts = to_timespec(seconds);
    io_uring_sqe* e = sqe();
    io_uring_prep_timeout(e, &run.ts, 0, 0);
    io_uring_sqe_set_data64(e, user_data(slot, run.gen, kOpTimer));
    run.timer_armed = true;
    io_uring_submit(&ring);  // the kernel reads ts at submission
  }
  void remove_op(std::uint32_t slot, Run& run, Op op) {
    io_uring_sqe* e = sqe();
    if (op == kOpTimer || op == kOpCpu)
      io_uring_prep_timeout_remove(e, user_data(slot, run.gen, op), 0);
    else
      io_uring_prep_poll_remove(e, user_data(slot, run.gen, op));
    io_uring_sqe_set_data64(e, 0);
  }

  // Stop reading a pipe. The fd is closed only once the ring holds no
  // operation on it any more.
  void close_pipe(std::uint32_t slot, Run& run, Pipe& pipe, Op op) {
    pipe.eof = true;
    if (pipe.armed) {
      if (!pipe.removing) {
        remove_op(slot, run, op);
        pipe.removing = true;
      }
      return;
    }
    pipe.fd.reset();
  }

  void emit(Run& run, StreamId id, std::string_view masked) {
    if (!masked.empty() && run.callbacks.on_output) run.callbacks.on_output(id, masked);
  }

  // Reads what the pipe holds, until EAGAIN (then a one-shot poll is armed
  // again), EOF, or the read budget (then the pipe goes on the ready list
  // and is read again next turn, with no poll armed). One-shot, not
  // multishot: while a busy stream is being read no poll is armed, so the
  // writer's refills do not each wake the ring (task work, an IPI) the way
  // a standing multishot poll does — a plain blocking read() loop pays none
  // of that, and a 1 GiB capture was ~20% slower with it.
  void drain_pipe(std::uint32_t slot, Run& run, Pipe& pipe, Op op) {
    if (pipe.eof || !pipe.fd) return;
    StreamCapture& cap = (op == kOpOut) ? *run.out_capture : *run.err_capture;
    StreamId id = (op == kOpOut) ? StreamId::stdout_stream : StreamId::stderr_stream;
    pipe.ready = false;
    for (std::size_t i = 0; i < kReadBudget; ++i) {
      if (run.output_paused && !run.exited) {
        pipe.held = true;  // no poll armed: release_held() puts it on the ready list
        return;
      }
      ssize_t n = ::read(pipe.fd.get(), scratch.get(), kScratchBytes);
      if (n > 0) {
        emit(run, id, cap.on_data(std::string_view(scratch.get(), static_cast<std::size_t>(n))));
        check_output_limit(slot, run, cap, op == kOpOut ? Limit::stdout_bytes : Limit::stderr_bytes);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (!pipe.armed && !pipe.removing) arm_poll(slot, run, pipe, op);
        return;
      }
      close_pipe(slot, run, pipe, op);  // EOF or a read error: either way, done
      return;
    }
    // Budget spent with data left: come back next turn, after the others.
    pipe.ready = true;
    ready_pipes.push_back(slot);
  }

  // Request::on_output_limit kill: the first overrun of a stream's cap ends
  // the run (once; not after a deadline or a cancel already decided it).
  void check_output_limit(std::uint32_t slot, Run& run, const StreamCapture& cap, Limit limit) {
    if (run.prep.request.on_output_limit != OutputLimitPolicy::kill || !cap.truncated()) return;
    if (!run.end.output_limit.empty() || run.end.timed_out || run.end.cancelled) return;
    run.end.output_limit = std::string(limit_name(limit));
    request_kill(slot, run, SIGKILL);
  }

  // Read the pipes a pause held (resumed, or the leader is gone).
  void release_held(std::uint32_t slot, Run& run) {
    bool queued = false;
    for (Pipe* pipe : {&run.out, &run.err}) {
      if (!pipe->held) continue;
      pipe->held = false;
      if (!pipe->ready) {
        pipe->ready = true;
        queued = true;
      }
    }
    if (queued) ready_pipes.push_back(slot);
  }

  void on_leader_exit(std::uint32_t slot, Run& run) {
    if (run.exited) return;
    release_held(slot, run);
    // Stragglers in the group go with the leader, and as root everything of
    // the run's uid (escapees of the group too: nothing of the run outlives
    // it, and an escapee holding the pipes no longer makes us wait for the
    // drain). The leader's zombie keeps the pgid from being reused until we
    // reap it just below, so the guardian lets go of the run first.
    kill_group(run.pidfd, SIGKILL);
    reap_uid_at_exit(run);
    if (guardian) guardian->unwatch(slot);
    auto status = wait_exit(run.pidfd, true);
    run.exited = true;
    by_pid.erase(run.pidfd.pid());
    if (status && status->has_value()) run.end.status = **status;
    if (!run.out.eof || !run.err.eof) arm_timer(slot, run, TimerPhase::drain, options.drain_seconds);
  }

  // waitid(P_ALL) walks every child of ours: with thousands in flight a
  // scan per exit would make exits quadratic (about 100 us per exit at
  // 5,000 children here). Orphans only need reaping eventually, our own
  // leaders are reaped through their pidfds: scan at most every
  // kOrphanScanInterval, and whenever the loop goes idle.
  static constexpr auto kOrphanScanInterval = std::chrono::milliseconds(25);
  std::chrono::steady_clock::time_point last_orphan_scan{};

  void maybe_reap_orphans(bool force) {
    if (!options.become_subreaper) return;
    auto now = std::chrono::steady_clock::now();
    if (!force && now - last_orphan_scan < kOrphanScanInterval) return;
    last_orphan_scan = now;
    reap_orphans_now();
  }

  void reap_orphans_now() {
    if (!options.become_subreaper) return;
    reap_orphans([this](pid_t pid) { return by_pid.count(pid) > 0; });
  }

  void request_kill(std::uint32_t slot, Run& run, int sig) {
    (void)slot;
    if (run.exited || !run.pidfd.valid()) return;
    if (run.prep.container) {
      kill_container(*run.prep.container, run.pidfd, sig);  // pid 1 + cgroup
    } else {
      kill_group(run.pidfd, sig);
      kill_uid_of(run, sig);  // the deadline's SIGTERM too: the escapees get the same grace
    }
  }

  void on_timer(std::uint32_t slot, Run& run, int res) {
    run.timer_armed = false;
    TimerPhase fired = run.phase;
    run.phase = TimerPhase::none;
    if (res == -ECANCELED || res == 0) {
      if (run.next_phase != TimerPhase::none) {
        TimerPhase next = run.next_phase;
        run.next_phase = TimerPhase::none;
        __kernel_timespec ts = run.ts;
        arm_timer(slot, run, next, static_cast<double>(ts.tv_sec) + ts.tv_nsec / 1e9);
      }
      return;
    }
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

  bool ops_pending(const Run& run) const {
    return run.pid_armed || run.oom_armed || run.timer_armed || run.cpu_armed || run.out.armed || run.err.armed;
  }

  void maybe_finish(std::uint32_t slot, Run& run) {
    if (!run.active) return;
    if (!run.delivered && run.exited && run.out.eof && run.err.eof) {
      run.next_phase = TimerPhase::none;
      deliver(run);
    }
    if (run.delivered && !run.retiring) retire(slot, run);
  }

  // A delivered run gives its slot and fds back within the loop turn its
  // result was delivered in, not when the last completions of its ring
  // operations come in: a run that is over must not count against the fd
  // budget. Its remaining operations are removed first and the removals
  // submitted (once per turn, for every run retired in it): cancelling a
  // poll or a timeout completes inside that io_uring_enter (task work runs
  // before it returns), so the ring holds nothing on the fds when they are
  // closed. Late completions carry the old generation and are dropped.
  std::vector<std::uint32_t> retired;

  void retire(std::uint32_t slot, Run& run) {
    run.retiring = true;
    if (run.pid_armed) remove_op(slot, run, kOpPid);
    if (run.timer_armed) remove_op(slot, run, kOpTimer);
    if (run.cpu_armed) remove_op(slot, run, kOpCpu);
    if (run.oom_armed) remove_op(slot, run, kOpOom);
    for (auto [pipe, op] : {std::pair{&run.out, kOpOut}, std::pair{&run.err, kOpErr}})
      if (pipe->armed && !pipe->removing) remove_op(slot, run, op);
    retired.push_back(slot);
  }

  void free_retired() {
    if (retired.empty()) return;
    io_uring_submit(&ring);
    for (std::uint32_t slot : retired) free_slot(slot, *slots[slot]);
    retired.clear();
  }

  void deliver(Run& run) {
    run.delivered = true;
    // The maskers' held-back tails are output too: stream them first.
    emit(run, StreamId::stdout_stream, run.out_capture->finish());
    if (run.err_capture) emit(run, StreamId::stderr_stream, run.err_capture->finish());
    // A masker's held-back tail may be what passes the cap.
    check_output_limit(0, run, *run.out_capture, Limit::stdout_bytes);
    if (run.err_capture) check_output_limit(0, run, *run.err_capture, Limit::stderr_bytes);
    // Found again by name below the shared base; a failure (the directory
    // was moved or replaced) shows in the result's detail via remove().
    if (run.prep.workspace) (void)run.prep.workspace->reacquire();
    run.prep.enforcement = cache.enforcement[run.prep.request.tier];
    // Not const, and not used after the callback: run() moves from it.
    Result result = finish_run(run.prep, run.end, *run.out_capture, run.err_capture.get());
    if (options.audit) {
      std::span<const std::string> secrets;
      if (run.prep.secrets) secrets = run.prep.secrets->values();
      if (Status st = options.audit->record(audit_record(run.prep.request, result), secrets); !st)
        result.warnings.push_back("audit line not written: " + st.error().message());
    }
    --in_flight;
    if (run.callbacks.on_result) run.callbacks.on_result(result);
  }

  void free_slot(std::uint32_t slot, Run& run) {
    run.active = false;
    run.retiring = false;
    --active;
    held_fds -= run.fd_weight;
    run.pidfd.reset();
    run.out.fd.reset();
    run.err.fd.reset();
    run.prep = PreparedRun{};
    run.callbacks = RunCallbacks{};
    run.out_capture.reset();
    run.err_capture.reset();
    free_slots.push_back(slot);
  }

  void handle_cqe(io_uring_cqe* cqe);

  // The CPU watch (supervisor_cpu.cpp). start_cpu_watch at submit names
  // the enforcer in run.prep.cpu_enforcer (empty: none needed or none
  // possible); on_cpu_check runs at each look.
  void start_cpu_watch(std::uint32_t slot, Run& run);
  void arm_cpu_check(std::uint32_t slot, Run& run, double seconds);
  void on_cpu_check(std::uint32_t slot, Run& run, int res);
  Expected<double> run_cpu_seconds(Run& run);
  // At the deadline: how long the program waited for a CPU (process tiers).
  void note_runqueue_wait(Run& run);

  void arm_watch(std::uint32_t index) {
    FdWatch& w = watches[index];
    io_uring_sqe* e = sqe();
    io_uring_prep_poll_add(e, w.fd, POLLIN);
    io_uring_sqe_set_data64(e, user_data(index, w.gen, kOpWatch));
    w.armed = true;
    ++armed_watches;
  }

  void on_watch(std::uint32_t index, std::uint32_t gen) {
    if (index >= watches.size()) return;
    FdWatch& w = watches[index];
    if (!w.armed || (w.gen & 0xffffff) != gen) return;  // unwatched meanwhile
    w.armed = false;
    --armed_watches;
    auto cb = std::move(w.on_ready);
    w.on_ready = nullptr;
    if (cb) cb();  // may watch the fd again
  }

  void on_write(std::uint32_t index, std::uint32_t gen, int res) {
    if (index >= writes.size()) return;
    FdWrite& w = writes[index];
    if (!w.pending || (w.gen & 0xffffff) != gen) return;
    w.pending = false;
    --pending_writes;
    auto cb = std::move(w.on_done);
    w.on_done = nullptr;
    if (cb) cb(res);  // may write again
  }

  void process_requests() {
    auto cancels = std::move(to_cancel);
    to_cancel.clear();
    for (std::uint64_t tok : cancels) {
      Run* found = lookup(tok);
      if (found == nullptr || found->delivered) continue;
      std::uint32_t slot = static_cast<std::uint32_t>(tok >> 32);
      Run& run = *found;
      // A run already killed for an OOM stays an OOM.
      if (!run.end.oom_notified) run.end.cancelled = true;
      request_kill(slot, run, SIGKILL);
      // A cancelled run does not wait for an escapee to let go of its pipes.
      if (run.exited) {
        close_pipe(slot, run, run.out, kOpOut);
        if (run.err_capture) close_pipe(slot, run, run.err, kOpErr);
      }
      maybe_finish(slot, run);
    }
    auto ready = std::move(ready_pipes);
    ready_pipes.clear();
    for (std::uint32_t slot : ready) {
      Run& run = *slots[slot];
      if (!run.active) continue;
      if (run.out.ready) drain_pipe(slot, run, run.out, kOpOut);
      if (run.err.ready) drain_pipe(slot, run, run.err, kOpErr);
      maybe_finish(slot, run);
    }
    auto deliveries = std::move(to_deliver);
    to_deliver.clear();
    for (std::uint32_t slot : deliveries) maybe_finish(slot, *slots[slot]);
  }
};

}  // namespace corral
