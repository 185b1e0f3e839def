// Resource limits (setrlimit) for a run: a fixed array of (resource, soft,
// hard) built in the parent and applied in the child between clone and exec.
//
//   parent:  auto set = rlimits_from_limits(limits);      // validates, may allocate
//   child:   int err = apply_rlimits_in_child(*set);     // raw prlimit64 only
//
// Core dumps are off unless the caller sets RLIMIT_CORE itself: a crashing
// untrusted program should not write its memory into the workspace.
#pragma once

#include <sys/resource.h>

#include <array>
#include <cstddef>
#include <span>

#include "corral/limits.hpp"
#include "corral/status.hpp"

namespace corral {

struct RlimitEntry {
  int resource;  // RLIMIT_*
  rlim_t soft;
  rlim_t hard;
};

// A fixed-capacity set with at most one entry per resource. No heap, no
// pointers: it can be copied into a child plan and read by a CLONE_VM child.
class RlimitSet {
 public:
  // RLIM_NLIMITS is 16 on Linux; a set never holds more entries than that.
  static constexpr std::size_t kCapacity = 16;

  // Starts with RLIMIT_CORE 0/0 (core dumps off).
  RlimitSet() noexcept;

  // Adds `resource` or replaces its earlier entry. A resource outside
  // [0, RLIM_NLIMITS) or soft > hard leaves the set unchanged; the first
  // such mistake is kept and returned by status(). Fluent:
  //   set.set(RLIMIT_NOFILE, 64, 64).set(RLIMIT_FSIZE, 1 << 20);
  RlimitSet& set(int resource, rlim_t soft, rlim_t hard) noexcept;
  RlimitSet& set(int resource, rlim_t both) noexcept { return set(resource, both, both); }

  // Ok, or the first rejected set() ("rlimits: RLIMIT_NOFILE: soft 10 above hard 5").
  Status status() const;

  std::span<const RlimitEntry> entries() const noexcept { return {entries_.data(), count_}; }
  std::size_t size() const noexcept { return count_; }
  // The entry for `resource`, or nullptr.
  const RlimitEntry* find(int resource) const noexcept;

 private:
  enum class Fault : unsigned char { none, bad_resource, soft_above_hard };
  std::array<RlimitEntry, kCapacity> entries_{};
  std::size_t count_ = 0;
  // The first rejected call, kept as numbers so the set stays heap-free.
  Fault fault_ = Fault::none;
  RlimitEntry faulty_{};
};

// "RLIMIT_NOFILE" for RLIMIT_NOFILE; "RLIMIT_?" for an unknown number.
const char* rlimit_resource_name(int resource) noexcept;

// This process's hard limits, each read (getrlimit) the first time it is
// asked for and then remembered: a supervisor checks every run's entries
// against them (rlimits_from_limits), two system calls a run otherwise.
// Without CAP_SYS_RESOURCE a hard limit can only go down, and only this
// process (setrlimit) or a privileged one (prlimit) can lower it: should
// that happen after it was remembered, a run asking above the new one is
// not refused up front but fails in the child (prlimit64 EPERM: its
// Result is spawn_failed at stage rlimits, the program never runs), and
// the run layer then names the limit with an uncached check.
class OwnHardLimits {
 public:
  rlim_t hard(int resource);  // RLIM_INFINITY when it cannot be read (the child then finds out)

 private:
  std::array<rlim_t, RlimitSet::kCapacity> hard_{};
  std::array<bool, RlimitSet::kCapacity> known_{};
};

// Parent side. Maps the rlimit-backed limits: cpu_seconds -> RLIMIT_CPU
// (soft N, hard N+1: SIGXCPU at N seconds, the kernel's SIGKILL one second
// later backs it up), memory_bytes -> RLIMIT_AS, process_count ->
// RLIMIT_NPROC (per uid, and not enforced for uid 0: see privilege.hpp),
// file_bytes -> RLIMIT_FSIZE, open_files -> RLIMIT_NOFILE (soft = hard = N).
// Limits without an rlimit (wall_seconds, stdout_bytes, ...) are ignored.
// Refuses, naming the limit: 0 where the limit does not allow it, values of
// 2^63 or more, and a hard limit this process could not set (see
// check_rlimits_allowed); with `ours`, against the hard limits it
// remembers instead of a getrlimit per entry.
Expected<RlimitSet> rlimits_from_limits(const Limits& limits, OwnHardLimits* ours = nullptr);

// Parent side. Refuses an entry whose hard limit is above this process's
// current hard limit while CAP_SYS_RESOURCE is not effective in the calling
// thread (the child inherits both, so its setrlimit would fail with EPERM),
// and RLIMIT_NOFILE above /proc/sys/fs/nr_open (refused even with the
// capability). Refusals are ERANGE: a limit out of this host's range.
Status check_rlimits_allowed(const RlimitSet& set);

// Child side, between clone and exec (also fine in a preexec hook after
// fork). Async-signal-safe: one raw prlimit64(0, ...) per entry, in order,
// no allocation, errno untouched. Returns 0, or the positive errno of the
// first entry the kernel refused (EPERM: raising a hard limit without
// CAP_SYS_RESOURCE).
int apply_rlimits_in_child(const RlimitSet& set) noexcept;

}  // namespace corral
