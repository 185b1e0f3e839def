// corral batch's "session" job field (session.hpp): a job may run in a warm
// session named by {scope, thread[, agent]}; the session is opened on first
// use with that job's container options, jobs of one session run one at a
// time in the order they came, and the sessions a batch opened are disposed
// at its end unless --keep-sessions.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "corral/request.hpp"
#include "corral/session.hpp"
#include "corral/status.hpp"

namespace corral::cli {

// Takes the "session" member off a job line (the door's job parser does not
// know it) and returns its key; nullopt when the line has none. A line that
// is not a JSON object is left as it is (the job parser says why).
Expected<std::optional<SessionKey>> take_session_field(std::string& line);

class BatchSessions {
 public:
  // Told the keeper's pid of every session this batch opens or finds: a
  // keeper started here is the batch's child (session_spawn.cpp), which
  // the supervisor must not take for a run's leftover.
  explicit BatchSessions(std::function<void(pid_t)> on_keeper) : on_keeper_(std::move(on_keeper)) {}
  // The live session for `key`, opened (or found) with the container options
  // of `job` the first time this batch names it.
  Expected<std::string> session_for(const SessionKey& key, const Request& job);
  // A job waiting for its session's previous one: what starts it, and who
  // it is (for its result line if it never starts).
  struct Waiting {
    std::function<void()> start;
    std::string job_id;
    long line = 0;
  };
  // Runs `start` now if the session has no job in flight, else queues it.
  void run_or_queue(const std::string& id, Waiting job);
  // The session's job ended (from a result callback): its next queued job
  // starts at the next pump(), outside the supervisor's callbacks.
  void finished(const std::string& id) { ready_.push_back(id); }
  void pump();
  std::size_t queued() const { return queued_; }
  // Every job still waiting (the batch is stopping: none of them will
  // start), in the order they came; the queues are left empty.
  std::vector<Waiting> take_waiting();
  // Disposes the sessions this batch opened; the count.
  int dispose_opened();

 private:
  std::function<void(pid_t)> on_keeper_;
  std::map<std::string, std::deque<Waiting>> waiting_;
  std::set<std::string> busy_;
  std::set<std::string> opened_;
  std::deque<std::string> ready_;
  std::size_t queued_ = 0;
};

}  // namespace corral::cli
