// ipc_namespace: an IPC namespace a finished run left empty, handed to a
// later run instead of every run having one made and the kernel tearing it
// down after (its mqueue mount, sysctl tables and an RCU grace period on a
// workqueue: 300-400 µs of a process-tier /bin/true here, see README).
//
// What "empty" covers is all an unprivileged process can leave in an IPC
// namespace: SysV shared memory segments, message queues and semaphore
// sets (the *_INFO counts, which answer for the caller's namespace) and
// POSIX message queues (a listing of the namespace's mqueue filesystem,
// through a mount of it in no mount table). Its sysctls (kernel.shm*,
// msg*, sem, *_next_id, fs.mqueue.*) need CAP_SYS_ADMIN or
// CAP_CHECKPOINT_RESTORE over the namespace, which a run never has. What a
// reused namespace still shows is its id counters: a new SysV object's id
// says how many were made there before it.
//
// Parent side: the spawn thread (spawn_thread.hpp) calls these between
// clones. Needs CAP_SYS_ADMIN (setns, fsopen), as making the namespace does.
#pragma once

#include "corral/fd.hpp"

namespace corral {

// The calling thread's IPC namespace (/proc/thread-self/ns/ipc), held; an
// invalid fd when /proc cannot give it (the namespace is then used once).
UniqueFd hold_own_ipc_namespace() noexcept;

// Moves the calling thread into the namespace `ns` holds (setns) and says
// whether it is empty as above. False on any failure too: the caller then
// leaves it for a new one (unshare) and drops `ns`.
bool enter_ipc_namespace_if_empty(int ns) noexcept;

}  // namespace corral
