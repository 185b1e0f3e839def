// The run's private directory: created fresh (0700) with home/ and tmp/
// for HOME and TMPDIR, inputs staged in before the child starts, outputs
// collected after it ended or was killed (output_collect.hpp, through this
// workspace's fd), then removed on every path, whatever the child left behind.
//
// Parent-side only; blocking file I/O (the supervisor runs it before spawn
// and after the child is reaped, not from the io_uring loop's hot path).
//
// Trust: after the child has run, everything under the workspace is
// hostile. All access is relative to the directory fd this object holds
// (never by path): collection and staging use openat2 with
// RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS (| RESOLVE_NO_MAGICLINKS), so a
// planted symlink or ".." cannot lead out; removal walks with
// O_NOFOLLOW|O_DIRECTORY and never follows a symlink (it unlinks it).
// Needs openat2 (Linux 5.6).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "corral/fd.hpp"
#include "corral/limits.hpp"
#include "corral/status.hpp"
#include "corral/workspace_base.hpp"

namespace corral {

struct WorkspaceOwner {
  uid_t uid;
  gid_t gid;
};

// choose_workspace_base, WorkspaceBaseChoice, is_tmpfs: workspace_base.hpp.


// A base directory opened once and shared by every workspace created in it
// (a supervisor keeps one for all its runs), so that a workspace whose own
// fd is released (Workspace::release_fd) holds no fd at all.
//
// Trust: a released workspace is found again BY NAME under this fd, so no
// one but corral may be able to rename or replace entries in it. open()
// uses `dir` itself only when it is ours (st_uid == euid) and writable by
// nobody else (no group/other write bit). Otherwise (e.g. /tmp, 1777) it
// uses corral-<euid> inside it: a directory of ours, mode 0711, made once
// and kept (as tmux keeps /tmp/tmux-<uid>). A run's uid can pass through
// it to its own workspace (search bit) but cannot list, create, rename or
// remove anything there. If that name is taken by someone else or is a
// symlink, a fresh corral-<euid>-<16 hex> is made instead and removed (if
// empty) when the base goes. A run that has corral's own uid (not root)
// can still rename in a base of ours; reacquire() then sees another inode
// and refuses to touch it.
class WorkspaceBase {
 public:
  // "" means choose_workspace_base(""). Errors name the directory.
  static Expected<std::shared_ptr<const WorkspaceBase>> open(const std::string& dir = "");
  ~WorkspaceBase();
  WorkspaceBase(const WorkspaceBase&) = delete;
  WorkspaceBase& operator=(const WorkspaceBase&) = delete;

  int fd() const noexcept { return fd_.get(); }            // O_PATH|O_DIRECTORY
  const std::string& path() const noexcept { return path_; }  // where workspaces go
  bool is_private() const noexcept { return private_; }  // corral-<euid>[-hex] inside the given one

 private:
  WorkspaceBase() = default;
  std::string path_;
  UniqueFd fd_;
  bool private_ = false;
  UniqueFd parent_;   // the given directory, when path_ is a fallback to remove
  std::string name_;  // the fallback's entry name in parent_
};

struct WorkspaceOptions {
  // Parent directory of the workspace; "" means choose_workspace_base("").
  // Ignored when `base` is set.
  std::string base_dir;
  // When set (corral runs as root and the child drops to this uid), the
  // workspace root, home/, tmp/ and every staged input are chown'ed to it
  // before the child starts. Note: the owner may then rename the
  // workspace directory inside a sticky base; corral never relies on the
  // path after create() (all access is through the held fds).
  std::optional<WorkspaceOwner> owner;
  // Create the workspace in this shared base (no fd of its own for the
  // base; release_fd() allowed).
  std::shared_ptr<const WorkspaceBase> base = nullptr;
  // Make tmp/ (the process tiers' TMPDIR). A container run has a tmpfs
  // /tmp of its own, and on a disk each directory made and removed costs.
  bool make_tmp = true;
  // Make the workspace a tmpfs of this many bytes (fsopen/fsmount: needs
  // CAP_SYS_ADMIN, i.e. root) instead of a directory under the base. It is
  // a per-run size limit (a write past it fails with ENOSPC), nothing of it
  // touches the host's disk, and its pages are charged to the memory
  // cgroup of whoever writes them (a run's files count against its
  // memory_bytes). It has no path: it is reached through dirfd() and put
  // into a mount tree with MountTreeSpec::workspace_mount(). The kernel
  // frees it once the workspace's fd and the last mount of it are gone, so
  // a killed supervisor leaves none behind. The base is not used.
  std::optional<std::uint64_t> tmpfs_bytes = std::nullopt;
  // With tmpfs_bytes: also an empty directory under the base (named as a
  // directory workspace is, WorkspaceOptions::name_tag too) for the tmpfs
  // to go over in the run's own mount namespace (tier process:
  // PrivateTmpfs::over_workspace). path(), home() and tmp() then name where
  // the run sees it. Nothing is ever written to that directory; remove()
  // removes it. The tmpfs gets tmp/ as well when make_tmp says so.
  bool tmpfs_mount_point = false;
  // With tmpfs_mount_point: mount the tmpfs over that directory now, in our
  // own mount namespace, instead of in the run's (which then needs one of
  // its own: ~0.2 ms a run). It is in the host's mount table while the run
  // lasts, under a base that only root enters; release_fd() works as for a
  // directory (found again by name, checked by device and inode), remove()
  // empties and unmounts it (MNT_DETACH), and a supervisor that dies leaves
  // it to the leftovers sweep (remove_leftovers unmounts what it finds).
  bool tmpfs_on_host = false;
  // Make the tree and remove it by its name below `base`, holding no fd of
  // it in between: the workspace starts released (dirfd() is -1 until
  // reacquire(), which staging calls itself) and remove() takes the empty
  // tree a run usually leaves by name. 4 calls to make (mkdirat, fstatat,
  // mkdirat home/ and tmp/) and 4 to remove (fstatat, three rmdir) instead
  // of 14 through fds. Safe because a shared base is a directory of our
  // euid that nobody else can write (WorkspaceBase): no one with fewer
  // rights than ours can plant or swap a name there, and rmdir never
  // follows a symlink in its last component. Ignored without `base` and
  // for a tmpfs workspace.
  bool by_name = false;
  // Names the workspace corral-<tag>-<16 hex> instead of corral-<16 hex>:
  // a supervisor puts its token here, so that what it leaves when it dies
  // is found again by it (remove_leftovers; leftovers.hpp). [0-9a-z] only.
  std::string name_tag = {};
};

class Workspace {
 public:
  // A fresh corral-<16 hex> directory (mode 0700) with home/ and tmp/
  // (0700) under the base. Errors name the base directory.
  static Expected<Workspace> create(const WorkspaceOptions& options = {});

