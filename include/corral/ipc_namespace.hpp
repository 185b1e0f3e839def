// ipc_namespace: an IPC namespace a finished run left empty, handed to a
// later run instead of every run having one made and the kernel tearing it
// down after (its mqueue mount, sysctl tables and an RCU grace period on a
// workqueue: 300-400 µs of a process-tier /bin/true here, see README).
//
// What "empty" covers is all an unprivileged process can leave in an IPC
// namespace: SysV shared memory segments, message queues and semaphore
// sets (the *_INFO counts, which answer for the caller's namespace) and
// POSIX message queues (a listing of the namespace's mqueue filesystem,
// through a mount of it in no mount table, kept with the namespace: see
// HeldIpcNamespace). Its sysctls (kernel.shm*, msg*, sem, *_next_id,
// fs.mqueue.*) need CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE over the
// namespace, which a run never has. What a reused namespace still shows
// is its id counters: a new SysV object's id says how many were made there
// before it.
//
// Parent side: the spawn thread (spawn_thread.hpp) calls these between
// clones. Needs CAP_SYS_ADMIN (setns, fsopen), as making the namespace does.
#pragma once

#include "corral/fd.hpp"

namespace corral {

// An IPC namespace, held (nsfs fd), and a mount of its mqueue filesystem
// to list its POSIX queues through (fsmount: in no mount table). The mount
// lives as long as the hold: made once, when the namespace is first held
// (or, failing that, first checked), never per check. Dropping a mount is
// an unmount, and its expedited RCU grace period interrupts every CPU:
// made and dropped at each check it cost a process-tier /bin/true run
// 280-440 µs of wall time on a 2-CPU VM, though the check runs in the
// spawn thread, off the run's path (README "What each tier enforces").
struct HeldIpcNamespace {
  UniqueFd ns;
  UniqueFd mqueue;  // invalid until made, or if it could not be
  explicit operator bool() const noexcept { return ns.valid(); }
};

// The calling thread's IPC namespace (/proc/thread-self/ns/ipc), held, with
// its mqueue mount; an invalid hold when /proc cannot give it (the
// namespace is then used once), no mount when fsmount fails (the first
// check makes it).
HeldIpcNamespace hold_own_ipc_namespace() noexcept;

// Moves the calling thread into the namespace `held` holds (setns) and says
// whether it is empty as above, making its mount if it has none yet (in
// the namespace just entered, so it is that namespace's). False on any
// failure too: the caller then leaves it for a new one (unshare) and drops
// `held`.
bool enter_ipc_namespace_if_empty(HeldIpcNamespace& held) noexcept;

}  // namespace corral
