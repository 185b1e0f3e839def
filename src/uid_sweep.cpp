// uid_sweep (uid_sweep.hpp). The walk is raw syscalls on the arena only:
// the helper (a CLONE_VM child as the uid) runs it to remove, the parent
// (root) runs the same walk to find, read only.
#include "corral/uid_sweep.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <utility>

#include "corral/syscalls.hpp"
#include "corral/uid_lock.hpp"

#ifndef SYS_fchmodat2
#define SYS_fchmodat2 452  // Linux 6.6, the same number on x86_64 and aarch64
#endif

namespace corral {
namespace {

struct Dirent64 {  // getdents64(2)
  std::uint64_t d_ino;
  std::int64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[];
};

constexpr std::size_t kDentsBytes = 32 * 1024;

// One directory the walk is in: its identity (to know it again when
// climbing back with ".."), where its listing goes on after the entry being
// entered, and that entry's name (an own directory is removed by it once
// emptied). No path: a path per level is O(depth^2) in a tree the run made
// as deep as it liked.
struct Level {
  std::uint64_t dev;
  std::uint64_t ino;
  std::int64_t resume;     // d_off of the entry entered (the listing's next position)
  std::uint8_t foreign;    // other users' directories entered to get here
  bool own;                // the uid's: removed when emptied
  std::uint8_t passes;     // listings of it done (a pass that removed something is repeated)
  bool removed_this_pass;
  // Finding walk with a SweepDirCache: the directory's ctime when entered,
  // whether its files are skipped (unchanged since a walk cached it),
  // whether it may be cached at the end of its listing (settled, listed
  // whole, no file of the pool's range in it).
  bool skip_files;
  bool cacheable;
  std::int64_t ctime_sec;
  std::uint32_t ctime_nsec;
  char child[256];         // the entry entered (NAME_MAX + 1)
};

constexpr std::size_t kArenaBytes = kDentsBytes + kSweepMaxLevels * sizeof(Level);

// A listing that removed entries is listed once more (POSIX leaves open
// whether readdir sees every entry while the directory changes), at most
// this many times in all.
constexpr std::uint8_t kMaxPasses = 3;

bool is_dot(const char* n) noexcept { return n[0] == '.' && (n[1] == 0 || (n[1] == '.' && n[2] == 0)); }

long open_dir_at(int dirfd, const char* name, bool follow) noexcept {
  const long flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW);
  return sys::call(SYS_openat, dirfd, reinterpret_cast<long>(name), flags, 0);
}

bool stat_at(int dirfd, const char* name, int flags, struct statx* st) noexcept {
  return sys::call(SYS_statx, dirfd, reinterpret_cast<long>(name),
                   flags | AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT | AT_STATX_DONT_SYNC,
                   STATX_TYPE | STATX_MODE | STATX_UID | STATX_INO | STATX_CTIME, reinterpret_cast<long>(st)) == 0;
}

// Another user's directory the walked uid may have reached: searchable by
// others. Writable by others or not: a world-writable directory below one
// that is not (/tmp/x/pub, x 0755) is reached through it, and the uid's
// files there are found and removed the way the uid made them.
bool foreign_searchable(const struct statx& st) noexcept {
  return S_ISDIR(st.stx_mode) && (st.stx_mode & S_IXOTH);
}

// What the walk does with the entries of the uids it looks for.
struct Target {
  bool remove;                // remove (the helper, as `uids[0]`) or find (read only)
  const uid_t* uids;          // sorted
  std::size_t n;
  char* found;                // find: per uid
  SweepCount* count;
  SweepDirCache* cache;       // find: may be null
  std::int64_t settled_before;  // find: a ctime before this (realtime seconds) may be cached
  int which(uid_t uid) const noexcept {
    const uid_t* end = uids + n;
    const uid_t* it = std::lower_bound(uids, end, uid);
    return it != end && *it == uid ? static_cast<int>(it - uids) : -1;
  }
  void fail(int err) const noexcept {
    if (count && !count->first_error) count->first_error = err;
  }
  void left() const noexcept {
    if (count) ++count->left;
  }
  // A directory just entered: its identity, and what the cache says of it.
  void enter(Level& level, const struct statx& st) const noexcept {
    level.dev = (std::uint64_t{st.stx_dev_major} << 32) | st.stx_dev_minor;
    level.ino = st.stx_ino;
    level.ctime_sec = st.stx_ctime.tv_sec;
    level.ctime_nsec = st.stx_ctime.tv_nsec;
    if (remove || !cache) return;
    level.skip_files = cache->unchanged(level.dev, level.ino, level.ctime_sec, level.ctime_nsec);
    level.cacheable = !level.skip_files && level.ctime_sec < settled_before;
  }
};

// How often one root's walk starts over after a directory it was in was
// removed (a busy /tmp: another user's temporary tree deleted under us).
constexpr int kMaxRootRestarts = 32;

enum class RootWalk { done, restart };

// One root: iterative, one directory fd open at a time. A directory we are
// in that is removed meanwhile (getdents or ".." say ENOENT: it is dead,
// and its entries went with it) leaves no way back to our place in its
// parent: the root is walked again from the top (restart), not failed.
// One moved elsewhere is a failure: its entries still exist.
RootWalk walk_root(const char* root, const Target& t, char* dents, Level* levels) noexcept {
  long opened = open_dir_at(AT_FDCWD, root, /*follow=*/true);  // the host's own path (/var/tmp may be a link)
  if (opened < 0) {
    if (opened != -ENOENT) t.fail(sys::error_of(opened));
    return RootWalk::done;
  }
  int fd = static_cast<int>(opened);
  struct statx st;
  if (!stat_at(fd, "", AT_EMPTY_PATH, &st)) {
    sys::call(SYS_close, fd);
    return RootWalk::done;
  }
  std::size_t d = 0;
  levels[0] = Level{};
  t.enter(levels[0], st);
  long len = 0, pos = 0;
  for (;;) {
    Level& cur = levels[d];
    if (pos >= len) {
      len = sys::call(SYS_getdents64, fd, reinterpret_cast<long>(dents), static_cast<long>(kDentsBytes));
      pos = 0;
      if (len == -ENOENT && d > 0) {
        sys::call(SYS_close, fd);
        return RootWalk::restart;
      }
      if (len < 0) {
        t.fail(sys::error_of(len));
        cur.cacheable = false;  // not listed whole
        len = 0;
      }
      if (len > 0) continue;
      // The end of this listing.
      if (cur.cacheable) t.cache->remember(cur.dev, cur.ino, cur.ctime_sec, cur.ctime_nsec);
      if (t.remove && cur.removed_this_pass && ++cur.passes < kMaxPasses) {
        cur.removed_this_pass = false;
        sys::call(SYS_lseek, fd, 0, SEEK_SET);
        continue;
      }
      if (d == 0) break;
      // Climb back: ".." must be the directory we came from.
      long up = open_dir_at(fd, "..", false);
      if (up == -ENOENT) {
        sys::call(SYS_close, fd);
        return RootWalk::restart;
      }
      struct statx pst;
      const Level& parent = levels[d - 1];
      bool same = up >= 0 && stat_at(static_cast<int>(up), "", AT_EMPTY_PATH, &pst) &&
                  ((std::uint64_t{pst.stx_dev_major} << 32) | pst.stx_dev_minor) == parent.dev &&
                  pst.stx_ino == parent.ino;
      sys::call(SYS_close, fd);
      if (!same) {
        if (up >= 0) sys::call(SYS_close, up);
        t.fail(EIO);  // moved while we walked: this root is left for the next sweep
        t.left();
        return RootWalk::done;
      }
      fd = static_cast<int>(up);
      const bool was_own = cur.own;
      --d;
      Level& back = levels[d];
      if (t.remove && was_own) {
        long r = sys::call(SYS_unlinkat, fd, reinterpret_cast<long>(back.child), AT_REMOVEDIR);
        if (r == 0) {
          if (t.count) ++t.count->removed;
          back.removed_this_pass = true;
        } else {
          t.fail(sys::error_of(r));
          t.left();
        }
      }
      sys::call(SYS_lseek, fd, back.resume, SEEK_SET);
      len = pos = 0;
      continue;
    }
    const auto* e = reinterpret_cast<const Dirent64*>(dents + pos);
    pos += e->d_reclen;
    if (is_dot(e->d_name)) continue;
    if (cur.skip_files && e->d_type != DT_DIR && e->d_type != DT_UNKNOWN) {
      if (t.count) ++t.count->skipped;
      continue;
    }
    if (!stat_at(fd, e->d_name, 0, &st)) {  // gone meanwhile
      cur.cacheable = false;
      continue;
    }
    if (t.count) ++t.count->entries;
    const int mine = t.which(st.stx_uid);
    bool enter_own = false;
    if (!t.remove) {
      if (cur.cacheable && !S_ISDIR(st.stx_mode) && t.cache->in_range(st.stx_uid)) cur.cacheable = false;
      if (mine >= 0) {
        t.found[mine] = 1;
        if (t.count) ++t.count->left;
        continue;  // never entered: it is the uid's helper's to remove
      }
    } else if (mine >= 0) {
      if (!S_ISDIR(st.stx_mode)) {
        // A symlink is removed, not followed; a file, fifo or socket too.
        long r = sys::call(SYS_unlinkat, fd, reinterpret_cast<long>(e->d_name), 0);
        if (r == 0) {
          if (t.count) ++t.count->removed;
          cur.removed_this_pass = true;
        } else if (r != -ENOENT) {
          t.fail(sys::error_of(r));
          t.left();
        }
        continue;
      }
      if (cur.passes > 0) {
        // A repeated listing enters nothing (else a tree that cannot be
        // emptied would be walked again at every level above it): an own
        // directory emptied meanwhile goes, one still full stays counted.
        long r = sys::call(SYS_unlinkat, fd, reinterpret_cast<long>(e->d_name), AT_REMOVEDIR);
        if (r == 0) {
          if (t.count) ++t.count->removed;
        } else if (r != -ENOENT) {
          t.left();
        }
        continue;
      }
      enter_own = true;
    }
    if (cur.passes > 0) continue;
    if (!enter_own && !(foreign_searchable(st) && cur.foreign < kSweepForeignDepth)) continue;
    if (d + 1 >= kSweepMaxLevels) {
      if (enter_own) t.left();
      continue;
    }
    long child = open_dir_at(fd, e->d_name, false);
    if (child == -EACCES && enter_own) {
      // A 000 (or 0500) directory of the uid's: its owner may chmod it.
      // fchmodat2 never follows a symlink with AT_SYMLINK_NOFOLLOW.
      sys::call(SYS_fchmodat2, fd, reinterpret_cast<long>(e->d_name), 0700, AT_SYMLINK_NOFOLLOW);
      child = open_dir_at(fd, e->d_name, false);
    }
    if (child < 0) {
      if (enter_own && child != -ENOENT) {
        t.fail(sys::error_of(child));
        t.left();
      }
      continue;
    }
    // The very inode we looked at, owned as we saw (nothing swapped in).
    struct statx cst;
    if (!stat_at(static_cast<int>(child), "", AT_EMPTY_PATH, &cst) || cst.stx_ino != st.stx_ino ||
        cst.stx_uid != st.stx_uid || !S_ISDIR(cst.stx_mode)) {
      sys::call(SYS_close, child);
      continue;
    }
    if (enter_own && (cst.stx_mode & 0700) != 0700) sys::call(SYS_fchmod, child, 0700);
    std::size_t nlen = std::strlen(e->d_name);
    std::memcpy(cur.child, e->d_name, nlen + 1);
    cur.resume = e->d_off;
    sys::call(SYS_close, fd);
    fd = static_cast<int>(child);
    const std::uint8_t foreign = static_cast<std::uint8_t>(cur.foreign + (enter_own ? 0 : 1));
    ++d;
    levels[d] = Level{};
    t.enter(levels[d], cst);
    levels[d].foreign = foreign;
    levels[d].own = enter_own;
    len = pos = 0;
  }
  sys::call(SYS_close, fd);
  return RootWalk::done;
}

void walk(const Target& t, SweepArena& arena) noexcept {
  char* dents = static_cast<char*>(arena.base());
  auto* levels = reinterpret_cast<Level*>(dents + kDentsBytes);
  for (const char* root : kSweepRoots) {
    int restarts = 0;
    while (walk_root(root, t, dents, levels) == RootWalk::restart)
      if (++restarts == kMaxRootRestarts) {
        t.fail(EAGAIN);  // the root kept changing under us: left for the next sweep
        t.left();
        break;
      }
  }
}

struct SweepArgs {
  long uid;
  bool kill_first;
  SweepArena* arena;
  SweepCount* count;
  int setuid_error;
};

// The helper, between clone and its exit: raw syscalls only (it borrows the
// parent's memory), every signal blocked (clone_child).
int sweep_as_uid_in_child(void* p) noexcept {
  auto* a = static_cast<SweepArgs*>(p);
  if (a->kill_first) {
    (void)kill_uid_in_child(a->uid, SIGKILL, &a->setuid_error);
  } else {
    a->setuid_error = become_reaper_of_uid_in_child(a->uid);
  }
  if (a->setuid_error) return 1;
  sweep_uid_in_child(a->uid, *a->arena, a->count);
  return 0;
}

}  // namespace

