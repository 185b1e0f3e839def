// UidPool (privilege.hpp): one uid per run in flight, locally or host-wide.
// Parent side only.
#include <signal.h>
#include <sys/mman.h>

#include <algorithm>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "corral/privilege.hpp"
#include "corral/uid_lock.hpp"
#include "corral/uid_sweep.hpp"

namespace corral {

namespace {
constexpr std::uint64_t kNoId = static_cast<uid_t>(-1);

// Host-wide marks, one per offset of the range.
enum Mark : std::uint8_t {
  kNotOurs = 0,  // not locked by this pool
  kLeased = 1,   // locked, handed out
  kIdle = 2,     // locked, clean, on the free list
  kLost = 3,     // locked, could not be made clean: kept, never handed out
  kIdleMarked = 4,  // kIdle, and its byte already says clean (mark_idle_clean)
  kUnswept = 5,  // locked, no process of it lives, its files not swept yet: never handed out
  kUnsweptMarked = 6,  // kUnswept, and its byte already says so (kUidUnswept): a holder before us let
                       // go of it unswept, or mark_idle_clean wrote it
};

// Uids released by runs that may have left files in the host's shared
// directories (Lease::leaves_host_files) wait this many to a sweep: one
// finding walk (a statx per entry of /tmp and the rest, uid_sweep.hpp)
// serves them all, and only a uid it finds something of costs a helper.
// Meanwhile the next runs take other uids of the range. A process that
// ends with some unswept lets go of them unswept (kUidUnswept), and a later
// acquire, in any process, that finds a batch of such bytes sweeps them
// together (take_clean_by_hint): a one-shot `corral run` walks /tmp and the
// rest once in kSweepBatch runs, not at every end.
constexpr std::size_t kSweepBatch = 32;
// Bytes of the lock file read at a time when looking for a uid its last
// holder left clean.
constexpr std::size_t kHintChunk = 4096;
}  // namespace

struct UidPool::Lease::State {
  std::mutex mu;
  uid_t first = 0;
  std::uint32_t count = 0;
  bool range_ok = false;
  std::uint32_t next_unused = 0;     // local: offsets below this were handed out at least once
  std::vector<std::uint32_t> free;   // returned offsets; capacity kept >= what can be returned
  std::uint32_t in_use = 0;
  bool pinned = false;
  uid_t pin_uid = 0;
  gid_t pin_gid = 0;

  // Host-wide mode.
  bool host_wide = false;
  std::string lock_path;
  std::optional<UidLockFile> lock;
  // Per offset: a Mark. Anonymous memory, not a vector: its zero pages are
  // kNotOurs already, and a page is touched only once a scan reaches its
  // offsets (filling a vector wrote all 64 KiB of the default 65,536-uid
  // range: 13 page faults of every one-run `corral run --tier process`).
  // marks_end: one past the highest offset ever marked.
  std::uint8_t* marks = nullptr;
  std::uint32_t marks_end = 0;
  std::uint32_t cursor = 0;         // where the next scan for a free uid starts
  // The kill helper's stack; kill_mu serialises its use (taken after mu
  // when both are held).
  std::mutex kill_mu;
  std::optional<ChildStack> kill_stack;
  // Host-wide: released uids whose files are not swept yet (kUnswept), and
  // the sweep's working memory (made at the first sweep).
  std::vector<std::uint32_t> unswept;
  std::optional<SweepArena> sweep_arena;
  std::vector<uid_t> sweep_uids;
  std::vector<char> sweep_found;

  std::string range() const {
    return std::to_string(first) + ".." + std::to_string(std::uint64_t{first} + count - 1);
  }

  Status open_lock() {  // under mu
    if (lock) return {};
    auto file = UidLockFile::open(lock_path);
    if (!file) return std::move(file).error().context("uid pool " + range());
    lock.emplace(std::move(*file));
    return {};
  }

  // The pool goes (its last lease too): every uid it still holds is let
  // go, an idle one marked clean first (uid_lock.hpp) so the next holder,
  // in this process or another, need not reap it, an unswept one marked
  // unswept (the next holder sweeps it, with others: kSweepBatch). A lost
  // one stays as it is (dirty or unswept: the next holder tries again).
  ~State() {
    if (lock)
      for (std::uint32_t off = 0; off < marks_end; ++off) {
        if (marks[off] == kNotOurs) continue;
        // kIdleMarked, kUnsweptMarked: written already.
        if (marks[off] == kIdle) (void)lock->mark(first + off, true);
        else if (marks[off] == kUnswept) (void)lock->write_byte(first + off, kUidUnswept);
        lock->unlock(first + off);
      }
    if (marks) ::munmap(marks, count);
  }

