// Child subreaper: orphans of a run (a daemonizing grandchild, a process
// whose parent died) are re-parented to us instead of to init, so we can
// see them, kill them and reap them, and none is left as a zombie.
//
// Who runs what: become_subreaper() in the supervisor (or a run's pid-1
// helper) before it spawns; become_subreaper_in_child() in a forked child
// that will act as a reaper; reap_orphans() in the subreaper, e.g. on every
// SIGCHLD and after the owner reaps one of its tracked children.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>

#include "corral/status.hpp"

namespace corral {

// PR_SET_CHILD_SUBREAPER (Linux 3.4) on the calling process. The attribute
// is per process, kept across execve, not inherited by fork.
Status become_subreaper();
bool is_subreaper() noexcept;

// Child side, async-signal-safe (raw prctl, errno untouched): 0 or errno.
int become_subreaper_in_child() noexcept;

// Says whether a pid is one the caller tracks (a pidfd it will wait on
// itself): true = leave it alone. An empty filter tracks nothing.
using ReapFilter = std::function<bool(pid_t)>;

// Non-blocking. Reaps every exited child that `is_tracked` does not claim:
// adopted orphans, and any untracked direct child. Returns how many it
// reaped. Never blocks and never reaps a tracked pid, so a tracked child's
// exit status stays for its owner's waitid(P_PIDFD).
//
// How: waitid(P_ALL, WEXITED|WNOHANG|WNOWAIT) peeks at an exited child;
// an untracked one is reaped by pid. When the peeked one is tracked,
// P_ALL would keep returning it, so the remaining children are found in
// /proc/self/task/*/children (zombies included) and each untracked one
// gets a WNOHANG reap by pid. Children cloned with an exit signal other
// than SIGCHLD are invisible to it (no __WALL); orphans always have
// SIGCHLD after re-parenting. A child that exits while this runs is
// reaped by the next call.
std::size_t reap_orphans(const ReapFilter& is_tracked = {});

// Kills every child of ours that `is_kept` does not claim, and whatever
// they leave: each one is SIGKILLed through a pidfd (a child keeps its pid
// until we reap it, so the pidfd names that process), waited for and
// reaped, and its own children, ours by then as the subreaper's, go in the
// next round, until a round finds none. Bounded by `max_seconds` overall
// (a process stuck in uninterruptible sleep is not waited for longer).
// Returns how many processes the SIGKILL ended. For a subreaper whose
// every child is known: an unclaimed one is a leftover, never someone
// else's (SupervisorOptions::owns_every_child).
std::size_t kill_unclaimed_children(const ReapFilter& is_kept, double max_seconds);

// When a process started, and now, on one clock: clock ticks
// (sysconf(_SC_CLK_TCK), 100 a second on Linux) of CLOCK_BOOTTIME, rounded
// down, which is what /proc/PID/stat's starttime counts (field 22).
// Coarse, but enough to tell "born before that moment" for sure: a process
// started at or after a moment read here has a start tick no lower than
// that moment's. process_start_ticks is nullopt when the process is gone.
std::optional<std::uint64_t> process_start_ticks(pid_t pid);
std::uint64_t boottime_ticks_now();

// True when no child of ours is one a wait without __WALL sees: no child at
// all but clone children (an exit signal other than SIGCHLD at clone time),
// which only the caller itself makes (a program cannot: CLONE_PARENT gives
// the new sibling its caller's exit signal, and a re-parented orphan gets
// SIGCHLD). One waitid(P_ALL, WNOHANG|WNOWAIT), which reaps nothing; it
// walks every child, so it pays only with few of them. False on any doubt.
bool no_children_but_clone_children() noexcept;

}  // namespace corral
