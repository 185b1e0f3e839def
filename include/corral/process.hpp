// process: clone3 with CLONE_PIDFD, pidfds, group kill, and waiting with
// rusage. The child runs a caller-supplied function on its own stack and
// never returns into the parent's frames, which is what makes the
// CLONE_VM|CLONE_VFORK fast path (the one posix_spawn uses) safe.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>

#include "corral/fd.hpp"
#include "corral/status.hpp"

namespace corral {

// A child process known by pid and pidfd. The pidfd keeps naming the same
// process after it exits; the pid does not once the process is reaped.
class Pidfd {
 public:
  Pidfd() = default;
  Pidfd(pid_t pid, UniqueFd fd) : pid_(pid), fd_(std::move(fd)) {}

  // pidfd_open(2) for a process we did not clone ourselves (kernel 5.3).
  static Expected<Pidfd> open(pid_t pid);

  pid_t pid() const noexcept { return pid_; }
  int fd() const noexcept { return fd_.get(); }
  bool valid() const noexcept { return fd_.valid(); }
  void reset() noexcept { fd_.reset(); pid_ = -1; }
  // Gives up the fd (the caller closes it) and forgets the pid.
  int release() noexcept {
    pid_ = -1;
    return fd_.release();
  }

  // pidfd_send_signal(2): reaches exactly this process even if its pid was
  // reused. Returns 0 or errno (ESRCH once it has been reaped).
  int send_signal(int sig) const noexcept;

 private:
  pid_t pid_ = -1;
  UniqueFd fd_;
};

// How a waited-for process ended, with its resource usage (the process and
// the descendants it waited for).
struct ExitStatus {
  bool exited = false;    // true: exit_code is valid; false: killed by `signal`
  int exit_code = -1;
  int signal = 0;
  bool core_dumped = false;
  struct rusage usage {};

  double cpu_seconds() const;
  std::uint64_t max_rss_bytes() const { return static_cast<std::uint64_t>(usage.ru_maxrss) * 1024; }
};

// waitid(P_PIDFD) with rusage (kernel 5.4), and __WALL: a clone child
// (exit signal not SIGCHLD) too. nullopt when `block` is false and the
// process has not exited yet.
Expected<std::optional<ExitStatus>> wait_exit(const Pidfd& child, bool block = true);

// CPU time (user + system, every thread, nanosecond resolution) the live
// process `pid` has used so far: its process CPU clock
// (clock_getcpuclockid(3), CLOCK_PROCESS_CPUTIME_ID of another process).
// Not its children's. Call only while the process is not yet reaped (the
// pid names it until then). Parent side.
Expected<double> process_cpu_seconds(pid_t pid);

// How long the main thread of the live process `pid` has been runnable but
// waiting for a CPU (/proc/PID/schedstat, second field, ns; kernel built
// with CONFIG_SCHED_INFO). How a run starved of CPU by the host's load is
// told from one that slept.
Expected<double> runqueue_wait_seconds(pid_t pid);

// SIGNAL the child's process group and the child itself. The child made
// itself a session leader, so its pgid is its pid; killpg reaches what it
// forked, pidfd_send_signal reaches the leader even if it left the group.
// Call before reaping the leader: its zombie keeps the pgid from being reused.
// Returns 0 if either signal was delivered, else the errno of the pidfd send.
int kill_group(const Pidfd& child, int sig) noexcept;

// A child stack: mmap'd, with a guard page below it. Reused across spawns;
// a CLONE_VFORK parent sleeps until the child execs or exits, so one stack
// per spawning thread is enough.
class ChildStack {
 public:
  static Expected<ChildStack> allocate(std::size_t bytes = 256 * 1024);
  ChildStack() = default;
  ChildStack(ChildStack&& other) noexcept;
  ChildStack& operator=(ChildStack&& other) noexcept;
  ~ChildStack();
  void* top() const noexcept;         // 16-byte aligned
  void* base() const noexcept { return base_; }
  std::size_t size() const noexcept { return size_; }

 private:
  void* map_ = nullptr;
  std::size_t map_size_ = 0;
  void* base_ = nullptr;
  std::size_t size_ = 0;
};

struct CloneSpec {
  // Extra clone flags: CLONE_NEW*, CLONE_FILES, ... CLONE_PIDFD is always set.
  std::uint64_t flags = 0;
  // CLONE_VM|CLONE_VFORK: the child borrows our memory and we sleep until it
  // execs or exits. Requires `stack`. The child function must then touch
  // nothing but its own stack, prepared data and raw syscalls.
  bool share_memory = false;
  const ChildStack* stack = nullptr;
  // CLONE_INTO_CGROUP (cgroup v2, kernel 5.7): an O_DIRECTORY fd of the target.
  int cgroup_fd = -1;
  // The calling thread blocks every signal already (a SpawnThread): the
  // two sigprocmask calls around a share_memory clone are skipped.
  bool signals_blocked = false;
};

// Child-side entry. Runs in the new process; its return value becomes the
// process's exit status (via exit_group). Must be async-signal-safe.
using ChildFunction = int (*)(void* arg) noexcept;

// clone3(2) with CLONE_PIDFD; `fn(arg)` runs in the child. With
// share_memory the child starts with every signal blocked (no handler of
// ours may run on its borrowed stack) and sets its own mask; the caller's
// mask is restored on return. A fork-like child inherits the caller's mask.
Expected<Pidfd> clone_child(const CloneSpec& spec, ChildFunction fn, void* arg);

// Child side: setsid(2), so the child leads its own session and process
// group (pgid = pid) and has no controlling terminal. Returns 0 or errno.
int become_session_leader_in_child() noexcept;

// Child side: oom_score_adj 1000 (proc(5); raising it needs no privilege),
// so the kernel's OOM killer takes this process, and what it forks, before
// any process at the default 0: the supervisor, the host's services. A run
// without memory_bytes has no cgroup of its own to be killed in; its
// workspace, /tmp and /dev/shm tmpfs pages are nobody's RSS, and only its
// end gives them back, which killing its own processes brings. Before the
// privilege drop (after it the file is root's) and Landlock. Returns 0 or
// errno.
int make_first_oom_victim_in_child() noexcept;

}  // namespace corral
