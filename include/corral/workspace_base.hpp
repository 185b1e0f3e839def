// workspace_base: where a run's workspace goes on this host when nobody
// names a directory, and whether memory backs it. A host fact (HostFacts'
// workspace_* fields, `corral enforcement`), below the run layer whose
// Workspace (workspace.hpp) uses it.
#pragma once

#include <string>

namespace corral {

// Where workspaces go when a caller names no directory, and what backs it.
// Precedence: an explicit base (WorkspaceOptions::base_dir,
// SupervisorOptions::workspace_base, CORRAL_WORKSPACE_BASE in the CLI),
// then $TMPDIR when set, then a memory-backed default, then /tmp. The
// default is memory because a workspace made and removed on a disk costs
// journal writes and, with `discard`, a TRIM per run. As root it is a tmpfs
// of corral's own mounted once at kRootWorkspaceMount and kept (nosuid,
// nodev, 0711; its pages are not /run's nor /dev/shm's to exhaust); else
// $XDG_RUNTIME_DIR when it is a tmpfs (not as root: /run/user/0 is 0700,
// closed to a run's uid); else /dev/shm when it is a tmpfs; else /tmp.
inline constexpr const char* kRootWorkspaceMount = "/run/corral/workspaces";

struct WorkspaceBaseChoice {
  std::string path;
  std::string source;  // "workspace_base", "TMPDIR", "default"
  bool tmpfs = false;  // statfs f_type == TMPFS_MAGIC (or the root mount still to be made)
  std::string note;    // why a memory-backed place was not used, or "" when it was
};

// `given` is the explicit base ("" for none). With prepare, root's tmpfs is
// mounted when it is not yet (and, should that fail, the next candidate
// chosen); without, nothing is changed on the host (corral enforcement).
WorkspaceBaseChoice choose_workspace_base(const std::string& given, bool prepare = true);

// statfs(path).f_type == TMPFS_MAGIC.
bool is_tmpfs(const std::string& path);

}  // namespace corral
