// corral run --stdin FILE|-: the program's stdin fed from a file or from
// corral's own stdin through a pipe, a chunk at a time, through the
// supervisor's ring: a read happens only when the source is readable
// (Supervisor::watch_fd), the write into the pipe is an io_uring write
// (Supervisor::write_fd), so neither a slow producer nor a program that
// does not read ever blocks the loop, a deadline or a cancel. Bytes pass
// as they are (binary-safe); at `cap` bytes the pipe is closed (the
// program sees end of file) and cut() says so.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "corral/fd.hpp"
#include "corral/status.hpp"
#include "corral/supervisor.hpp"

namespace corral::cli {

class StdinPump {
 public:
  // `source` is read (not owned: corral's fd 0, or a file the caller keeps
  // open). Makes the pipe; program_end() is the read end for the Request.
  static Expected<std::unique_ptr<StdinPump>> create(Supervisor& sup, int source, std::uint64_t cap);
  ~StdinPump();
  StdinPump(const StdinPump&) = delete;
  StdinPump& operator=(const StdinPump&) = delete;

  int program_end() const { return read_end_.get(); }
  // After submit(): our copy of the read end is closed (the run holds its
  // own), and the pumping starts.
  Status start();
  // Stop: unwatch the source and close the pipe (the run ended). Call it
  // while the supervisor lives, and destroy the pump only after the
  // supervisor (a write in its ring may still read the chunk).
  void stop();

  std::uint64_t passed() const { return passed_; }
  bool cut() const { return cut_; }
  // A read error of the source (errno), 0 while none.
  int error() const { return error_; }

 private:
  StdinPump(Supervisor& sup, int source, std::uint64_t cap) : sup_(sup), source_(source), cap_(cap) {}
  void readable();
  void written(int res);
  void watch();
  void finish();

  Supervisor& sup_;
  int source_;
  std::uint64_t cap_;
  UniqueFd read_end_, write_end_;
  std::string chunk_;
  std::size_t offset_ = 0;
  std::uint64_t passed_ = 0;
  bool watching_ = false, writing_ = false, done_ = false, cut_ = false, stopped_ = false;
  int error_ = 0;
};

}  // namespace corral::cli