  Status kill_uid(uid_t uid, int sig) {
    std::lock_guard k(kill_mu);
    if (!kill_stack) {
      // Raw syscalls and a small frame: 64 KiB is plenty.
      auto stack = ChildStack::allocate(64 * 1024);
      if (!stack) return std::move(stack).error().context("uid pool");
      kill_stack.emplace(std::move(*stack));
    }
    return signal_uid(uid, sig, *kill_stack);
  }

  Status ensure_sweep_memory() {  // under kill_mu
    if (!kill_stack) {
      auto stack = ChildStack::allocate(64 * 1024);
      if (!stack) return std::move(stack).error().context("uid pool");
      kill_stack.emplace(std::move(*stack));
    }
    if (!sweep_arena) {
      auto arena = SweepArena::allocate();
      if (!arena) return std::move(arena).error().context("uid pool");
      sweep_arena.emplace(std::move(*arena));
    }
    return {};
  }

  // Kills every process of `uid` and removes its files (uid_sweep.hpp),
  // then looks again from outside: true when nothing of it is left.
  // kill: whether processes of it may live (a dead holder's uid); a
  // released one's were killed already.
  Expected<bool> kill_and_sweep(uid_t uid, bool kill = true) {
    std::lock_guard k(kill_mu);
    if (auto st = ensure_sweep_memory(); !st) return std::move(st).error();
    if (auto st = sweep_uid(uid, *kill_stack, *sweep_arena, nullptr, kill); !st) return std::move(st).error();
    std::vector<uid_t> one{uid};
    std::vector<char> found;
    find_uids_with_files(one, *sweep_arena, found);
    return !found[0];
  }

  // Under mu, host-wide. An idle uid (still locked by us, and clean), else
  // one of the range freshly locked and made clean; nullopt when neither.
  Expected<std::optional<std::uint32_t>> take_host_wide() {
    if (!free.empty()) return take_idle();
    auto hinted = take_clean_by_hint();
    if (!hinted || *hinted) return hinted;
    for (std::uint32_t i = 0; i < count; ++i) {
      const std::uint32_t off = (cursor + i) % count;
      if (marks[off] != kNotOurs) continue;
      const uid_t uid = first + off;
      auto got = lock->try_lock(uid);
      if (!got) return std::move(got).error();
      if (!*got) continue;  // another run on the host holds it
      // Ours now. Unless its last holder let go of it marked clean, that
      // holder may have died leaving processes of it behind, and files of
      // it in the host's shared directories: one helper kills the ones and
      // sweeps the others (uid_sweep.hpp). Reap::by_first_process cannot
      // spare it: the files must be gone before a run has the uid. Then
      // dirty until we let go of it clean (uid_lock.hpp), so a crash of
      // ours makes the next holder reap and sweep.
      if (!lock->left_clean(uid)) {
        auto swept = kill_and_sweep(uid);
        if (!swept) {
          lock->unlock(uid);
          return std::move(swept).error().context("uid pool " + range() + ": reap uid " + std::to_string(uid) +
                                                   " before handing it out");
        }
        if (!*swept) {
          // Something of it stays (another user's entry in its directory,
          // a directory it may not list): kept locked, never handed out.
          marks[off] = kLost;
          marks_end = std::max(marks_end, off + 1);
          continue;
        }
      }
      if (!lock->mark(uid, false)) {
        int err = errno;
        lock->unlock(uid);
        return Error::from_errno(err, "uid pool " + range() + ": mark uid " + std::to_string(uid) + " in use in " +
                                          lock_path);
      }
      cursor = (off + 1) % count;
      return std::optional<std::uint32_t>(off);
    }
    return std::optional<std::uint32_t>();
  }

