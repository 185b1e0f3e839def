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
#include "corral/reaper.hpp"
#include "corral/run_setup.hpp"

namespace corral {

// Events of a streamed run, filled by callbacks, drained by Stream::next().
struct StreamQueue {
  std::deque<RunEvent> events;
  bool done = false;
};

namespace {

enum Op : std::uint8_t { kOpPid = 1, kOpOut = 2, kOpErr = 3, kOpTimer = 4, kOpWatch = 5, kOpOom = 6 };
// What a run holds while its child runs: the pidfd and the stdout/stderr
// read ends. The workspace holds none (its root fd is released after the
// spawn and reopened for collection; the base fd is shared), the plan's
// fds (stdin memfd, Landlock ruleset) are closed once the child has them.
constexpr std::size_t kFdsPerRun = 3;
// A container run holds more while it runs: pid 1's report pipe, /dev/null,
// the cgroup's directory and procs fds (up to four hierarchies on v1), the
// OOM eventfd. Counted generously so the budget stays honest.
constexpr std::size_t kFdsPerContainerRun = 12;
std::size_t fds_per_run(Tier tier) { return tier == Tier::container ? kFdsPerContainerRun : kFdsPerRun; }
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

std::size_t count_open_fds() {
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
};

__kernel_timespec to_timespec(double seconds) {
  if (seconds < 0) seconds = 0;
  __kernel_timespec ts;
  ts.tv_sec = static_cast<long long>(seconds);
  ts.tv_nsec = static_cast<long long>((seconds - static_cast<double>(ts.tv_sec)) * 1e9);
  return ts;
}

}  // namespace

struct Supervisor::Impl {
  SupervisorOptions options;
  io_uring ring{};
  bool ring_ready = false;
  std::optional<Spawner> spawner;
  UidPool uids;
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
  std::uint64_t run_counter = 0;
  std::string scratch;
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
        (void)wait_exit(run->pidfd, true);
      }
    slots.clear();
    if (ring_ready) io_uring_queue_exit(&ring);
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
    if (op == kOpTimer)
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
      ssize_t n = ::read(pipe.fd.get(), scratch.data(), scratch.size());
      if (n > 0) {
        emit(run, id, cap.on_data(std::string_view(scratch.data(), static_cast<std::size_t>(n))));
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

  void on_leader_exit(std::uint32_t slot, Run& run) {
    if (run.exited) return;
    // Stragglers in the group go with the leader; the leader's zombie keeps
    // the pgid from being reused until we reap it just below.
    kill_group(run.pidfd, SIGKILL);
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
    if (run.prep.container) kill_container(*run.prep.container, run.pidfd, sig);  // pid 1 + cgroup
    else kill_group(run.pidfd, sig);
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
        if (run.exited) break;
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
    return run.pid_armed || run.oom_armed || run.timer_armed || run.out.armed || run.err.armed;
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

  void handle_cqe(io_uring_cqe* cqe) {
    std::uint64_t data = io_uring_cqe_get_data64(cqe);
    if (data == 0) return;  // a removal or update request's own completion
    if (data == kSignalData) {
      on_signal_ready();
      return;
    }
    std::uint32_t slot = static_cast<std::uint32_t>(data >> 32);
    std::uint32_t gen = static_cast<std::uint32_t>((data >> 8) & 0xffffff);
    Op op = static_cast<Op>(data & 0xff);
    if (op == kOpWatch) {
      on_watch(slot, gen);
      return;
    }
    if (slot >= slots.size() || !slots[slot]) return;
    Run& run = *slots[slot];
    if (!run.active || run.retiring || (run.gen & 0xffffff) != gen) return;
    bool more = (cqe->flags & IORING_CQE_F_MORE) != 0;
    switch (op) {
      case kOpPid:
        run.pid_armed = false;
        if (cqe->res >= 0) on_leader_exit(slot, run);
        maybe_reap_orphans(false);
        break;
      case kOpOut:
      case kOpErr: {
        Pipe& pipe = (op == kOpOut) ? run.out : run.err;
        if (!more) pipe.armed = false;
        if (pipe.eof) {
          if (!pipe.armed) pipe.fd.reset();
          break;
        }
        drain_pipe(slot, run, pipe, op);  // re-arms the poll once the pipe is empty
        if (pipe.eof && !pipe.armed) pipe.fd.reset();
        break;
      }
      case kOpTimer:
        on_timer(slot, run, cqe->res);
        break;
      case kOpOom:
        // An OOM kill inside the run's cgroup (v1): the run is over, as a
        // whole; the outcome is read from the cgroup's counter at the end.
        run.oom_armed = false;
        if (cqe->res > 0 && !run.exited) request_kill(slot, run, SIGKILL);
        break;
      case kOpWatch:
        break;  // handled above
    }
    maybe_finish(slot, run);
  }

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

  void process_requests() {
    auto cancels = std::move(to_cancel);
    to_cancel.clear();
    for (std::uint64_t tok : cancels) {
      Run* found = lookup(tok);
      if (found == nullptr || found->delivered) continue;
      std::uint32_t slot = static_cast<std::uint32_t>(tok >> 32);
      Run& run = *found;
      run.end.cancelled = true;
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

// ---------------------------------------------------------------------------

Supervisor::Supervisor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Supervisor::~Supervisor() = default;

Expected<std::unique_ptr<Supervisor>> Supervisor::create(SupervisorOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->uids = UidPool(options.uid_range_first, options.uid_range_count);
  impl->host = probe_host(/*with_containers=*/false);  // probed on the first container run
  impl->scratch.resize(kScratchBytes);

  // The fd table is what bounds runs in flight: raise the soft limit to the
  // hard one (raising the hard limit needs CAP_SYS_RESOURCE; we don't try).
  struct rlimit nofile;
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    setrlimit(RLIMIT_NOFILE, &nofile);
  }
  getrlimit(RLIMIT_NOFILE, &nofile);
  std::size_t soft = nofile.rlim_cur == RLIM_INFINITY ? 1 << 20 : static_cast<std::size_t>(nofile.rlim_cur);

  io_uring_params params;
  std::memset(&params, 0, sizeof params);
  params.flags = 0;
  int rc = io_uring_queue_init_params(options.ring_entries, &impl->ring, &params);
  if (rc == -EINVAL) {
    std::memset(&params, 0, sizeof params);
    rc = io_uring_queue_init_params(options.ring_entries, &impl->ring, &params);
  }
  if (rc < 0) return Error::from_errno(-rc, "supervisor: io_uring_queue_init");
  impl->ring_ready = true;

  auto spawner = Spawner::create();
  if (!spawner) return std::move(spawner).error().context("supervisor");
  impl->spawner.emplace(std::move(*spawner));

  if (options.become_subreaper) {
    if (auto st = become_subreaper(); !st) return std::move(st).error().context("supervisor");
  }

  // One base fd for every workspace (a private 0711 directory when the
  // given base is writable by others; see WorkspaceBase).
  auto base = WorkspaceBase::open(options.workspace_base);
  if (!base) return std::move(base).error().context("supervisor");
  impl->base = std::move(*base);

  // The fd budget: what is open now (the host's fds, the ring, the
  // spawner's slots, the base) plus the reserve, then kFdsPerRun per run.
  std::size_t used = count_open_fds() + kFdReserve;
  impl->fd_budget = soft > used ? soft - used : 0;
  impl->capacity = impl->fd_budget / kFdsPerRun;
  return std::unique_ptr<Supervisor>(new Supervisor(std::move(impl)));
}

std::string Supervisor::next_run_id() {
  return "r-" + std::to_string(getpid()) + "-" + std::to_string(++impl_->run_counter);
}

std::size_t Supervisor::in_flight() const { return impl_->in_flight; }

Status Supervisor::watch_signals(std::initializer_list<int> signals, std::function<void(int)> handler) {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : signals) sigaddset(&set, sig);
  if (pthread_sigmask(SIG_BLOCK, &set, nullptr) != 0) return Error(EINVAL, "watch_signals: pthread_sigmask");
  int fd = signalfd(impl_->signal_fd ? impl_->signal_fd.get() : -1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (fd < 0) return Error::from_errno(errno, "watch_signals: signalfd");
  if (!impl_->signal_fd) impl_->signal_fd.reset(fd);
  impl_->signal_handler = std::move(handler);
  if (!impl_->signal_armed) impl_->arm_signals();
  io_uring_submit(&impl_->ring);
  return {};
}

Status Supervisor::watch_fd(int fd, std::function<void()> on_ready) {
  Impl& s = *impl_;
  if (fd < 0) return Error(EBADF, "watch_fd: invalid fd " + std::to_string(fd));
  std::uint32_t index = static_cast<std::uint32_t>(s.watches.size());
  for (std::uint32_t i = 0; i < s.watches.size(); ++i) {
    if (s.watches[i].fd == fd) {
      index = i;
      break;
    }
    if (s.watches[i].fd < 0 && index == s.watches.size()) index = i;
  }
  if (index == s.watches.size()) s.watches.emplace_back();
  FdWatch& w = s.watches[index];
  w.on_ready = std::move(on_ready);
  if (w.armed) return {};  // already in the ring: only the callback changes
  w.fd = fd;
  ++w.gen;
  s.arm_watch(index);
  io_uring_submit(&s.ring);
  return {};
}

void Supervisor::unwatch_fd(int fd) {
  Impl& s = *impl_;
  for (std::uint32_t i = 0; i < s.watches.size(); ++i) {
    FdWatch& w = s.watches[i];
    if (w.fd != fd) continue;
    if (w.armed) {
      io_uring_sqe* e = s.sqe();
      io_uring_prep_poll_remove(e, Impl::user_data(i, w.gen, kOpWatch));
      io_uring_sqe_set_data64(e, 0);
      // Cancelling a poll completes within the submit: once this returns
      // the ring holds no operation on fd and the caller may close it.
      io_uring_submit(&s.ring);
      w.armed = false;
      --s.armed_watches;
    }
    ++w.gen;  // the cancelled poll's completion no longer matches
    w.fd = -1;
    w.on_ready = nullptr;
  }
}

void Supervisor::cancel_all() {
  for (std::uint32_t slot = 0; slot < impl_->slots.size(); ++slot) {
    Run* run = impl_->slots[slot].get();
    if (run && run->active && !run->delivered) impl_->to_cancel.push_back(Impl::token(slot, run->gen));
  }
}
std::size_t Supervisor::capacity() const { return impl_->capacity; }

Expected<RunHandle> Supervisor::submit(Request request, RunCallbacks callbacks) {
  Impl& s = *impl_;
  if (request.tier == Tier::container && !s.host.containers_probed) {
    probe_container_facts(s.host);
    s.cache.enforcement.erase(Tier::container);
  }
  const std::size_t weight = fds_per_run(request.tier);
  if (s.held_fds + weight > s.fd_budget) s.free_retired();  // runs already over give their fds back first
  if (s.held_fds + weight > s.fd_budget)
    return Error(EMFILE, "submit: " + std::to_string(s.active) + " runs in flight already hold " +
                             std::to_string(s.held_fds) + " of the " + std::to_string(s.fd_budget) +
                             " fds the fd limit (RLIMIT_NOFILE) leaves for runs (" +
                             std::to_string(weight) + " more needed); wait for some to finish");
  RunContext ctx{&s.uids, s.options.workspace_base, &s.host, &s.cache, s.base};
  std::string run_id = next_run_id();
  auto prepared = prepare_run(std::move(request), ctx, run_id);
  if (!prepared) return std::move(prepared).error();

  std::uint32_t slot;
  if (!s.free_slots.empty()) {
    slot = s.free_slots.back();
    s.free_slots.pop_back();
  } else {
    slot = static_cast<std::uint32_t>(s.slots.size());
    s.slots.push_back(std::make_unique<Run>());
  }
  Run& run = *s.slots[slot];
  std::uint32_t gen = run.gen + 1;  // stale completions of the slot's last run no longer match
  run = Run{};
  run.gen = gen;
  run.active = true;
  ++s.active;
  run.fd_weight = weight;
  s.held_fds += weight;
  run.prep = std::move(*prepared);
  run.callbacks = std::move(callbacks);
  const Limits& limits = run.prep.limits;
  run.out_capture = std::make_unique<StreamCapture>(limits.get(Limit::stdout_bytes).value_or(UINT64_MAX),
                                                    SecretMasker(run.prep.secrets));
  if (!run.prep.request.merge_output)
    run.err_capture = std::make_unique<StreamCapture>(limits.get(Limit::stderr_bytes).value_or(UINT64_MAX),
                                                      SecretMasker(run.prep.secrets));
  ++s.in_flight;

  auto child = run.prep.container ? spawn_container(run.prep.plan, *run.prep.container)
                                  : s.spawner->spawn(run.prep.plan);
  if (!child) {
    // corral's own failure (pipe, clone3): nothing runs; undo.
    --s.in_flight;
    run.delivered = true;
    s.free_slot(slot, run);
    return std::move(child).error();
  }
  run.end.clone_seconds = child->clone_seconds;
  run.end.report = child->report;
  run.pidfd = std::move(child->pidfd);
  // The child has what it needs: drop the plan (argv/env copies, BPF, the
  // Landlock ruleset fd) and the workspace's root fd until collection.
  run.prep.plan = ChildPlan{};
  if (run.prep.workspace) (void)run.prep.workspace->release_fd();
  // One copy per tier lives in the cache (about 4 KiB each), not one per
  // run in flight; restored at delivery.
  run.prep.enforcement = {};
  if (child->report.stage != SpawnStage::none) {
    // Exec never happened (the child is already reaped): a spawn_failed
    // result, delivered from the loop like every other result.
    run.exited = true;
    run.out.eof = run.err.eof = true;
    s.to_deliver.push_back(slot);
    return RunHandle(this, Impl::token(slot, run.gen));
  }
  run.out.fd = std::move(child->stdout_read);
  run.err.fd = std::move(child->stderr_read);
  run.err.eof = !run.err_capture;
  s.by_pid[run.pidfd.pid()] = slot;
  s.arm_pid(slot, run);
  s.arm_poll(slot, run, run.out, kOpOut);
  if (run.err_capture) s.arm_poll(slot, run, run.err, kOpErr);
  if (run.prep.container && run.prep.container->oom_event) {
    io_uring_sqe* e = s.sqe();
    io_uring_prep_poll_add(e, run.prep.container->oom_event.get(), POLLIN);
    io_uring_sqe_set_data64(e, Impl::user_data(slot, run.gen, kOpOom));
    run.oom_armed = true;
  }
  if (auto wall = limits.get(Limit::wall_seconds))
    s.arm_timer(slot, run, TimerPhase::deadline, static_cast<double>(*wall));
  io_uring_submit(&s.ring);
  return RunHandle(this, Impl::token(slot, run.gen));
}

Expected<bool> Supervisor::run_once(double timeout_seconds) {
  Impl& s = *impl_;
  s.process_requests();
  s.free_retired();
  if (s.in_flight == 0 && s.armed_watches == 0) return false;
  bool urgent = !s.ready_pipes.empty() || !s.to_cancel.empty() || !s.to_deliver.empty();
  io_uring_cqe* cqe = nullptr;
  __kernel_timespec ts = to_timespec(urgent ? 0 : timeout_seconds);
  bool wait_forever = !urgent && timeout_seconds < 0;
  int rc = io_uring_submit_and_wait_timeout(&s.ring, &cqe, 1, wait_forever ? nullptr : &ts, nullptr);
  if (rc < 0 && rc != -ETIME && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY)
    return Error::from_errno(-rc, "supervisor: io_uring wait");
  unsigned head;
  unsigned seen = 0;
  io_uring_for_each_cqe(&s.ring, head, cqe) {
    s.handle_cqe(cqe);
    ++seen;
  }
  io_uring_cq_advance(&s.ring, seen);
  s.process_requests();
  io_uring_submit(&s.ring);
  s.free_retired();
  if (s.in_flight == 0) s.maybe_reap_orphans(true);  // idle: no zombie left behind
  return s.in_flight > 0 || s.armed_watches > 0;
}

Status Supervisor::run_until_idle() {
  for (;;) {
    auto more = run_once(-1);
    if (!more) return std::move(more).error();
    if (!*more) return {};
  }
}

void Supervisor::cancel(std::uint64_t token) {
  if (impl_->lookup(token)) impl_->to_cancel.push_back(token);
}

bool Supervisor::finished(std::uint64_t token) const {
  Run* run = impl_->lookup(token);
  return run == nullptr || run->delivered;
}

void Supervisor::release(std::uint64_t token, bool cancel_if_running) {
  if (cancel_if_running && !finished(token)) cancel(token);
}

Expected<Supervisor::Stream> Supervisor::stream(Request request) {
  auto queue = std::make_shared<StreamQueue>();
  RunCallbacks cb;
  cb.on_output = [queue](StreamId id, std::string_view data) {
    queue->events.push_back(RunEvent{RunEvent::output, id, std::string(data), nullptr});
  };
  cb.on_result = [queue](const Result& result) {
    queue->events.push_back(RunEvent{RunEvent::result, StreamId::stdout_stream, {}, std::make_shared<Result>(result)});
  };
  auto handle = submit(std::move(request), std::move(cb));
  if (!handle) return std::move(handle).error();
  Stream st;
  st.sup_ = this;
  st.handle_ = std::move(*handle);
  st.queue_ = std::move(queue);
  return st;
}

Expected<std::optional<RunEvent>> Supervisor::Stream::next() {
  while (queue_->events.empty()) {
    if (queue_->done) return std::optional<RunEvent>{};
    auto more = sup_->run_once(-1);
    if (!more) return std::move(more).error();
    if (!*more && queue_->events.empty()) return std::optional<RunEvent>{};
  }
  RunEvent ev = std::move(queue_->events.front());
  queue_->events.pop_front();
  if (ev.kind == RunEvent::result) queue_->done = true;
  return std::optional<RunEvent>{std::move(ev)};
}

Expected<Result> Supervisor::run(Request request) {
  // The callback path with nobody watching chunks: no copy of each chunk
  // into an event queue, only the result is kept.
  std::optional<Result> out;
  RunCallbacks cb;
  // deliver() hands on a local Result it never touches again: take it
  // instead of copying (the kept output can be 16 MiB per stream).
  cb.on_result = [&out](const Result& r) { out = std::move(const_cast<Result&>(r)); };
  auto handle = submit(std::move(request), std::move(cb));
  if (!handle) return std::move(handle).error();
  while (!out) {
    auto more = run_once(-1);
    if (!more) return std::move(more).error();
    if (!*more && !out) return Error(EPROTO, "run: the supervisor ended without a result");
  }
  return std::move(*out);
}

// ---------------------------------------------------------------------------

RunHandle::RunHandle(RunHandle&& other) noexcept
    : sup_(std::exchange(other.sup_, nullptr)), token_(std::exchange(other.token_, 0)) {}

RunHandle& RunHandle::operator=(RunHandle&& other) noexcept {
  if (this != &other) {
    if (sup_) sup_->release(token_, true);
    sup_ = std::exchange(other.sup_, nullptr);
    token_ = std::exchange(other.token_, 0);
  }
  return *this;
}

RunHandle::~RunHandle() {
  if (sup_) sup_->release(token_, true);
}

void RunHandle::cancel() {
  if (sup_) sup_->cancel(token_);
}

bool RunHandle::finished() const { return sup_ == nullptr || sup_->finished(token_); }

void RunHandle::detach() { sup_ = nullptr; }

}  // namespace corral
