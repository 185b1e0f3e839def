// Internal to the supervisor's sources: the per-run state and the io_uring
// loop's state (Supervisor::Impl), declared here and defined in .cpp files:
// supervisor.cpp has the submit path and the loop turn, supervisor_run.cpp a
// run's steps in the ring (polls, reads, kills, delivery),
// supervisor_loop.cpp the completion dispatch, supervisor_timers.cpp the
// runs' timers, supervisor_cpu.cpp the CPU watch, supervisor_notice.cpp
// the seccomp listener, supervisor_api.cpp the handles, streams and
// watches built on them.
// Not installed.
#pragma once

#include "corral/supervisor.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <liburing.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "corral/guardian.hpp"
#include "corral/kernel_oom_log.hpp"
#include "corral/leftovers.hpp"
#include "corral/reaper.hpp"
#include "corral/run_setup.hpp"
#include "corral/tier_runner.hpp"
#include "ring_submit.hpp"

namespace corral {

// Events of a streamed run, filled by callbacks, drained by Stream::next().
struct StreamQueue {
  std::deque<RunEvent> events;
  bool done = false;
};

namespace supervision {

enum Op : std::uint8_t {
  kOpPid = 1, kOpOut = 2, kOpErr = 3, /* 4: was a run's own timer */ kOpWatch = 5, kOpOom = 6, kOpWrite = 7,
  kOpCpu = 8,  // the CPU watch's next look (supervisor_cpu.cpp)
  kOpNotice = 9,  // the run's seccomp listener: a refused call waits for its answer
};
// What a run holds while its child runs is its runner's to say
// (TierRunner::fds_while_running); the capacity counts runs of the
// process tiers' three (the pidfd, the stdout and stderr read ends).
constexpr std::size_t kFdsPerRun = 3;
inline std::size_t fds_per_run(const Request& req) { return tier_runner(req.tier).fds_while_running(req); }
// Notifications answered per wakeup before the others get their turn (a
// program with many threads can have as many waiting at once).
constexpr std::size_t kNoticeBudget = 64;
// Above the fds open when the supervisor was made: what one submit or one
// collection holds for a moment (workspace, staging, pipe write ends,
// memfd, ruleset, the collection walk: about ten), the signalfd, the IPC
// namespaces the spawn thread keeps between runs (its next child's and up
// to SpawnThread::kKeptIpcNamespaces, each with its mqueue mount: 18 fds),
// and room for the host to open a few more of its own.
constexpr std::size_t kFdReserve = 64;
constexpr std::size_t kReadBudget = 16;     // reads per wakeup before yielding to others
constexpr std::size_t kScratchBytes = 256 * 1024;
// A pipe starts at the kernel's 64 KiB; a read that finds at least that
// much waiting (the writer outruns us) grows it to this, once: the writer
// then blocks, and we wake, a quarter as often. Only busy streams pay for
// the bigger buffer (its pages are allocated as they fill).
constexpr std::size_t kDefaultPipeBytes = 64 * 1024;
constexpr int kBusyPipeBytes = 1024 * 1024;

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
  bool grown = false;   // F_SETPIPE_SZ tried (drain_pipe: a busy stream)
  bool nonblocking = false;  // our end is O_NONBLOCK: read(2), not preadv2(RWF_NOWAIT)
};

struct Run {
  std::uint32_t gen = 0;
  bool active = false;
  // boottime_ticks_now() just before the spawn: every process of the run
  // started at this tick or later (kill_leftovers_of_ended_runs).
  std::uint64_t started_ticks = 0;
  std::size_t fd_weight = 0;  // fds_per_run(tier), counted in held_fds while active
  PreparedRun prep;
  RunCallbacks callbacks;
  Pidfd pidfd;
  Pipe out, err;
  std::unique_ptr<StreamCapture> out_capture, err_capture;
  bool pid_armed = false;
  bool oom_armed = false;  // the runner's OOM eventfd (a container on cgroup v1)
  bool exited = false;
  // The run's one timer (supervisor_timers.cpp): in the timer heap at
  // timer_pos while armed, due at timer_due, doing `phase` then.
  bool timer_armed = false;
  TimerPhase phase = TimerPhase::none;
  std::chrono::steady_clock::time_point timer_due{};
  std::size_t timer_pos = 0;
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
  // A notifying seccomp filter's listener (tier process, --net none): every
  // refused socket call of the run's processes waits here for our answer,
  // EACCES, which on_notice gives at once and counts.
  UniqueFd listener;
  bool listener_armed = false;
  // The IPC namespace the child was born in, held (Spawner::Child): to the
  // spawner for a later run once none of this run's processes is left.
  HeldIpcNamespace ipc_namespace;
};

// The default policy's pre-run check, remembered. check_enforceable builds
// the tier's whole enforcement map (about 30 entries, each with its note)
// to look up the few a request touches: ~50 us of every submit. Its answer
// depends only on the host facts, the tier, which limits the request and
// the defaults set, and four guarantees asked for; a request with
// acknowledgements (whose warnings quote the values) is checked afresh.
// A caller's own policy (SupervisorOptions::policy) is never remembered:
// it may read anything. forget() when the host facts change.
class CheckMemo final : public RunPolicy {
 public:
  Status check(const HostFacts& host, const Request& request, const Limits& defaults,
               std::vector<std::string>& warnings) const override;
  std::map<std::string, std::string> host_enforcement(const HostFacts& host, Tier tier) const override {
    return default_run_policy().host_enforcement(host, tier);
  }
  std::map<std::string, std::string> run_enforcement(const std::map<std::string, std::string>& host,
                                                     const Request& request, const Limits& in_force) const override {
    return default_run_policy().run_enforcement(host, request, in_force);
  }
  void finished(const Request& request, Result& result, std::span<const std::string> secrets,
                AuditSink* audit) const override {
    default_run_policy().finished(request, result, secrets, audit);
  }
  Status refused(const Request& asked, const std::string& reason, long line, std::span<const std::string> secrets,
                 AuditSink* audit) const override {
    return default_run_policy().refused(asked, reason, line, secrets, audit);
  }
  void forget() { passed_.clear(); }

