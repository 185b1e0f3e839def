// uid_sweep: the files a pool uid left in the host's shared writable
// directories, found and removed before the uid is another run's.
//
//   parent (root):  auto arena = SweepArena::allocate();          // once per pool
//                   find_uids_with_files(uids, *arena, found);     // read only
//                   sweep_uid(uid, stack, *arena, &count);         // helper as the uid
//
// Why: every process of a pool uid dies at the end of its run, but what it
// made in /tmp, /var/tmp, /dev/shm or /run/lock (a 0600 file with a secret,
// a fifo, a socket, a symlink, a tree) outlived it, and the next run handed
// the same uid, another user's job, read it, appended to it or found it
// planted at a name it uses. A uid is handed to another run only once those
// are gone (UidPool, uid_pool.cpp).
//
// Where: kSweepRoots, the world-writable sticky directories every Linux
// host has (/run/lock: lock files such as LCK..ttyS0 are looked up there by
// name, a planted one poisons the next run; /dev/mqueue when mounted: the
// host's POSIX message queues, a file each). Below a root, entries of the
// uid at any depth (its own trees), and other users' directories the uid
// can search (o+x: /tmp/.X11-unix, a 1777 directory someone made, and a
// 0755 one with a 1777 one inside, /tmp/x/pub), entered kSweepForeignDepth
// levels deep. Not reached: a writable directory deeper than that below
// the roots, and world-writable places off the list (README "Tiers").
//
// How: the removal runs as the uid itself, in a CLONE_VM helper whose real
// and saved uid are its own, as signal_uid's are (uid_lock.hpp): it kills
// every process of the uid first, then walks with *at() calls only, never
// follows a symlink (O_NOFOLLOW, AT_SYMLINK_NOFOLLOW, fchmodat2 with
// AT_SYMLINK_NOFOLLOW for a 000 directory of its own), removes only entries
// whose owner is the uid (a symlink is removed, its target never looked at),
// and leaves every other user's entry as it is (then the uid's directory
// holding it stays too, counted in `left`). Iterative: one directory fd open
// per level entered of other users' (at most kSweepForeignDepth + 1), one
// for the uid's own trees, climbing back with ".." checked against the
// remembered (dev, inode); memory is a level record per depth in the arena
// (a 30,000-deep tree: 8 MB of a reserved, mostly untouched mapping).
//
// Cost: the uid's helper runs only for a uid that owns something there (or
// whose last holder died); the finding walk is one statx per entry of the
// roots and of the searchable directories below them (3 levels), once for
// a batch of uids (uid_pool.cpp), and with a SweepDirCache none for the
// files of a directory unchanged since the last walk.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "corral/process.hpp"
#include "corral/status.hpp"

namespace corral {

inline constexpr const char* kSweepRoots[] = {"/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/dev/mqueue"};
// Levels of other users' directories entered below a root: /tmp/.X11-unix
// is 1, a 1777 directory inside it 2.
inline constexpr int kSweepForeignDepth = 3;

// The walk's working memory, made in the parent (the helper cannot
// allocate): a getdents buffer and the level records, in one mapping
// reserved up front (MAP_NORESERVE: pages are touched only as deep as a
// walk goes). A tree deeper than kSweepMaxLevels is not entered past it
// (its remains are counted in `left`).
inline constexpr std::size_t kSweepMaxLevels = 1u << 20;
class SweepArena {
 public:
  static Expected<SweepArena> allocate();
  SweepArena() = default;
  SweepArena(SweepArena&& other) noexcept;
  SweepArena& operator=(SweepArena&& other) noexcept;
  SweepArena(const SweepArena&) = delete;
  SweepArena& operator=(const SweepArena&) = delete;
  ~SweepArena();
  void* base() const noexcept { return base_; }

 private:
  void* base_ = nullptr;
  std::size_t size_ = 0;
};

struct SweepCount {
  long entries = 0;   // entries looked at (statx)
  long skipped = 0;   // files of directories unchanged since a walk that cached them, not looked at
  long removed = 0;   // of the uid's, removed
  long left = 0;      // of the uid's, still there (or not reached)
  int first_error = 0;  // errno of the first failure, 0 if none
};

// What a finding walk remembers for the next one (parent side): the
// directories whose files (everything but subdirectories) no uid of a pool's
// range owned, each with the ctime it had. A directory whose ctime is the
// same at the next walk has the same entries, so the same owners: its files
// are not looked at again (its subdirectories are). Why ctime: creating,
// linking, renaming or removing an entry sets it, and so does every change
// of the directory's own times, so an owner that puts the mtime back
// (utimensat) still shows; only the clock's owner can forge it. A file's
// owner changes only by chown, which a pool uid cannot do to another uid.
// A ctime that is not at least kSweepCacheSettle old when the walk starts
// is not remembered: a change in the same clock tick would keep it.
// A /tmp of 20,000 files in 40 quiet directories: a walk of ~70 ms became
// one of ~1 ms (a statx per directory). Fixed size; when full, a newer
// directory takes an older one's place. Not thread-safe (the pool's lock).
inline constexpr long kSweepCacheSettleSeconds = 1;
class SweepDirCache {
 public:
  // For the uids [first, first + count).
  SweepDirCache(uid_t first, std::uint32_t count);
  bool in_range(uid_t uid) const noexcept { return uid - first_ < count_; }
  bool unchanged(std::uint64_t dev, std::uint64_t ino, std::int64_t ctime_sec, std::uint32_t ctime_nsec) const noexcept;
  void remember(std::uint64_t dev, std::uint64_t ino, std::int64_t ctime_sec, std::uint32_t ctime_nsec) noexcept;

 private:
  struct Slot {
    std::uint64_t dev = 0, ino = 0;
    std::int64_t ctime_sec = 0;
    std::uint32_t ctime_nsec = 0;
    bool used = false;
  };
  static constexpr std::size_t kSlots = 1u << 14;  // 512 KiB
  static constexpr std::size_t kProbes = 8;
  std::size_t home(std::uint64_t dev, std::uint64_t ino) const noexcept;
  uid_t first_;
  std::uint32_t count_;
  std::vector<Slot> slots_;
};

// Parent side (root), read only: which of `uids` (sorted ascending) own an
// entry where the sweep looks. found[i] says for uids[i]; `found` is sized
// by the caller. Never enters a directory of one of `uids`. With `cache`
// (its range holding `uids`), the files of directories unchanged since an
// earlier walk are not looked at again.
void find_uids_with_files(const std::vector<uid_t>& uids, SweepArena& arena, std::vector<char>& found,
                          SweepCount* count = nullptr, SweepDirCache* cache = nullptr) noexcept;

// Child side, raw syscalls only, as euid `uid` (the helper): removes what
// the uid owns where the sweep looks.
void sweep_uid_in_child(long uid, SweepArena& arena, SweepCount* count) noexcept;

// Parent side (root): a CLONE_VM|CLONE_VFORK helper on `stack` becomes
// the uid's kill helper (uid_lock.hpp), kills every process of the uid
// (kill(-1, SIGKILL); not when kill_first is false: the caller knows none
// lives), then sweep_uid_in_child. A helper killed (by another pid
// namespace's that shares its real uid) is made again
// while its tries make progress. An error when it could not do it;
// `count` says what it looked at, removed and left.
Status sweep_uid(uid_t uid, const ChildStack& stack, SweepArena& arena, SweepCount* count = nullptr,
                 bool kill_first = true);

}  // namespace corral
