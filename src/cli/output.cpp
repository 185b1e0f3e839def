#include "output.hpp"

#include "corral/json.hpp"
#include "corral/names.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>

namespace corral::cli {

void write_all_fd(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    data.remove_prefix(static_cast<std::size_t>(n));
  }
}

void say(const char* fmt, ...) {
  char buf[4096];
  va_list ap;
  va_start(ap, fmt);
  int n = std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  // One line of printable UTF-8 whatever a message repeats of someone's
  // input (a job file's bytes, an option's value): control bytes, newlines
  // included, and ill-formed UTF-8 are shown as \xNN, so the line can
  // neither end early nor act on the terminal.
  std::string line = "corral: ";
  line += printable_name(std::string_view(buf, static_cast<std::size_t>(n) < sizeof buf ? static_cast<std::size_t>(n) : sizeof buf - 1));
  line += '\n';
  write_all_fd(2, line);
}

void RingWriter::write(std::string_view data) {
  if (data.empty()) return;
  if (error_ != 0) {
    lost_ += data.size();
    return;
  }
  // Small pieces (a line each) are joined into the last chunk when it is not
  // the one being written, so the ring sees few large writes.
  constexpr std::size_t kJoinBelow = 256 * 1024;
  bool back_free = !chunks_.empty() && !(from_front_ && chunks_.size() == 1) && !chunks_.back().more;
  if (back_free && chunks_.back().bytes.size() < kJoinBelow) chunks_.back().bytes.append(data);
  else chunks_.push_back(Chunk{std::string(data), {}, 0});
  queued_ += data.size();
  if (over()) was_over_ = true;
  kick();
}

void RingWriter::write_made(std::uint64_t size, std::function<std::string()> more) {
  if (size == 0) return;
  if (error_ != 0) {
    lost_ += size;
    return;
  }
  chunks_.push_back(Chunk{{}, std::move(more), size});
  queued_ += size;
  if (over()) was_over_ = true;
  // A made chunk starts empty: its first part is made when it is the front
  // (advance(), from kick() or done()).
  kick();
}

void RingWriter::advance() {
  while (!chunks_.empty() && offset_ >= chunks_.front().bytes.size()) {
    Chunk& front = chunks_.front();
    offset_ = 0;
    if (front.more && front.unmade > 0) {
      front.bytes = front.more();
      // Never more than was promised (queued() counted it), never stuck:
      // a maker that ends early leaves its count to be dropped.
      if (front.bytes.size() > front.unmade) front.bytes.resize(static_cast<std::size_t>(front.unmade));
      front.unmade -= front.bytes.size();
      if (!front.bytes.empty()) return;
      queued_ -= static_cast<std::size_t>(front.unmade);
      lost_ += front.unmade;
    }
    chunks_.pop_front();
  }
}

// One ring write carries every piece queued, up to kGatherBytes, copied
// into one buffer: the ring gives a write's completion back a loop turn
// later (to a regular file, from a worker thread), so a write per piece (a
// line, a part of a Result) let a busy batch's result lines queue faster
// than they went out: 30,000 jobs at --parallel 64 into a file queued ~36
// MB and reached the high water, which stops the intake. A piece that is
// big on its own is written from its chunk, uncopied.
void RingWriter::kick() {
  constexpr std::size_t kGatherBytes = 256 * 1024;
  if (in_flight_ || error_ != 0) return;
  if (!from_front_ && gathered_at_ >= gathered_.size()) {
    gathered_.clear();
    gathered_at_ = 0;
    advance();
    if (chunks_.empty()) return;
    from_front_ = chunks_.front().bytes.size() - offset_ >= kGatherBytes;
    while (!from_front_ && !chunks_.empty() && gathered_.size() < kGatherBytes) {
      Chunk& front = chunks_.front();
      if (!gathered_.empty() && front.bytes.size() - offset_ >= kGatherBytes) break;  // next time, uncopied
      gathered_.append(front.bytes, offset_);
      offset_ = front.bytes.size();
      advance();
    }
  }
  std::string_view rest = from_front_ ? std::string_view(chunks_.front().bytes).substr(offset_)
                                      : std::string_view(gathered_).substr(gathered_at_);
  // Neither is touched while the ring writes from it: write() appends only
  // to a later chunk than one written from, a deque keeps its elements in
  // place, and gathered_ is refilled only once it is all written.
  if (auto st = sup_.write_fd(fd_, rest, [this](int res) { done(res); }); !st) {
    done(-st.error().code());
    return;
  }
  in_flight_ = true;
}

void RingWriter::done(int res) {
  in_flight_ = false;
  if (res == -EINTR || res == -EAGAIN) {
    kick();
    return;
  }
  if (res <= 0) {
    error_ = res < 0 ? -res : EIO;  // 0 bytes of a non-empty write: no progress possible
    lost_ += queued_;
    chunks_.clear();
    gathered_.clear();
    offset_ = gathered_at_ = queued_ = 0;
    from_front_ = false;
  } else {
    std::size_t n = static_cast<std::size_t>(res);
    queued_ -= n;
    written_ += n;
    if (!from_front_) {
      gathered_at_ += n;
    } else if ((offset_ += n) >= chunks_.front().bytes.size()) {
      from_front_ = false;
      advance();
    }
  }
  if (was_over_ && queued_ < high_ / 2) {
    was_over_ = false;
    if (on_drained) on_drained();
  }
  kick();
}

bool RingWriter::flush(const int* interrupted) {
  while (queued_ > 0 && error_ == 0 && !(interrupted && *interrupted)) {
    auto more = sup_.run_once(-1);
    if (!more) return false;
    if (!*more && queued_ > 0) break;  // nothing in the ring: no write will finish
  }
  return queued_ == 0 && error_ == 0;
}

void write_result_json(RingWriter& out, const Result& result, const int* interrupted) {
  ResultJson made(result, 0, /*borrow=*/true);
  for (std::string part = made.next(); !part.empty(); part = made.next()) {
    out.write(part);
    if (out.over() && !out.flush(interrupted)) return;  // a failed write or a signal: the rest is not needed
  }
  out.write("\n");
}

void end_process(int code) {
  std::fflush(nullptr);
  ::_exit(code);
}

int exit_code_for_error(int err) {
  return (err == EINVAL || err == ENOTSUP || err == ERANGE) ? 2 : 125;
}

}  // namespace corral::cli
