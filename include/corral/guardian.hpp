// guardian: what kills a supervisor's runs when the supervisor dies.
//
// PR_SET_PDEATHSIG (set in every run's first process) reaches only that
// process: what it forked, and anything that left its process group,
// lives on when the supervisor is SIGKILLed. The guardian is one process
// per supervisor, started at its first run that is not a container, that
// waits for the supervisor to die and then kills what its runs were:
//   - the process group of every run in flight (killpg: all a run without
//     a uid of its own can be reached by), and
//   - as root, every process of every uid a run in flight held
//     (signal_uid's kill(-1) from a helper: escapees of the group too).
// When the supervisor goes away normally it stops the guardian first
// (stop(): a flag and a byte on a pipe) and the guardian exits without
// touching anything; its table is empty by then anyway, since a run's
// entry is cleared once the run's processes are dead.
//
// Cost: the guardian is a CLONE_VM child (about as cheap to make as a
// thread, no page tables copied, no copy-on-write growth however large
// the supervisor's heap): it reads the supervisor's table in place, so
// watch()/unwatch() are one atomic store each and no syscall. It runs
// raw syscalls only (never malloc: a dead supervisor may have died holding
// the allocator's lock). It shares the uid lock file's open file
// description (UidPool::opened_lock_fd), so a dead supervisor's uids stay
// locked — and no other run can take one — until the guardian has killed
// their processes and exited. The file is opened by the first run that
// holds a uid (a tier none run holds none): a guardian started before
// that is replaced, before that run starts, by one that holds it and
// adopts the old one's table; the old one watched no uid (none was held).
//
// It is a clone child: its exit signal is 0, not SIGCHLD, so a wait without
// __WALL does not see it. The supervisor's check that a run left no child
// behind is then one waitid (no_children_but_clone_children, reaper.hpp)
// instead of a listing of /proc/self/task: with the guardian a SIGCHLD
// child, a one-run CLI always had a child and always listed. It is waited
// for with __WALL (wait_exit); orphaned, it is re-parented with SIGCHLD.
//
// Container runs are not watched and start none (a session's exec neither:
// session.hpp says what covers it): their pid 1 dies with the
// supervisor (PR_SET_PDEATHSIG, checked after it is set) and takes its pid
// namespace with it, so nothing of such a run can be left; its uid stays
// marked in use (uid_lock.hpp), so the next holder reaps it first.
//
// What it does not cover, stated: a supervisor that execs is taken as dead
// (the pipe's write end is CLOEXEC); the kernel's OOM killer kills every
// process that shares the victim's memory, the guardian with the
// supervisor (the next start's sweep and the uid reap at acquire are what
// is left then); a SIGKILL aimed at the guardian itself.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>

#include "corral/fd.hpp"
#include "corral/process.hpp"
#include "corral/status.hpp"

namespace corral {

class Guardian {
 public:
  // Slots a table can hold (one per run in flight, indexed by the caller:
  // the supervisor's run slot). Mapped lazily: untouched pages cost nothing.
  static constexpr std::uint32_t kSlots = 1u << 20;

  // Starts the guardian. It keeps `keep_fd` (-1 for none: the uid lock
  // file's fd when root) and closes every other fd it inherited.
  static Expected<std::unique_ptr<Guardian>> start(int keep_fd);
  // stop(), then waits for the guardian to exit.
  ~Guardian();
  Guardian(const Guardian&) = delete;
  Guardian& operator=(const Guardian&) = delete;

  // Run `slot` is in flight as process group `pgid` (> 0), and as `uid`
  // (0: none of its own). No syscall. A slot >= kSlots is not covered.
  void watch(std::uint32_t slot, pid_t pgid, uid_t uid) noexcept;
  // The run's processes are dead: nothing to kill for it any more.
  void unwatch(std::uint32_t slot) noexcept;
  // Watches every slot `other` watches (a guardian that replaces it, e.g.
  // one that holds the uid lock file the other was started without).
  void adopt(const Guardian& other) noexcept;
  int keep_fd() const noexcept;  // the fd start() was given

  pid_t pid() const noexcept { return pidfd_.pid(); }

  // Tells the guardian to exit killing nothing (a flag, and a byte on its
  // pipe): for a supervisor that has nothing running any more. One write;
  // its stacks, table and fds are freed by the destructor, or by the exit
  // of a process that ends right after (Supervisor::close). Idempotent.
  void stop() noexcept;

  struct Shared;  // what the guardian reads (guardian.cpp)

 private:
  Guardian() = default;
  bool stopped_ = false;
  Shared* shared_ = nullptr;  // in table_ (mmap'd)
  void* table_ = nullptr;
  std::size_t table_bytes_ = 0;
  ChildStack guardian_stack_, helper_stack_;
  UniqueFd quit_write_;
  UniqueFd self_pidfd_;
  Pidfd pidfd_;
};

}  // namespace corral
