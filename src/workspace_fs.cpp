// The fd-relative file helpers of the workspace sources (workspace_fs.hpp):
// openat2 beneath a directory fd, parents made without following a link,
// exclusive creation, directory listing. Parent side only.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <utility>

#include "corral/names.hpp"
#include "workspace_fs.hpp"


namespace corral::wsfs {

// openat2(2), Linux 5.6; glibc 2.36 has no wrapper. Parent-side, so the
// errno-setting syscall(3) is fine here.
int openat2_fd(int dirfd, const std::string& path, std::uint64_t flags, std::uint64_t mode,
               std::uint64_t resolve) {
  struct open_how how {};
  how.flags = flags;
  how.mode = mode;
  how.resolve = resolve;
  long fd;
  do {
    fd = ::syscall(SYS_openat2, dirfd, path.c_str(), &how, sizeof how);
  } while (fd < 0 && (errno == EINTR || errno == EAGAIN));  // EAGAIN: RESOLVE_CACHED only, or a rename race
  return static_cast<int>(fd);
}

std::string quoted(std::string_view s) { return quote_input(s); }

Error errno_error(std::string_view what) { return Error::from_errno(errno, what); }

std::vector<std::string> split_segments(std::string_view path) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (;;) {
    std::size_t slash = path.find('/', start);
    out.emplace_back(path.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start));
    if (slash == std::string_view::npos) return out;
    start = slash + 1;
  }
}

Status write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_error("write");
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return {};
}

bool same_inode(const struct stat& a, const struct stat& b) { return a.st_dev == b.st_dev && a.st_ino == b.st_ino; }

bool entry_is(int parent, const std::string& name, int fd) {
  struct stat mine {}, entry {};
  return ::fstat(fd, &mine) == 0 && ::fstatat(parent, name.c_str(), &entry, AT_SYMLINK_NOFOLLOW) == 0 &&
         same_inode(mine, entry);
}

// Walks (and creates, 0755) the parent directories of `segs[0..n-1]` below
// root, never following a symlink, chown'ing what it creates to owner.
// Returns an O_PATH fd of the innermost parent. `label` is "input 'a/b'".
Expected<UniqueFd> open_parents(int root, const std::vector<std::string>& segs, const std::string& label,
                                const std::optional<WorkspaceOwner>& owner) {
  UniqueFd cur(::fcntl(root, F_DUPFD_CLOEXEC, 0));
  if (!cur) return errno_error(label + ": dup");
  std::string so_far;
  for (std::size_t i = 0; i + 1 < segs.size(); ++i) {
    so_far += (i ? "/" : "") + segs[i];
    bool created = ::mkdirat(cur.get(), segs[i].c_str(), 0755) == 0;
    if (!created && errno != EEXIST) return errno_error(label + ": create directory " + quoted(so_far));
    UniqueFd next(openat2_fd(cur.get(), segs[i], O_PATH | O_DIRECTORY | O_CLOEXEC, 0, kResolve));
    if (!next && errno == ELOOP)
      return Error(ELOOP, label + ": " + quoted(so_far) + " is a symlink; refusing to follow it");
    if (!next) return errno_error(label + ": open directory " + quoted(so_far));
    if (created && owner && ::fchownat(next.get(), "", owner->uid, owner->gid, AT_EMPTY_PATH) != 0)
      return errno_error(label + ": chown directory " + quoted(so_far));
    cur = std::move(next);
  }
  return cur;
}

// Creates `leaf` below parent exclusively (never through a symlink, never
// truncating an existing file, so a planted hard link is not written through).
Expected<UniqueFd> create_exclusive(int parent, const std::string& leaf, mode_t mode, const std::string& label) {
  UniqueFd fd(openat2_fd(parent, leaf, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode, kResolve));
  if (fd) return fd;
  int err = errno;
  struct stat st {};
  if (err == EEXIST && ::fstatat(parent, leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
    return Error(EEXIST, label + ": destination is a symlink; refusing to follow it");
  if (err == EEXIST) return Error(EEXIST, label + ": destination already exists");
  return Error::from_errno(err, label + ": create");
}

Status for_each_entry(int fd, const std::function<bool(const char*, unsigned char)>& fn) {
  // readdir needs its own open file description: a dup, rewound.
  int dup = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (dup < 0) return errno_error("dup");
  DIR* d = ::fdopendir(dup);
  if (!d) {
    int err = errno;
    ::close(dup);
    return Error::from_errno(err, "fdopendir");
  }
  ::rewinddir(d);
  errno = 0;
  while (struct dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0 && !fn(e->d_name, e->d_type)) break;
    errno = 0;
  }
  int err = errno;
  ::closedir(d);
  if (err) return Error::from_errno(err, "readdir");
  return {};
}

Expected<std::vector<Entry>> list_dir(int fd, std::size_t max) {
  std::vector<Entry> out;
  auto st = for_each_entry(fd, [&](const char* name, unsigned char type) {
    out.push_back({name, type});
    return out.size() < max;
  });
  if (!st) return std::move(st).error();
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.name < b.name; });
  return out;
}

// d_type, or lstat's answer when the filesystem does not fill it in.
unsigned char entry_type(int dirfd, const Entry& e) {
  if (e.type != DT_UNKNOWN) return e.type;
  struct stat st {};
  if (::fstatat(dirfd, e.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return DT_UNKNOWN;
  return IFTODT(st.st_mode);
}

const char* dt_name(unsigned char type) {
  switch (type) {
    case DT_FIFO: return "fifo";
    case DT_SOCK: return "socket";
    case DT_CHR: return "character device";
    case DT_BLK: return "block device";
    case DT_DIR: return "directory";
    case DT_LNK: return "symlink";
    default: return "unknown type";
  }
}

int unmount_workspace_at(const std::string& path) {
  // MNT_DETACH, UMOUNT_NOFOLLOW: <sys/mount.h> and <linux/mount.h> clash in this glibc.
  constexpr long kDetach = 2, kNoFollow = 8;
  if (::syscall(SYS_umount2, path.c_str(), kDetach | kNoFollow) == 0 || errno == EINVAL) return 0;
  return errno;
}

}  // namespace corral::wsfs
