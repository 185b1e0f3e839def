// Internal: what every tmpfs corral mounts for a run is bounded by (a
// workspace, a private /dev/shm, a container's /tmp, /dev/shm, --tmpfs and
// root), and the detached one a workspace or a private /dev/shm is made
// as. One place, so the bound cannot differ between the mount(2) data
// string of a mount tree and the fsconfig keys of a detached mount.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "corral/fd.hpp"
#include "corral/status.hpp"

namespace corral::detail {

// A tmpfs's `size` counts pages of file content only. An empty file, a
// directory, a symlink, a hard link or a user xattr costs kernel memory
// (an inode and a dentry: ~1 KiB an empty file, measured on 6.18) and no
// size, and the kernel's default nr_inodes is one per two pages of RAM
// (3 million on a 24 GiB host), whatever the size. So a run with a 1 MiB
// workspace could pin gigabytes of kernel memory in empty files, charged
// to no one when it has no memory cgroup.
//
// One inode per page of the size, plus a fixed allowance for directories:
// a tree of non-empty files that fits the size always fits the inodes
// (each such file already takes a page of the size), and what inodes can
// pin stays about a quarter of the size. Since 6.6 the kernel also caps
// a tmpfs's user xattrs by nr_inodes (1 KiB of "inode space" each).
inline constexpr std::uint64_t kTmpfsInodeAllowance = 1024;
inline constexpr std::uint64_t kTmpfsBytesPerInode = 4096;

inline std::uint64_t tmpfs_max_inodes(std::uint64_t bytes) {
  return bytes / kTmpfsBytesPerInode + kTmpfsInodeAllowance;
}

// The mount(2) data for a tmpfs of `bytes` with root mode `mode` (octal
// text, "1777").
inline std::string tmpfs_mount_data(std::uint64_t bytes, std::string_view mode) {
  return "size=" + std::to_string(bytes) + ",nr_inodes=" + std::to_string(tmpfs_max_inodes(bytes)) +
         ",mode=" + std::string(mode);
}

struct TmpfsOwner {
  uid_t uid;
  gid_t gid;
};

// A detached tmpfs (fsopen, fsconfig, fsmount; nosuid, nodev) of `bytes`,
// its inodes bounded as above, its root `mode` (octal text) and owned by
// `owner` when given; `source` is what mountinfo names it. Each error says
// `who` and the step that failed. Needs CAP_SYS_ADMIN.
Expected<UniqueFd> fsmount_tmpfs(const std::string& who, const char* source, std::uint64_t bytes, const char* mode,
                                 std::optional<TmpfsOwner> owner = std::nullopt);

}  // namespace corral::detail
