// Dropping to an unprivileged uid/gid for a run, and handing out one uid per
// run in flight.
//
//   parent:  auto lease = pool.acquire();                        // bookkeeping only
//            auto drop = prepare_privilege_drop(lease->uid(), lease->gid());
//   child:   int err = apply_privilege_drop_in_child(*drop);     // raw set*id
//
// Why one uid per run: RLIMIT_NPROC counts processes per real uid, so
// `process_count` only binds a run when the run has a uid to itself, and
// runs under distinct uids cannot signal, ptrace or read each other. The
// kernel does not enforce RLIMIT_NPROC for uid 0 at all.
//
// With capabilities.hpp, see the order there: bounding set, then this, then
// clearing the remaining sets.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>

#include "corral/status.hpp"

namespace corral {

// Prepared identity for the child. Plain numbers; safe in a CLONE_VM child.
class PrivilegeDrop {
 public:
  uid_t uid() const noexcept { return uid_; }
  gid_t gid() const noexcept { return gid_; }
  // False when the target is the caller's own identity: the child then
  // keeps its supplementary groups (clearing them needs CAP_SETGID) and
  // only verifies.
  bool changes_identity() const noexcept { return changes_; }

 private:
  friend Expected<PrivilegeDrop> prepare_privilege_drop(uid_t, gid_t);
  PrivilegeDrop() = default;
  uid_t uid_ = 0;
  gid_t gid_ = 0;
  bool changes_ = true;
};

// Parent side. Refuses, naming the uid/gid: -1 (4294967295, which set*id
// reads as "unchanged"); uid 0 or gid 0 as a target, even when that is our
// own identity (a run is never root, nor in root's group); ids not mapped
// in our user namespace; and any real change when the calling thread lacks
// CAP_SETUID or CAP_SETGID (checked here because the child inherits this
// thread's capabilities). A target equal to our current real, effective and
// saved uid and gid is accepted as a no-op that still verifies.
Expected<PrivilegeDrop> prepare_privilege_drop(uid_t uid, gid_t gid);

// The same drop without a prepared object, for a preexec hook (the C ABI):
// validates only what it can without allocating (-1 ids, uid 0 and gid 0
// refused with EINVAL) and skips setgroups when the target is already our
// identity; returns 0 only once setresuid(0,0,0) and setresgid(0,0,0) fail. Child side;
// async-signal-safe. Returns 0 or errno.
int drop_privileges_now(uid_t uid, gid_t gid) noexcept;

// Child side, async-signal-safe: raw syscalls only (never glibc's
// setresuid, which would broadcast to the parent's threads from a CLONE_VM
// child), errno untouched. Order: setgroups(0, NULL), setresgid(g,g,g),
// setresuid(u,u,u) (groups and gid while we still may). Then verifies:
// getresuid/getresgid all equal the target, and setresuid(0,0,0) and
// setresgid(0,0,0) fail. Returns 0, the
// positive errno of the failed step, or ENOTRECOVERABLE if root could be
// regained or the ids did not stick (the caller must _exit: the child may
// be root again).
int apply_privilege_drop_in_child(const PrivilegeDrop& drop) noexcept;

// Parent side: euid 0 with CAP_SETUID and CAP_SETGID effective, i.e. this
// process can give each run its own uid.
bool is_root_capable() noexcept;

// One uid (and the gid of the same number) per run in flight, from a range.
// Pure bookkeeping: nothing is created on the system, and the range should
// be one no real account uses. O(1) acquire and release; thread-safe.
// Copies are handles to the same pool.
class UidPool {
 public:
  static constexpr uid_t kDefaultFirst = 200000;
  static constexpr std::uint32_t kDefaultCount = 65536;  // 200000..265535

  // A held uid/gid. Movable; returns the uid to its pool when destroyed
  // (the pool's bookkeeping outlives the pool object if a lease does).
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&& other) noexcept;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease();

    uid_t uid() const noexcept { return uid_; }
    gid_t gid() const noexcept { return gid_; }
    bool held() const noexcept { return held_; }
    // Returns the uid now instead of at destruction.
    void release() noexcept;

   private:
    friend class UidPool;
    struct State;
    std::shared_ptr<State> state_;  // null for a pinned lease: nothing to return
    uid_t uid_ = 0;
    gid_t gid_ = 0;
    bool held_ = false;
  };

  UidPool();
  // [first, first + count). A range that is empty, contains 0 or runs past
  // 4294967294 makes acquire() return the error naming it; status() too.
  UidPool(uid_t first, std::uint32_t count);

  // `--user`: every lease is (uid, gid), shared by all runs, never
  // exhausted. process_count then counts the processes of all those runs
  // (and anything else running as uid) together.
  UidPool& pin(uid_t uid, gid_t gid) noexcept;
  bool pinned() const noexcept;

  // A uid no other live lease of this pool holds (or the pinned one); an
  // error naming the range when all are in use.
  Expected<Lease> acquire();
  Status status() const;
  std::uint32_t in_use() const noexcept;

 private:
  std::shared_ptr<Lease::State> state_;
};

}  // namespace corral
