#include "line_reader.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace corral::cli {

LineReader::Got LineReader::fill() {
  // Compact once the consumed part is at least half the buffer: each byte
  // is moved O(1) times on average.
  if (pos_ > 0 && pos_ * 2 >= buf_.size()) {
    buf_.erase(0, pos_);
    scan_ -= pos_;
    pos_ = 0;
  }
  constexpr std::size_t kChunk = 64 * 1024;
  std::size_t old = buf_.size();
  buf_.resize(old + kChunk);  // amortised growth: no zeroing beyond this chunk
  ssize_t n = ::read(fd_, buf_.data() + old, kChunk);
  buf_.resize(old + (n > 0 ? static_cast<std::size_t>(n) : 0));
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return Got::again;
  if (n <= 0) {
    eof_ = true;
    return n == 0 ? Got::eof : Got::error;
  }
  if (skipping_) {
    // The rest of a too-long line: keep only what follows its newline.
    const char* nl = static_cast<const char*>(std::memchr(buf_.data() + pos_, '\n', buf_.size() - pos_));
    if (nl == nullptr) {
      buf_.resize(pos_);
    } else {
      pos_ = static_cast<std::size_t>(nl - buf_.data()) + 1;
      skipping_ = false;
    }
    scan_ = pos_;
  }
  return Got::data;
}

LineReader::Line LineReader::next(std::string& line) {
  line.clear();
  if (skipping_) {
    if (!eof_) return Line::none;
    skipping_ = false;  // the too-long line ended at EOF
    pos_ = scan_ = buf_.size();
    return Line::none;
  }
  if (scan_ < pos_) scan_ = pos_;
  const char* nl = static_cast<const char*>(std::memchr(buf_.data() + scan_, '\n', buf_.size() - scan_));
  std::size_t end = nl ? static_cast<std::size_t>(nl - buf_.data()) : buf_.size();
  if (end - pos_ > max_) {
    // Over the cap: reported now, its bytes dropped (those after its newline
    // kept when the newline is already here).
    if (nl) {
      pos_ = scan_ = end + 1;
    } else {
      buf_.resize(pos_);
      scan_ = pos_;
      skipping_ = !eof_;
    }
    return Line::too_long;
  }
  if (nl == nullptr) {
    scan_ = buf_.size();
    if (!eof_ || pos_ >= buf_.size()) return Line::none;
  }
  line.assign(buf_, pos_, end - pos_);
  pos_ = scan_ = nl ? end + 1 : end;
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return Line::ok;
}

}  // namespace corral::cli
