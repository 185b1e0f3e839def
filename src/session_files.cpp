// A session's files (session.hpp put/get/list/remove): the sandbox's
// /workspace reached from the host through /proc/<pid1>/root, every path
// below it resolved with openat2 beneath and without a link; the layout is
// the workload's, so hostile. Parent side.
#include <fcntl.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "corral/container.hpp"
#include "corral/glob.hpp"
#include "corral/session.hpp"
#include "session_state.hpp"
#include "workspace_fs.hpp"

namespace corral {
namespace {

using wsfs::kResolveHostile;

struct WorkDir {
  SessionInfo info;
  UniqueFd fd;  // O_PATH|O_DIRECTORY of the sandbox's /workspace
  dev_t dev = 0;
};

Expected<WorkDir> open_workdir(std::string_view id, const std::string& dir) {
  auto info = find_session(id, dir);
  if (!info) return std::move(info).error();
  auto pid1 = Pidfd::open(info->pid1);
  if (!pid1) return std::move(pid1).error().context("session " + info->id);
  const std::string proc = "/proc/" + std::to_string(info->pid1);
  struct stat ns {};
  if (::stat((proc + "/ns/pid").c_str(), &ns) != 0 || ns.st_ino != info->pidns_inode)
    return Error(ESRCH, "session " + info->id + ": its pid 1 is gone");
  WorkDir w;
  w.fd.reset(::open((proc + "/root" + std::string(kContainerWorkspace)).c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!w.fd) return Error::from_errno(errno, "session " + info->id + ": open its /workspace");
  // Opened while that pid 1 lived: the root we went through was its.
  struct pollfd p = {pid1->fd(), POLLIN, 0};
  if (::poll(&p, 1, 0) != 0) return Error(ESRCH, "session " + info->id + ": its pid 1 is gone");
  struct stat st {};
  if (::fstat(w.fd.get(), &st) != 0) return Error::from_errno(errno, "session " + info->id + ": stat /workspace");
  w.dev = st.st_dev;
  w.info = std::move(*info);
  session_state::touch_active(w.info.dir);
  return w;
}

// The path's segments below the work dir: "." and empty ones dropped,
// ".." and NULs refused; an empty result is the work dir itself.
Expected<std::vector<std::string>> segments(std::string_view path, const std::string& what) {
  if (path.find('\0') != std::string_view::npos) return Error::invalid(what + ": the path holds a NUL");
  std::string_view p = path;
  if (p.rfind(kContainerWorkspace, 0) == 0 && (p.size() == kContainerWorkspace.size() || p[kContainerWorkspace.size()] == '/'))
    p.remove_prefix(kContainerWorkspace.size());
  std::vector<std::string> segs;
  for (auto& s : wsfs::split_segments(p)) {
    if (s.empty() || s == ".") continue;
    if (s == "..") return Error::invalid(what + ": '..' is not allowed in a session path");
    segs.push_back(s);
  }
  return segs;
}

std::string joined(const std::vector<std::string>& segs, std::size_t n) {
  std::string out;
  for (std::size_t i = 0; i < n && i < segs.size(); ++i) out += (i ? "/" : "") + segs[i];
  return out;
}

// An O_PATH fd of the directory holding the last segment, never through a
// link (RESOLVE_NO_SYMLINKS: a symlinked parent is ELOOP).
Expected<UniqueFd> open_parent(const WorkDir& w, const std::vector<std::string>& segs, const std::string& what) {
  if (segs.size() == 1) return UniqueFd(::fcntl(w.fd.get(), F_DUPFD_CLOEXEC, 0));
  const std::string parent = joined(segs, segs.size() - 1);
  UniqueFd fd(wsfs::openat2_fd(w.fd.get(), parent, O_PATH | O_DIRECTORY | O_CLOEXEC, 0, kResolveHostile));
  if (!fd && errno == ELOOP) return Error(ELOOP, what + ": " + wsfs::quoted(parent) + " goes through a symlink; refused");
  if (!fd) return wsfs::errno_error(what + ": open " + wsfs::quoted(parent));
  return fd;
}

char type_of(mode_t m) {
  if (S_ISREG(m)) return 'f';
  if (S_ISDIR(m)) return 'd';
  if (S_ISLNK(m)) return 'l';
  return '?';
}

const char* type_name(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISLNK(m)) return "a symlink";
  if (S_ISFIFO(m)) return "a fifo";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m) || S_ISBLK(m)) return "a device";
  return "not a regular file";
}

}  // namespace

