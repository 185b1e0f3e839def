// The uid pool's bookkeeping (privilege.hpp: UidPool), shared by its two
// files: uid_pool.cpp (leases, the pool's end, taking a uid) and
// uid_pool_batch.cpp (sweeps, and the batches that make uids clean).
// Internal: not installed.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "corral/privilege.hpp"
#include "corral/process.hpp"
#include "corral/uid_lock.hpp"
#include "corral/uid_sweep.hpp"

namespace corral {

namespace uid_pool_detail {
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
// finding walk (a statx per entry of /tmp and the rest, uid_sweep.hpp:
// ~3,000 here) serves them all, and only a uid it finds something of costs
// a helper. Meanwhile the next runs take other uids of the range (a range
// smaller than the batch is swept when it has no other uid to give).
constexpr std::size_t kReleaseBatch = 128;
// A process that ends with some unswept lets go of them marked unswept
// (kUidUnswept), and a later acquire, in any process, that finds this many
// such bytes (or no clean uid) sweeps them together (take_clean_by_hint): a
// loop of one-shot `corral run` walks /tmp and the rest once in
// kSweepBatch runs, not at every end. The walk costs what the host keeps
// there (~3 us an entry here): with 53,000 entries in /tmp, a walk every
// 32 runs (what this was) put 5 ms on each one-shot process run (5.0x a
// bare exec; 3.3x with 256).
constexpr std::size_t kSweepBatch = 256;
// Uids never used, or left dirty, that such an acquire makes clean with
// them, at most: each costs a helper that kills every process of it first.
constexpr std::size_t kDirtyBatch = 32;
// Bytes of the lock file read at a time when looking for a uid its last
// holder left clean.
constexpr std::size_t kHintChunk = 4096;
}  // namespace uid_pool_detail

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
  std::optional<SweepDirCache> sweep_cache;  // what the finding walks remember of quiet directories
  std::vector<uid_t> sweep_uids;
  std::vector<char> sweep_found;

  std::string range() const {
    return std::to_string(first) + ".." + std::to_string(std::uint64_t{first} + count - 1);
  }
  // uid_pool.cpp: the lock file, the pool's end, the kill helper, taking a uid.
  Status open_lock();  // under mu
  ~State();
  Status ensure_kill_stack();  // under kill_mu
  Status kill_uid(uid_t uid, int sig);
  Status ensure_sweep_memory();  // under kill_mu
  Expected<bool> kill_and_sweep(uid_t uid, bool kill = true);
  Status mark_in_use(std::uint32_t off);
  Expected<std::optional<std::uint32_t>> take_host_wide();
  Expected<std::optional<std::uint32_t>> take_idle();
  // uid_pool_batch.cpp: sweeps, and uids made clean a batch at a time.
  Status sweep_unswept() noexcept;
  Expected<std::optional<std::uint32_t>> take_clean_by_hint();
  Expected<std::optional<std::uint32_t>> make_batch_clean(const std::uint32_t* unswept_seen, std::size_t n_unswept,
                                                          const std::uint32_t* others_seen, std::size_t n_others);
};

}  // namespace corral
