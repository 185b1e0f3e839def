#include "background_work.hpp"

#include <pthread.h>
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

namespace corral::detail {

namespace {

constexpr std::size_t kMaxWaiting = 2;

struct Worker {
  std::mutex mu;
  std::condition_variable work, done;
  std::deque<std::function<void()>> jobs;
  bool running = false;              // a job taken off the queue, not finished
  std::atomic<pid_t> owner{-1};      // the process the thread runs in

  void main() {
    std::unique_lock lock(mu);
    for (;;) {
      work.wait(lock, [&] { return !jobs.empty(); });
      std::function<void()> job = std::move(jobs.front());
      jobs.pop_front();
      running = true;
      lock.unlock();
      try {
        job();
      } catch (...) {
        // A job's failure is its own; the next one still runs.
      }
      job = nullptr;  // what it captured (a last fd) goes here, not under the lock
      lock.lock();
      running = false;
      if (jobs.empty()) done.notify_all();
    }
  }

  // True when the thread runs in this process (started now if need be).
  bool start_here(pid_t self) {
    const pid_t at = owner.load();
    if (at == self) return true;
    if (at != -1) return false;  // a forked copy: the thread is the parent's
    // Every signal blocked from its first instruction (a thread starts with
    // its creator's mask): a SIGTERM meant for the caller's signalfd must
    // never find this thread open and take the default action.
    sigset_t all, before;
    ::sigfillset(&all);
    ::pthread_sigmask(SIG_SETMASK, &all, &before);
    bool started = true;
    try {
      std::thread([this] { main(); }).detach();
    } catch (...) {
      started = false;
    }
    ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
    if (started) owner.store(self);
    return started;
  }
};

// Never destroyed: the thread runs until the process exits, and a static
// destructor at exit would pull the queue from under it. What is still
// queued then is left to the kernel (the process's fds close at its exit).
Worker& worker() {
  static Worker* w = new Worker;
  return *w;
}

}  // namespace

void run_in_background(std::function<void()> job) {
  Worker& w = worker();
  const pid_t self = ::getpid();
  // A forked copy may find the lock held by a thread of its parent that is
  // not in the copy: it never waits for it, and runs the job itself.
  std::unique_lock lock(w.mu, std::try_to_lock);
  if (!lock.owns_lock() && w.owner.load() == self) lock.lock();  // the thread's own, held briefly
  // Backpressure: with kMaxWaiting jobs already waiting, the caller runs
  // this one itself, which holds its loop back as before. Otherwise a run
  // of workspaces full of files faster than the thread empties them would
  // pile up, each one's memory and fd held until its turn.
  if (!lock.owns_lock() || w.jobs.size() >= kMaxWaiting || !w.start_here(self)) {
    if (lock.owns_lock()) lock.unlock();
    job();
    return;
  }
  w.jobs.push_back(std::move(job));
  w.work.notify_one();
}

void wait_for_background_work() {
  Worker& w = worker();
  if (w.owner.load() != ::getpid()) return;
  std::unique_lock lock(w.mu);
  w.done.wait(lock, [&] { return w.jobs.empty() && !w.running; });
}

}  // namespace corral::detail