Status session_put(std::string_view id, std::string_view path, std::string_view bytes, unsigned mode,
                   const std::string& dir) {
  const std::string what = "session " + std::string(id) + ": put " + wsfs::quoted(path);
  auto segs = segments(path, what);
  if (!segs) return std::move(segs).error();
  if (segs->empty()) return Error::invalid(what + ": that is the work dir itself");
  auto w = open_workdir(id, dir);
  if (!w) return std::move(w).error();
  WorkspaceOwner owner{w->info.outside_uid, w->info.outside_gid};
  auto parent = wsfs::open_parents(w->fd.get(), *segs, what, owner);
  if (!parent) return std::move(parent).error();
  const std::string& leaf = segs->back();
  struct stat st {};
  if (::fstatat(parent->get(), leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode))
    return Error(EISDIR, what + ": a directory is there; remove it first");
  // Written under a fresh name, then renamed over the leaf: an existing file
  // is replaced (a symlink or hard link there is replaced, never written through).
  unsigned char rnd[8];
  if (::getrandom(rnd, sizeof rnd, 0) != static_cast<ssize_t>(sizeof rnd)) return wsfs::errno_error(what + ": getrandom");
  std::string tmp = ".corral-put-";
  for (unsigned char b : rnd) tmp += "0123456789abcdef"[b >> 4], tmp += "0123456789abcdef"[b & 0xf];
  auto fd = wsfs::create_exclusive(parent->get(), tmp, mode & 0777, what);
  if (!fd) return std::move(fd).error();
  Status st2 = wsfs::write_all(fd->get(), bytes);
  if (st2 && ::fchmod(fd->get(), mode & 0777) != 0) st2 = wsfs::errno_error(what + ": chmod");
  if (st2 && ::fchown(fd->get(), owner.uid, owner.gid) != 0) st2 = wsfs::errno_error(what + ": chown");
  if (st2 && ::renameat(parent->get(), tmp.c_str(), parent->get(), leaf.c_str()) != 0)
    st2 = wsfs::errno_error(what + ": rename into place");
  if (!st2) (void)::unlinkat(parent->get(), tmp.c_str(), 0);
  return st2;
}

Expected<std::string> session_get(std::string_view id, std::string_view path, const SessionFileCaps& caps,
                                  const std::string& dir) {
  const std::string what = "session " + std::string(id) + ": get " + wsfs::quoted(path);
  auto segs = segments(path, what);
  if (!segs) return std::move(segs).error();
  if (segs->empty()) return Error(EISDIR, what + ": that is the work dir itself");
  auto w = open_workdir(id, dir);
  if (!w) return std::move(w).error();
  // O_NONBLOCK: a fifo planted there must not hang us (it is refused below anyway).
  UniqueFd fd(wsfs::openat2_fd(w->fd.get(), joined(*segs, segs->size()), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC,
                               0, kResolveHostile));
  if (!fd && errno == ELOOP) return Error(ELOOP, what + ": a symlink is on the way; refused, never followed");
  if (!fd && errno == EXDEV) return Error(EXDEV, what + ": crosses a mount; refused");
  if (!fd) return wsfs::errno_error(what);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return wsfs::errno_error(what + ": stat");
  if (!S_ISREG(st.st_mode)) return Error(EINVAL, what + ": " + type_name(st.st_mode) + "; only regular files are read");
  if (st.st_dev != w->dev) return Error(EXDEV, what + ": not on the session's work dir; refused");
  if (st.st_nlink > 1 && st.st_uid != w->info.outside_uid)
    return Error(EPERM, what + ": a hard link to a file the session does not own; refused");
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size > caps.file_bytes || size > caps.total_bytes)
    return Error(EFBIG, what + ": " + std::to_string(size) + " bytes, over the cap of " +
                            std::to_string(std::min(caps.file_bytes, caps.total_bytes)));
  // Exactly the size seen: a file that grows meanwhile is cut there.
  std::string out(size, '\0');
  std::size_t got = 0;
  while (got < size) {
    ssize_t n = ::pread(fd.get(), out.data() + got, size - got, static_cast<off_t>(got));
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < 0) return wsfs::errno_error(what + ": read");
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  out.resize(got);
  return out;
}

