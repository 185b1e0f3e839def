// spawn_thread: a thread of the Spawner's own that a process-tier child is
// cloned from, so that two things every such child used to do on the
// supervisor's clock are already done, once, in the thread's own state:
//
//   - its bounding set is empty: dropped once when the thread starts (the
//     41 PR_CAPBSET_DROP calls each child made, about 90 µs here); a child
//     copies its creator thread's credentials;
//   - its IPC namespace is fresh: entered right after the thread's last
//     clone returned (the supervisor already has its child then), and given
//     to the next child at clone instead of CLONE_NEWIPC making one then.
//     The thread leaves a namespace as soon as a child has it. The next is
//     one a finished run left empty (recycle(), ipc_namespace.hpp), checked
//     again as the thread enters it, or else a new one (unshare); one it
//     cannot leave (unshare failed: max_ipc_namespaces, no CAP_SYS_ADMIN)
//     is never given again: the next child gets CLONE_NEWIPC as before.
//     So no two live runs ever share a namespace, and none starts in one
//     that holds an object.
//
// Linux keeps credentials and namespaces per thread, so the process's other
// threads keep their bounding sets and IPC namespace. The thread blocks
// every signal, never execs, never makes an IPC object; between clones it
// sleeps on a futex. What changes for the child is its parent thread:
// PR_SET_PDEATHSIG fires when this thread exits, i.e. when its Spawner is
// destroyed (the supervisor has killed its runs by then).
//
// Parent side only. Not thread-safe: one caller (the Spawner's) at a time.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "corral/capabilities.hpp"
#include "corral/ipc_namespace.hpp"
#include "corral/process.hpp"
#include "corral/status.hpp"

namespace corral {

class SpawnThread {
 public:
  // Starts the thread, every signal blocked in it. It drops the bounding
  // set (capabilities 0..drop.last_cap()) and, with `fresh_ipc`, makes its
  // first IPC namespace; until then ready() is false.
  static Expected<std::unique_ptr<SpawnThread>> start(const CapabilityDrop& drop, bool fresh_ipc);
  // Wakes the thread and joins it.
  ~SpawnThread();
  SpawnThread(const SpawnThread&) = delete;
  SpawnThread& operator=(const SpawnThread&) = delete;

  // Set up: clone() may be called (it would wait for the set-up otherwise).
  bool ready() const noexcept { return ready_.load(std::memory_order_acquire); }
  // Whether it keeps a fresh IPC namespace (start's fresh_ipc).
  bool fresh_ipc() const noexcept { return fresh_ipc_; }
  // What its bounding set still holds (bit n: capability n): 0 once it
  // emptied it; what the kernel refused to drop otherwise. Valid once ready.
  std::uint64_t bounding_set() const noexcept { return bounding_set_; }
  // The thread's id (gettid), for tests and /proc/self/task/TID.
  pid_t tid() const noexcept { return tid_.load(std::memory_order_acquire); }

  struct Cloned {
    Expected<Pidfd> pidfd;
    std::uint64_t t0_ns = 0, resumed_ns = 0;  // CLOCK_MONOTONIC around the clone
    // The IPC namespace the child was born in, held with its mqueue mount,
    // when it was the thread's: for recycle() once no process of the run is
    // left.
    HeldIpcNamespace ipc_namespace;
  };
  // clone_child(spec, fn, arg) made by the thread, waited for. A spec
  // with CLONE_NEWIPC while the thread's namespace is fresh loses the flag:
  // the child is born in that namespace. The child inherits the thread's
  // bounding set and its (blocked) signal mask.
  Cloned clone(CloneSpec spec, ChildFunction fn, void* arg);

  // A Cloned::ipc_namespace whose run is over with none of its processes
  // left (the caller knows: every process of the run's uid is gone and
  // none can start), for a later child if it is empty then. Kept up to
  // kKeptIpcNamespaces; more are dropped (the kernel frees them). Any
  // thread.
  static constexpr std::size_t kKeptIpcNamespaces = 8;
  void recycle(HeldIpcNamespace ipc_namespace);

 private:
  SpawnThread(const CapabilityDrop& drop, bool fresh_ipc) : drop_(drop), fresh_ipc_(fresh_ipc) {}
  void main() noexcept;
  void renew_namespace() noexcept;

  const CapabilityDrop drop_;
  const bool fresh_ipc_;
  std::uint64_t bounding_set_ = ~std::uint64_t{0};  // written before ready_
  std::atomic<bool> ready_{false};
  std::atomic<pid_t> tid_{0};
  // The thread's alone: whether its IPC namespace is one no child has, and
  // that namespace held (invalid if /proc could not give it).
  bool namespace_fresh_ = false;
  HeldIpcNamespace namespace_held_;
  // Namespaces recycle() kept, for renew_namespace.
  std::mutex kept_mutex_;
  std::vector<HeldIpcNamespace> kept_;

  // The handshake (futex words): the caller bumps `requested_`, the thread
  // answers by setting `done_` to the same number. `quit_` ends the loop.
  std::atomic<std::uint32_t> requested_{0};
  std::atomic<std::uint32_t> done_{0};
  std::atomic<bool> quit_{false};
  struct Job {
    CloneSpec spec;
    ChildFunction fn = nullptr;
    void* arg = nullptr;
    std::optional<Cloned> out;
  };
  Job job_;
  std::thread thread_;
};

}  // namespace corral