  // Under mu. Every unswept uid is swept: one finding walk for all, a
  // helper for each it finds something of. Swept ones go idle (the free
  // list); one whose files could not all go is kept, never handed out
  // (kLost), and its byte stays dirty for the next holder to try again.
  // Called with the batch full, when a run needs a uid and the range has
  // no other, and before the pool lets go of its uids.
  Status sweep_unswept() noexcept {
    if (unswept.empty()) return {};
    Status result;
    {
      std::lock_guard k(kill_mu);
      if (auto st = ensure_sweep_memory(); !st) return st;
      sweep_uids.clear();
      for (std::uint32_t off : unswept) sweep_uids.push_back(first + off);  // capacity reserved in acquire
      std::sort(sweep_uids.begin(), sweep_uids.end());
      find_uids_with_files(sweep_uids, *sweep_arena, sweep_found);
    }
    for (std::size_t i = 0; i < sweep_uids.size(); ++i) {
      const std::uint32_t off = sweep_uids[i] - first;
      bool clean = !sweep_found[i];
      if (!clean) {
        try {
          auto swept = kill_and_sweep(sweep_uids[i], /*kill=*/false);
          if (swept) clean = *swept;
          else if (result.ok()) result = std::move(swept).error();
        } catch (...) {
          clean = false;  // a message that could not be built
        }
      }
      if (clean && marks[off] == kUnsweptMarked) {
        // Its byte says unswept: clean now, and said so at once (a byte
        // left saying unswept would cost the next holder a walk). Handed
        // out, it is marked dirty first, as every kIdleMarked uid is.
        (void)lock->mark(sweep_uids[i], true);
        marks[off] = kIdleMarked;
      } else {
        marks[off] = clean ? kIdle : kLost;
      }
      if (clean) free.push_back(off);  // capacity reserved in acquire
    }
    unswept.clear();
    return result;
  }

  // Under mu, host-wide, the free list empty. A uid of the range that its
  // last holder let go of clean, found by reading the lock file's bytes
  // (kHintChunk at a time) instead of locking each uid to read its own:
  // one pread for thousands of uids, then one fcntl and one pread for the
  // one taken. The bytes are hints (a holder may change its byte at any
  // time): a uid is taken only if its byte still says clean once we hold
  // its lock.
  // Uids the bytes say were let go unswept are counted on the way: once a
  // batch of them is seen, or no clean uid is left, a batch is made clean
  // (make_batch_clean) and one of it taken. nullopt when none could be:
  // the caller then reaps uids one at a time.
  Expected<std::optional<std::uint32_t>> take_clean_by_hint() {
    char bytes[kHintChunk];
    std::uint32_t unswept_seen[kSweepBatch], others_seen[kSweepBatch];
    const std::size_t room = std::min<std::size_t>(count, kSweepBatch) - unswept.size();
    std::size_t n_unswept = 0, n_others = 0;
    // From the cursor to the end of the range, then from its start.
    const std::uint32_t segments[2][2] = {{cursor, count}, {0, cursor}};
    for (const auto& seg : segments) {
      for (std::uint32_t at = seg[0]; at < seg[1] && n_unswept < room;) {
        const std::size_t want = std::min<std::size_t>(kHintChunk, seg[1] - at);
        const long n = lock->read_bytes(first + at, bytes, want);
        if (n < 0) return std::optional<std::uint32_t>();  // the reaping loop goes on without hints
        for (long i = 0; i < static_cast<long>(want) && n_unswept < room; ++i) {
          const std::uint32_t off = at + static_cast<std::uint32_t>(i);
          if (marks[off] != kNotOurs) continue;
          const char b = i < n ? bytes[i] : 0;  // 0: never written
          if (b == kUidUnswept) {
            unswept_seen[n_unswept++] = off;
            continue;
          }
          if (b != kUidClean) {
            if (n_others < room) others_seen[n_others++] = off;
            continue;
          }
          auto got = lock->try_lock(first + off);
          if (!got) return std::move(got).error();
          if (!*got) continue;  // another run on the host holds it
          if (lock->byte(first + off) == kUidClean) {
            if (!lock->mark(first + off, false)) {
              int err = errno;
              lock->unlock(first + off);
              return Error::from_errno(err, "uid pool " + range() + ": mark uid " + std::to_string(first + off) +
                                                " in use in " + lock_path);
            }
            cursor = (off + 1) % count;
            return std::optional<std::uint32_t>(off);
          }
          lock->unlock(first + off);  // changed under us: the reaping loop deals with it
        }
        if (n < static_cast<long>(want) && n_others >= room) break;  // the file ends: the rest is never used
        at += static_cast<std::uint32_t>(want);
      }
    }
    // Uids never used or left dirty join the batch only when no clean one
    // is left, and only a few of a small range: the batch's uids are held
    // while it is made clean, and a small range is shared by few.
    const std::size_t others = std::min<std::size_t>({n_others, count / 16, room - n_unswept});
    return make_batch_clean(unswept_seen, n_unswept, others_seen, others);
  }

