// UidPool's sweeps (uid_pool_state.hpp): the uids released with files
// possibly left in the host's shared directories, swept with one walk a
// batch (uid_sweep.hpp), and the batches an acquire makes clean when the
// lock file's bytes say none is left clean. Parent side only.
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "uid_pool_state.hpp"

namespace corral {

using namespace uid_pool_detail;

// Under mu. Every unswept uid is swept: one finding walk for all, a
// helper for each it finds something of. Swept ones go idle (the free
// list); one whose files could not all go is kept, never handed out
// (kLost), and its byte stays dirty for the next holder to try again.
// Called with the batch full, when a run needs a uid and the range has
// no other, and before the pool lets go of its uids.
Status UidPool::Lease::State::sweep_unswept() noexcept {
  if (unswept.empty()) return {};
  Status result;
  {
    std::lock_guard k(kill_mu);
    if (auto st = ensure_sweep_memory(); !st) return st;
    sweep_uids.clear();
    for (std::uint32_t off : unswept) sweep_uids.push_back(first + off);  // capacity reserved in acquire
    std::sort(sweep_uids.begin(), sweep_uids.end());
    find_uids_with_files(sweep_uids, *sweep_arena, sweep_found, nullptr, &*sweep_cache);
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
Expected<std::optional<std::uint32_t>> UidPool::Lease::State::take_clean_by_hint() {
  char bytes[kHintChunk];
  std::uint32_t unswept_seen[kSweepBatch], others_seen[kDirtyBatch];
  // Capacity of `unswept`: what waits of ours (below kReleaseBatch) and this.
  const std::size_t room = std::min<std::size_t>(count, kSweepBatch);
  const std::size_t others_room = std::min<std::size_t>(count, kDirtyBatch);
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
          if (n_others < others_room) others_seen[n_others++] = off;
          continue;
        }
        auto got = lock->try_lock(first + off);
        if (!got) return std::move(got).error();
        if (!*got) continue;  // another run on the host holds it
        if (lock->byte(first + off) == kUidClean) {
          if (auto st = mark_in_use(off); !st) return std::move(st).error();
          cursor = (off + 1) % count;
          return std::optional<std::uint32_t>(off);
        }
        lock->unlock(first + off);  // changed under us: the reaping loop deals with it
      }
      if (n < static_cast<long>(want) && n_others >= others_room) break;  // the file ends: the rest is never used
      at += static_cast<std::uint32_t>(want);
    }
  }
  // Uids never used or left dirty join the batch only when no clean one
  // is left, and only a few of a small range: the batch's uids are held
  // while it is made clean, and a small range is shared by few.
  const std::size_t others = std::min<std::size_t>(n_others, count / 16);
  return make_batch_clean(unswept_seen, n_unswept, others_seen, others);
}

// Under mu. Locks the uids of `unswept_seen` whose byte still says
// unswept and those of `others_seen` (never used, or a dead holder's:
// every process of each killed first, one helper each), sweeps them with
// one walk (sweep_unswept), keeps one and lets the others go, clean, for
// any run on the host. The one kept, or nullopt if none came clean.
Expected<std::optional<std::uint32_t>> UidPool::Lease::State::make_batch_clean(const std::uint32_t* unswept_seen,
                                                                                std::size_t n_unswept,
                                                                                const std::uint32_t* others_seen,
                                                                                std::size_t n_others) {
  std::uint32_t batch[kSweepBatch + kDirtyBatch];
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
  if (auto st = mark_in_use(*kept); !st) return std::move(st).error();
  cursor = (*kept + 1) % count;
  return kept;
}

}  // namespace corral
