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
// (a lock past the end of a file is fine; the file is sparse: only the
// bytes of uids ever held are written, see below).
//
// Why a byte that says "left clean": a fresh holder must reap a dead
// holder's leftovers, and that reap is a process of its own (a clone and a
// wait: most of a one-shot CLI's container run was that helper and the
// user namespace template its random uid needed). So the holder of a lock
// records in the locked byte itself whether the uid may hold processes:
// kUidDirty when it hands the uid to a run, kUidClean only when it lets go
// of the lock knowing nothing of the uid lives (every run of it was reaped
// by a SIGKILL to the uid, or seen to have left nothing) and no file of it
// is left in the host's shared writable directories (swept: uid_sweep.hpp). Only a holder
// writes the byte. A holder that dies leaves kUidDirty; a file that never
// held a byte there, or any other value, reads as dirty too: the next
// holder reaps, exactly as before. Clean means clean for the same reason
// a pool reuses an idle uid of its own without a kill: a process of a
// range uid is started only by a holder of its lock (root), and none of
// the last holder's outlived its reaping.
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

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "corral/fd.hpp"
#include "corral/process.hpp"
#include "corral/status.hpp"

namespace corral {

inline constexpr std::string_view kUidLockPath = "/run/corral/uids.lock";
// 's' (swept), not the 'c' corral wrote before its holders swept files
// (uid_sweep.hpp): a byte written by such a corral means no process of the
// uid lives, not that none of its files are left, and reads as dirty now.
inline constexpr char kUidClean = 's';
inline constexpr char kUidDirty = 'd';
// Reaped, not swept: no process of the uid lives (its holder killed them),
// but files of it may be left in the host's shared writable directories.
// A process that ends (the one-shot CLI) lets go of its runs' uids so
// instead of sweeping them itself: a sweep is a walk of /tmp and the rest
// (a statx per entry, ~1.5 ms on a host with ~450 entries there), and one
// walk serves up to kSweepBatch uids (uid_pool.cpp). A holder never hands
// such a uid to a run before it is swept; what reads it as anything but
// clean (an older corral: dirty) reaps and sweeps it first.
inline constexpr char kUidUnswept = 'u';

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
  // Holder only (under its lock). Whether the last holder of <uid> left it
  // marked clean; anything unreadable or unknown is not clean.
  bool left_clean(uid_t uid) const noexcept;
  // Holder only: records whether <uid> may hold processes (see above).
  // False when the byte could not be written (then the next holder reaps).
  bool mark(uid_t uid, bool clean) noexcept;
  // Holder only: the byte of <uid> (0 where none was ever written), and
  // writing one of kUidClean, kUidDirty, kUidUnswept.
  char byte(uid_t uid) const noexcept;
  bool write_byte(uid_t uid, char byte) noexcept;
  // Anyone, as a hint (a holder may change them at any time): the bytes of
  // uids [first, first + n) into `out`. How many the file has (fewer than
  // n where it ends: no byte was ever written past it), -1 when they could
  // not be read.
  long read_bytes(uid_t first, char* out, std::size_t n) const noexcept;

  int fd() const noexcept { return fd_.get(); }
  const std::string& path() const noexcept { return path_; }

 private:
  UidLockFile() = default;
  UniqueFd fd_;
  std::string path_;
};

// The helper's real and saved uid while it kills a run's uid. kill(2) lets
// a process signal another whose real or saved uid equals the sender's
// real or effective uid. A helper that took the run's uid for all three
// could itself be signalled by every process of the run: one looping
// kill(-1, SIGSTOP) stopped it, and its vfork parent (the supervisor, or
// the guardian) waited in the kernel for good, past the run's deadline,
// its uid never reaped. So the helper's effective uid is the run's and its
// real and saved uid one no process of the run can match.
//
// That uid is its own too: one band uid per pid (reaper_uid_of_pid), not
// one uid for every helper. Sharing one real uid, a helper's kill(-1)
// reached every other helper alive at that moment (the sender's real uid
// matched theirs), so two pools reaping at once killed each other's
// helpers, and a long sweep lost 20 helpers in a row and retired its uid.
// Pids are unique among live processes of a pid namespace, so no two
// helpers of one pid namespace share it; helpers of two pid namespaces
// may, and one killed so is tried again (kReaperHelperAttempts). No run is
// given a uid of the band (check_run_user refuses it, and no pool's range
// may hold one).
inline constexpr uid_t kReaperUidFirst = 0xFF800000u;  // 4286578688
inline constexpr uid_t kReaperUidCount = 1u << 22;     // PID_MAX_LIMIT: a pid fits
inline constexpr int kReaperHelperAttempts = 20;       // a helper killed so, made again

constexpr bool is_reaper_uid(std::uint64_t uid) noexcept {
  return uid >= kReaperUidFirst && uid < std::uint64_t{kReaperUidFirst} + kReaperUidCount;
}
constexpr uid_t reaper_uid_of_pid(long pid) noexcept {
  return kReaperUidFirst + (static_cast<uid_t>(pid) & (kReaperUidCount - 1));
}

// Child side, raw syscalls only: become the helper of `uid` as above
// (real and saved uid reaper_uid_of_pid of our own pid, effective `uid`).
// Only the uids change: kill(2) and the sweep's file calls check uids, and
// the groups do not matter. 0 or the errno of setresuid.
int become_reaper_of_uid_in_child(long uid) noexcept;

// Child side, raw syscalls only: become_reaper_of_uid_in_child, then send
// `sig` to every process of the uid. 0, or the errno of the step that
// failed in *setuid (the uid change) or the return (the kill).
int kill_uid_in_child(long uid, int sig, int* setuid_error) noexcept;

// Parent side (root): sends `sig` to every process whose real or saved uid
// is `uid`, through a CLONE_VM|CLONE_VFORK helper on `stack` that does
// kill_uid_in_child, then waits for it.
// Says nothing of how many were signalled: kill(-1) answers 0 whenever any
// other process exists, even one it may not signal (EPERM is not counted
// against it). The caller serialises use of `stack`. Costs one short-lived
// process (tens of us on an idle host, most of it clone and the reap).
Status signal_uid(uid_t uid, int sig, const ChildStack& stack);

}  // namespace corral
