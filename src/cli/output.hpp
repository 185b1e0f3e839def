// Small output helpers shared by the CLI verbs.
#pragma once

#include <cstdarg>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <string_view>

#include "corral/supervisor.hpp"

namespace corral::cli {

// Write all of `data` to fd (EINTR-safe; a closed reader is ignored).
void write_all_fd(int fd, std::string_view data);
// One "corral: ..." line on stderr. Every line corral itself writes there
// goes through this.
void say(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// Exit status for a corral-side error: 2 when the request is refused or
// malformed, 125 when corral itself failed.
int exit_code_for_error(int err);
// The end of a one-run process (corral run, session exec), after the
// Result is out and Supervisor::close() did what the host must see (runs,
// workspaces, uids, the guardian, the owner record): stdio is flushed and
// the process exits without unwinding. What is left is memory, mappings
// and fds, which the kernel takes back at exit either way; destructors
// would first unmap the ring and the spawn stack, close each fd and free
// every block, and exit() would run the static destructors.
[[noreturn]] void end_process(int code);

// A Result as JSON and a newline, written a part at a time (ResultJson): at
// most the high water queued before the loop turns to write it, so
// `corral run --json` of a 16 MiB stdout of NULs costs about a part, not
// the ~96 MiB of text. Stops early when a write failed or *interrupted.
class RingWriter;
void write_result_json(RingWriter& out, const Result& result, const int* interrupted);

// corral's own output to one of its fds (stdout, stderr), written through
// the supervisor's ring so that nothing written there blocks the loop
// (DESIGN: "Nothing corral writes to its own stdout/stderr may block the
// loop"): a reader that stalls holds up this queue, never a deadline, a
// cancel or another run. The fd's file description is left as it is (no
// O_NONBLOCK on a terminal or pipe shared with the shell).
class RingWriter {
 public:
  // high_water: queued() at or above it is over(); the owner then stops
  // what feeds the queue (pauses a run's output, starts no more jobs).
  RingWriter(Supervisor& sup, int fd, std::size_t high_water) : sup_(sup), fd_(fd), high_(high_water) {}
  RingWriter(const RingWriter&) = delete;
  RingWriter& operator=(const RingWriter&) = delete;

  // Queue data and start writing it. After a failure, data is dropped.
  void write(std::string_view data);
  // Queue `size` bytes that `more` makes a part at a time, as the ring
  // writes them (each call: the next part; "" when all `size` were given):
  // a long line (a Result's JSON) costs its parts, not its length. Counted
  // in queued() whole from the start.
  void write_made(std::uint64_t size, std::function<std::string()> more);
  std::size_t queued() const { return queued_; }
  bool over() const { return queued_ >= high_; }
  // The first write error (errno), 0 while none.
  int error() const { return error_; }
  // Bytes dropped because of a write error.
  std::uint64_t lost() const { return lost_; }
  // Bytes written so far (all of what write() was given, once flushed).
  std::uint64_t written() const { return written_; }

  // Called when queued() falls below half the high water after being over.
  std::function<void()> on_drained;
  // Turn the loop until everything queued is written, a write failed, or
  // *interrupted (when given) is non-zero; true when all was written.
  bool flush(const int* interrupted = nullptr);

 private:
  void kick();
  void done(int res);

  Supervisor& sup_;
  int fd_;
  std::size_t high_;
  // The bytes to write; a chunk with `more` is a made one (write_made):
  // its next part replaces it once it is written.
  struct Chunk {
    std::string bytes;
    std::function<std::string()> more;
    std::uint64_t unmade = 0;  // bytes `more` has still to give
  };
  std::deque<Chunk> chunks_;
  // The front chunk written: its next part, or the next chunk.
  void advance();
  std::size_t offset_ = 0;  // of chunks_.front() already written or gathered
  // What the ring writes: pieces gathered from the chunks (kick()), or the
  // front chunk itself (from_front_: a big piece, uncopied).
  std::string gathered_;
  std::size_t gathered_at_ = 0;  // of gathered_ already written
  bool from_front_ = false;
  std::size_t queued_ = 0;
  bool in_flight_ = false;  // a write is in the ring
  bool was_over_ = false;
  int error_ = 0;
  std::uint64_t lost_ = 0;
  std::uint64_t written_ = 0;
};

}  // namespace corral::cli
