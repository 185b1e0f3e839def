#include "tmpfs_options.hpp"

#include <linux/mount.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <utility>
#include <vector>

namespace corral::detail {

Expected<UniqueFd> fsmount_tmpfs(const std::string& who, const char* source, std::uint64_t bytes, const char* mode,
                                 std::optional<TmpfsOwner> owner) {
  UniqueFd fs(static_cast<int>(::syscall(SYS_fsopen, "tmpfs", FSOPEN_CLOEXEC)));
  if (!fs) return Error::from_errno(errno, who + ": fsopen");
  std::vector<std::pair<const char*, std::string>> config = {{"source", source},
                                                             {"size", std::to_string(bytes)},
                                                             {"nr_inodes", std::to_string(tmpfs_max_inodes(bytes))},
                                                             {"mode", mode}};
  if (owner) {
    config.emplace_back("uid", std::to_string(owner->uid));
    config.emplace_back("gid", std::to_string(owner->gid));
  }
  for (const auto& [key, value] : config)
    if (::syscall(SYS_fsconfig, fs.get(), FSCONFIG_SET_STRING, key, value.c_str(), 0) != 0)
      return Error::from_errno(errno, who + ": fsconfig " + key + "=" + value);
  if (::syscall(SYS_fsconfig, fs.get(), FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) != 0)
    return Error::from_errno(errno, who + ": fsconfig create");
  UniqueFd mnt(static_cast<int>(::syscall(SYS_fsmount, fs.get(), FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)));
  if (!mnt) return Error::from_errno(errno, who + ": fsmount");
  return mnt;
}

}  // namespace corral::detail
