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
};

// Uids released by runs that may have left files in the host's shared
// directories (Lease::leaves_host_files) wait this many to a sweep: one
// finding walk (a statx per entry of /tmp and the rest, uid_sweep.hpp)
// serves them all, and only a uid it finds something of costs a helper.
// Meanwhile the next runs take other uids of the range.
constexpr std::size_t kSweepBatch = 32;
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
  // in this process or another, need not reap it. A lost one stays dirty.
  ~State() {
    (void)sweep_unswept();
    if (lock)
      for (std::uint32_t off = 0; off < marks_end; ++off) {
        if (marks[off] == kNotOurs) continue;
        if (marks[off] == kIdle) (void)lock->mark(first + off, true);  // kIdleMarked: written already
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
    if (!free.empty()) {
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
      marks[off] = clean ? kIdle : kLost;
      if (clean) free.push_back(off);  // capacity reserved in acquire
    }
    unswept.clear();
    return result;
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
  (void)s.sweep_unswept();  // clean means no files either (uid_lock.hpp)
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