Expected<std::vector<SessionEntry>> session_list(std::string_view id, std::string_view glob,
                                                 const SessionFileCaps& caps, const std::string& dir) {
  const std::string what = "session " + std::string(id) + ": list " + wsfs::quoted(glob);
  auto gsegs = segments(glob, what);
  if (!gsegs) return std::move(gsegs).error();
  // The one glob dialect (glob.hpp, as --output and routes): "**" spans
  // directories. No glob: everything.
  std::optional<Glob> pattern;
  if (!gsegs->empty()) {
    auto g = Glob::parse(joined(*gsegs, gsegs->size()), what + ": glob");
    if (!g) return std::move(g).error();
    pattern.emplace(std::move(*g));
  }
  auto w = open_workdir(id, dir);
  if (!w) return std::move(w).error();
  std::vector<SessionEntry> out;
  // Depth first; a directory is entered only while the glob may still match below it.
  struct Level {
    UniqueFd fd;
    std::string rel;
    Glob::State state;
  };
  std::vector<Level> todo;
  todo.push_back({UniqueFd(wsfs::openat2_fd(w->fd.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0, kResolveHostile)),
                  "", pattern ? pattern->start() : Glob::State{}});
  if (!todo.back().fd) return wsfs::errno_error(what + ": open /workspace");
  while (!todo.empty()) {
    Level level = std::move(todo.back());
    todo.pop_back();
    auto entries = wsfs::list_dir(level.fd.get(), caps.max_entries + 1);
    if (!entries) return std::move(entries).error().context(what);
    for (const auto& e : *entries) {
      struct stat st {};
      if (::fstatat(level.fd.get(), e.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
      const std::string rel = level.rel.empty() ? e.name : level.rel + "/" + e.name;
      Glob::State state = pattern ? pattern->step(level.state, e.name) : Glob::State{};
      bool matches = !pattern || pattern->matched(state);
      if (matches) {
        if (out.size() >= caps.max_entries)
          return Error(E2BIG, what + ": more than " + std::to_string(caps.max_entries) + " entries; narrow the glob");
        out.push_back({rel, type_of(st.st_mode), S_ISREG(st.st_mode) ? static_cast<std::uint64_t>(st.st_size) : 0});
      }
      bool descend = S_ISDIR(st.st_mode) && st.st_dev == w->dev && (!pattern || pattern->may_descend(state));
      if (!descend) continue;
      UniqueFd sub(wsfs::openat2_fd(level.fd.get(), e.name, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0, kResolveHostile));
      if (sub) todo.push_back({std::move(sub), rel, std::move(state)});
    }
  }
  std::sort(out.begin(), out.end(), [](const SessionEntry& a, const SessionEntry& b) { return a.path < b.path; });
  return out;
}

Status session_remove(std::string_view id, std::string_view path, bool recursive, const std::string& dir) {
  const std::string what = "session " + std::string(id) + ": remove " + wsfs::quoted(path);
  auto segs = segments(path, what);
  if (!segs) return std::move(segs).error();
  if (segs->empty()) return Error::invalid(what + ": that is the work dir itself; refused");
  auto w = open_workdir(id, dir);
  if (!w) return std::move(w).error();
  auto parent = open_parent(*w, *segs, what);
  if (!parent) return std::move(parent).error();
  const std::string& leaf = segs->back();
  struct stat st {};
  if (::fstatat(parent->get(), leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return wsfs::errno_error(what);
  if (!S_ISDIR(st.st_mode)) {
    // A symlink goes itself; its target is never touched.
    if (::unlinkat(parent->get(), leaf.c_str(), 0) != 0) return wsfs::errno_error(what);
    return {};
  }
  if (!recursive) return Error(EISDIR, what + ": a directory; removing it needs recursive");
  UniqueFd d(wsfs::openat2_fd(parent->get(), leaf, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0, kResolveHostile));
  if (!d) return wsfs::errno_error(what + ": open");
  wsfs::Errors errors;
  // Links inside are unlinked, never followed; no other mount is entered.
  wsfs::remove_contents(d.get(), errors);
  if (errors.first) return errors.first->context(what);
  if (::unlinkat(parent->get(), leaf.c_str(), AT_REMOVEDIR) != 0) return wsfs::errno_error(what);
  return {};
}

}  // namespace corral
