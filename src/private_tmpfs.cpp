#include "corral/private_tmpfs.hpp"

#include <fcntl.h>
#include <linux/mount.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "corral/syscalls.hpp"
#include "tmpfs_options.hpp"

namespace corral {
namespace {

// Whether `path` is the root of a mount (statx's STATX_ATTR_MOUNT_ROOT,
// Linux 5.8). Unknown (an older kernel): false, and the caller walks up.
bool is_mount_root(const std::string& path) {
  struct statx sx {};
  if (::statx(AT_FDCWD, path.c_str(), AT_STATX_SYNC_AS_STAT, 0, &sx) != 0) return false;
  return (sx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) && (sx.stx_attributes & STATX_ATTR_MOUNT_ROOT);
}

// The nearest mount point at or above `path` ("/" at worst).
std::string holding_mount(std::string path) {
  while (path.size() > 1 && !is_mount_root(path)) {
    auto slash = path.rfind('/');
    path = slash == 0 ? "/" : path.substr(0, slash);
  }
  return path.empty() ? "/" : path;
}

}  // namespace

Expected<PrivateTmpfs> PrivateTmpfs::prepare(const std::string& target, std::uint64_t bytes) {
  const std::string who = "private tmpfs for " + target;
  if (target.empty() || target.front() != '/') return Error::invalid(who + ": not an absolute path");
  struct stat st {};
  if (::stat(target.c_str(), &st) != 0) return Error::from_errno(errno, who + ": stat");
  if (!S_ISDIR(st.st_mode)) return Error(ENOTDIR, who + ": not a directory");
  PrivateTmpfs t;
  t.target_ = target;
  t.bytes_ = bytes;
  t.holder_ = holding_mount(target);
  auto mounted = detail::fsmount_tmpfs(who, "corral-shm", bytes, "1777");
  if (!mounted) return std::move(mounted).error();
  t.mount_ = std::move(*mounted);
  return t;
}

Expected<PrivateTmpfs> PrivateTmpfs::adopt(const std::string& target, int mount_fd, std::uint64_t bytes) {
  const std::string who = "private tmpfs for " + target;
  if (target.empty() || target.front() != '/') return Error::invalid(who + ": not an absolute path");
  PrivateTmpfs t;
  t.target_ = target;
  t.bytes_ = bytes;
  t.holder_ = holding_mount(target);
  t.mount_.reset(::fcntl(mount_fd, F_DUPFD_CLOEXEC, 0));
  if (!t.mount_) return Error::from_errno(errno, who + ": dup its mount fd");
  return t;
}

int attach_private_tmpfs_in_child(const PrivateTmpfs& tmpfs) noexcept {
  // Runs in the child between clone and exec: raw syscalls on prepared data.
  // Our namespace is a copy: a mount point that was shared there is a peer
  // of the host's, and a mount on it would appear on the host too.
  if (int e = sys::error_of(sys::call(SYS_mount, 0, reinterpret_cast<long>(tmpfs.holder().c_str()), 0, MS_PRIVATE, 0)))
    return e;
  return sys::error_of(sys::call(SYS_move_mount, tmpfs.fd(), reinterpret_cast<long>(""), AT_FDCWD,
                                 reinterpret_cast<long>(tmpfs.target().c_str()), MOVE_MOUNT_F_EMPTY_PATH));
}

}  // namespace corral
