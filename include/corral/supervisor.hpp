// The supervisor: one thread, one io_uring, many runs in flight. Per run it
// watches a pidfd (exit), the stdout/stderr pipes (a one-shot poll while
// a pipe is empty, non-blocking reads into one scratch buffer while it is
// not, so an idle child costs no buffer), and one timeout (deadline, then
// grace). No thread per child and
// no sleeping poll loop.
//
// Not thread-safe: create, submit, cancel and drive it from one thread.
// Callbacks run on that thread, inside run_once()/run_until_idle().
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "corral/request.hpp"
#include "corral/result.hpp"
#include "corral/status.hpp"

namespace corral {

class AuditSink;
class RunPolicy;  // run_policy.hpp

enum class StreamId { stdout_stream, stderr_stream };

struct RunCallbacks {
  // A masked chunk as it arrives (never split inside a secret), within the
  // stream's cap (stdout_bytes / stderr_bytes): the callbacks see the bytes
  // the Result keeps, and the Result says what was cut.
  std::function<void(StreamId, std::string_view)> on_output;
  // The final result; called exactly once per submitted run.
  std::function<void(const Result&)> on_result;
  // Not a callback: the `line` of the audit line a refused submit() writes
  // (a batch job's line number; 0: none). See SupervisorOptions::audit.
  long audit_line = 0;
};

struct SupervisorOptions {
  std::string workspace_base;           // "": choose_workspace_base (workspace.hpp)
  uid_t uid_range_first = 200000;       // one uid per run in flight when root
  std::uint32_t uid_range_count = 65536;
  bool become_subreaper = true;         // reap orphans the runs leave behind
  // The process is the supervisor's alone (corral run, corral batch): a
  // child of it that is neither a run's leader, nor the guardian, nor one
  // it was told to spare (spare_child) can only be something a run left,
  // e.g. a setsid escapee of tier none reparented to us as the subreaper.
  // Such children, and all they leave, are killed when a run's leader
  // exits while no other run is in flight (nothing else could own them);
  // with others in flight, within 0.1 s of a leader's exit, those
  // that started before every run still in flight did (by
  // /proc/PID/stat's start time: they descend from none of them), so an
  // escapee in a busy batch outlives its run only until the runs in flight
  // at its birth have ended; the rest once the supervisor goes idle, and
  // at the latest by close(). Off
  // for a library caller, whose process may have children of its own;
  // needs become_subreaper.
  bool owns_every_child = false;
  unsigned ring_entries = 4096;
  // Per run after the leader exits: how long to wait for the pipes to reach
  // EOF (a straggler holding them open is killed with the group first).
  double drain_seconds = 0.5;
  // When set, every finished run appends one JSON line here (audit.hpp),
  // with the run's secret values scrubbed; a failed append becomes a
  // warning on that run's Result. So does every submit() that returns an
  // Error (outcome "error", the Error's message as its reason): a refused
  // request leaves a line whoever the caller is. Shared: batch and run use
  // the same sink.
  std::shared_ptr<AuditSink> audit;
  // A supervisor for execs into live sessions only (`corral session exec`):
  // no host-wide uid lock, workspace base, owner record or sweep of dead
  // supervisors' leftovers at create — an exec takes neither a uid nor a
  // workspace, and what it starts lives in a cgroup below its session's,
  // which the session's keeper sweeps once the exec's owner is gone
  // (session.hpp). submit() refuses any other request.
  bool session_execs_only = false;
  // What decides, for every run, what the host must enforce, what the
  // Result's enforcement says and how the audit line is written
  // (run_policy.hpp). Null: default_run_policy(), the enforcement map and
  // the audit of the policy layer.
  std::shared_ptr<const RunPolicy> policy;
};

class Supervisor;

// A handle to one submitted run. Destroying an unfinished handle cancels
// the run (SIGKILL to the group, pipes drained, workspace removed, result
// `cancelled`). Release it with detach() to let the run finish on its own.
class RunHandle {
 public:
  RunHandle() = default;
  RunHandle(RunHandle&& other) noexcept;
  RunHandle& operator=(RunHandle&& other) noexcept;
  RunHandle(const RunHandle&) = delete;
  RunHandle& operator=(const RunHandle&) = delete;
  ~RunHandle();

  // Kill the group now; the result arrives as `cancelled` within one loop turn.
  void cancel();
  // Flow control for a caller that passes the output on and cannot keep up:
  // paused, the supervisor stops reading the run's pipes, so the program
  // blocks in its own write(2) while deadlines, cancels and other runs go
  // on. Once the program's leader has exited the pipes are read anyway (the
  // drain is bounded by drain_seconds). Resuming reads what was left.
  void pause_output(bool paused);
  bool finished() const;
  void detach();
  std::uint64_t id() const { return token_; }

