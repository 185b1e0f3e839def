// The supervisor's submit path and loop turn; the per-run state is
// Supervisor::Impl in supervisor_impl.hpp, its steps supervisor_run.cpp.
#include "corral/host_probe.hpp"
#include "corral/session.hpp"
#include "supervisor_impl.hpp"

#include <sys/random.h>

namespace corral {

// ---------------------------------------------------------------------------

Supervisor::Supervisor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Supervisor::~Supervisor() = default;

Expected<std::unique_ptr<Supervisor>> Supervisor::create(SupervisorOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->uids = UidPool(options.uid_range_first, options.uid_range_count);
  // The container facts (the namespace probe, the cgroups) are probed on
  // the first container run; the workspace facts are those of our base,
  // chosen once below.
  impl->host = probe_host(/*with_containers=*/false, /*with_workspace=*/false);
  // As root a run's uid is its own on the whole host, not only among our
  // runs: locked in /run/corral/uids.lock (uid_lock.hpp).
  const bool full = !options.session_execs_only;
  if (impl->host.root && full) impl->uids.lock_host_wide();
  // Run ids name this supervisor by 48 random bits, not by its pid: two
  // processes that are each pid 1 of a pid namespace of their own, or a
  // restart that got the same pid, must not make the same ids (an artifact
  // directory is named after the run id).
  unsigned char rnd[6];
  if (getrandom(rnd, sizeof rnd, 0) != static_cast<ssize_t>(sizeof rnd))
    return Error::from_errno(errno, "supervisor: getrandom for the run ids");
  static constexpr char kHex[] = "0123456789abcdef";
  for (unsigned char b : rnd) impl->owner_token += {kHex[b >> 4], kHex[b & 0xf]};
  impl->scratch.reset(new char[kScratchBytes]);

  // The fd table is what bounds runs in flight: raise the soft limit to the
  // hard one (raising the hard limit needs CAP_SYS_RESOURCE; we don't try).
  struct rlimit nofile {};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &nofile) != 0) getrlimit(RLIMIT_NOFILE, &nofile);
  }
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
  // The kernel's record of its OOM kills, for runs without a memory cgroup
  // of their own (finish_run). Without CAP_SYSLOG there is none to read,
  // and such a run's OOM kill stays `signaled`.
  if (auto log = KernelOomLog::open()) impl->kernel_oom_log.emplace(std::move(*log));

  // One base fd for every workspace (a private 0711 directory when the
  // given base is writable by others; see WorkspaceBase).
  if (full) {
    // Chosen once (prepared: root's tmpfs mounted if it is not yet); the
    // host facts say where our runs' workspaces go, which is this base.
    WorkspaceBaseChoice where = choose_workspace_base(options.workspace_base, /*prepare=*/true);
    impl->host.workspace_base = where.path;
    impl->host.workspace_source = where.source;
    impl->host.workspace_tmpfs = where.tmpfs;
    impl->host.workspace_note = where.note;
    auto base = WorkspaceBase::open(where.path);
    if (!base) return std::move(base).error().context("supervisor");
    impl->base = std::move(*base);
  } else {
    set_workspace_facts(impl->host, options.workspace_base);
  }

  // As root: register (what we leave if we die is then found by token),
  // then sweep what dead supervisors left (leftovers.hpp).
  if (impl->host.root && full) {
    auto owner = OwnerRecord::create(impl->owner_token, impl->base->path());
    if (!owner) return std::move(owner).error().context("supervisor");
    impl->owner.emplace(std::move(*owner));
    (void)sweep_dead_supervisors(impl->owner_token);
  }

  // The fd budget (what is open then, plus the reserve, off the soft limit;
  // kFdsPerRun per run) is counted when first needed: by capacity(), or by
  // a submit that would take the runs past half the soft limit. Below that
  // no count is needed to know a run fits, unless the host already holds
  // over half of the limit itself; then a run's pipe2 or clone3 says
  // EMFILE instead, and the submit is refused whole just the same.
  impl->soft_nofile = soft;
  return std::unique_ptr<Supervisor>(new Supervisor(std::move(impl)));
}

void Supervisor::Impl::count_fd_budget() {
  if (budget_counted) return;
  budget_counted = true;
  const std::size_t open = count_open_fds();
  const std::size_t ours = held_fds + closing_fds;  // the runs' fds, and those queued for closing
  const std::size_t used = (open > ours ? open - ours : 0) + kFdReserve;
  fd_budget = soft_nofile > used ? soft_nofile - used : 0;
  capacity = fd_budget / kFdsPerRun;
}