 private:
  // The warnings of each check that passed, by what decided it.
  mutable std::map<std::uint64_t, std::vector<std::string>> passed_;
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
  std::optional<KernelOomLog> kernel_oom_log;  // when /dev/kmsg can be read (CAP_SYSLOG)
  // Kills the runs' groups and uids if this process dies (guardian.hpp);
  // started at the first submit.
  std::unique_ptr<Guardian> guardian;
  std::string owner_token;  // 12 hex digits, random: this supervisor in run ids
  std::optional<OwnerRecord> owner;  // as root: /run/corral/owners/<token> (leftovers.hpp)
  HostFacts host;
  MechanismCache cache;
  CheckMemo check_memo;  // the policy of runs when options.policy is null
  std::vector<std::unique_ptr<Run>> slots;
  std::vector<std::uint32_t> free_slots;
  std::unordered_map<pid_t, std::uint32_t> by_pid;
  std::vector<std::uint64_t> to_cancel;  // tokens: a slot reused meanwhile is not cancelled
  std::vector<std::uint32_t> ready_pipes;
  std::vector<std::uint32_t> to_deliver;
  std::size_t in_flight = 0;
  std::size_t active = 0;    // slots holding a run's fds (in flight, or finishing)
  // The fd budget, counted when first needed (count_fd_budget): listing
  // /proc/self/fd cost a one-run CLI 50-80 us for a budget its one run
  // never came near.
  std::size_t soft_nofile = 0;  // RLIMIT_NOFILE's soft limit, raised at create
  bool budget_counted = false;
  std::size_t capacity = 0;  // runs of kFdsPerRun fds the budget allows
  std::size_t fd_budget = 0; // fds the runs may hold in all
  std::size_t held_fds = 0;  // what the active runs hold (fds_per_run of each)
  std::size_t closing_fds = 0;  // queued for close_later, not submitted yet: still open
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
  // Whether preadv2(RWF_NOWAIT) reads a pipe without blocking (pipes have
  // FMODE_NOWAIT: Linux 5.8 and later). Assumed, not probed at create (a
  // probe was a pipe2, a preadv2 and two closes of every supervisor): the
  // first read a kernel refuses (EOPNOTSUPP) makes that pipe's end
  // O_NONBLOCK and clears this, and then each later run's read ends are
  // made O_NONBLOCK at submit (drain_pipe).
  bool nowait_reads = true;
  UniqueFd signal_fd;
  bool signal_armed = false;
  std::function<void(int)> signal_handler;
  static constexpr std::uint64_t kSignalData = ~std::uint64_t{0};