Expected<SweepArena> SweepArena::allocate() {
  void* map = ::mmap(nullptr, kArenaBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (map == MAP_FAILED) return Error::from_errno(errno, "uid sweep: map its working memory");
  SweepArena a;
  a.base_ = map;
  a.size_ = kArenaBytes;
  return a;
}

SweepArena::SweepArena(SweepArena&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)), size_(std::exchange(other.size_, 0)) {}

SweepArena& SweepArena::operator=(SweepArena&& other) noexcept {
  if (this != &other) {
    if (base_) ::munmap(base_, size_);
    base_ = std::exchange(other.base_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

SweepArena::~SweepArena() {
  if (base_) ::munmap(base_, size_);
}

SweepDirCache::SweepDirCache(uid_t first, std::uint32_t count) : first_(first), count_(count), slots_(kSlots) {}

std::size_t SweepDirCache::home(std::uint64_t dev, std::uint64_t ino) const noexcept {
  return static_cast<std::size_t>((ino * 0x9E3779B97F4A7C15ull) ^ (dev * 0xC2B2AE3D27D4EB4Full)) & (kSlots - 1);
}

bool SweepDirCache::unchanged(std::uint64_t dev, std::uint64_t ino, std::int64_t ctime_sec,
                              std::uint32_t ctime_nsec) const noexcept {
  const std::size_t h = home(dev, ino);
  for (std::size_t i = 0; i < kProbes; ++i) {
    const Slot& slot = slots_[(h + i) & (kSlots - 1)];
    if (!slot.used) return false;
    if (slot.dev == dev && slot.ino == ino) return slot.ctime_sec == ctime_sec && slot.ctime_nsec == ctime_nsec;
  }
  return false;
}

void SweepDirCache::remember(std::uint64_t dev, std::uint64_t ino, std::int64_t ctime_sec,
                             std::uint32_t ctime_nsec) noexcept {
  const std::size_t h = home(dev, ino);
  Slot* target = &slots_[h];  // all probed slots taken by others: the home one is replaced
  for (std::size_t i = 0; i < kProbes; ++i) {
    Slot& slot = slots_[(h + i) & (kSlots - 1)];
    if (!slot.used || (slot.dev == dev && slot.ino == ino)) {
      target = &slot;
      break;
    }
  }
  *target = Slot{dev, ino, ctime_sec, ctime_nsec, true};
}

void find_uids_with_files(const std::vector<uid_t>& uids, SweepArena& arena, std::vector<char>& found,
                          SweepCount* count, SweepDirCache* cache) noexcept {
  found.assign(uids.size(), 0);  // capacity: the caller's (no allocation when it reserved)
  if (uids.empty()) return;
  std::int64_t settled_before = 0;
  if (cache) {
    struct timespec now {};
    ::clock_gettime(CLOCK_REALTIME, &now);
    settled_before = now.tv_sec - kSweepCacheSettleSeconds;
  }
  walk(Target{false, uids.data(), uids.size(), found.data(), count, cache, settled_before}, arena);
}

void sweep_uid_in_child(long uid, SweepArena& arena, SweepCount* count) noexcept {
  const uid_t u = static_cast<uid_t>(uid);
  walk(Target{true, &u, 1, nullptr, count, nullptr, 0}, arena);
}

Status sweep_uid(uid_t uid, const ChildStack& stack, SweepArena& arena, SweepCount* count, bool kill_first) {
  const std::string who = "sweep the files of uid " + std::to_string(uid);
  if (uid == 0 || uid == static_cast<uid_t>(-1) || is_reaper_uid(uid))
    return Error::invalid(who + ": refused (uid 0, -1 or one of the kill helpers' own)");
  CloneSpec spec;
  spec.share_memory = true;
  spec.stack = &stack;
  // A helper of another pid namespace may share ours' real uid and kill it
  // (uid_lock.hpp), and a sweep of a large tree lasts long enough for
  // several: it is made again while each try removes something (what it
  // removed stays removed), and gives up after kReaperHelperAttempts tries
  // in a row that removed nothing.
  SweepCount total;
  for (int fruitless = 0;;) {
    SweepCount local;
    SweepArgs args{static_cast<long>(uid), kill_first, &arena, &local, 0};
    auto helper = clone_child(spec, sweep_as_uid_in_child, &args);
    if (!helper) return std::move(helper).error().context(who);
    auto status = wait_exit(*helper, true);
    if (!status) return std::move(status).error().context(who);
    total.entries += local.entries;
    total.removed += local.removed;
    if (!total.first_error) total.first_error = local.first_error;
    if (*status && !(*status)->exited) {
      fruitless = local.removed > 0 ? 0 : fruitless + 1;
      if (fruitless < kReaperHelperAttempts) continue;
      return Error(EINTR, who + ": the helper was killed " + std::to_string(fruitless) +
                              " times in a row before it removed anything");
    }
    if (args.setuid_error) return Error::from_errno(args.setuid_error, who + ": setresuid in the helper");
    total.left = local.left;
    if (count) *count = total;
    return {};
  }
}

}  // namespace corral