Status CheckMemo::check(const HostFacts& host, const Request& request, const Limits& defaults,
                        std::vector<std::string>& warnings) const {
  const RunPolicy& policy = default_run_policy();
  if (!request.acknowledged.empty()) return policy.check(host, request, defaults, warnings);
  // Everything check_enforceable reads of the request and the defaults.
  static_assert(2 * kLimitCount + 3 + 4 <= 64, "the key holds every limit twice, the tier and four guarantees");
  std::uint64_t key = static_cast<std::uint64_t>(request.tier);
  int bit = 3;
  for (const auto& info : all_limits()) {
    key |= std::uint64_t{request.limits.has(info.limit)} << bit++;
    key |= std::uint64_t{defaults.has(info.limit)} << bit++;
  }
  key |= std::uint64_t{request.confine_writes || !request.write_paths.empty()} << bit++;
  key |= std::uint64_t{request.net == NetworkAccess::none} << bit++;
  key |= std::uint64_t{request.user.has_value()} << bit++;
  key |= std::uint64_t{!request.dev_binds.empty()} << bit++;
  if (auto it = passed_.find(key); it != passed_.end()) {
    warnings.insert(warnings.end(), it->second.begin(), it->second.end());
    return {};
  }
  std::vector<std::string> found;
  Status st = policy.check(host, request, defaults, found);
  if (st) passed_.emplace(key, found);
  warnings.insert(warnings.end(), std::make_move_iterator(found.begin()), std::make_move_iterator(found.end()));
  return st;
}

std::string Supervisor::next_run_id() {
  return "r-" + impl_->owner_token + "-" + std::to_string(++impl_->run_counter);
}

std::size_t Supervisor::in_flight() const { return impl_->in_flight; }

std::size_t Supervisor::capacity() const {
  impl_->count_fd_budget();
  return impl_->capacity;
}

Expected<RunHandle> Supervisor::submit(Request request, RunCallbacks callbacks) {
  Impl& s = *impl_;
  // A refusal's message may repeat what the request holds (its id, an argv
  // word, a path) and with it a secret's value: it is masked as a run's
  // Result is, whoever prints it. The refs are kept aside only when there
  // are some.
  std::vector<SecretRef> secret_refs;
  if (!request.secrets.empty()) secret_refs = request.secrets;
  // What the refusal's audit line says was asked (audit_refusal reads no
  // more): kept aside, as the run takes the request. A payload's source is
  // not, only its interpreter and name.
  std::optional<Request> asked;
  if (s.options.audit) {
    asked.emplace();
    asked->id = request.id;
    asked->argv = request.argv;
    asked->tier = request.tier;
    asked->limits = request.limits;
    asked->route = request.route;
    asked->provenance = request.provenance;
    if (request.payload) asked->payload = ProgramPayload{{}, request.payload->interpreter, request.payload->filename};
  }
  const long line = callbacks.audit_line;
  auto started = start(std::move(request), std::move(callbacks));
  if (started) return started;
  const std::vector<std::string> secrets = secret_refs.empty() ? std::vector<std::string>{} : secret_values(secret_refs);
  Error refusal(started.error().code(), scrub_secrets(started.error().message(), secrets));
  if (!asked) return refusal;
  const RunPolicy& policy = s.options.policy ? *s.options.policy : default_run_policy();
  if (Status st = policy.refused(*asked, refusal.message(), line, secrets, s.options.audit.get()); !st)
    return Error(refusal.code(), refusal.message() + "; its audit line was not written: " + st.error().message());
  return refusal;
}

