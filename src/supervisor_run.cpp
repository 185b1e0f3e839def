// Out-of-line members of Supervisor::Impl (supervisor_impl.hpp): a run's
// steps in the ring. Arming its polls and timers, reading its pipes into
// the captures, the deadline, grace and drain timers, the kills, delivery
// of the result and retirement of its slot; the watches and writes of the
// caller's own fds; the signalfd. The completion dispatch that calls them
// is supervisor_loop.cpp, the submit path supervisor.cpp.
#include "supervisor_impl.hpp"

#include "corral/run_policy.hpp"
#include "background_work.hpp"

namespace corral {

void Supervisor::Impl::close() {
  if (closed) return;
  closed = true;
  // Kill what is still running; results are not delivered any more.
  for (auto& run : slots)
    if (run && run->active && !run->exited && run->pidfd.valid()) {
      kill_group(run->pidfd, SIGKILL);
      kill_uid_of(*run, SIGKILL);
      (void)wait_exit(run->pidfd, true);
      leftovers_unchecked = true;  // and what it left (owns_every_child)
    }
  // What those runs left, and what earlier ones left while others were in
  // flight if the loop never went idle since.
  if (leftovers_unchecked) kill_leftover_children();
  // Each run's workspace is removed and its uid lease released as it goes
  // (leases not reaped yet are reaped as they go). Nothing refers to a slot
  // after this: completions still in the ring find none and are dropped.
  slots.clear();
  // Workspaces handed to the background thread (Workspace::remove_or_hand_off)
  // are gone, and their uids back in the pool, before we say we are done:
  // `corral run` ends with _exit right after, which would leave a directory
  // half removed.
  detail::wait_for_background_work();
  // The uids those runs had are idle now, each known clean: say so in the
  // lock file, so that a process ending with _exit (the CLI) spares the next
  // holder of its uid the reap (kill(-1) walks every process on the host).
  uids.mark_idle_clean();
  free_slots.clear();
  by_pid.clear();
  timer_heap.clear();
  to_cancel.clear();
  ready_pipes.clear();
  to_deliver.clear();
  retired.clear();
  in_flight = active = held_fds = 0;
  // What close_later queued is closed now: unsubmitted entries die with the ring.
  if (ring_ready && io_uring_sq_ready(&ring) > 0) (void)submit("close the fds of finished runs");
  // Nothing of ours runs any more: it exits, killing nothing. Its memory
  // and fds go with the destructor or the exit (a one-run CLI _exits next:
  // no poll, closes or munmaps of a teardown the exit does anyway).
  if (guardian) guardian->stop();
  owner.reset();  // our record goes before its lock does (leftovers.hpp)
}

Supervisor::Impl::~Impl() {
  close();
  if (ring_ready) io_uring_queue_exit(&ring);
}

void Supervisor::Impl::arm_signals() {
  io_uring_sqe* e = sqe();
  io_uring_prep_poll_add(e, signal_fd.get(), POLLIN);
  io_uring_sqe_set_data64(e, kSignalData);
  signal_armed = true;
}

void Supervisor::Impl::on_signal_ready() {
  signal_armed = false;
  signalfd_siginfo info;
  while (::read(signal_fd.get(), &info, sizeof info) == static_cast<ssize_t>(sizeof info))
    if (signal_handler) signal_handler(static_cast<int>(info.ssi_signo));
  arm_signals();
}

void Supervisor::Impl::kill_uid_of(Run& run, int sig) {
  if (run.prep.uid_lease && run.prep.uid_lease->host_wide()) (void)run.prep.uid_lease->signal_processes(sig);
}

void Supervisor::Impl::reap_uid_at_exit(Run& run) {
  if (!run.prep.uid_lease || !run.prep.uid_lease->host_wide()) return;
  if (only_known_children()) {
    run.prep.uid_lease->mark_reaped();
    // No process of the run is left to make an IPC object in its namespace
    // (the last one's exit put it there or freed it): a later run may have
    // it, checked empty as it is given. After a kill, some may still be
    // dying, mid-call: their namespace is never reused.
    spawner->recycle_ipc_namespace(std::move(run.ipc_namespace));
  } else {
    kill_uid_of(run, SIGKILL);
  }
}

Status Supervisor::Impl::submit(std::string_view step) {
  Status st = submit_all(ring, step, [this] {
    // Room for the kernel to flush overflowed completions into: ours are
    // moved aside, to be handled first at the loop's next turn.
    unsigned head, seen = 0;
    io_uring_cqe* cqe;
    io_uring_for_each_cqe(&ring, head, cqe) {
      stashed.push_back(*cqe);
      ++seen;
    }
    io_uring_cq_advance(&ring, seen);
    return seen > 0;
  });
  if (!st && !ring_error) ring_error = st.error();
  if (st) closing_fds = 0;  // everything queued reached the kernel
  return st;
}

void Supervisor::Impl::close_later(int fd) {
  if (fd < 0) return;
  io_uring_sqe* e = sqe();
  if (e == &spare_sqe) {
    ::close(fd);  // the ring is failing (ring_error): now, the plain way
    return;
  }
  // Closed inline as the kernel takes the entry (a pipe or a pidfd has no
  // flush to punt to a worker for); its completion is ignored (data 0).
  io_uring_prep_close(e, fd);
  io_uring_sqe_set_data64(e, 0);
  ++closing_fds;
}

io_uring_sqe* Supervisor::Impl::sqe() {
  io_uring_sqe* e = io_uring_get_sqe(&ring);
  if (e == nullptr && submit("flush a full submission queue")) e = io_uring_get_sqe(&ring);
  if (e == nullptr) {
    // ring_error says why; run_once returns it. Nothing reads the spare.
    if (!ring_error) ring_error = Error(EBUSY, "supervisor: the io_uring submission queue stayed full");
    spare_sqe = io_uring_sqe{};
    return &spare_sqe;
  }
  return e;
}

void Supervisor::Impl::arm_poll(std::uint32_t slot, Run& run, Pipe& pipe, Op op) {
  io_uring_sqe* e = sqe();
  io_uring_prep_poll_add(e, pipe.fd.get(), POLLIN);
  io_uring_sqe_set_data64(e, user_data(slot, run.gen, op));
  pipe.armed = true;
}

void Supervisor::Impl::arm_oom(std::uint32_t slot, Run& run, int oom_fd) {
  io_uring_sqe* e = sqe();
  io_uring_prep_poll_add(e, oom_fd, POLLIN);
  io_uring_sqe_set_data64(e, user_data(slot, run.gen, kOpOom));
  run.oom_armed = true;
}

void Supervisor::Impl::arm_pid(std::uint32_t slot, Run& run) {
  io_uring_sqe* e = sqe();
  io_uring_prep_poll_add(e, run.pidfd.fd(), POLLIN);
  io_uring_sqe_set_data64(e, user_data(slot, run.gen, kOpPid));
  run.pid_armed = true;
}

void Supervisor::Impl::remove_op(std::uint32_t slot, Run& run, Op op) {
  io_uring_sqe* e = sqe();
  if (op == kOpCpu)
    io_uring_prep_timeout_remove(e, user_data(slot, run.gen, op), 0);
  else
    io_uring_prep_poll_remove(e, user_data(slot, run.gen, op));
  io_uring_sqe_set_data64(e, 0);
}

void Supervisor::Impl::close_pipe(std::uint32_t slot, Run& run, Pipe& pipe, Op op) {
  pipe.eof = true;
  if (pipe.armed) {
    if (!pipe.removing) {
      remove_op(slot, run, op);
      pipe.removing = true;
    }
    return;
  }
  close_later(pipe.fd.release());
}

void Supervisor::Impl::emit(Run& run, StreamId id, std::string_view masked) {
  if (!masked.empty() && run.callbacks.on_output) run.callbacks.on_output(id, masked);
}

void Supervisor::Impl::drain_pipe(std::uint32_t slot, Run& run, Pipe& pipe, Op op) {
  if (pipe.eof || !pipe.fd) return;
  StreamCapture& cap = (op == kOpOut) ? *run.out_capture : *run.err_capture;
  StreamId id = (op == kOpOut) ? StreamId::stdout_stream : StreamId::stderr_stream;
  pipe.ready = false;
  for (std::size_t i = 0; i < kReadBudget; ++i) {
    if (run.output_paused && !run.exited) {
      pipe.held = true;  // no poll armed: release_held() puts it on the ready list
      return;
    }
    // RWF_NOWAIT: EAGAIN on an empty pipe without O_NONBLOCK on our end,
    // which took an fcntl per pipe (the program's end stays blocking either
    // way). Where the kernel lacks it, our end is made O_NONBLOCK: by
    // submit once a read was refused, else just below.
    iovec iov{scratch.get(), kScratchBytes};
    ssize_t n = pipe.nonblocking ? ::read(pipe.fd.get(), scratch.get(), kScratchBytes)
                                 : ::preadv2(pipe.fd.get(), &iov, 1, -1, RWF_NOWAIT);
    if (n < 0 && errno == EOPNOTSUPP && !pipe.nonblocking) {
      // This kernel refuses RWF_NOWAIT on a pipe (before Linux 5.8): no
      // byte was read. This end becomes O_NONBLOCK and is read again; later
      // runs' ends are made so at submit.
      nowait_reads = false;
      if (::fcntl(pipe.fd.get(), F_SETFL, O_NONBLOCK) == 0) {
        pipe.nonblocking = true;
        continue;
      }
    }
    if (n > 0) {
      // A failure (an unprivileged user past fs.pipe-user-pages-soft) keeps the size it has.
      if (!pipe.grown && static_cast<std::size_t>(n) >= kDefaultPipeBytes) {
        pipe.grown = true;
        (void)::fcntl(pipe.fd.get(), F_SETPIPE_SZ, kBusyPipeBytes);
      }
      // Two pieces, not joined: a chunk that needed no masking is hashed
      // and passed on from the scratch buffer itself.
      const MaskedPieces masked = cap.on_data_pieces(std::string_view(scratch.get(), static_cast<std::size_t>(n)));
      emit(run, id, masked.head);
      emit(run, id, masked.body);
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

void Supervisor::Impl::check_output_limit(std::uint32_t slot, Run& run, const StreamCapture& cap, Limit limit) {
  if (run.prep.request.on_output_limit != OutputLimitPolicy::kill || !cap.truncated()) return;
  if (!run.end.output_limit.empty() || run.end.timed_out || run.end.cancelled) return;
  run.end.output_limit = std::string(limit_name(limit));
  request_kill(slot, run, SIGKILL);
}

void Supervisor::Impl::release_held(std::uint32_t slot, Run& run) {
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

void Supervisor::Impl::on_leader_exit(std::uint32_t slot, Run& run) {
  if (run.exited) return;
  release_held(slot, run);
  // Stragglers in the group go with the leader, and as root everything of
  // the run's uid (escapees of the group too: nothing of the run outlives
  // it, and an escapee holding the pipes no longer makes us wait for the
  // drain). The leader's zombie keeps the pgid from being reused until we
  // reap it just below, so the guardian lets go of the run first. The
  // group only: the leader itself is a zombie already (kill_group would
  // signal it through its pidfd too, a system call per run for nothing).
  (void)::kill(-run.pidfd.pid(), SIGKILL);
  if (guardian) guardian->unwatch(slot);
  auto status = wait_exit(run.pidfd, true);
  run.exited = true;
  by_pid.erase(run.pidfd.pid());
  if (status && status->has_value()) run.end.status = **status;
  // The leader is reaped before the checks below: the one run's leader
  // gone, a child of ours left means something of the run is (the
  // waitid shortcut of only_known_children and kill_leftover_children).
  reap_uid_at_exit(run);
  // What left the group (setsid) and is not the uid's to kill: when this
  // is the only run, every unknown child of ours is its; with others in
  // flight it cannot be told whose, and waits for the loop to go idle.
  if (options.owns_every_child && !(run.prep.uid_lease && run.prep.uid_lease->host_wide())) {
    if (in_flight == 1) {
      kill_leftover_children();
    } else {
      leftovers_unchecked = true;
      kill_leftovers_of_ended_runs();
    }
  }
  if (!run.out.eof || !run.err.eof) arm_timer(slot, run, TimerPhase::drain, options.drain_seconds);
}

void Supervisor::Impl::kill_leftover_children() {
  if (!options.owns_every_child || !options.become_subreaper) return;
  leftovers_unchecked = false;
  if (no_children_of_runs()) return;
  kill_unknown_children_born_before(UINT64_MAX);
}

void Supervisor::Impl::kill_leftovers_of_ended_runs() {
  if (!options.owns_every_child || !options.become_subreaper) return;
  const auto now = std::chrono::steady_clock::now();
  if (now < next_leftover_scan) {
    leftover_scan_owed = true;
    arm_wheel();
    return;
  }
  leftover_scan_owed = false;
  next_leftover_scan = now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                 std::chrono::duration<double>(kLeftoverScanSeconds));
  std::uint64_t oldest = UINT64_MAX;
  for (const auto& run : slots)
    if (run && run->active && !run->exited) oldest = std::min(oldest, run->started_ticks);
  kill_unknown_children_born_before(oldest);
}

void Supervisor::Impl::kill_unknown_children_born_before(std::uint64_t tick) {
  // Bounded: a process stuck in the kernel (D state) must not stall the
  // loop; one that outlasts the bound already has its SIGKILL, and dies
  // when the kernel lets it go.
  constexpr double kLeftoverKillSeconds = 0.5;
  (void)kill_unclaimed_children(
      [this, tick](pid_t pid) {
        if (by_pid.count(pid) > 0 || (guardian && pid == guardian->pid()) || spared_children.count(pid) > 0)
          return true;
        if (tick == UINT64_MAX) return false;  // no run in flight: every unknown child is a leftover
        auto born = process_start_ticks(pid);
        return !born || *born >= tick;  // gone, or maybe of a run in flight
      },
      kLeftoverKillSeconds);
}

void Supervisor::Impl::maybe_reap_orphans(bool force) {
  if (!options.become_subreaper) return;
  auto now = std::chrono::steady_clock::now();
  if (!force && now - last_orphan_scan < kOrphanScanInterval) return;
  last_orphan_scan = now;
  reap_orphans_now();
}

void Supervisor::Impl::reap_orphans_now() {
  if (!options.become_subreaper) return;
  reap_orphans([this](pid_t pid) { return by_pid.count(pid) > 0; });
}

void Supervisor::Impl::request_kill(std::uint32_t slot, Run& run, int sig) {
  (void)slot;
  if (run.exited || !run.pidfd.valid()) return;
  run.prep.runner->kill(run.prep, run.pidfd, sig);  // the group (a container's: pid 1 + cgroup), the run's uid
}

bool Supervisor::Impl::ops_pending(const Run& run) const {
  return run.pid_armed || run.oom_armed || run.timer_armed || run.cpu_armed || run.out.armed || run.err.armed ||
         run.listener_armed;
}

void Supervisor::Impl::maybe_finish(std::uint32_t slot, Run& run) {
  if (!run.active) return;
  if (!run.delivered && run.exited && run.out.eof && run.err.eof) {
    drop_timer(run);
    deliver(run);
  }
  if (run.delivered && !run.retiring) retire(slot, run);
}

void Supervisor::Impl::retire(std::uint32_t slot, Run& run) {
  run.retiring = true;
  if (run.pid_armed) remove_op(slot, run, kOpPid);
  drop_timer(run);
  if (run.cpu_armed) remove_op(slot, run, kOpCpu);
  if (run.oom_armed) remove_op(slot, run, kOpOom);
  if (run.listener_armed) remove_op(slot, run, kOpNotice);
  for (auto [pipe, op] : {std::pair{&run.out, kOpOut}, std::pair{&run.err, kOpErr}})
    if (pipe->armed && !pipe->removing) remove_op(slot, run, op);
  retired.push_back(slot);
}

void Supervisor::Impl::free_retired() {
  if (retired.empty()) return;
  // The removals reach the kernel before the fds close: the closes are
  // queued behind them (close_later), both go with the next submit.
  if (ring_error) return;  // the loop ends; the slots stay as they are
  for (std::uint32_t slot : retired) free_slot(slot, *slots[slot]);
  retired.clear();
}

void Supervisor::Impl::deliver(Run& run) {
  run.delivered = true;
  // The maskers' held-back tails are output too: stream them first.
  emit(run, StreamId::stdout_stream, run.out_capture->finish());
  if (run.err_capture) emit(run, StreamId::stderr_stream, run.err_capture->finish());
  // A masker's held-back tail may be what passes the cap.
  check_output_limit(0, run, *run.out_capture, Limit::stdout_bytes);
  if (run.err_capture) check_output_limit(0, run, *run.err_capture, Limit::stderr_bytes);
  // Found again by name below the shared base for the outputs to be read
  // through its fd; a failure (the directory was moved or replaced) shows
  // in the result's detail via remove(). Without outputs nothing reads it:
  // remove() reopens it only when the child left more than home/ and tmp/.
  const Request& req = run.prep.request;
  const bool unstaged = run.prep.unstaged.has_value();  // never spawned (run_setup.hpp)
  if (!unstaged && run.prep.workspace && (!req.outputs.empty() || !req.declared_outputs.empty()))
    (void)run.prep.workspace->reacquire();
  // Not const, and not used after the callback: run() moves from it.
  Result result = unstaged ? unstarted_result(run.prep)
                           : finish_run(run.prep, run.end, *run.out_capture, run.err_capture.get(),
                                        kernel_oom_log ? &*kernel_oom_log : nullptr);
  // The audit line (the policy's: run_policy.hpp), with the secrets scrubbed.
  std::span<const std::string> secrets;
  if (run.prep.secrets) secrets = run.prep.secrets->values();
  const RunPolicy& policy = run.prep.policy ? *run.prep.policy : default_run_policy();
  policy.finished(run.prep.request, result, secrets, options.audit.get());
  --in_flight;
  if (run.callbacks.on_result) run.callbacks.on_result(result);
}

void Supervisor::Impl::free_slot(std::uint32_t slot, Run& run) {
  drop_timer(run);  // none by now (retire, or a spawn that failed before arming)
  run.active = false;
  run.retiring = false;
  --active;
  held_fds -= run.fd_weight;
  close_later(run.pidfd.release());
  close_later(run.out.fd.release());
  close_later(run.err.fd.release());
  close_later(run.listener.release());
  close_later(run.ipc_namespace.ns.release());
  close_later(run.ipc_namespace.mqueue.release());
  run.prep = PreparedRun{};
  run.callbacks = RunCallbacks{};
  run.out_capture.reset();
  run.err_capture.reset();
  free_slots.push_back(slot);
}

void Supervisor::Impl::arm_watch(std::uint32_t index) {
  FdWatch& w = watches[index];
  io_uring_sqe* e = sqe();
  io_uring_prep_poll_add(e, w.fd, POLLIN);
  io_uring_sqe_set_data64(e, user_data(index, w.gen, kOpWatch));
  w.armed = true;
  ++armed_watches;
}

void Supervisor::Impl::on_watch(std::uint32_t index, std::uint32_t gen) {
  if (index >= watches.size()) return;
  FdWatch& w = watches[index];
  if (!w.armed || (w.gen & 0xffffff) != gen) return;  // unwatched meanwhile
  w.armed = false;
  --armed_watches;
  auto cb = std::move(w.on_ready);
  w.on_ready = nullptr;
  if (cb) cb();  // may watch the fd again
}

void Supervisor::Impl::on_write(std::uint32_t index, std::uint32_t gen, int res) {
  if (index >= writes.size()) return;
  FdWrite& w = writes[index];
  if (!w.pending || (w.gen & 0xffffff) != gen) return;
  w.pending = false;
  --pending_writes;
  auto cb = std::move(w.on_done);
  w.on_done = nullptr;
  if (cb) cb(res);  // may write again
}

void Supervisor::Impl::process_requests() {
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

}  // namespace corral