  Workspace(Workspace&& other) noexcept;
  Workspace& operator=(Workspace&& other) noexcept;
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  // Removes the tree; errors are swallowed here (call remove() to see them).
  ~Workspace();

  // As created; "" for a tmpfs workspace (WorkspaceOptions::tmpfs_bytes),
  // which has no path on the host, unless it has a mount point there
  // (WorkspaceOptions::tmpfs_mount_point).
  const std::string& path() const noexcept { return path_; }
  bool on_tmpfs() const noexcept { return tmpfs_bytes_ > 0; }
  bool tmpfs_on_host() const noexcept { return mounted_on_host_; }  // WorkspaceOptions::tmpfs_on_host
  std::uint64_t tmpfs_bytes() const noexcept { return tmpfs_bytes_; }
  std::string home() const { return path_ + "/home"; }
  std::string tmp() const { return path_ + "/tmp"; }
  // O_PATH|O_DIRECTORY|O_CLOEXEC fd of the root; owned by the workspace.
  // -1 while released (WorkspaceOptions::by_name: from the start).
  int dirfd() const noexcept { return dir_.get(); }
  bool removed() const noexcept { return !dir_.valid() && !released_ && !mount_point_; }

  // While the child runs nothing needs the workspace: close the root fd, so
  // a supervised run holds only its pidfd and pipes. Needs a shared
  // WorkspaceBase (the workspace is found again by name below it; see the
  // trust note there); refused for a workspace with a base of its own. A
  // tmpfs workspace has no name to be found by: it keeps its fd (no-op).
  Status release_fd();
  // Reopen the root by name below the base (O_NOFOLLOW) and check it is the
  // very inode create() made; a moved or replaced workspace is an Error and
  // stays untouched. No-op unless released. remove() calls it itself;
  // output collection needs it called first.
  Status reacquire();
  bool released() const noexcept { return released_; }

  // Inputs, before the child starts. `name` is a relative path: no leading
  // '/', no "." or ".." segment, no empty segment, no NUL; parents are
  // created (0755). The file must not exist yet. mode: permission bits
  // only (<= 0777). Errors name the input.
  Status stage_bytes(std::string_view name, std::string_view bytes, mode_t mode = 0644);
  // Copies (never links) a regular host file; keeps its permission bits
  // (& 0777). A FIFO or device on the host side is refused, not opened blocking.
  // At most `max_bytes` (unset: the default artifact_bytes, 64 MiB): a file
  // over it, or one that grows past it while it is copied, is refused
  // naming the cap. A file someone else controls (a sparse terabyte, a log
  // that grows on) cannot fill the workspace's memory or disk; a caller
  // that means more says how much.
  Status stage_file(const std::string& host_path, std::string_view name, bool no_symlinks = false,
                    std::optional<std::uint64_t> max_bytes = std::nullopt);
  // A host file as stage_file does, or a host directory copied recursively
  // under `name` (workspace_stage.cpp), both with the caps outputs have
  // (artifact_bytes per file, artifact_total_bytes, artifact_count: over
  // one, the input is refused naming it and the cap). A file is measured
  // twice: its size before the copy, and the bytes the copy reads, so one
  // that grows while copied, or says 0 bytes and reads on (a /proc file),
  // stops at the cap too; a FIFO, device or socket is refused (a single
  // one) or skipped (in a tree), never opened blocking. Inside the tree no link is
  // followed: a symlink is skipped (in `skipped`, with FIFOs, devices and
  // sockets), so a link out of the tree never brings its target in.
  struct TreeCaps {
    std::uint64_t file_bytes = UINT64_MAX, total_bytes = UINT64_MAX, count = UINT64_MAX;
  };
  Status stage_path(const std::string& host_path, std::string_view name, bool no_symlinks, const TreeCaps& caps,
                    std::vector<std::string>& skipped);

