// leftovers: what a dead supervisor left on the host, found and removed by
// the next one to start — never what a live supervisor owns.
//
// Each root supervisor registers itself: /run/corral/owners/<token>, a file
// it holds an flock (LOCK_EX) on for its whole life, naming its workspace
// base. <token> is the 12 hex digits of its run ids (r-<token>-<n>), which
// also name everything it makes per run: its workspaces are
// corral-<token>-<16 hex> under that base, its runs' cgroups
// r-<token>-<n>-<pid>-<8 hex>. The kernel drops the flock when the holder
// dies, however it dies, so "nobody holds the lock" is exactly "the owner
// is gone". A record is made as an unnamed O_TMPFILE, locked, then linked
// into place: no sweeper ever sees one unlocked while its owner lives.
//
// sweep_dead_supervisors() takes each record's lock without waiting. Held:
// a live owner, left alone. Taken: the owner is dead; while we hold the
// lock (a second sweeper fails to take it and skips) its workspaces and
// empty run cgroups are removed, then the record. Its processes were
// killed by its guardian (guardian.hpp); its uid locks went with it (OFD
// locks), and a uid it held is reaped before it is handed out again
// (UidPool). Namespace templates have no owner (they are shared by every
// run on the host and kept on purpose, at most kKeptTemplates): nothing to
// sweep there.
//
// Root only: /run/corral is root's. A supervisor without root registers
// nothing and sweeps nothing; its workspaces stay in its own private base.
#pragma once

#include <string>
#include <string_view>

#include "corral/cgroup.hpp"
#include "corral/fd.hpp"
#include "corral/status.hpp"

namespace corral {

inline constexpr std::string_view kOwnersDir = "/run/corral/owners";

class OwnerRecord {
 public:
  // Registers `token` (12 hex) as a live supervisor whose workspaces go to
  // `workspace_base`. Errors name the directory.
  static Expected<OwnerRecord> create(std::string_view token, const std::string& workspace_base,
                                      const std::string& dir = std::string(kOwnersDir));
  OwnerRecord(OwnerRecord&&) noexcept = default;
  OwnerRecord& operator=(OwnerRecord&&) noexcept;
  OwnerRecord(const OwnerRecord&) = delete;
  OwnerRecord& operator=(const OwnerRecord&) = delete;
  // A normal end: the record goes (nothing of ours is left to sweep).
  ~OwnerRecord();

  const std::string& token() const noexcept { return token_; }
  int fd() const noexcept { return fd_.get(); }

 private:
  OwnerRecord() = default;
  std::string dir_, token_;
  UniqueFd fd_;  // locked; closing it (or dying) releases the lock
};

struct SweepReport {
  int owners = 0;      // dead supervisors whose records were swept
  int workspaces = 0;  // workspace directories removed
  int cgroups = 0;     // run cgroup directories removed
  std::vector<std::string> problems;  // what could not be removed, and why
};

// Sweeps every record under `dir` whose owner is dead (see above), except
// `self` (our own token). The run cgroups are looked for in their parent
// group as a container run makes it (CgroupSpec's default, under our own
// cgroup); the hierarchies are probed only when there is a dead owner.
// Costs a readdir and an open + flock per live record when nothing is stale.
SweepReport sweep_dead_supervisors(std::string_view self, const std::string& dir = std::string(kOwnersDir));

}  // namespace corral
