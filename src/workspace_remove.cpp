// The workspace's removal walk (workspace.hpp, Workspace::remove): a tree
// the child controlled, removed without following a symlink, entering a
// mount or needing a stack or an fd per level. Parent side only.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "workspace_fs.hpp"

namespace corral::wsfs {
namespace {


// An O_RDONLY fd of directory `name` below parent that we may list and
// unlink in: a 000 or 0500 directory left by the child is chmod'ed 0700
// first (through an O_PATH fd of the very inode, via /proc/self/fd, so a
// symlink is never followed: O_NOFOLLOW|O_DIRECTORY refuses one).
Expected<UniqueFd> open_for_removal(int parent, const std::string& name) {
  UniqueFd fd(::openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd && errno == EACCES) {
    // "." (the root) cannot even be looked up in a 000 directory: use the
    // O_PATH fd we already hold.
    UniqueFd path(name == "." ? ::fcntl(parent, F_DUPFD_CLOEXEC, 0)
                              : ::openat(parent, name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!path) return errno_error("open");
    std::string proc = "/proc/self/fd/" + std::to_string(path.get());
    if (::chmod(proc.c_str(), 0700) != 0) return errno_error("chmod 0700");
    fd.reset(::openat(path.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  }
  if (!fd) return errno_error("open");
  struct stat st {};
  if (::fstat(fd.get(), &st) == 0 && (st.st_mode & 0700) != 0700) (void)::fchmod(fd.get(), 0700);
  return fd;
}

// One directory of the walk: its entry name in the parent, its inode (to
// know the parent again when climbing back with ".."), and the
// subdirectories still to remove. No path: a path per level costs
// O(depth^2) in a tree the child made as deep as it liked (40,000 levels
// were 1.6 GB); an error message builds the one it needs (path_of).
struct Level {
  std::string name;
  dev_t dev;
  ino_t ino;
  std::vector<std::string> subdirs = {};
  std::size_t next = 0;
};

// "a/b/" (the stack below the root, each name with a trailing '/') then
// `leaf`: the path an error message names. A deep one keeps its first and
// last 80 bytes around "...", so that a message stays readable and small
// whatever the depth.
std::string path_of(const std::vector<Level>& stack, std::string_view leaf) {
  constexpr std::size_t kEnds = 80;
  std::size_t total = leaf.size();
  for (std::size_t i = 1; i < stack.size(); ++i) total += stack[i].name.size() + 1;
  std::string path;
  if (total <= 2 * kEnds + 3) {
    for (std::size_t i = 1; i < stack.size(); ++i) path += stack[i].name + "/";
    return path + std::string(leaf);
  }
  for (std::size_t i = 1; i < stack.size() && path.size() < kEnds; ++i) path += stack[i].name + "/";
  std::string tail(leaf);
  for (std::size_t i = stack.size(); i-- > 1 && tail.size() < kEnds;) tail = stack[i].name + "/" + tail;
  path.resize(std::min(path.size(), kEnds));
  return path + "..." + tail.substr(tail.size() - std::min(tail.size(), kEnds)) + " (" +
         std::to_string(stack.size() - 1) + " levels deep)";
}

// Errors keeps the first error and counts the rest: only the first
// message (and the path in it) is built.
template <typename MakeError>
void add_error(Errors& errors, MakeError&& make) {
  if (errors.first) ++errors.more;
  else errors.add(make());
}

// Unlinks every non-directory entry of fd (the directory at the top of
// `stack`) as readdir returns it (no listing of a million names in
// memory); returns the subdirectories. POSIX leaves open whether readdir
// sees every entry while the directory changes, so passes repeat until one
// removes nothing; the subdirectory list of that quiet pass is complete.
// With a budget, each entry met counts one down; at 0 it stops
// (*out_of_budget).
std::vector<std::string> unlink_files(int fd, const std::vector<Level>& stack, Errors& errors, std::size_t* budget,
                                      bool* out_of_budget) {
  std::vector<std::string> subdirs;
  for (bool removed_some = true; removed_some;) {
    removed_some = false;
    subdirs.clear();
    auto st = for_each_entry(fd, [&](const char* name, unsigned char type) {
      if (type == DT_UNKNOWN) type = entry_type(fd, Entry{name, type});
      if (budget && (*budget)-- == 0) {
        *budget = 0;
        *out_of_budget = true;
        return false;
      }
      if (type == DT_DIR) {
        subdirs.emplace_back(name);
      } else if (::unlinkat(fd, name, 0) == 0) {
        removed_some = true;
      } else if (errno == EISDIR) {
        subdirs.emplace_back(name);
      } else {
        const int err = errno;
        add_error(errors, [&] { return Error::from_errno(err, "unlink " + quoted(path_of(stack, name))); });
      }
      return true;
    });
    if (*out_of_budget) break;
    if (!st) {
      add_error(errors, [&] { return st.error().context(quoted(path_of(stack, ""))); });
      break;
    }
  }
  return subdirs;
}

}  // namespace

// Removes everything below the root (not the root itself). Iterative, one
// directory fd open at a time, climbing back with ".." checked against the
// remembered (dev, ino), so a tree of any depth costs neither stack nor
// fds, and memory only for one name per level (plus the subdirectory
// names of each level still to visit).
bool remove_contents(int root_path_fd, Errors& errors, std::size_t* unlink_budget) {
  // The usual leftovers are an empty home/ and tmp/: rmdir them straight
  // away, without a walk each (rmdir never follows a symlink and refuses a
  // non-empty directory, a mount point or another type of file; the walk
  // below deals with whatever is still there).
  for (const char* sub : {"home", "tmp"}) (void)::unlinkat(root_path_fd, sub, AT_REMOVEDIR);
  auto root = open_for_removal(root_path_fd, ".");
  if (!root) {
    errors.add(root.error().context("open workspace root"));
    return true;
  }
  UniqueFd cur = std::move(*root);
  struct stat st {};
  if (::fstat(cur.get(), &st) != 0) {
    errors.add(errno_error("stat workspace root"));
    return true;
  }
  const dev_t root_dev = st.st_dev;
  std::vector<Level> stack;
  stack.push_back({".", st.st_dev, st.st_ino});
  bool out_of_budget = false;
  stack.back().subdirs = unlink_files(cur.get(), stack, errors, unlink_budget, &out_of_budget);
  while (!out_of_budget) {
    if (unlink_budget && *unlink_budget == 0) return false;  // each directory removed counts one too
    Level& top = stack.back();
    if (top.next < top.subdirs.size()) {
      // Moved out: the name is not needed in the list again, and a level
      // then holds only the names still to visit.
      std::string name = std::move(top.subdirs[top.next++]);
      auto child = open_for_removal(cur.get(), name);
      if (!child) {
        // Raced into a non-directory (symlink, file): unlink it, never follow.
        if (::unlinkat(cur.get(), name.c_str(), 0) != 0)
          add_error(errors, [&] { return child.error().context("directory " + quoted(path_of(stack, name + "/"))); });
        continue;
      }
      struct stat cst {};
      if (::fstat(child->get(), &cst) != 0 || cst.st_dev != root_dev) {
        add_error(errors, [&] {
          return Error(EXDEV,
                       "directory " + quoted(path_of(stack, name + "/")) + " is another filesystem; not entered");
        });
        continue;
      }
      stack.push_back({std::move(name), cst.st_dev, cst.st_ino});  // `top` is not used past here
      stack.back().subdirs = unlink_files(child->get(), stack, errors, unlink_budget, &out_of_budget);
      cur = std::move(*child);
      continue;
    }
    if (stack.size() == 1) return true;
    UniqueFd parent(::openat(cur.get(), "..", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    struct stat pst {};
    const Level& up = stack[stack.size() - 2];
    if (!parent || ::fstat(parent.get(), &pst) != 0 || pst.st_dev != up.dev || pst.st_ino != up.ino) {
      add_error(errors, [&] {
        return Error(EIO, "lost the parent of " + quoted(path_of(stack, "")) + " (moved during removal?)");
      });
      return true;
    }
    cur = std::move(parent);
    const std::string done = std::move(stack.back().name);
    stack.pop_back();
    if (unlink_budget && *unlink_budget > 0) --*unlink_budget;
    if (::unlinkat(cur.get(), done.c_str(), AT_REMOVEDIR) != 0) {
      const int err = errno;
      add_error(errors,
                [&] { return Error::from_errno(err, "remove directory " + quoted(path_of(stack, done + "/"))); });
    }
  }
  return false;  // out of budget
}

}  // namespace corral::wsfs

namespace corral {

using namespace wsfs;

Expected<int> Workspace::remove_leftovers(const std::string& base_dir, std::string_view tag) {
  const std::string who = "workspace: leftovers in " + quoted(base_dir);
  if (tag.empty() || tag.find_first_not_of("0123456789abcdefghijklmnopqrstuvwxyz") != std::string_view::npos)
    return Error::invalid(who + ": tag " + quoted(tag) + " must be [0-9a-z]+");
  UniqueFd base(::open(base_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!base) return errno_error(who);
  struct stat st {};
  if (::fstat(base.get(), &st) != 0) return errno_error(who + ": stat");
  // Only a base nobody else could have planted names in (WorkspaceBase's rule).
  if (st.st_uid != ::geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
    return Error(EPERM, who + ": not a base of ours (owner or mode); left alone");
  const std::string prefix = "corral-" + std::string(tag) + "-";
  std::vector<std::string> names;
  auto listed = for_each_entry(base.get(), [&](const char* name, unsigned char) {
    if (std::string_view(name).rfind(prefix, 0) == 0) names.emplace_back(name);
    return true;
  });
  if (!listed) return listed.error().context(who);
  int removed = 0;
  Errors errors;
  for (const auto& name : names) {
    UniqueFd dir(::openat(base.get(), name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!dir) continue;  // a symlink or a file by that name: not a workspace
    remove_contents(dir.get(), errors);  // a tmpfs mounted there: emptied through `dir`, then unmounted
    const std::string path = base_dir + "/" + name;
    if (int e = unmount_workspace_at(path)) errors.add(Error::from_errno(e, "unmount " + quoted(path)));
    if (::unlinkat(base.get(), name.c_str(), AT_REMOVEDIR) == 0) ++removed;
    else errors.add(errno_error("remove " + quoted(base_dir + "/" + name)));
  }
  if (errors.first) return errors.first->context(who);
  return removed;
}

}  // namespace corral