  // Outputs, after the child ended, are read out through dirfd() by the
  // one output collector (output_collect.hpp), never by path.

  // A dead supervisor's workspaces: every corral-<tag>-* directory directly
  // below base_dir (a base of ours: owned by our euid, writable by nobody
  // else, not a symlink; otherwise nothing is touched), removed as remove()
  // does. Returns how many were removed; the first failure is the error.
  static Expected<int> remove_leftovers(const std::string& base_dir, std::string_view tag);

  // Deletes the whole tree: 000-mode directories are chmod'ed 0700 before
  // descending, symlinks are unlinked (never followed), other filesystems
  // mounted inside are not entered. Works as root on files of another uid
  // and as an ordinary user on its own files. Idempotent.
  Status remove();

  // remove(), for a caller that must not wait long: the supervisor's loop,
  // which every other run's pipes, deadlines and exits wait on. A directory
  // workspace whose walk meets more than kEntriesInCaller entries (a run
  // that left 200,000 files cost the loop 0.86 s here) is finished on
  // corral's background thread (background_work.hpp), whose errors nobody
  // is told; a tmpfs workspace goes as remove() has it. `once_gone` is
  // called exactly once, after the directory is gone (or its removal has
  // failed): here, before this returns, or on that thread. What must not
  // outlive the files goes there (a run's uid: a later run of it could
  // enter the directory).
  enum class Removal { done, in_background };
  static constexpr std::size_t kEntriesInCaller = 4096;
  Expected<Removal> remove_or_hand_off(std::function<void()> once_gone);

 private:
  Status remove_walk(std::size_t* budget, bool* unfinished);  // remove()'s, in parts
  bool remove_if_empty();  // remove()'s fast path: an emptied root goes without the walk
  bool remove_by_name();   // the same for a released workspace, by name (by_name)
  bool tmpfs_emptied_by_name();  // the same for a released tmpfs_on_host, but for its mount
  void remove_subdirs(int at, const std::string& prefix) const;  // rmdir home/ and tmp/
  Status remove_tmpfs();        // unmounted and its mount point gone here; emptied and closed in the background
  Status remove_mount_point();  // a tmpfs's directory on the host (tmpfs_mount_point)
  static Expected<Workspace> create_by_name(const WorkspaceOptions& options, const std::string& prefix);
  Workspace() = default;

  int base_fd() const noexcept { return shared_base_ ? shared_base_->fd() : base_.get(); }
  static Expected<Workspace> create_tmpfs(const WorkspaceOptions& options);
  Status make_dir_in_base(const WorkspaceOptions& options);  // base_/shared_base_, name_, path_
  // For messages: the quoted path, or "tmpfs workspace <name>".
  std::string label() const;
  Status explain_full(Status st) const;
  // Copies the open regular file `src` to input `name` with `mode`: at most
  // `max_bytes`, or the input is removed again and the Error is EFBIG with
  // the message `too_big` (when not empty). The bytes copied in `copied`.
  Status stage_copy(int src, std::string_view name, mode_t mode, const std::string& label,
                    std::uint64_t max_bytes = UINT64_MAX, const std::string& too_big = {},
                    std::uint64_t* copied = nullptr);
  // An empty directory at input `name` (and its parents).
  Status stage_dir(std::string_view name, const std::string& label);
  struct TreeWalk;
  // Host directory `dir` (an fd) into input `name`, recursively.
  Status stage_tree(int dir, const std::string& name, TreeWalk& walk, int depth);

  std::string path_;
  std::string name_;  // entry name in the base directory
  UniqueFd base_;     // O_PATH fd of the base directory (when not shared)
  std::shared_ptr<const WorkspaceBase> shared_base_;
  UniqueFd dir_;      // O_PATH fd of the workspace root (closed while released)
  dev_t dev_ = 0;     // the root's identity, checked by reacquire()
  ino_t ino_ = 0;
  bool released_ = false;
  std::optional<WorkspaceOwner> owner_;
  std::uint64_t tmpfs_bytes_ = 0;  // > 0: a tmpfs of this size, dir_ its fsmount fd
  bool by_name_ = false;           // made by name (WorkspaceOptions::by_name)
  bool has_tmp_ = true;            // tmp/ was made (WorkspaceOptions::make_tmp)
  bool mount_point_ = false;       // a tmpfs's directory name_ under the base (tmpfs_mount_point)
  bool mounted_on_host_ = false;   // the tmpfs is mounted there in our namespace (tmpfs_on_host)
};

}  // namespace corral