  // Under mu. Locks the uids of `unswept_seen` whose byte still says
  // unswept and those of `others_seen` (never used, or a dead holder's:
  // every process of each killed first, one helper each), sweeps them with
  // one walk (sweep_unswept), keeps one and lets the others go, clean, for
  // any run on the host. The one kept, or nullopt if none came clean.
  Expected<std::optional<std::uint32_t>> make_batch_clean(const std::uint32_t* unswept_seen, std::size_t n_unswept,
                                                          const std::uint32_t* others_seen, std::size_t n_others) {
    std::uint32_t batch[kSweepBatch];
    std::size_t n = 0;
    auto take_lock = [&](std::uint32_t off) -> Expected<bool> {
      auto got = lock->try_lock(first + off);
      if (!got || !*got) return got;
      marks_end = std::max(marks_end, off + 1);
      batch[n++] = off;
      unswept.push_back(off);  // capacity reserved in acquire: a batch at most waits
      return true;
    };
    for (std::size_t i = 0; i < n_unswept; ++i) {
      const std::uint32_t off = unswept_seen[i];
      auto got = take_lock(off);
      if (!got) return std::move(got).error();
      if (!*got) continue;
      if (lock->byte(first + off) == kUidUnswept) {
        marks[off] = kUnsweptMarked;
      } else {  // changed under us
        --n;
        unswept.pop_back();
        lock->unlock(first + off);
      }
    }
    for (std::size_t i = 0; i < n_others; ++i) {
      const std::uint32_t off = others_seen[i];
      auto got = take_lock(off);
      if (!got) return std::move(got).error();
      if (!*got) continue;
      // Its byte says neither clean nor unswept: something of it may live.
      // Dirty until we let go of it clean, so a crash of ours makes the
      // next holder reap it again.
      bool killed = lock->mark(first + off, false);
      if (killed) {
        try {
          killed = kill_uid(first + off, SIGKILL).ok();
        } catch (...) {
          killed = false;  // a message that could not be built: the kill did not happen
        }
      }
      if (killed) {
        marks[off] = kUnswept;
      } else {
        --n;
        unswept.pop_back();
        lock->unlock(first + off);
      }
    }
    if (n == 0) return std::optional<std::uint32_t>();
    if (auto st = sweep_unswept(); !st) return std::move(st).error();
    std::optional<std::uint32_t> kept;
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint32_t off = batch[i];
      if (marks[off] != kIdle && marks[off] != kIdleMarked) continue;  // kLost: kept locked, never handed out
      if (auto it = std::find(free.begin(), free.end(), off); it != free.end()) free.erase(it);
      if (!kept) {
        kept = off;
        continue;
      }
      // Not ours to keep: said clean and let go, for the next run on the host.
      if (marks[off] == kIdle) (void)lock->mark(first + off, true);
      lock->unlock(first + off);
      marks[off] = kNotOurs;
    }
    if (!kept) return kept;
    if (!lock->mark(first + *kept, false)) {
      int err = errno;
      marks[*kept] = kNotOurs;
      lock->unlock(first + *kept);
      return Error::from_errno(err, "uid pool " + range() + ": mark uid " + std::to_string(first + *kept) +
                                        " in use in " + lock_path);
    }
    cursor = (*kept + 1) % count;
    return kept;
  }

  // Under mu: the last idle uid of the free list, marked dirty again if its
  // byte said otherwise.
  Expected<std::optional<std::uint32_t>> take_idle() {
    const std::uint32_t off = free.back();
    // A byte that says clean goes back to dirty before the uid is a run's
    // again, or our death would leave its processes and files to a
    // holder that trusts the byte.
    if (marks[off] == kIdleMarked && !lock->mark(first + off, false))
      return Error::from_errno(errno, "uid pool " + range() + ": mark uid " + std::to_string(first + off) +
                                          " in use in " + lock_path);
    free.pop_back();
    return std::optional<std::uint32_t>(off);
  }
};

UidPool::UidPool() : UidPool(kDefaultFirst, kDefaultCount) {}

