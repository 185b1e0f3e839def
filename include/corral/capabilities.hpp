// Dropping every Linux capability for a run, plus no_new_privs.
//
//   parent:  auto drop = prepare_capability_drop();          // libcap, may allocate
//   child:   int err = apply_capability_drop_in_child(*drop); // raw prctl/capset
//
// Together with a privilege drop (privilege.hpp) the child must run three
// steps in this order, because each one needs what the next one removes:
//   1. drop_bounding_set_in_child  needs CAP_SETPCAP      (still root)
//   2. apply_privilege_drop_in_child needs CAP_SETUID/SETGID; going to a
//      non-zero uid clears permitted/effective, CAP_SETPCAP included
//   3. clear_capabilities_in_child  needs nothing (only lowers)
// apply_capability_drop_in_child is steps 1 and 3 back to back, for a child
// that keeps its uid.
#pragma once

#include <cstdint>

#include "corral/status.hpp"

namespace corral {

// Prepared data for the child: which capability numbers the kernel knows.
// Plain numbers, no heap, safe to read from a CLONE_VM child.
class CapabilityDrop {
 public:
  // The highest capability number the running kernel knows
  // (/proc/sys/kernel/cap_last_cap; 40, CAP_CHECKPOINT_RESTORE, on 5.9+).
  int last_cap() const noexcept { return last_cap_; }

 private:
  friend Expected<CapabilityDrop> prepare_capability_drop();
  friend int drop_all_capabilities_now() noexcept;
  CapabilityDrop() = default;
  int last_cap_ = -1;
};

// Parent side. Reads the kernel's /proc/sys/kernel/cap_last_cap (one read;
// a PR_CAPBSET_READ search without /proc) to learn how many capabilities
// exist, so the child drops the ones this kernel knows even when they are
// newer than our headers. Refuses when
// CAP_SETPCAP is not effective in the calling thread: the child (which
// inherits this thread's capabilities) could not empty the bounding set.
Expected<CapabilityDrop> prepare_capability_drop();

// Child side, async-signal-safe (raw syscalls, errno untouched). Each
// returns 0 or a positive errno.
//
// Clears the ambient set (PR_CAP_AMBIENT_CLEAR_ALL; EINVAL from a kernel
// before 4.3, which has no ambient set, is ignored) and drops every
// capability from the bounding set (PR_CAPBSET_DROP; EINVAL for a number
// the kernel does not know is ignored). EPERM: the calling thread lacks
// CAP_SETPCAP, e.g. it already dropped to a non-root uid.
int drop_bounding_set_in_child(const CapabilityDrop& drop) noexcept;

// The same drop for the capabilities in `present` only (bit n: capability
// n): those the spawning thread's bounding set still held, which is all the
// child's can hold (a child copies its creator's; a bounding set only
// shrinks). 0: nothing to drop, no system call. The ambient set is left to
// clear_capabilities_in_child, which empties it anyway.
int drop_bounding_set_in_child(const CapabilityDrop& drop, std::uint64_t present) noexcept;

// Empties permitted, effective and inheritable (raw capset, version 3), and
// with them the ambient set (the kernel keeps it within permitted and
// inheritable), and sets PR_SET_NO_NEW_PRIVS, so no execve can give
// anything back (setuid bits and file capabilities are ignored from now on).
int clear_capabilities_in_child(const CapabilityDrop& drop) noexcept;

// drop_bounding_set_in_child, then clear_capabilities_in_child.
int apply_capability_drop_in_child(const CapabilityDrop& drop) noexcept;

// Parent side, in a thread of our own that spawns (spawn_thread.hpp): drops
// every capability up to drop.last_cap() from the calling thread's bounding
// set (the thread's alone: the process's other threads keep theirs), so its
// children start with an empty one. Returns what is left (bits the kernel
// refused, e.g. without CAP_SETPCAP); 0 when the set is empty.
std::uint64_t empty_thread_bounding_set(const CapabilityDrop& drop) noexcept;

// Parent side: whether `cap` (CAP_*) is in the calling thread's effective
// set. Used by prepare functions to refuse what the child could not do.
bool has_effective_capability(int cap) noexcept;
// The calling thread's effective set as a mask (bit CAP_* set when held),
// from one capget(2): a caller that asks about several capabilities reads
// them all at once. 0 when capget fails.
std::uint64_t effective_capabilities() noexcept;

// Everything above in one call, without a prepared object (the C ABI's
// corral_drop_capabilities). Child side; async-signal-safe; 0 or errno.
int drop_all_capabilities_now() noexcept;

}  // namespace corral
