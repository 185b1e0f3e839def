// Workspace::stage_file and stage_path (workspace.hpp): an input that is a
// host file or a whole host directory. Parent-side, before the child starts. The tree is
// walked from fds (openat O_NOFOLLOW below the directory opened first), so
// nothing renamed or linked into it while we copy leads outside it.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

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

}  // namespace corral