UidPool::UidPool(uid_t first, std::uint32_t count) : state_(std::make_shared<Lease::State>()) {
  state_->first = first;
  state_->count = count;
  // Never the reaper's uid (uid_lock.hpp): no process may have it.
  state_->range_ok = count > 0 && first > 0 && std::uint64_t{first} + count - 1 < kNoId &&
                     (kReaperUid < first || kReaperUid > std::uint64_t{first} + count - 1);
}

UidPool& UidPool::pin(uid_t uid, gid_t gid) noexcept {
  std::lock_guard lock(state_->mu);
  state_->pinned = true;
  state_->pin_uid = uid;
  state_->pin_gid = gid;
  return *this;
}

bool UidPool::pinned() const noexcept {
  std::lock_guard lock(state_->mu);
  return state_->pinned;
}

UidPool& UidPool::lock_host_wide(std::string path) {
  std::lock_guard lock(state_->mu);
  state_->host_wide = true;
  state_->lock_path = std::move(path);
  return *this;
}

bool UidPool::host_wide() const noexcept {
  std::lock_guard lock(state_->mu);
  return state_->host_wide && !state_->pinned;
}

Expected<int> UidPool::host_lock_fd() {
  std::lock_guard lock(state_->mu);
  if (!state_->host_wide || state_->pinned) return -1;
  if (auto st = state_->open_lock(); !st) return std::move(st).error();
  return state_->lock->fd();
}

int UidPool::opened_lock_fd() const noexcept {
  std::lock_guard lock(state_->mu);
  return state_->host_wide && !state_->pinned && state_->lock ? state_->lock->fd() : -1;
}

std::uint32_t UidPool::in_use() const noexcept {
  std::lock_guard lock(state_->mu);
  return state_->in_use;
}

Status UidPool::status() const {
  std::lock_guard lock(state_->mu);
  if (state_->pinned || state_->range_ok) return {};
  return Error::invalid("uid pool: range first " + std::to_string(state_->first) + " count " +
                        std::to_string(state_->count) +
                        " is unusable (must be non-empty, above 0, end below 4294967295 and leave out " +
                        std::to_string(kReaperUid) + ", corral's kill helper's own uid)");
}