 private:
  friend class Supervisor;
  RunHandle(Supervisor* sup, std::uint64_t token) : sup_(sup), token_(token) {}
  Supervisor* sup_ = nullptr;
  std::uint64_t token_ = 0;
};

// One event of a streamed run: an output chunk, or the final result.
struct RunEvent {
  enum Kind { output, result } kind;
  StreamId stream = StreamId::stdout_stream;
  std::string data;                 // output: the masked chunk
  std::shared_ptr<Result> final;    // result
};

class Supervisor {
 public:
  static Expected<std::unique_ptr<Supervisor>> create(SupervisorOptions options = {});
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Validate, plan and spawn. A request corral refuses (bad limit,
  // unenforceable limit not acknowledged, too many runs for the fd limit)
  // is an Error and nothing runs (with SupervisorOptions::audit, its audit
  // line is written); a program that fails to start is a `spawn_failed`
  // Result delivered through on_result.
  Expected<RunHandle> submit(Request request, RunCallbacks callbacks = {});

  // One loop turn: wait up to `timeout_seconds` (negative: until something
  // happens) for completions and handle them. Returns false when nothing is
  // in flight: no run and no watch_fd() armed.
  Expected<bool> run_once(double timeout_seconds = -1);
  // Turn the loop until no run is in flight and no watch_fd() is armed.
  Status run_until_idle();

  // Streaming: submit, then pull events; next() turns the loop until an
  // event for this run is ready. After the result event, next() is nullopt.
  class Stream {
   public:
    Expected<std::optional<RunEvent>> next();
    RunHandle& handle() { return handle_; }
   private:
    friend class Supervisor;
    Supervisor* sup_ = nullptr;
    RunHandle handle_;
    std::shared_ptr<struct StreamQueue> queue_;
  };
  Expected<Stream> stream(Request request);

  // Blocking run: submit() with nobody watching chunks, the loop turned
  // until its result (other runs in flight move on meanwhile).
  Expected<Result> run(Request request);

  // Deliver these signals through the ring instead of as interrupts: they
  // are blocked in the calling thread and read from a signalfd, and `handler`
  // runs on the loop thread (e.g. to cancel every run on SIGTERM).
  Status watch_signals(std::initializer_list<int> signals, std::function<void(int)> handler);
  // Watch one more fd of the caller's through the ring (e.g. `corral batch`
  // reading jobs from stdin without blocking the loop): when fd is readable
  // (or hung up, or in error) `on_ready` runs once, on the loop thread,
  // inside run_once(). One-shot: call watch_fd() again (from the callback
  // too) to go on watching. Watching an fd that is already armed replaces
  // the callback. While a watch is armed, run_once() waits for it even with
  // no run in flight. The fd stays the caller's: unwatch_fd() before
  // closing it (a poll left in the ring would keep the file open).
  Status watch_fd(int fd, std::function<void()> on_ready);
  // Write `data` to fd through the ring (IORING_OP_WRITE at the file's
  // position), so a caller's own output — corral's stdout behind a reader
  // that stalls — never blocks the loop. `data` must stay valid and
  // unchanged until `on_done` runs, on the loop thread inside run_once(),
  // with the bytes written (possibly fewer than asked) or -errno. One write
  // per fd at a time (EBUSY otherwise). While a write is in flight,
  // run_once() waits for it even with no run in flight. The destructor
  // cancels writes still in flight (their callbacks do not run).
  Status write_fd(int fd, std::string_view data, std::function<void(int)> on_done);

  // Stop watching fd; the callback will not run. When this returns, the
  // ring holds no operation on fd. No-op for an fd not watched.
  void unwatch_fd(int fd);

  // Cancel every run in flight.
  void cancel_all();

  // A child of this process that is none of its runs and that
  // SupervisorOptions::owns_every_child must spare: corral batch's session
  // keepers, which become its children as the subreaper (an orphan of the
  // keeper's double fork). Without owns_every_child it changes nothing.
  void spare_child(pid_t pid);

  // End what this supervisor does to the host, now, as its destructor
  // would: runs still in flight are killed and reaped (their results are
  // not delivered), every run's workspace is removed and its uid released,
  // the guardian is told to stop and the owner record is removed. Left
  // are memory, the ring and fds, which the destructor frees, or the
  // process's exit: `corral run` (one run per process) ends with _exit
  // after close(), since unmapping and freeing what the exit takes back
  // anyway is work for nothing. Afterwards submit() refuses and run_once()
  // returns false. Idempotent.
  void close();

  std::size_t in_flight() const;
  // How many runs the fd limit allows in flight at once: (RLIMIT_NOFILE
  // soft limit, raised to the hard one, minus the fds open when the
  // supervisor was made and a reserve) / 3 — a tier none run holds its
  // pidfd and two pipe read ends, nothing else, while its child runs; a
  // tier process run two more (its IPC namespace and that namespace's
  // mqueue mount, kept for a later run: ipc_namespace.hpp), three with
  // --net none (its seccomp listener), so fewer of those fit.
  // submit() refuses (EMFILE, before anything is made) a run that would go
  // past the limit.
  std::size_t capacity() const;

  // A fresh run id, "r-<12 hex>-<n>": 48 random bits drawn once per
  // supervisor and a counter, so ids are unique on the host and across
  // restarts (not tied to a pid, which repeats: every process that is pid 1
  // of a pid namespace of its own is pid 1).
  std::string next_run_id();

  struct Impl;

 private:
  friend class RunHandle;
  explicit Supervisor(std::unique_ptr<Impl> impl);
  Expected<RunHandle> start(Request request, RunCallbacks callbacks);  // submit() less its refusal's audit line
  void cancel(std::uint64_t token);
  bool finished(std::uint64_t token) const;
  void release(std::uint64_t token, bool cancel_if_running);
  void pause_output(std::uint64_t token, bool paused);
  std::unique_ptr<Impl> impl_;
};

}  // namespace corral
