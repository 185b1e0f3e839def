// What callers hold on to: signal and fd watches, streams, the blocking
// run(), and RunHandle — all thin layers over Supervisor::Impl.
#include "supervisor_impl.hpp"

namespace corral {

Status Supervisor::watch_signals(std::initializer_list<int> signals, std::function<void(int)> handler) {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : signals) sigaddset(&set, sig);
  if (pthread_sigmask(SIG_BLOCK, &set, nullptr) != 0) return Error(EINVAL, "watch_signals: pthread_sigmask");
  int fd = signalfd(impl_->signal_fd ? impl_->signal_fd.get() : -1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (fd < 0) return Error::from_errno(errno, "watch_signals: signalfd");
  if (!impl_->signal_fd) impl_->signal_fd.reset(fd);
  impl_->signal_handler = std::move(handler);
  // The poll goes in with the loop's next io_uring_enter: a signal that
  // comes before is blocked, and waits in the signalfd until then.
  if (!impl_->signal_armed) impl_->arm_signals();
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
  return s.submit("watch fd " + std::to_string(fd));
}

Status Supervisor::write_fd(int fd, std::string_view data, std::function<void(int)> on_done) {
  Impl& s = *impl_;
  if (fd < 0) return Error(EBADF, "write_fd: invalid fd " + std::to_string(fd));
  std::uint32_t index = static_cast<std::uint32_t>(s.writes.size());
  for (std::uint32_t i = 0; i < s.writes.size(); ++i) {
    if (s.writes[i].fd == fd && s.writes[i].pending)
      return Error(EBUSY, "write_fd: a write to fd " + std::to_string(fd) + " is in flight already");
    if (!s.writes[i].pending && index == s.writes.size()) index = i;
  }
  if (index == s.writes.size()) s.writes.emplace_back();
  FdWrite& w = s.writes[index];
  w.fd = fd;
  ++w.gen;
  w.pending = true;
  w.on_done = std::move(on_done);
  ++s.pending_writes;
  io_uring_sqe* e = s.sqe();
  // Offset -1: at (and advancing) the file position, as write(2) would, so
  // a regular file or an O_APPEND redirection is written the usual way.
  io_uring_prep_write(e, fd, data.data(), static_cast<unsigned>(std::min<std::size_t>(data.size(), 1u << 30)),
                      static_cast<__u64>(-1));
  io_uring_sqe_set_data64(e, Impl::user_data(index, w.gen, kOpWrite));
  return s.submit("write to fd " + std::to_string(fd));
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
      // the ring holds no operation on fd and the caller may close it. A
      // failure is in ring_error: run_once returns it.
      (void)s.submit("stop watching fd " + std::to_string(fd));
      w.armed = false;
      --s.armed_watches;
    }
    ++w.gen;  // the cancelled poll's completion no longer matches
    w.fd = -1;
    w.on_ready = nullptr;
  }
}

void Supervisor::pause_output(std::uint64_t token, bool paused) {
  Run* run = impl_->lookup(token);
  if (run == nullptr || run->output_paused == paused) return;
  run->output_paused = paused;
  if (!paused) impl_->release_held(static_cast<std::uint32_t>(token >> 32), *run);
}

void Supervisor::cancel_all() {
  for (std::uint32_t slot = 0; slot < impl_->slots.size(); ++slot) {
    Run* run = impl_->slots[slot].get();
    if (run && run->active && !run->delivered) impl_->to_cancel.push_back(Impl::token(slot, run->gen));
  }
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

void RunHandle::pause_output(bool paused) {
  if (sup_) sup_->pause_output(token_, paused);
}

bool RunHandle::finished() const { return sup_ == nullptr || sup_->finished(token_); }

void RunHandle::detach() { sup_ = nullptr; }

}  // namespace corral