  void arm_signals();
  void on_signal_ready();

  // Supervisor::close(); the destructor's first step.
  void close();
  bool closed = false;
  ~Impl();


  // As root, a run's uid is its own on the host (UidPool host-wide): every
  // process of it is the run's, in its process group or not (a setsid or
  // setpgid escapee). Nothing to do without such a lease. A failure leaves
  // the lease unclean: its release tries again, and keeps the uid out of
  // circulation if that fails too.
  static void kill_uid_of(Run& run, int sig);

  // Whether our children (every thread's: /proc/self/task/*/children) are
  // only runs' leaders and the guardian. As a subreaper every live process
  // of a run has an ancestor-or-self among our children that is the run's
  // (the leader, or an orphan reparented to us, alive or a zombie until we
  // reap it, which only this thread does): none unknown means nothing of
  // any run outlived its leader. Reading it costs a few syscalls; the uid
  // kill it spares costs a process (and a scheduling round trip, tens of
  // ms on a loaded host). Anything unreadable or unknown: false.
  bool only_known_children();

  // No run's leader in flight and no child of ours a wait sees (the guardian
  // is a clone child, guardian.hpp): nothing of any run is left, known
  // without listing /proc/self/task. False when it cannot tell.
  bool no_children_of_runs();

  // At the leader's exit (its group just got SIGKILL): as root, every
  // process of the run's uid dies too, unless none can be left.
  void reap_uid_at_exit(Run& run);
  // SupervisorOptions::owns_every_child: every child that is neither a
  // run's leader nor the guardian, and all it leaves, is killed.
  void kill_leftover_children();
  // A leader exited while other runs were in flight: what it left cannot be
  // told from theirs by parentage, but by age it can. A child of ours born
  // before every run still in flight started (/proc/PID/stat's start
  // tick, below each run's started_ticks) descends from none of them: it
  // is a leftover of a run that ended, and is killed here. So in a batch
  // that never goes idle an escapee lives until the runs in flight at its
  // birth have ended, not until the batch does. At most every
  // kLeftoverScanSeconds (it lists our children): a leader exit that comes
  // sooner leaves the scan owed, and the timer wheel does it when due.
  void kill_leftovers_of_ended_runs();
  bool leftover_scan_owed = false;
  // Kills, with all it leaves, every child of ours that is neither a run's
  // leader, nor the guardian, nor spared, and started before `tick`
  // (UINT64_MAX: whenever).
  void kill_unknown_children_born_before(std::uint64_t tick);
  static constexpr double kLeftoverScanSeconds = 0.1;
  std::chrono::steady_clock::time_point next_leftover_scan{};
  // Unknown children that only an idle loop can judge may be left (born
  // when a run now in flight had started): killed once the loop is idle.
  bool leftovers_unchecked = false;
  std::unordered_set<pid_t> spared_children;  // Supervisor::spare_child

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

  // A free SQE. When the SQ ring is full it is flushed first (submit());
  // should that fail, ring_error says why and a spare SQE no submit ever
  // reads is handed out, so the caller's prep lands nowhere.
  io_uring_sqe* sqe();
  // Closes fd with the ring's next submit (IORING_OP_CLOSE, Linux 5.6),
  // among the loop turn's other operations, not with a close(2) of its
  // own; after any operation queued on it before. Counted in closing_fds
  // until then. Taking ownership; -1 is nothing.
  void close_later(int fd);
  io_uring_sqe spare_sqe{};

  // Every io_uring_submit of the loop (ring_submit.hpp): retried on EINTR,
  // on EAGAIN/EBUSY after moving the CQ ring's completions to `stashed`
  // (handled first at the next turn, in order). A failure is kept in
  // ring_error, the first one only, and run_once returns it: the loop
  // cannot keep its promises about a run whose poll or timer never
  // reached the kernel. `step` names what was being submitted.
  Status submit(std::string_view step);
  std::deque<io_uring_cqe> stashed;
  std::optional<Error> ring_error;

