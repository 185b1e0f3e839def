// How fast `corral batch` takes jobs, and which are its own: the default
// parallelism, the queue that keeps CPU-limited jobs to one per CPU, and
// the shard skip (--shard I/N: the k-th job is shard k mod N's). Loop
// thread only, like the rest of the batch.
#pragma once

#include <cstddef>
#include <deque>
#include <optional>
#include <string>
#include <utility>

#include "corral/request.hpp"
#include "corral/shard.hpp"

namespace corral::cli {

// The CPUs this process may run on (its affinity mask).
std::size_t usable_cpus();

// Most jobs wait on something (I/O, a child, a sleep): four per CPU keeps
// the CPUs busy. A job with a cpu_seconds limit is one that computes: more
// of them than CPUs share the CPUs, and each one's wall_seconds runs out
// while it waits for its turn (16 on 2 CPUs: 18 of 20 cpu_seconds=1 jobs
// with wall_seconds=2 came back killed_timeout). By default those run at
// most one per CPU (CpuQueue); --parallel N says otherwise on purpose.
std::size_t default_parallel();

// A line with nothing but blanks: not a job.
bool blank(const std::string& line);

// Jobs in a regular file, counted up front for the progress line (pread:
// the read position stays where it is); nullopt for a pipe or a terminal.
std::optional<std::size_t> count_jobs(int fd);

// Jobs with a cpu_seconds limit in flight at most `cpu_parallel` at once.
// One such job, admitted while every slot is taken, waits here (the intake
// stops behind it, so corral never reads further ahead than it runs).
class CpuQueue {
 public:
  struct Job {
    Request request;
    std::string id;
    long line = 0;
    std::string session{};  // a session job's session (batch_session.hpp)
  };

  explicit CpuQueue(std::size_t cpu_parallel) : cpu_parallel_(cpu_parallel) {}

  static bool limited(const Request& r) { return r.limits.has(Limit::cpu_seconds); }
  // A CPU-limited job while every slot is taken: hold() it instead of submitting.
  bool must_wait(const Request& r) const { return limited(r) && in_flight_ >= cpu_parallel_; }
  void hold(Job job) { held_ = std::move(job); }
  bool holding() const { return held_.has_value(); }
  // The held job once a slot is free (nullopt while none is).
  std::optional<Job> release() {
    if (!held_ || in_flight_ >= cpu_parallel_) return std::nullopt;
    return take();
  }
  // The held job whatever the slots (the batch is stopping).
  std::optional<Job> take() {
    std::optional<Job> out = std::move(held_);
    held_.reset();
    return out;
  }
  // A session job whose turn came (its session's previous job ended) while
  // every slot is taken: it waits too, in the order the turns came, its
  // session busy meanwhile. The intake goes on (other sessions, other jobs).
  void hold_turn(Job job) { turns_.push_back(std::move(job)); }
  bool turns_waiting() const { return !turns_.empty(); }
  std::optional<Job> release_turn() {
    if (turns_.empty() || in_flight_ >= cpu_parallel_) return std::nullopt;
    Job job = std::move(turns_.front());
    turns_.pop_front();
    return job;
  }
  std::deque<Job> take_turns() { return std::exchange(turns_, {}); }
  void started() { ++in_flight_; }
  void finished() { --in_flight_; }

 private:
  std::size_t cpu_parallel_;
  std::size_t in_flight_ = 0;
  std::optional<Job> held_;
  std::deque<Job> turns_;
};

// --shard I/N: which jobs of the file are this batch's, by place (shard.hpp
// says why not by id). Without a shard every job is.
class ShardSkip {
 public:
  explicit ShardSkip(const std::optional<Shard>& shard) : shard_(shard) {}
  // Whether the next job (a non-blank or too-long line) is this batch's.
  bool mine() { return !shard_ || shard_->owns(ordinal_++); }
  // This shard's jobs among `all` jobs of the file: I, I+N, I+2N, ...
  std::optional<std::size_t> of(std::optional<std::size_t> all) const {
    if (!all || !shard_) return all;
    return *all > shard_->index ? (*all - shard_->index + shard_->count - 1) / shard_->count : 0;
  }

 private:
  const std::optional<Shard>& shard_;
  std::size_t ordinal_ = 0;  // jobs read so far, this shard's or not
};

}  // namespace corral::cli
