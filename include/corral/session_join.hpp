// session_join: the run layer's part of a session exec — a child that joins
// a live session's namespaces, under a cgroup of its own below the
// session's (session.hpp has the sessions: the keeper, their host state,
// their files). The run layer knows a session only as the plain data of a
// SessionTarget, which the supervisor layer reads from the session's host
// state (session_target() in session.hpp) and hands to prepare_run in
// RunContext::session.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "corral/spawn.hpp"
#include "corral/status.hpp"

namespace corral {

struct PreparedRun;
struct HostFacts;
struct ContainerRun;
struct ChildPlan;
struct CgroupStats;
struct TierFacts;

// What an exec needs to know of its live session.
struct SessionTarget {
  std::string id;
  pid_t pid1 = 0;                 // host pid of the session's pid 1
  std::uint64_t pidns_inode = 0;  // /proc/<pid1>/ns/pid, against pid reuse
  uid_t inside_uid = 0;           // the program's uid (and gid) inside
  std::vector<std::string> cgroup_dirs;  // the session's cgroup, one per hierarchy
  // The session's ceilings: an exec's own are never above them.
  std::optional<std::uint64_t> memory_bytes, process_count;
  // Its mtime is the session's last use: touched at an exec's start and end.
  std::string active_file;
};

// Parent, from prepare_run for a request with `session`: the session's
// pid 1 (pidfd, checked against pid reuse), the exec's cgroup below the
// session's, the inside ids, the cwd. Fills run.container.
Status prepare_session_exec(PreparedRun& run, const HostFacts& host, const SessionTarget& target);
// Parent, from spawn_container for a ContainerRun with `session`: the exec's
// child, in the session's pid namespace (this thread enters it for the
// clone and leaves it again), joins the rest through the pidfd and execs.
// Waits for the exec (one process, no maps to write): a failure before it
// is a Child with report.stage set, already reaped.
Expected<Spawner::Child> spawn_session_exec(ChildPlan& plan, ContainerRun& c, std::uint64_t ignored_signals);

// ---- an OOM in a session
//
// v1 signals an OOM to the group whose ceiling ran out and to every group
// below it: the exec's eventfd (ContainerRun::oom_event) fires for the
// exec's own ceiling and for the session's alike, in every exec of the
// session. So an exec also watches the session's group (an eventfd there
// fires only for an OOM at the session's ceiling or above it), registered
// at prepare_session_exec. v1 counts an OOM kill (oom_kill) in the
// victim's own group only. v2: the session group's memory.events.local
// `oom` (its own ceiling only) against its value at the exec's start; the
// exec group's `oom` event is its own ceiling's, its oom_kill its
// processes' (memory.oom.group 1 there: the victim's whole exec dies).
//
// Supervisor, when the exec's eventfd fired: whether the exec's own ceiling
// ran out (its eventfd has counted more, since the exec began, than the
// session's: kill the whole exec, as a container run's OOM is; also when an
// OOM of the session's came in the same wake-up), or only the session's
// (false: the kernel's OOM killer picks its victim among every exec of the
// session, and only that one dies; a neighbour exec that did not allocate
// is not killed for it).
bool session_oom_is_the_execs_own(ContainerRun& c);
// finish_container, for a session exec: facts.oom_killed and the notes from
// the exec group's stats, the exec's eventfd (`notified`) and the session's:
// killed_oom at the exec's own ceiling (CgroupStats::ceiling_oom), or when
// the session's ceiling ran out during the exec and the kernel's OOM killer
// took a process of this exec; otherwise a note says exactly what happened.
void finish_session_exec_oom(ContainerRun& c, const CgroupStats& stats, bool notified, TierFacts& facts);

}  // namespace corral
