// SpawnThread (spawn_thread.hpp). start(), clone() and the destructor run in
// the Spawner's thread; main() and what it calls in the spawn thread.
#include "corral/spawn_thread.hpp"

#include <linux/futex.h>
#include <sched.h>
#include <sys/prctl.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <system_error>

#include "corral/ipc_namespace.hpp"
#include "corral/syscalls.hpp"

namespace corral {
namespace {

// Sleeps while *word == seen (a spurious or early wake returns too: the
// callers loop on the word).
void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t seen) noexcept {
  sys::call(SYS_futex, reinterpret_cast<long>(&word), FUTEX_WAIT_PRIVATE, seen, 0, 0, 0);
}

void futex_wake(std::atomic<std::uint32_t>& word) noexcept {
  sys::call(SYS_futex, reinterpret_cast<long>(&word), FUTEX_WAKE_PRIVATE, 1, 0, 0, 0);
}

// CLOCK_MONOTONIC from the vDSO, as the Spawner's thread reads it
// (spawn.cpp): an ordinary thread, not a vfork child, so clock_gettime(3)
// may serve it from memory; sys::monotonic_ns, the raw system call, cost two
// calls a run. The child's readings are of the same clock.
std::uint64_t thread_monotonic_ns() noexcept {
  struct timespec ts {};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

}  // namespace

Expected<std::unique_ptr<SpawnThread>> SpawnThread::start(const CapabilityDrop& drop, bool fresh_ipc) {
  std::unique_ptr<SpawnThread> t(new SpawnThread(drop, fresh_ipc));
  // Born with every signal blocked: a signal meant for the process must
  // never be delivered here (it has no handler of its own to run, and a
  // CLONE_VM child it makes starts from this mask).
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  try {
    t->thread_ = std::thread([p = t.get()] { p->main(); });
  } catch (const std::system_error& e) {
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    return Error(e.code().value(), "spawn thread: start");
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return t;
}

SpawnThread::~SpawnThread() {
  if (!thread_.joinable()) return;
  quit_.store(true, std::memory_order_release);
  requested_.fetch_add(1, std::memory_order_acq_rel);
  futex_wake(requested_);
  thread_.join();
}

// In the spawn thread: leaves its namespace (given to a child) for one a
// finished run left empty, or a new one.
void SpawnThread::renew_namespace() noexcept {
  namespace_fresh_ = false;
  namespace_held_ = {};
  if (!fresh_ipc_) return;
  for (;;) {
    HeldIpcNamespace kept;
    {
      std::lock_guard<std::mutex> lock(kept_mutex_);
      if (kept_.empty()) break;
      kept = std::move(kept_.back());
      kept_.pop_back();
    }
    if (enter_ipc_namespace_if_empty(kept)) {
      namespace_held_ = std::move(kept);
      namespace_fresh_ = true;
      return;
    }
    // Not empty (or not entered): dropped; the unshare below leaves it.
  }
  namespace_fresh_ = sys::call(SYS_unshare, CLONE_NEWIPC) == 0;
  if (namespace_fresh_) namespace_held_ = hold_own_ipc_namespace();
}

void SpawnThread::recycle(HeldIpcNamespace ipc_namespace) {
  if (!ipc_namespace) return;
  std::lock_guard<std::mutex> lock(kept_mutex_);
  if (kept_.size() < kKeptIpcNamespaces) kept_.push_back(std::move(ipc_namespace));
}

void SpawnThread::main() noexcept {
  tid_.store(static_cast<pid_t>(sys::call(SYS_gettid)), std::memory_order_release);
  sys::call(SYS_prctl, PR_SET_NAME, reinterpret_cast<long>("corral-spawn"), 0, 0, 0);  // the thread's comm
  bounding_set_ = empty_thread_bounding_set(drop_);
  renew_namespace();
  ready_.store(true, std::memory_order_release);
  std::uint32_t seen = 0;
  for (;;) {
    std::uint32_t now;
    while ((now = requested_.load(std::memory_order_acquire)) == seen) futex_wait(requested_, seen);
    seen = now;
    if (quit_.load(std::memory_order_acquire)) return;
    CloneSpec spec = job_.spec;
    bool given = false;
    if ((spec.flags & CLONE_NEWIPC) && namespace_fresh_) {
      spec.flags &= ~static_cast<std::uint64_t>(CLONE_NEWIPC);
      given = true;
    }
    // Every signal is blocked here already: clone_child need not block them.
    spec.signals_blocked = true;
    try {
      const std::uint64_t t0 = thread_monotonic_ns();
      auto pidfd = clone_child(spec, job_.fn, job_.arg);
      const std::uint64_t resumed = thread_monotonic_ns();
      if (!pidfd) given = false;  // no child: nobody entered the namespace
      job_.out.emplace(Cloned{std::move(pidfd), t0, resumed, {}});
      if (given) job_.out->ipc_namespace = std::move(namespace_held_);
    } catch (...) {
      job_.out.reset();  // the failure's message could not be made: clone() says ENOMEM
    }
    done_.store(seen, std::memory_order_release);
    futex_wake(done_);
    // The caller has its child; the next one gets a namespace of its own
    // (and one that could not be made is tried again).
    if (given || (fresh_ipc_ && !namespace_fresh_)) renew_namespace();
  }
}

SpawnThread::Cloned SpawnThread::clone(CloneSpec spec, ChildFunction fn, void* arg) {
  job_.spec = spec;
  job_.fn = fn;
  job_.arg = arg;
  job_.out.reset();
  const std::uint32_t ticket = requested_.load(std::memory_order_relaxed) + 1;
  requested_.store(ticket, std::memory_order_release);
  futex_wake(requested_);
  std::uint32_t d;
  while ((d = done_.load(std::memory_order_acquire)) != ticket) futex_wait(done_, d);
  if (!job_.out) return Cloned{Error(ENOMEM, "spawn thread: clone"), 0, 0, {}};
  Cloned out = std::move(*job_.out);
  job_.out.reset();
  return out;
}

}  // namespace corral