  void arm_poll(std::uint32_t slot, Run& run, Pipe& pipe, Op op);
  // A poll of the runner's OOM eventfd (oom_event_fd), one-shot.
  void arm_oom(std::uint32_t slot, Run& run, int oom_fd);
  void arm_pid(std::uint32_t slot, Run& run);
  // The runs' timers (supervisor_timers.cpp): a heap of slots by due
  // time, and one ring timeout (kWheelData) for the earliest. Arming,
  // replacing (one timer per run) and dropping a run's timer are heap
  // operations; the ring's timeout moves only to come sooner.
  void arm_timer(std::uint32_t slot, Run& run, TimerPhase phase, double seconds);
  void drop_timer(Run& run);
  void arm_wheel();
  void on_wheel();
  bool timer_before(std::uint32_t a, std::uint32_t b) const;
  void timer_place(std::size_t pos, std::uint32_t slot);
  void timer_sift(std::size_t pos);
  std::vector<std::uint32_t> timer_heap;
  bool wheel_armed = false;
  std::chrono::steady_clock::time_point wheel_due{};
  __kernel_timespec wheel_ts{};
  static constexpr std::uint64_t kWheelData = ~std::uint64_t{0} - 1;
  void remove_op(std::uint32_t slot, Run& run, Op op);

  // Stop reading a pipe. The fd is closed only once the ring holds no
  // operation on it any more.
  void close_pipe(std::uint32_t slot, Run& run, Pipe& pipe, Op op);

  void emit(Run& run, StreamId id, std::string_view masked);

  // Reads what the pipe holds, until EAGAIN (then a one-shot poll is armed
  // again), EOF, or the read budget (then the pipe goes on the ready list
  // and is read again next turn, with no poll armed). One-shot, not
  // multishot: while a busy stream is being read no poll is armed, so the
  // writer's refills do not each wake the ring (task work, an IPI) the way
  // a standing multishot poll does — a plain blocking read() loop pays none
  // of that, and a 1 GiB capture was ~20% slower with it.
  void drain_pipe(std::uint32_t slot, Run& run, Pipe& pipe, Op op);

  // Request::on_output_limit kill: the first overrun of a stream's cap ends
  // the run (once; not after a deadline or a cancel already decided it).
  void check_output_limit(std::uint32_t slot, Run& run, const StreamCapture& cap, Limit limit);

  // Read the pipes a pause held (resumed, or the leader is gone).
  void release_held(std::uint32_t slot, Run& run);

  void on_leader_exit(std::uint32_t slot, Run& run);

  // waitid(P_ALL) walks every child of ours: with thousands in flight a
  // scan per exit would make exits quadratic (about 100 us per exit at
  // 5,000 children here). Orphans only need reaping eventually, our own
  // leaders are reaped through their pidfds: scan at most every
  // kOrphanScanInterval, and whenever the loop goes idle.
  static constexpr auto kOrphanScanInterval = std::chrono::milliseconds(25);
  std::chrono::steady_clock::time_point last_orphan_scan{};

  void maybe_reap_orphans(bool force);

  void reap_orphans_now();

  void request_kill(std::uint32_t slot, Run& run, int sig);

  void on_timer(std::uint32_t slot, Run& run, TimerPhase fired);

  // The run's seccomp listener (supervisor_notice.cpp).
  void arm_notice(std::uint32_t slot, Run& run);
  void on_notice(std::uint32_t slot, Run& run, int res);

  bool ops_pending(const Run& run) const;

  void maybe_finish(std::uint32_t slot, Run& run);

  // A delivered run gives its slot and fds back within the loop turn its
  // result was delivered in, not when the last completions of its ring
  // operations come in: a run that is over must not count against the fd
  // budget. Its remaining operations are removed first and the removals
  // submitted (once per turn, for every run retired in it): cancelling a
  // poll or a timeout completes inside that io_uring_enter (task work runs
  // before it returns), so the ring holds nothing on the fds when they are
  // closed. Late completions carry the old generation and are dropped.
  std::vector<std::uint32_t> retired;

  void retire(std::uint32_t slot, Run& run);

  // The budget from what is open now: every fd but those the active runs

  // hold (held_fds), plus kFdReserve, off soft_nofile. Once.

  void count_fd_budget();

  void free_retired();

  void deliver(Run& run);

  void free_slot(std::uint32_t slot, Run& run);

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

  void arm_watch(std::uint32_t index);

  void on_watch(std::uint32_t index, std::uint32_t gen);

  void on_write(std::uint32_t index, std::uint32_t gen, int res);

  void process_requests();
};

}  // namespace corral
