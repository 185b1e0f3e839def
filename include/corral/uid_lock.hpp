// uid_lock: host-wide ownership of a run's uid, and the kill that makes a
// uid safe to hand over.
//
//   parent:  auto file = UidLockFile::open();            // once per pool
//            if (*file->try_lock(uid)) ...               // one fcntl
//            signal_uid(uid, SIGKILL, stack);            // every process of uid
//
// Why a lock file: a uid pool in one process knows nothing of another
// process's pool, so two `corral run` started side by side both took
// 200000 and could read each other's /proc/<pid>/environ, signal and
// write into each other's workspace. Ownership is a write lock on byte
// <uid> of /run/corral/uids.lock, taken with F_OFD_SETLK (open file
// description locks, Linux 3.15): one fcntl per acquire and per release,
// no daemon, shared by every thread holding the description, and released
// by the kernel when the last fd of the description closes — a holder that
// dies (SIGKILL, OOM) leaves no stale lock. The byte is the uid itself, so
// pools with different ranges still exclude each other where they overlap
// (a lock past the end of a file is fine; the file stays empty).
//
// Why a kill: a lock says who holds the uid, not that nothing of its last
// holder still runs (a setsid escapee of a supervisor that was SIGKILLed
// with it). signal_uid() reaches every process of the uid at once: a
// helper that becomes the uid and calls kill(-1, sig), which signals every
// process the caller may signal (same real or saved uid) in its pid
// namespace and below, the caller excepted. A fork racing with it fails:
// the kernel sends under the tasklist lock and a fork with a fatal signal
// pending is undone. Root only (setresuid).
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "corral/fd.hpp"
#include "corral/process.hpp"
#include "corral/status.hpp"

namespace corral {

inline constexpr std::string_view kUidLockPath = "/run/corral/uids.lock";

class UidLockFile {
 public:
  // Opens (creating it, and its directory, 0755 / 0600) the lock file.
  // Errors name the path.
  static Expected<UidLockFile> open(const std::string& path = std::string(kUidLockPath));

  // Write lock on byte <uid> for this open file description: true when
  // taken (or already held by this description), false when another
  // description holds it.
  Expected<bool> try_lock(uid_t uid) noexcept;
  // Drops the lock on byte <uid>; no-op when not held.
  void unlock(uid_t uid) noexcept;
  // Whether some other open file description holds byte <uid> (F_OFD_GETLK).
  Expected<bool> held_elsewhere(uid_t uid) const noexcept;

  int fd() const noexcept { return fd_.get(); }
  const std::string& path() const noexcept { return path_; }

 private:
  UidLockFile() = default;
  UniqueFd fd_;
  std::string path_;
};

// Parent side (root): sends `sig` to every process whose real or saved uid
// is `uid`, through a CLONE_VM|CLONE_VFORK helper on `stack` that does
// setresuid(uid) and kill(-1, sig) with raw syscalls, then waits for it.
// Says nothing of how many were signalled: kill(-1) answers 0 whenever any
// other process exists, even one it may not signal (EPERM is not counted
// against it). The caller serialises use of `stack`. Costs one short-lived
// process (tens of us on an idle host, most of it clone and the reap).
Status signal_uid(uid_t uid, int sig, const ChildStack& stack);

}  // namespace corral
