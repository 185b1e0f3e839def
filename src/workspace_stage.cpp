// Staging into a workspace (workspace.hpp): stage_bytes, stage_copy and
// stage_dir, and stage_file and stage_path, an input that is a host file or
// a whole host directory. Parent-side, before the child starts. The tree is
// walked from fds (openat O_NOFOLLOW below the directory opened first), so
// nothing renamed or linked into it while we copy leads outside it.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <functional>

#include <linux/openat2.h>

#include "corral/request.hpp"  // default_limits: the default artifact_bytes
#include "corral/workspace.hpp"
#include "workspace_fs.hpp"

namespace corral {

using namespace wsfs;

// Deep enough for any real tree; a deeper one is refused, not recursed into.
constexpr int kMaxTreeDepth = 64;

// Why an input is refused: the caps of outputs.
const char* const kOver = " (an input has the caps of outputs)";

namespace {

// The host side of an input, and its stat. O_NONBLOCK: opening a FIFO must
// not hang the supervisor. no_symlinks: the door checked this resolved
// path; a symlink swapped into it since fails with ELOOP instead of leading
// out of the allowed prefix.
Expected<UniqueFd> open_input(const std::string& host_path, bool no_symlinks, const std::string& label,
                              struct stat& st) {
  constexpr int kFlags = O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC;
  UniqueFd src(no_symlinks ? openat2_fd(AT_FDCWD, host_path, kFlags, 0, RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)
                           : ::open(host_path.c_str(), kFlags));
  if (!src) return errno_error(label);
  if (::fstat(src.get(), &st) != 0) return errno_error(label + ": stat");
  return src;
}

}  // namespace

struct Workspace::TreeWalk {
  TreeCaps caps;
  std::vector<std::string>& skipped;
  std::string label;  // "workspace: input 'data' from '/host/data'"
  std::uint64_t files = 0, bytes = 0;

