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
#include <string>
#include <utility>
#include <vector>

#include "corral/status.hpp"

namespace corral {

// What prepare_privilege_drop reads of the calling process: its real,
// effective and saved ids, its user namespace's uid and gid maps, and
// whether CAP_SETUID and CAP_SETGID are effective (about ten system calls
// and two /proc reads). A supervisor reads them once and keeps them for
// its runs, as it keeps its other host facts.
struct PrivilegeFacts {
  uid_t ruid = 0, euid = 0, suid = 0;
  gid_t rgid = 0, egid = 0, sgid = 0;
  int ids_errno = 0;  // getresuid/getresgid failed with it (0: read)
  // (first id, count) ranges of /proc/self/uid_map and gid_map; no map
  // file (no /proc): every id counts as mapped.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> uid_ranges, gid_ranges;
  bool uid_map_read = false, gid_map_read = false;
  bool cap_setuid = false, cap_setgid = false;
};
PrivilegeFacts read_privilege_facts();

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
  friend Expected<PrivilegeDrop> prepare_privilege_drop(uid_t, gid_t, const PrivilegeFacts&);
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
// The same, judged on facts read earlier (read_privilege_facts).
Expected<PrivilegeDrop> prepare_privilege_drop(uid_t uid, gid_t gid, const PrivilegeFacts& facts);

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
// Nothing is created on the system, and the range should be one no real
// account uses. Thread-safe. Copies are handles to the same pool.
//
// Two modes:
//  - local (the default): bookkeeping in this process only, O(1) acquire
//    and release. Another process's pool may hand out the same uid.
//  - host-wide (lock_host_wide(), what a root Supervisor uses): a uid is
//    also write-locked on byte <uid> of a lock file (uid_lock.hpp), so no
//    other run on the host — another corral process, batch or library
//    supervisor — holds it at the same time, and the kernel drops the lock
//    if this process dies. Before a uid freshly locked is handed out, and
//    when a lease ends without having been reaped, every process of the
//    uid is killed (signal_uid): a uid is never handed out while something
//    of its last run (a setsid escapee, a dead holder's leftovers) lives.
//    Nor while files of it are left in the host's shared writable
//    directories (/tmp, /var/tmp, /dev/shm, /run/lock: uid_sweep.hpp):
//    a lease that may have left some (leaves_host_files) waits for a
//    sweep at release (batched: one walk of those directories for up to
//    128 uids; a pool that ends first lets them go marked unswept, and a
//    later acquire, in any process, sweeps them in a batch before one is
//    handed out), and a uid freshly locked whose byte says neither clean
//    nor unswept is swept as it is reaped. A uid its last holder let go
//    of clean is preferred (one read of the lock file finds them). A uid released here stays locked by the pool, idle and clean, and is
//    handed out again without a syscall; all go when the pool does. Needs
//    root (setresuid for the kill).
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
    // A lease of a host-wide pool: the uid is the run's alone on the host
    // and signal_processes() works.
    bool host_wide() const noexcept;
    // Host-wide leases: send `sig` to every process of the uid (the run's
    // program and whatever it started, in or out of its process group).
    // After a SIGKILL that succeeded the lease is clean: the run's
    // processes are gone and release() does not kill again. Callers must
    // not start anything under the uid after that. ENOTSUP otherwise.
    Status signal_processes(int sig);
    // A SIGKILL to the uid succeeded since the lease was handed out.
    bool reaped() const noexcept { return clean_; }
    // The caller knows no process of the uid lives and none will start
    // (e.g. a subreaper whose children hold none of the run's processes):
    // release() then needs no kill.
    void mark_reaped() noexcept { clean_ = true; }
    // acquire(Reap::by_first_process) handed out a uid freshly locked
    // without reaping it: the first process to run as the uid must kill
    // every other process of it (kill(-1, SIGKILL)) before anything else.
    bool first_process_reaps() const noexcept { return first_reaps_; }
    // The run may leave files in the host's shared writable directories
    // (tier process without confined writes): at release the uid waits,
    // locked, for a sweep of them (uid_sweep.hpp) before another run has
    // it. Host-wide leases only.
    void leaves_host_files() noexcept { leaves_files_ = true; }
    // Returns the uid now instead of at destruction. A host-wide lease that
    // is not clean is reaped first (SIGKILL to the uid); if that fails the
    // uid is kept locked and never handed out again by this pool.
    void release() noexcept;

   private:
    friend class UidPool;
    struct State;
    std::shared_ptr<State> state_;  // null for a pinned lease: nothing to return
    uid_t uid_ = 0;
    gid_t gid_ = 0;
    bool held_ = false;
    bool clean_ = false;  // reaped by a SIGKILL since it was handed out
    bool first_reaps_ = false;
    bool leaves_files_ = false;
  };

  // Who kills what a dead holder of a freshly locked uid left behind. Since
  // a dead holder leaves files too, acquire() now always kills and sweeps
  // with one helper (uid_sweep.hpp) before it hands such a uid out, and
  // first_process_reaps() stays false; by_first_process is kept for
  // callers, and the first process's kill(-1) for a plan that asks.
  //   now: acquire() does, with a helper process (signal_uid).
  //   by_first_process: the caller's first process under the uid does, as
  //     its first act after becoming the uid (spawn.hpp: ChildPlan's
  //     reap_uid_first): no extra process per run. Only a caller that
  //     starts that process in our pid namespace may ask for it (kill(-1)
  //     reaches no further than the caller's pid namespace).
  enum class Reap { now, by_first_process };

  UidPool();
  // [first, first + count). A range that is empty, contains 0 or runs past
  // 4294967294 makes acquire() return the error naming it; status() too.
  UidPool(uid_t first, std::uint32_t count);

  // `--user`: every lease is (uid, gid), shared by all runs, never
  // exhausted. process_count then counts the processes of all those runs
  // (and anything else running as uid) together. Never host-wide.
  UidPool& pin(uid_t uid, gid_t gid) noexcept;
  bool pinned() const noexcept;

  // Host-wide mode (see above), with the lock file at `path` (opened at the
  // first acquire, or by host_lock_fd()). Before the first acquire.
  UidPool& lock_host_wide(std::string path = "/run/corral/uids.lock");
  bool host_wide() const noexcept;
  // The lock file's fd (opening it now), -1 in local mode. A process that
  // shares the open file description (inherits this fd) shares the locks:
  // the supervisor's guardian holds it so a dead supervisor's uids stay
  // locked until their processes are killed.
  Expected<int> host_lock_fd();
  // The lock file's fd if it is open already (a lease, or host_lock_fd(),
  // opened it), else -1: a caller that only needs it once uids are held
  // opens nothing.
  int opened_lock_fd() const noexcept;

  // A uid no other live lease holds (host-wide: no other run on the host),
  // or the pinned one; an error naming the range when all are in use.
  Expected<Lease> acquire(Reap reap = Reap::now);
  Status status() const;
  std::uint32_t in_use() const noexcept;
  // Host-wide: records in the lock file that each idle uid (released
  // clean, still locked by this pool) is clean, and each one released but
  // not yet swept is unswept (no process of it lives; the next holder
  // sweeps it), as the pool's end does, but keeps holding them. For a process that ends with _exit once its runs
  // are over (the CLI after Supervisor::close()): the kernel drops the
  // locks, and the next holder of those uids, in any process, needs no reap
  // (uid_lock.hpp). An idle uid handed out again is marked dirty first.
  // Returns how many were marked clean.
  std::uint32_t mark_idle_clean() noexcept;

 private:
  std::shared_ptr<Lease::State> state_;
};

}  // namespace corral