Expected<RunHandle> Supervisor::start(Request request, RunCallbacks callbacks) {
  Impl& s = *impl_;
  if (s.closed) return Error::invalid("submit: the supervisor was closed");
  const bool session_exec = !request.session.empty();
  if (s.options.session_execs_only && !session_exec)
    return Error::invalid("submit: this supervisor runs execs into live sessions only (session_execs_only)");
  if (request.tier == Tier::container && !s.host.containers_probed) {
    // A live session is the host's answer already: its sandbox was made here.
    if (session_exec) note_live_session(s.host);
    else probe_container_facts(s.host);
    s.cache.enforcement.erase(Tier::container);
    s.check_memo.forget();
  }
  const std::size_t weight = fds_per_run(request);
  if (s.held_fds + s.closing_fds + weight > s.soft_nofile / 2) s.count_fd_budget();
  if (s.budget_counted && s.held_fds + s.closing_fds + weight > s.fd_budget) {
    // Runs already over give their fds back first (closed through the ring).
    s.free_retired();
    if (s.closing_fds > 0) (void)s.submit("close the fds of finished runs");
  }
  if (s.budget_counted && s.held_fds + s.closing_fds + weight > s.fd_budget)
    return Error(EMFILE, "submit: " + std::to_string(s.active) + " runs in flight already hold " +
                             std::to_string(s.held_fds) + " of the " + std::to_string(s.fd_budget) +
                             " fds the fd limit (RLIMIT_NOFILE) leaves for runs (" +
                             std::to_string(weight) + " more needed); wait for some to finish");
  const RunPolicy* policy = s.options.policy ? s.options.policy.get() : &s.check_memo;
  RunContext ctx{&s.uids, s.options.workspace_base, &s.host, &s.cache, s.base, s.owner_token, policy};
  // A session exec: the live session from its host state (ENOENT, or ESRCH
  // when its keeper is gone), handed to the run layer as plain data.
  std::optional<SessionTarget> target;
  if (session_exec) {
    auto info = find_session(request.session);
    if (!info) return std::move(info).error();
    target = session_target(*info);
    ctx.session = &*target;
  }
  std::string run_id = next_run_id();
  auto prepared = prepare_run(std::move(request), ctx, run_id);
  if (!prepared) return std::move(prepared).error();
  // Whether we must kill the run if we die (guardian.hpp): the runner's to
  // say (a container's pid 1 dies with us and takes its namespace along).
  const TierRunner& runner = *prepared->runner;
  const bool unstaged = prepared->unstaged.has_value();  // nothing will run (run_setup.hpp)
  const bool guarded = !unstaged && runner.needs_guardian(*prepared);
  if (guarded) {
    // Before the run starts: from its first instant it is covered
    // (guardian.hpp). The guardian shares the uid lock file, once a lease
    // opened it, so a dead supervisor's uids stay locked until it has
    // killed their processes; one started without it is replaced.
    const int lock_fd = s.uids.opened_lock_fd();
    if (!s.guardian || (lock_fd >= 0 && s.guardian->keep_fd() != lock_fd)) {
      auto guardian = Guardian::start(lock_fd);
      if (!guardian) return std::move(guardian).error().context("supervisor");
      if (s.guardian) (*guardian)->adopt(*s.guardian);
      s.guardian = std::move(*guardian);
    }
  }

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
  if (unstaged) {
    // An input could not be staged: no child; its spawn_failed Result is
    // delivered from the loop like every other (Impl::deliver).
    run.exited = true;
    run.out.eof = run.err.eof = true;
    s.to_deliver.push_back(slot);
    return RunHandle(this, Impl::token(slot, run.gen));
  }

  run.started_ticks = boottime_ticks_now();
  // Right before the start: no OOM kill the kernel logged before it is this run's.
  if (s.kernel_oom_log) run.end.kernel_log_mark = s.kernel_oom_log->mark();
  auto child = runner.spawn(run.prep, *s.spawner);
  if (!child) {
    // corral's own failure (pipe, clone3): nothing runs; undo.
    --s.in_flight;
    run.delivered = true;
    s.free_slot(slot, run);
    return std::move(child).error();
  }
  // Our copies of the write ends go with the next submit, queued before
  // the polls of the read ends below (a tier's spawn may have closed them).
  s.close_later(child->stdout_write.release());
  s.close_later(child->stderr_write.release());
  run.end.clone_seconds = child->clone_seconds;
  run.end.exec_seconds = child->exec_seconds;
  run.end.spawned = std::chrono::steady_clock::now();
  run.end.report = child->report;
  run.pidfd = std::move(child->pidfd);
  run.listener = std::move(child->seccomp_listener);
  run.ipc_namespace = std::move(child->ipc_namespace);
  // The child has what it needs: drop the plan (argv/env copies, BPF, the
  // Landlock ruleset fd) and the workspace's root fd until collection.
  run.prep.plan.reset();
  if (run.prep.workspace) (void)run.prep.workspace->release_fd();
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
  if (!s.nowait_reads)
    for (Pipe* pipe : {&run.out, &run.err})
      if (pipe->fd) pipe->nonblocking = ::fcntl(pipe->fd.get(), F_SETFL, O_NONBLOCK) == 0;
  run.err.eof = !run.err_capture;
  s.by_pid[run.pidfd.pid()] = slot;
  run.end.leader = run.pidfd.pid();
  // The leader leads its own group (pgid = pid); as root the uid is the run's alone.
  const UidPool::Lease* lease = run.prep.uid_lease ? &*run.prep.uid_lease : nullptr;
  if (guarded) s.guardian->watch(slot, run.pidfd.pid(), lease && lease->host_wide() ? lease->uid() : 0);
  s.arm_pid(slot, run);
  s.arm_poll(slot, run, run.out, kOpOut);
  if (run.err_capture) s.arm_poll(slot, run, run.err, kOpErr);
  if (run.listener) s.arm_notice(slot, run);
  if (const int oom_fd = runner.oom_event_fd(run.prep); oom_fd >= 0) s.arm_oom(slot, run, oom_fd);
  if (auto wall = limits.seconds(Limit::wall_seconds))
    s.arm_timer(slot, run, TimerPhase::deadline, *wall);
  s.start_cpu_watch(slot, run);
  // The polls reach the kernel with the loop's next io_uring_enter (run_once
  // submits before it waits), together with those of every run submitted
  // meanwhile: one system call for a burst of submits, not one each. Until
  // then nothing of the run is read or reaped, which is so until the loop
  // runs anyway; a poll of a pipe or pidfd that is ready by then completes
  // at once. A full submission queue is flushed by sqe(); a failure is in
  // ring_error, and the next run_once returns it (the handle cancels the
  // run when dropped).
  return RunHandle(this, Impl::token(slot, run.gen));
}

