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
#include "uid_pool_state.hpp"

namespace corral {

using namespace uid_pool_detail;

Status UidPool::Lease::State::open_lock() {
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
UidPool::Lease::State::~State() {
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

Status UidPool::Lease::State::ensure_kill_stack() {
  if (kill_stack) return {};
  // Raw syscalls and a small frame: 64 KiB is plenty.
  auto stack = ChildStack::allocate(64 * 1024);
  if (!stack) return std::move(stack).error().context("uid pool");
  kill_stack.emplace(std::move(*stack));
  return {};
}

Status UidPool::Lease::State::kill_uid(uid_t uid, int sig) {
  std::lock_guard k(kill_mu);
  if (auto st = ensure_kill_stack(); !st) return st;
  return signal_uid(uid, sig, *kill_stack);
}

Status UidPool::Lease::State::ensure_sweep_memory() {
  if (auto st = ensure_kill_stack(); !st) return st;
  if (!sweep_arena) {
    auto arena = SweepArena::allocate();
    if (!arena) return std::move(arena).error().context("uid pool");
    sweep_arena.emplace(std::move(*arena));
  }
  if (!sweep_cache) {
    try {
      sweep_cache.emplace(first, count);
    } catch (const std::bad_alloc&) {
      return Error(ENOMEM, "uid pool " + range() + ": out of memory for the sweep's directory cache");
    }
  }
  return {};
}

// Kills every process of `uid` and removes its files (uid_sweep.hpp),
// then looks again from outside: true when nothing of it is left.
// kill: whether processes of it may live (a dead holder's uid); a
// released one's were killed already.
Expected<bool> UidPool::Lease::State::kill_and_sweep(uid_t uid, bool kill) {
  std::lock_guard k(kill_mu);
  if (auto st = ensure_sweep_memory(); !st) return std::move(st).error();
  if (auto st = sweep_uid(uid, *kill_stack, *sweep_arena, nullptr, kill); !st) return std::move(st).error();
  std::vector<uid_t> one{uid};
  std::vector<char> found;
  find_uids_with_files(one, *sweep_arena, found, nullptr, &*sweep_cache);
  return !found[0];
}

// Under mu: a uid we hold is marked dirty before a run has it, so our
// death leaves it to a holder that reaps and sweeps (uid_lock.hpp). If
// the byte cannot be written the uid is let go (never handed out so).
Status UidPool::Lease::State::mark_in_use(std::uint32_t off) {
  if (lock->mark(first + off, false)) return {};
  const int err = errno;
  lock->unlock(first + off);
  marks[off] = kNotOurs;
  return Error::from_errno(err, "uid pool " + range() + ": mark uid " + std::to_string(first + off) + " in use in " +
                                    lock_path);
}

// Under mu, host-wide. An idle uid (still locked by us, and clean), else
// one of the range freshly locked and made clean; nullopt when neither.
Expected<std::optional<std::uint32_t>> UidPool::Lease::State::take_host_wide() {
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
    if (auto st = mark_in_use(off); !st) return std::move(st).error();
    cursor = (off + 1) % count;
    return std::optional<std::uint32_t>(off);
  }
  return std::optional<std::uint32_t>();
}

// Under mu: the last idle uid of the free list, marked dirty again if its
// byte said otherwise.
Expected<std::optional<std::uint32_t>> UidPool::Lease::State::take_idle() {
  const std::uint32_t off = free.back();
  free.pop_back();
  // A byte that says clean goes back to dirty before the uid is a run's
  // again, or our death would leave its processes and files to a
  // holder that trusts the byte.
  if (marks[off] == kIdleMarked)
    if (auto st = mark_in_use(off); !st) return std::move(st).error();
  return std::optional<std::uint32_t>(off);
}

UidPool::UidPool() : UidPool(kDefaultFirst, kDefaultCount) {}

UidPool::UidPool(uid_t first, std::uint32_t count) : state_(std::make_shared<Lease::State>()) {
  state_->first = first;
  state_->count = count;
  // Never a kill helper's uid (uid_lock.hpp): no process of a run may have one.
  const std::uint64_t last = std::uint64_t{first} + count - 1;
  state_->range_ok = count > 0 && first > 0 && last < kNoId &&
                     (last < kReaperUidFirst || first >= std::uint64_t{kReaperUidFirst} + kReaperUidCount);
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
                        std::to_string(kReaperUidFirst) + ".." +
                        std::to_string(kReaperUidFirst + (kReaperUidCount - 1)) + ", corral's kill helpers' own uids)");
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
        // What waits of ours, and a batch of other processes' (make_batch_clean).
        const std::size_t batch = std::min<std::size_t>(s.count, kReleaseBatch + kSweepBatch + kDirtyBatch);
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
      // until swept (batched, kReleaseBatch).
      s.marks[offset] = kUnswept;
      s.unswept.push_back(offset);  // capacity reserved in acquire: at most a batch waits
      if (s.unswept.size() >= std::min<std::size_t>(s.count, kReleaseBatch)) (void)s.sweep_unswept();
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
