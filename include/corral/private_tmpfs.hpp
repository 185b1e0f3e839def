// private_tmpfs: a tmpfs of one run's own mounted over a host path (the
// process tier's /dev/shm under --confine-writes, its workspace as root
// when sized: process_runner.cpp) in the run's mount
// namespace, so what the run writes there is neither the host's nor any
// other run's, and dies with the run.
//
// Prepare in the parent (PrivateTmpfs::prepare: fsopen, fsconfig, fsmount
// give a detached mount; needs CAP_SYS_ADMIN, so root) -> apply in the
// child, which runs in a mount namespace of its own (clone with
// CLONE_NEWNS): attach_private_tmpfs_in_child makes the mount that holds
// the target private there (a shared one would carry the new mount back
// into the host's namespace) and move_mounts the tmpfs onto the target.
// The child must do that before Landlock (a Landlock domain may not mount)
// and before the default seccomp filter (which denies the mount family).
//
// Landlock names inodes: a write rule for the path would name the host
// directory the tmpfs covers, not the tmpfs. Name fd() instead
// (LandlockSpec::allow_writes_beneath).
#pragma once

#include <cstdint>
#include <string>

#include "corral/fd.hpp"
#include "corral/status.hpp"

namespace corral {

class PrivateTmpfs {
 public:
  // Parent: a detached tmpfs of `bytes`, mode 1777 (what /dev/shm has:
  // every uid may create, none may remove another's), nosuid and nodev, to
  // go over `target` (an absolute path to a directory). Errors name the
  // call: "private tmpfs for /dev/shm: fsopen: Operation not permitted".
  static Expected<PrivateTmpfs> prepare(const std::string& target, std::uint64_t bytes);
  // Parent: a detached tmpfs made elsewhere (`mount_fd`, an fsmount fd: a
  // run's tmpfs workspace, WorkspaceOptions::tmpfs_mount_point), to go over
  // `target`, its mount point. Holds a dup of mount_fd (closed with the
  // plan); the owner keeps its own to stage and collect through.
  static Expected<PrivateTmpfs> adopt(const std::string& target, int mount_fd, std::uint64_t bytes);

  PrivateTmpfs(PrivateTmpfs&&) noexcept = default;
  PrivateTmpfs& operator=(PrivateTmpfs&&) noexcept = default;

  // The detached mount's root (O_CLOEXEC): what the child attaches, and
  // what a Landlock rule names.
  int fd() const noexcept { return mount_.get(); }
  const std::string& target() const noexcept { return target_; }
  std::uint64_t bytes() const noexcept { return bytes_; }
  // The mount point that holds target (target itself when it is one, else
  // the nearest mount above it): made private in the child.
  const std::string& holder() const noexcept { return holder_; }

 private:
  PrivateTmpfs() = default;
  UniqueFd mount_;
  std::string target_;
  std::string holder_;
  std::uint64_t bytes_ = 0;
};

// Child, between clone and exec, in a mount namespace of its own (a copy of
// the parent's): mount(MS_PRIVATE) on holder(), then move_mount(fd(),
// target()). Raw syscalls only; returns 0 or a positive errno.
int attach_private_tmpfs_in_child(const PrivateTmpfs& tmpfs) noexcept;

}  // namespace corral
