#include "stdin_pump.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace corral::cli {
namespace {

// One read's worth: a pipe holds 64 KiB by default, so a chunk fills it
// once and the ring's write waits for the program to drain it.
constexpr std::size_t kChunkBytes = 64 * 1024;

}  // namespace

Expected<std::unique_ptr<StdinPump>> StdinPump::create(Supervisor& sup, int source, std::uint64_t cap) {
  std::unique_ptr<StdinPump> pump(new StdinPump(sup, source, cap));
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return Error::from_errno(errno, "--stdin: pipe2");
  pump->read_end_.reset(fds[0]);
  pump->write_end_.reset(fds[1]);
  return pump;
}

// The owner calls stop() while the supervisor lives and destroys the pump
// after the supervisor: a write the ring still held reads chunk_ until then.
StdinPump::~StdinPump() = default;

Status StdinPump::start() {
  read_end_.reset();  // the run has its own copy; a program gone is then EPIPE for us
  if (cap_ == 0) {
    cut_ = true;
    finish();
    return {};
  }
  watch();
  return error_ ? Status(Error::from_errno(error_, "--stdin: watch the source")) : Status{};
}

void StdinPump::watch() {
  if (done_ || watching_) return;
  auto st = sup_.watch_fd(source_, [this] {
    watching_ = false;
    readable();
  });
  if (!st) {
    error_ = st.error().code();
    finish();
    return;
  }
  watching_ = true;
}

void StdinPump::readable() {
  if (done_) return;
  std::uint64_t room = cap_ - passed_;
  chunk_.resize(static_cast<std::size_t>(room < kChunkBytes ? room : kChunkBytes));
  // The source was reported readable: this read returns what is there
  // (a pipe's or a terminal's bytes, a file's next chunk) without waiting.
  ssize_t n = ::read(source_, chunk_.data(), chunk_.size());
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) {
    watch();
    return;
  }
  if (n <= 0) {
    if (n < 0) error_ = errno;
    finish();  // end of the source: the program sees end of file
    return;
  }
  chunk_.resize(static_cast<std::size_t>(n));
  offset_ = 0;
  auto st = sup_.write_fd(write_end_.get(), chunk_, [this](int res) { written(res); });
  if (!st) {
    finish();
    return;
  }
  writing_ = true;
}

void StdinPump::written(int res) {
  writing_ = false;
  if (done_) {
    write_end_.reset();  // finish() came while this write was in the ring
    return;
  }
  if (res == -EINTR || res == -EAGAIN) res = 0;
  if (res < 0) {
    finish();  // EPIPE: the program closed its stdin or ended; nothing more to give
    return;
  }
  offset_ += static_cast<std::size_t>(res);
  passed_ += static_cast<std::uint64_t>(res);
  if (offset_ < chunk_.size()) {
    std::string_view rest = std::string_view(chunk_).substr(offset_);
    if (sup_.write_fd(write_end_.get(), rest, [this](int r) { written(r); })) writing_ = true;
    else finish();
    return;
  }
  if (passed_ >= cap_) {
    // Whether more was there is not asked: at the cap the program's
    // stdin ends, and the caller says it was cut.
    cut_ = true;
    finish();
    return;
  }
  watch();
}

void StdinPump::finish() {
  done_ = true;
  if (watching_) sup_.unwatch_fd(source_);
  watching_ = false;
  if (!writing_) write_end_.reset();  // else when the write completes (or the supervisor cancels it)
}

void StdinPump::stop() {
  if (stopped_) return;
  stopped_ = true;
  done_ = true;
  if (watching_) sup_.unwatch_fd(source_);
  watching_ = false;
  // A write still in the ring keeps its buffer (chunk_) until the
  // supervisor, destroyed before us or turning its loop, completes or
  // cancels it; the fd is closed now: the ring holds its own reference.
  write_end_.reset();
}

}  // namespace corral::cli