Expected<UidPool::Lease> UidPool::acquire(Reap) {
  if (auto ok = status(); !ok) return std::move(ok).error();
  Lease::State& s = *state_;
  std::lock_guard lock(s.mu);
  Lease lease;
  lease.held_ = true;
  if (s.pinned) {
    lease.uid_ = s.pin_uid;
    lease.gid_ = s.pin_gid;
    return lease;
  }
  std::uint32_t offset = 0;
  if (s.host_wide) {
    if (auto st = s.open_lock(); !st) return std::move(st).error();
    if (s.marks == nullptr) {
      // Allocated once, where failing is allowed: release (noexcept) then
      // never allocates. The scan starts at the range's first uid, not at
      // a random one: processes that run one after the other (a shell loop
      // of `corral run`) then take the same few uids, left clean by the
      // last one (no reap), whose user namespace templates already exist
      // (ns_template.hpp). Processes side by side skip each other's uids
      // at one fcntl each.
      try {
        s.free.reserve(s.count);
        const std::size_t batch = std::min<std::size_t>(s.count, kSweepBatch);
        s.unswept.reserve(batch);
        s.sweep_uids.reserve(batch);
        s.sweep_found.reserve(batch);
      } catch (const std::bad_alloc&) {
        return Error(ENOMEM, "uid pool " + s.range() + ": out of memory");
      }
      void* map = ::mmap(nullptr, s.count, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (map == MAP_FAILED) return Error::from_errno(errno, "uid pool " + s.range() + ": map its marks");
      s.marks = static_cast<std::uint8_t*>(map);
    }
    auto took = s.take_host_wide();
    if (!took) return std::move(took).error();
    if (!*took) {
      // No idle uid and none of the range left to lock: the unswept ones
      // are swept now, and one of them is taken.
      if (auto st = s.sweep_unswept(); !st) return std::move(st).error().context("uid pool " + s.range());
      took = s.take_host_wide();
      if (!took) return std::move(took).error();
    }
    if (!*took)
      return Error(EAGAIN, "uid pool " + s.range() + ": all " + std::to_string(s.count) +
                               " uids are held by runs on this host (" + s.lock_path + ")");
    offset = **took;
    s.marks[offset] = kLeased;
    s.marks_end = std::max(s.marks_end, offset + 1);
  } else if (!s.free.empty()) {
    offset = s.free.back();
    s.free.pop_back();
  } else if (s.next_unused < s.count) {
    // Grow the free list's capacity now, where failing is allowed, so that
    // release (noexcept) never allocates.
    if (s.free.capacity() < std::size_t{s.next_unused} + 1) {
      try {
        s.free.reserve(std::max<std::size_t>(64, std::size_t{s.next_unused} * 2));
      } catch (const std::bad_alloc&) {
        return Error(ENOMEM, "uid pool " + s.range() + ": out of memory");
      }
    }
    offset = s.next_unused++;
  } else {
    return Error(EAGAIN, "uid pool " + s.range() + ": all " + std::to_string(s.count) +
                             " uids are in use by runs in flight");
  }
  ++s.in_use;
  lease.uid_ = s.first + offset;
  lease.gid_ = lease.uid_;
  lease.state_ = state_;
  return lease;
}

std::uint32_t UidPool::mark_idle_clean() noexcept {
  Lease::State& s = *state_;
  std::lock_guard lock(s.mu);
  if (!s.host_wide || s.pinned || !s.lock) return 0;
  // Clean means no files either (uid_lock.hpp): an unswept uid is said
  // unswept, and whoever holds it next sweeps it with others (kSweepBatch),
  // not this process at its end.
  for (std::uint32_t off : s.unswept)
    if (s.marks[off] == kUnswept && s.lock->write_byte(s.first + off, kUidUnswept)) s.marks[off] = kUnsweptMarked;
  std::uint32_t marked = 0;
  for (std::uint32_t off : s.free) {
    if (s.marks[off] != kIdle) continue;
    if (!s.lock->mark(s.first + off, true)) continue;  // stays dirty: the next holder reaps
    s.marks[off] = kIdleMarked;
    ++marked;
  }
  return marked;
}

bool UidPool::Lease::host_wide() const noexcept { return held_ && state_ && state_->host_wide; }

Status UidPool::Lease::signal_processes(int sig) {
  if (!host_wide())
    return Error(ENOTSUP, "uid " + std::to_string(uid_) + ": not a host-wide lease; its processes are not all the run's");
  if (auto sent = state_->kill_uid(uid_, sig); !sent) return sent;
  if (sig == SIGKILL) clean_ = true;
  return {};
}

UidPool::Lease::Lease(Lease&& other) noexcept
    : state_(std::move(other.state_)),
      uid_(other.uid_),
      gid_(other.gid_),
      held_(std::exchange(other.held_, false)),
      clean_(other.clean_),
      first_reaps_(other.first_reaps_),
      leaves_files_(other.leaves_files_) {}

UidPool::Lease& UidPool::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    release();
    state_ = std::move(other.state_);
    uid_ = other.uid_;
    gid_ = other.gid_;
    held_ = std::exchange(other.held_, false);
    clean_ = other.clean_;
    first_reaps_ = other.first_reaps_;
    leaves_files_ = other.leaves_files_;
  }
  return *this;
}

UidPool::Lease::~Lease() { release(); }

void UidPool::Lease::release() noexcept {
  held_ = false;
  if (!state_) return;
  State& s = *state_;
  const std::uint32_t offset = uid_ - s.first;
  if (s.host_wide) {
    // Never handed on with something of this run alive.
    bool clean = clean_;
    if (!clean) {
      try {
        clean = s.kill_uid(uid_, SIGKILL).ok();
      } catch (...) {
        clean = false;  // a message that could not be built: the kill did not happen
      }
    }
    std::lock_guard lock(s.mu);
    if (clean && leaves_files_) {
      // Nothing of the run lives, but its files may: not another run's
      // until swept (batched, kSweepBatch).
      s.marks[offset] = kUnswept;
      s.unswept.push_back(offset);  // capacity reserved in acquire: at most a batch waits
      if (s.unswept.size() >= std::min<std::size_t>(s.count, kSweepBatch)) (void)s.sweep_unswept();
    } else {
      s.marks[offset] = clean ? kIdle : kLost;
      if (clean) s.free.push_back(offset);  // capacity reserved in acquire
    }
    --s.in_use;
  } else {
    std::lock_guard lock(s.mu);
    s.free.push_back(offset);  // capacity reserved in acquire
    --s.in_use;
  }
  state_.reset();
}

}  // namespace corral