  // One regular file of the input (`rel` its name in the workspace, `shown`
  // in messages), counted against every cap: its size before the copy, then
  // the bytes the copy read, so a file that grows while it is copied (or
  // says 0 bytes and reads on) stops at the cap instead of being copied on.
  Status copy(Workspace& ws, int src, const std::string& rel, std::uint64_t size, mode_t mode,
              const std::string& shown) {
    const std::string who = label + (shown.empty() ? "" : ": " + quoted(shown));
    if (size > caps.file_bytes)
      return Error(EFBIG, who + " is " + std::to_string(size) + " bytes, over artifact_bytes=" +
                              std::to_string(caps.file_bytes) + kOver);
    if (++files > caps.count)
      return Error(EFBIG, label + ": more than artifact_count=" + std::to_string(caps.count) + " files" + kOver);
    if (size > caps.total_bytes - std::min(bytes, caps.total_bytes))
      return Error(EFBIG, label + ": more than artifact_total_bytes=" + std::to_string(caps.total_bytes) +
                              " bytes" + kOver);
    // What the copy may still take: the smaller of the two caps.
    const std::uint64_t room = caps.total_bytes - bytes;
    const bool file_cap_binds = caps.file_bytes <= room;
    const std::string too_big =
        file_cap_binds ? who + " grew past artifact_bytes=" + std::to_string(caps.file_bytes) +
                             " bytes while it was copied" + kOver
                       : label + ": more than artifact_total_bytes=" + std::to_string(caps.total_bytes) +
                             " bytes (a file grew while it was copied)" + kOver;
    std::uint64_t copied = 0;
    if (auto s = ws.stage_copy(src, rel, mode, who, std::min(caps.file_bytes, room), too_big, &copied); !s)
      return s;
    bytes += copied;
    return {};
  }
  Status copy(Workspace& ws, int src, const std::string& rel, std::uint64_t size, mode_t mode) {
    return copy(ws, src, rel, size, mode, rel);
  }
};

Status Workspace::stage_tree(int dir, const std::string& name, TreeWalk& walk, int depth) {
  if (depth > kMaxTreeDepth) return Error(ELOOP, walk.label + ": '" + name + "' is more than 64 directories deep");
  auto entries = list_dir(dir, 1u << 20);
  if (!entries) return std::move(entries).error().context(walk.label);
  if (entries->empty()) return stage_dir(name, walk.label);
  for (const auto& e : *entries) {
    std::string rel = name + "/" + e.name;
    struct stat st;
    if (::fstatat(dir, e.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
      return errno_error(walk.label + ": stat '" + rel + "'");
    if (S_ISDIR(st.st_mode)) {
      UniqueFd sub(::openat(dir, e.name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!sub) return errno_error(walk.label + ": open '" + rel + "'");
      if (auto s = stage_tree(sub.get(), rel, walk, depth + 1); !s) return s;
      continue;
    }
    if (!S_ISREG(st.st_mode)) {
      walk.skipped.push_back(rel + (S_ISLNK(st.st_mode) ? " (a symlink)" : " (not a regular file)"));
      continue;
    }
    UniqueFd src(::openat(dir, e.name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
    if (!src) {
      // Replaced by a symlink since the listing: skipped like one.
      if (errno == ELOOP) {
        walk.skipped.push_back(rel + " (a symlink)");
        continue;
      }
      return errno_error(walk.label + ": open '" + rel + "'");
    }
    // What we opened, not what we listed.
    if (::fstat(src.get(), &st) != 0) return errno_error(walk.label + ": stat '" + rel + "'");
    if (!S_ISREG(st.st_mode)) {
      walk.skipped.push_back(rel + " (not a regular file)");
      continue;
    }
    if (auto s = walk.copy(*this, src.get(), rel, static_cast<std::uint64_t>(st.st_size), st.st_mode & 0777); !s)
      return s;
  }
  return {};
}

Status Workspace::stage_file(const std::string& host_path, std::string_view name, bool no_symlinks,
                             std::optional<std::uint64_t> max_bytes) {
  std::string label = "workspace: input " + quoted(name) + " from " + quoted(host_path);
  struct stat st {};
  auto src = open_input(host_path, no_symlinks, label, st);
  if (!src) return std::move(src).error();
  if (!S_ISREG(st.st_mode)) return Error::invalid(label + ": not a regular file (" + dt_name(IFTODT(st.st_mode)) + ")");
  // The cap an --input file has (stage_path's walk: its size, then what
  // the copy reads).
  TreeCaps caps;
  caps.file_bytes = max_bytes ? *max_bytes : *default_limits().get(Limit::artifact_bytes);
  std::vector<std::string> skipped;
  TreeWalk walk{caps, skipped, label};
  return walk.copy(*this, src->get(), std::string(name), static_cast<std::uint64_t>(st.st_size), st.st_mode & 0777, "");
}

Status Workspace::stage_path(const std::string& host_path, std::string_view name, bool no_symlinks,
                             const TreeCaps& caps, std::vector<std::string>& skipped) {
  std::string label = "workspace: input " + quoted(name) + " from " + quoted(host_path);
  struct stat st {};
  auto src = open_input(host_path, no_symlinks, label, st);
  if (!src) return std::move(src).error();
  TreeWalk walk{caps, skipped, label};
  // A single file has the caps a directory's files have: it was uncapped,
  // and `--input` of a 10 GB file filled the workspace's disk before the run.
  if (S_ISREG(st.st_mode))
    return walk.copy(*this, src->get(), std::string(name), static_cast<std::uint64_t>(st.st_size), st.st_mode & 0777,
                     "");
  if (!S_ISDIR(st.st_mode))
    return Error::invalid(label + ": neither a regular file nor a directory (" + dt_name(IFTODT(st.st_mode)) + ")");
  return stage_tree(src->get(), std::string(name), walk, 0);
}

// ---- bytes, a copy, a directory -------------------------------------------

namespace {

// Creates input `name` (validated) below root and lets `fill` write it.
Status stage_into(int root, const std::optional<WorkspaceOwner>& owner, std::string_view name, mode_t mode,
                  const std::string& label, const std::function<Status(int)>& fill) {
  if (auto ok = validate_relative_name(name, "workspace: input"); !ok) return ok;
  if (mode & ~mode_t{0777}) return Error::invalid(label + ": mode must be permission bits only (<= 0777)");
  if (root < 0) return Error(EBADF, label + ": workspace already removed");
  auto segs = split_segments(name);
  auto parent = open_parents(root, segs, label, owner);
  if (!parent) return std::move(parent).error();
  auto fd = create_exclusive(parent->get(), segs.back(), mode, label);
  if (!fd) return std::move(fd).error();
  Status st;
  if (::fchmod(fd->get(), mode) != 0) st = errno_error(label + ": chmod");  // the umask must not matter
  else if (owner && ::fchown(fd->get(), owner->uid, owner->gid) != 0) st = errno_error(label + ": chown");
  else st = fill(fd->get());
  if (!st) (void)::unlinkat(parent->get(), segs.back().c_str(), 0);  // no half-staged input
  return st;
}

// copy_file_range (in-kernel, reflink where the filesystem can), falling
// back to read/write when the kernel refuses it for this pair of files.
// At most `max_bytes`: a file with more (one that grows while it is copied,
// or says 0 bytes and reads without end, as /proc files do) stops the copy
// one byte past the cap with EFBIG, never an endless copy. The bytes copied.
Expected<std::uint64_t> copy_fd(int src, int dst, std::uint64_t max_bytes) {
  bool fallback = false;
  std::string buf;
  std::uint64_t done = 0;
  for (;;) {
    if (done > max_bytes) return Error(EFBIG, "more than " + std::to_string(max_bytes) + " bytes");
    // One byte past the cap at most, to see that there is more.
    const std::uint64_t left = max_bytes - done == UINT64_MAX ? UINT64_MAX : max_bytes - done + 1;
    ssize_t n;
    if (!fallback) {
      n = ::copy_file_range(src, nullptr, dst, nullptr, static_cast<std::size_t>(std::min<std::uint64_t>(left, 1 << 30)), 0);
      if (n < 0 && (errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP)) {
        fallback = true;
        continue;
      }
    } else {
      if (buf.empty()) buf.resize(1 << 16);
      n = ::read(src, buf.data(), static_cast<std::size_t>(std::min<std::uint64_t>(left, buf.size())));
      if (n > 0) {
        if (auto w = write_all(dst, std::string_view(buf.data(), static_cast<std::size_t>(n))); !w) return w.error();
      }
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_error("copy");
    if (n == 0) return done;
    done += static_cast<std::uint64_t>(n);
  }
}

}  // namespace

Status Workspace::stage_bytes(std::string_view name, std::string_view bytes, mode_t mode) {
  std::string label = "workspace: input " + quoted(name);
  if (auto st = reacquire(); !st) return st;  // a workspace made by name holds no fd yet
  return explain_full(stage_into(dir_.get(), owner_, name, mode, label, [&](int fd) -> Status {
    if (auto w = write_all(fd, bytes); !w) return w.error().context(label);
    return {};
  }));
}

Status Workspace::stage_copy(int src, std::string_view name, mode_t mode, const std::string& label,
                             std::uint64_t max_bytes, const std::string& too_big, std::uint64_t* copied) {
  if (auto st = reacquire(); !st) return st;
  return explain_full(stage_into(dir_.get(), owner_, name, mode, label, [&](int fd) -> Status {
    auto c = copy_fd(src, fd, max_bytes);
    if (!c && c.error().code() == EFBIG && !too_big.empty()) return Error(EFBIG, too_big);
    if (!c) return c.error().context(label);
    if (copied) *copied = *c;
    return {};
  }));
}

Status Workspace::stage_dir(std::string_view name, const std::string& label) {
  if (auto ok = validate_relative_name(name, "workspace: input"); !ok) return ok;
  if (auto st = reacquire(); !st) return st;
  if (dir_.get() < 0) return Error(EBADF, label + ": workspace already removed");
  auto segs = split_segments(std::string(name) + "/.");
  auto parent = open_parents(dir_.get(), segs, label, owner_);
  if (!parent) return explain_full(std::move(parent).error());
  return {};
}

}  // namespace corral
