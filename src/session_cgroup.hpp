// Internal to the session sources: a session's exec cgroups, below the
// session's own group in each hierarchy it uses:
//
//   <session group>/execs/<name>   one per exec while it runs; a few clean
//                                  ones kept between execs where the
//                                  backend reuses groups (the pool).
//   <session group>/init           v2: pid 1 (the session's group holds no
//                                  process, so it can hand memory and pids
//                                  to the exec groups)
//
// An exec holds its group (the cgroup module's hold: LOCK_EX on the
// group's directory in the first hierarchy) from its claim until it ends;
// a group nobody holds is the pool's or a dead exec's leftover. Claims and
// sweeps of one session take LOCK_EX on <first session group>/execs
// around their scan, so a group is never taken by two, nor swept while its
// maker has yet to hold it. Parent side only; not installed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "corral/cgroup.hpp"
#include "corral/status.hpp"

namespace corral {

// Clean exec groups a session keeps for its next execs, beyond those held.
inline constexpr int kExecPoolKeep = 4;

// The exec's cgroup, held: a clean group an earlier exec left
// (reuse_run_cgroup: its ceilings rewritten, its counters reset), else a
// new one, made reusable so that a clean exec leaves it to the next. A
// pool group found unfit (an OOM kill or a refused fork counted, a process
// left in it) is removed on the way. memory_bytes/pids_max: the exec's
// ceilings (none: no ceiling of its own below the session's).
Expected<RunCgroup> claim_exec_cgroup(const CgroupProbe& host, const std::vector<std::string>& session_dirs,
                                      std::optional<std::uint64_t> memory_bytes,
                                      std::optional<std::uint64_t> pids_max, std::string_view run_name);

// Exec groups nobody holds: an exec whose owner died (a SIGKILLed `corral
// session exec`) let go of its group, and what its setsid children left
// there is killed and the group removed. Empty ones stay for reuse, up to
// pool_keep; the rest go. `held` says whether any exec holds a group now.
// Returns how many groups were removed.
int sweep_unclaimed_execs(const std::vector<std::string>& session_dirs, int pool_keep,
                          std::vector<std::string>& problems, bool* held = nullptr);

// Every exec group below each session group (processes killed, removed),
// the pool's too, and the execs directories; the number that could not go.
int remove_exec_cgroups(const std::vector<std::string>& session_dirs, std::vector<std::string>& problems);

}  // namespace corral