Expected<bool> Supervisor::run_once(double timeout_seconds) {
  Impl& s = *impl_;
  if (s.closed) return false;
  if (s.ring_error) return *s.ring_error;
  s.process_requests();
  s.free_retired();
  if (s.in_flight == 0 && s.armed_watches == 0 && s.pending_writes == 0) return false;
  bool urgent = !s.ready_pipes.empty() || !s.to_cancel.empty() || !s.to_deliver.empty() || !s.stashed.empty();
  io_uring_cqe* cqe = nullptr;
  __kernel_timespec ts = to_timespec(urgent ? 0 : timeout_seconds);
  bool wait_forever = !urgent && timeout_seconds < 0;
  int rc = io_uring_submit_and_wait_timeout(&s.ring, &cqe, 1, wait_forever ? nullptr : &ts, nullptr);
  if (io_uring_sq_ready(&s.ring) == 0) s.closing_fds = 0;  // what close_later queued is closed
  if (rc < 0 && rc != -ETIME && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY)
    return Error::from_errno(-rc, "supervisor: io_uring wait");
  // One completion at a time, each off the CQ ring before it is handled:
  // a handler's submit may find the ring busy and move the completions
  // still there to `stashed` (Impl::submit), which came before any later
  // one. At most a ring's worth per turn, so the requests get their turn.
  for (unsigned n = 0, cap = 2 * s.ring.cq.ring_entries; n < cap; ++n) {
    io_uring_cqe next;
    if (!s.stashed.empty()) {
      next = s.stashed.front();
      s.stashed.pop_front();
    } else if (io_uring_peek_cqe(&s.ring, &cqe) == 0) {
      next = *cqe;
      io_uring_cqe_seen(&s.ring, cqe);
    } else {
      break;
    }
    s.handle_cqe(&next);
  }
  s.process_requests();
  // The finished runs' fds are queued for closing behind their removals,
  // and all of it goes now: nothing of a delivered run stays open.
  s.free_retired();
  (void)s.submit("the loop turn's new operations");
  if (s.ring_error) return *s.ring_error;
  if (s.in_flight == 0) {
    if (s.leftovers_unchecked) s.kill_leftover_children();  // idle: nothing a run started is left
    s.maybe_reap_orphans(true);  // and no zombie
  }
  return s.in_flight > 0 || s.armed_watches > 0 || s.pending_writes > 0;
}

Status Supervisor::run_until_idle() {
  for (;;) {
    auto more = run_once(-1);
    if (!more) return std::move(more).error();
    if (!*more) return {};
  }
}

void Supervisor::close() { impl_->close(); }

void Supervisor::spare_child(pid_t pid) { impl_->spared_children.insert(pid); }

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


}  // namespace corral
