// Lines of `corral batch`'s job input, read one chunk per fill() when the
// ring says the fd is readable.
//
// Linear in the input: the search for a newline resumes where the last one
// stopped (searching a partial line again from its start on every chunk made
// an 80 MB line take 7 s), and consumed lines are dropped by compaction once
// they are at least half the buffer. A line longer than the cap is not held:
// next() reports it as too long as soon as it passes the cap, and the rest of
// it, up to its newline, is read and thrown away chunk by chunk.
#pragma once

#include <cstddef>
#include <string>

namespace corral::cli {

class LineReader {
 public:
  LineReader(int fd, std::size_t max_line_bytes) : fd_(fd), max_(max_line_bytes) {}
  int fd() const { return fd_; }

  enum class Got { data, eof, again, error };
  // One read(); call when the fd is readable.
  Got fill();

  enum class Line { none, ok, too_long };
  // The next complete line (a last line without '\n' once at EOF), without
  // its '\n' (and '\r'). too_long: a line of more than the cap; it counts as
  // one line and its bytes are skipped; `line` is left empty.
  Line next(std::string& line);
  bool eof() const { return eof_; }
  bool exhausted() const { return eof_ && pos_ >= buf_.size(); }
  std::size_t max_line_bytes() const { return max_; }

 private:
  int fd_;
  std::size_t max_;
  std::string buf_;
  std::size_t pos_ = 0;     // start of the line not yet taken
  std::size_t scan_ = 0;    // [pos_, scan_) holds no '\n'
  bool skipping_ = false;   // inside a too-long line: drop bytes up to its '\n'
  bool eof_ = false;
};

}  // namespace corral::cli
