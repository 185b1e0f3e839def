// Where a run's workspace goes when nobody names a directory
// (choose_workspace_base in workspace_base.hpp): a memory-backed place where the
// host has one, so that making and removing a workspace costs no disk flush.
#include <fcntl.h>
#include <linux/magic.h>
#include <linux/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "corral/workspace_base.hpp"

namespace corral {

namespace {

// The directory's device, or 0 when it cannot be stat'ed.
dev_t dev_of(const char* path) {
  struct stat st {};
  return ::stat(path, &st) == 0 ? st.st_dev : 0;
}

// Private, whatever /run's propagation is: a run's workspace tmpfs mounted
// below it (WorkspaceOptions::tmpfs_on_host) reaches no other mount
// namespace. Said again for a base already mounted: an older corral
// mounted it without this step, and under a shared /run (systemd's) it
// stayed shared until reboot. One mount(2) that changes nothing when it is
// private already.
bool make_private(const std::string& mnt, std::string& why) {
  if (::syscall(SYS_mount, nullptr, mnt.c_str(), nullptr, MS_PRIVATE, nullptr) == 0) return true;
  why = "make " + mnt + " a private mount: " + std::strerror(errno);
  return false;
}

// Root's tmpfs at kRootWorkspaceMount: true when it is mounted (already, or
// now with prepare); `why` says what failed otherwise.
bool root_workspace_tmpfs(bool prepare, std::string& why) {
  const std::string mnt = kRootWorkspaceMount;
  const std::string parent = mnt.substr(0, mnt.rfind('/'));
  // Ours is a mount of its own: another device than its parent's, and a
  // tmpfs. (A /run that is itself a tmpfs does not count: its space is
  // the host's services'.)
  dev_t here = dev_of(mnt.c_str());
  if (here != 0 && here != dev_of(parent.c_str()) && is_tmpfs(mnt)) return !prepare || make_private(mnt, why);
  if (!prepare) {
    why = "mounted by the first run";
    return true;
  }
  if ((::mkdir(parent.c_str(), 0755) != 0 && errno != EEXIST) || (::mkdir(mnt.c_str(), 0711) != 0 && errno != EEXIST)) {
    why = "create " + mnt + ": " + std::strerror(errno);
    return false;
  }
  // Two first runs racing stack two mounts; the upper one is used from then
  // on and the lower one's workspaces are still removed through their fds.
  if (::syscall(SYS_mount, "corral-workspaces", mnt.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "mode=0711") != 0) {
    why = "mount a tmpfs on " + mnt + ": " + std::strerror(errno);
    return false;
  }
  return make_private(mnt, why);
}

}  // namespace

bool is_tmpfs(const std::string& path) {
  struct statfs fs {};
  return ::statfs(path.c_str(), &fs) == 0 && fs.f_type == TMPFS_MAGIC;
}

WorkspaceBaseChoice choose_workspace_base(const std::string& given, bool prepare) {
  WorkspaceBaseChoice c;
  auto pick = [&](std::string path, const char* source) {
    c.tmpfs = is_tmpfs(path);
    c.path = std::move(path);
    c.source = source;
    return c;
  };
  if (!given.empty()) return pick(given, "workspace_base");
  if (const char* t = std::getenv("TMPDIR"); t && *t) return pick(t, "TMPDIR");
  std::string why;
  if (::geteuid() == 0) {
    if (root_workspace_tmpfs(prepare, why)) {
      c.path = kRootWorkspaceMount;
      c.source = "default";
      c.tmpfs = true;
      c.note = why;
      return c;
    }
  } else if (const char* x = std::getenv("XDG_RUNTIME_DIR"); x && *x == '/' && is_tmpfs(x)) {
    return pick(x, "default");
  }
  if (is_tmpfs("/dev/shm")) {
    pick("/dev/shm", "default");
    c.note = why;
    return c;
  }
  pick("/tmp", "default");
  c.note = (why.empty() ? "" : why + "; ") + "no tmpfs at /dev/shm";
  return c;
}

}  // namespace corral
