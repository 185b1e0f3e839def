// idmap: idmapped mounts (mount_setattr MOUNT_ATTR_IDMAP, kernel >= 5.12).
// A detached copy of a host directory whose files, seen and written through
// it, change owner by a user namespace's map: the container tier uses it so
// that what a run writes through a writable bind lands on the host as the
// directory's owner instead of the run's host uid (container.hpp).
//
// Parent-side only, and root only: the kernel lets a mount be idmapped by a
// holder of CAP_SYS_ADMIN over the filesystem's user namespace (the host's
// for ext4, xfs, btrfs, tmpfs), which a child in its own user namespace is
// not. The filesystem must support it (FS_ALLOW_IDMAP; EINVAL otherwise).
#pragma once

#include <sys/types.h>

#include <cstdint>

#include "corral/fd.hpp"
#include "corral/status.hpp"

namespace corral {

// One id of each kind, as the mount's map: a file owned by `disk_uid` on
// the filesystem is seen through the mount as owned by `kernel_uid`, and a
// file `kernel_uid` creates through it is owned by `disk_uid` on disk. Ids
// the map does not name are seen as the overflow id (65534) and cannot be
// written as.
struct IdmapIds {
  uid_t disk_uid;
  uid_t kernel_uid;
  gid_t disk_gid;
  gid_t kernel_gid;
};

// A user namespace fd with exactly that map ("disk kernel 1" in uid_map and
// gid_map): a helper process unshares it, we write its maps, open
// /proc/PID/ns/user and let it go (reaped before returning). ~0.3 ms.
// Refuses a map that sends anything to or from id 0.
Expected<UniqueFd> make_idmap_userns(const IdmapIds& ids);

// A detached, recursive copy (open_tree OPEN_TREE_CLONE|AT_RECURSIVE) of
// the mount at the O_PATH fd `source`, with MOUNT_ATTR_* `attr` and the
// user namespace `userns_fd`'s map set on all of it, as an O_CLOEXEC fd for
// move_mount. An error names the call (mount_setattr EINVAL: the
// filesystem, or a mount under the source, cannot be idmapped).
Expected<UniqueFd> open_idmapped_tree(int source, std::uint64_t attr, int userns_fd);

}  // namespace corral
