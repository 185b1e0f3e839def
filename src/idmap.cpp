#include "corral/idmap.hpp"

#include <fcntl.h>
#include <linux/mount.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "corral/syscalls.hpp"
#include "holding_helper.hpp"

// Debian 12's headers have these (6.1); kept for older ones.
#ifndef MOUNT_ATTR_IDMAP
#define MOUNT_ATTR_IDMAP 0x00100000
#endif
#ifndef OPEN_TREE_CLONE
#define OPEN_TREE_CLONE 1
#endif
#ifndef OPEN_TREE_CLOEXEC
#define OPEN_TREE_CLOEXEC O_CLOEXEC
#endif

namespace corral {
namespace {

Status write_proc(pid_t pid, const char* name, const std::string& text) {
  std::string path = "/proc/" + std::to_string(pid) + "/" + name;
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return Error::from_errno(errno, "idmap: open " + path);
  if (::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()))
    return Error::from_errno(errno, "idmap: write '" + text.substr(0, text.size() - 1) + "' to " + path);
  return {};
}

}  // namespace

Expected<UniqueFd> make_idmap_userns(const IdmapIds& ids) {
  if (ids.disk_uid == 0 || ids.kernel_uid == 0 || ids.disk_gid == 0 || ids.kernel_gid == 0)
    return Error::invalid("idmap: a map to or from id 0 is refused (a run never writes as root)");
  Expected<UniqueFd> out = Error::invalid("idmap: no user namespace was made");
  auto idmap_error = [](int err, const std::string& what) { return Error::from_errno(err, "idmap: " + what); };
  Status st = with_holding_helper<int>(
      idmap_error, []() noexcept { return sys::error_of(sys::call(SYS_unshare, CLONE_NEWUSER)); },
      [&](pid_t pid, int err) -> Status {
        if (err) return idmap_error(err, "unshare(CLONE_NEWUSER)");
        auto line = [](unsigned long disk, unsigned long kernel) {
          return std::to_string(disk) + " " + std::to_string(kernel) + " 1\n";
        };
        if (auto w = write_proc(pid, "uid_map", line(ids.disk_uid, ids.kernel_uid)); !w) return w;
        if (auto w = write_proc(pid, "gid_map", line(ids.disk_gid, ids.kernel_gid)); !w) return w;
        std::string ns = "/proc/" + std::to_string(pid) + "/ns/user";
        UniqueFd fd(::open(ns.c_str(), O_RDONLY | O_CLOEXEC));
        if (!fd) return idmap_error(errno, "open " + ns);
        out = std::move(fd);
        return {};
      });
  if (!st) return std::move(st).error();
  return out;
}

Expected<UniqueFd> open_idmapped_tree(int source, std::uint64_t attr, int userns_fd) {
  long tree = sys::call(SYS_open_tree, source, reinterpret_cast<long>(""),
                        OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH | AT_RECURSIVE);
  if (tree < 0) return Error::from_errno(sys::error_of(tree), "idmap: open_tree(OPEN_TREE_CLONE)");
  UniqueFd fd(static_cast<int>(tree));
  struct mount_attr ma;
  std::memset(&ma, 0, sizeof ma);
  ma.attr_set = attr | MOUNT_ATTR_IDMAP;
  ma.userns_fd = static_cast<std::uint64_t>(userns_fd);
  long ret = sys::call(SYS_mount_setattr, fd.get(), reinterpret_cast<long>(""), AT_EMPTY_PATH | AT_RECURSIVE,
                       reinterpret_cast<long>(&ma), sizeof ma);
  if (ret < 0) return Error::from_errno(sys::error_of(ret), "idmap: mount_setattr(MOUNT_ATTR_IDMAP)");
  return fd;
}

}  // namespace corral
