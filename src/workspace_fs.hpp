// Internal to the workspace sources (workspace*.cpp, output_collect.cpp):
// fd-relative file helpers. Parent-side only; not installed.
#pragma once

#include <dirent.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "corral/fd.hpp"
#include "corral/status.hpp"
#include "corral/syscalls.hpp"
#include "corral/workspace.hpp"

namespace corral::wsfs {

// Beneath the directory fd, no symlink anywhere (the last component
// included: ELOOP; O_NOFOLLOW is left out of directory opens because with
// O_DIRECTORY it turns that into an ambiguous ENOTDIR), no magic links.
constexpr std::uint64_t kResolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
// Collection reads a tree the child controlled: no mount crossings either.
constexpr std::uint64_t kResolveHostile = kResolve | RESOLVE_NO_XDEV;

// openat2(2) (Linux 5.6): the fd, or -1 with errno set.
int openat2_fd(int dirfd, const std::string& path, std::uint64_t flags, std::uint64_t mode, std::uint64_t resolve);

std::string quoted(std::string_view s);
Error errno_error(std::string_view what);
std::vector<std::string> split_segments(std::string_view path);
Status write_all(int fd, std::string_view data);
bool same_inode(const struct stat& a, const struct stat& b);
// Whether entry `name` below `parent` (not followed) is still the inode of
// `fd`: what a removal checks before it unlinks a name someone could have
// swapped.
bool entry_is(int parent, const std::string& name, int fd);

struct Entry {
  std::string name;
  unsigned char type;  // DT_*
};
// Calls fn(name, d_type) for each entry of a directory fd ("." and ".."
// left out) until fn returns false.
Status for_each_entry(int fd, const std::function<bool(const char*, unsigned char)>& fn);
// At most `max` entries of a directory fd, sorted by name.
Expected<std::vector<Entry>> list_dir(int fd, std::size_t max);
// d_type, or lstat's answer when the filesystem does not fill it in.
unsigned char entry_type(int dirfd, const Entry& e);
const char* dt_name(unsigned char type);

// Creates (0755, chown'ed to owner) and walks the parents of segs (all but
// the last) below root without following symlinks; an O_PATH fd of the
// innermost. `label` starts every error message.
Expected<UniqueFd> open_parents(int root, const std::vector<std::string>& segs, const std::string& label,
                                const std::optional<WorkspaceOwner>& owner);
// O_CREAT|O_EXCL below parent, never through a symlink; says so when the
// destination is one.
Expected<UniqueFd> create_exclusive(int parent, const std::string& leaf, mode_t mode, const std::string& label);

// Keeps the first error and counts the rest, so one stubborn file does not
// stop the removal of everything else.
struct Errors {
  std::optional<Error> first;
  std::size_t more = 0;
  void add(Error e) {
    if (first) ++more;
    else first = std::move(e);
  }
};

// Removes everything below the root fd (not the root itself): iterative,
// one directory fd at a time; what could not go is in `errors`. With
// `unlink_budget`, stops once that many entries went (counted down) and
// returns false when the tree was not empty yet: a later call goes on
// where it left off (the walk starts again at the root, over what is left).
bool remove_contents(int root_path_fd, Errors& errors, std::size_t* unlink_budget = nullptr);

// Detaches the mount at `path` (a tmpfs workspace mounted on the host,
// WorkspaceOptions::tmpfs_on_host), not following a symlink there. 0 when
// it went or nothing is mounted there (EINVAL); else errno.
int unmount_workspace_at(const std::string& path);

}  // namespace corral::wsfs
