// Runs in the parent (supervisor) process only. Every fd opened here is
// owned by the function that opened it (UniqueFd), by the Workspace
// (base_, dir_) or by a WorkspaceBase shared by many workspaces; none is
// passed to a child.
//
// This file: life cycle and staging. workspace_fs.cpp: the fd helpers;
// workspace_remove.cpp: the removal walk. Outputs are read out by
// output_collect.cpp (the one collector) through the workspace fd.
#include "corral/workspace.hpp"

#include "corral/names.hpp"
#include "corral/sha256.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <sys/auxv.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <utility>

#include "background_work.hpp"
#include "tmpfs_options.hpp"
#include "workspace_fs.hpp"

namespace corral {

using namespace wsfs;

// ---- Workspace: life cycle ------------------------------------------------

namespace {

std::string default_base(const std::string& given) { return choose_workspace_base(given).path; }


// 64 bits for a fresh name without a syscall: splitmix64 of a counter and
// a seed, SHA-256 of AT_RANDOM (the 16 bytes the kernel gave us at exec;
// hashed, as libc's stack canary came from them), getrandom without it.
// Distinct within the process (a bijection of the counter); where a name
// is taken anyway (a fork's copy of the counter, a guess planted in a
// shared base) the caller retries with fresh bits. 0: no seed.
std::uint64_t next_name_bits() {
  static const std::uint64_t seed = [] {
    std::uint64_t v = 0;
    if (const auto* at = reinterpret_cast<const char*>(::getauxval(AT_RANDOM))) {
      std::string digest = Sha256::hex_of(std::string("corral workspace names ") + std::string(at, 16));
      v = std::strtoull(digest.substr(0, 16).c_str(), nullptr, 16);
    }
    if (v == 0 && ::getrandom(&v, sizeof v, 0) != sizeof v) v = 0;
    return v;
  }();
  static std::atomic<std::uint64_t> counter{0};
  if (seed == 0) return 0;
  std::uint64_t z = seed + counter.fetch_add(1, std::memory_order_relaxed) * 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::string hex64(std::uint64_t v) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) out[static_cast<std::size_t>(i)] = kHex[v & 0xf];
  return out;
}

// mkdirat(parent, "<prefix><16 hex>", mode) under a fresh name; the name.
Expected<std::string> make_unique_dir(int parent, const char* prefix, mode_t mode, const std::string& who) {
  for (int attempt = 0;; ++attempt) {
    std::uint64_t bits = attempt == 0 ? next_name_bits() : 0;
    if (bits == 0 && ::getrandom(&bits, sizeof bits, 0) != sizeof bits) return errno_error(who + ": getrandom");
    std::string name = prefix + hex64(bits);
    if (::mkdirat(parent, name.c_str(), mode) == 0) return name;
    if (errno != EEXIST || attempt == 16) return errno_error(who + ": create " + quoted(name));
  }
}

// "corral-", or "corral-<tag>-" (WorkspaceOptions::name_tag).
std::string name_prefix(const WorkspaceOptions& options) {
  return options.name_tag.empty() ? "corral-" : "corral-" + options.name_tag + "-";
}

std::string join(const std::string& dir, const std::string& name) {
  return dir + (!dir.empty() && dir.back() == '/' ? "" : "/") + name;
}

}  // namespace

namespace {

// An O_PATH fd of directory `name` below parent when it is a directory (not
// a symlink) of ours that nobody else can write, made 0711 so a run's uid
// can pass through to its own workspace; invalid (errno set) otherwise.
UniqueFd open_private_dir(int parent, const std::string& name) {
  UniqueFd rd(::openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct stat st {};
  if (!rd || ::fstat(rd.get(), &st) != 0) return {};
  if (st.st_uid != ::geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    errno = EPERM;
    return {};
  }
  if ((st.st_mode & 07777) != 0711 && ::fchmod(rd.get(), 0711) != 0) return {};
  return UniqueFd(::openat(rd.get(), ".", O_PATH | O_DIRECTORY | O_CLOEXEC));
}

}  // namespace

Expected<std::shared_ptr<const WorkspaceBase>> WorkspaceBase::open(const std::string& dir) {
  // A named directory is the base as it is (choose_workspace_base would
  // only statfs it again).
  std::string given = dir.empty() ? default_base(dir) : dir;
  std::string who = "workspace: base directory " + quoted(given);
  UniqueFd fd(::open(given.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return errno_error(who);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return errno_error(who + ": stat");
  std::shared_ptr<WorkspaceBase> base(new WorkspaceBase());
  if (st.st_uid == ::geteuid() && (st.st_mode & (S_IWGRP | S_IWOTH)) == 0) {
    base->path_ = given;
    base->fd_ = std::move(fd);
    return std::shared_ptr<const WorkspaceBase>(std::move(base));
  }
  // Others may write here (/tmp): corral-<euid> inside it, made once and
  // kept (as tmux keeps tmux-<uid>), so a CLI run pays no mkdir for it.
  base->private_ = true;
  std::string stable = "corral-" + std::to_string(::geteuid());
  if (::mkdirat(fd.get(), stable.c_str(), 0711) != 0 && errno != EEXIST)
    return errno_error(who + ": create " + quoted(stable));
  base->fd_ = open_private_dir(fd.get(), stable);
  if (base->fd_) {
    base->path_ = join(given, stable);
    return std::shared_ptr<const WorkspaceBase>(std::move(base));
  }
  // The name is someone else's (or a symlink): a fresh one of ours, removed
  // with this base.
  auto name = make_unique_dir(fd.get(), (stable + "-").c_str(), 0711, who);
  if (!name) return std::move(name).error();
  base->fd_ = open_private_dir(fd.get(), *name);
  base->parent_ = std::move(fd);
  base->name_ = *name;
  base->path_ = join(given, *name);
  if (!base->fd_) return Error(EPERM, who + ": private directory " + quoted(*name) + " was replaced as it was made");
  return std::shared_ptr<const WorkspaceBase>(std::move(base));
}

WorkspaceBase::~WorkspaceBase() {
  if (!parent_) return;  // the given directory, or the kept corral-<euid>
  // Only our own fallback directory, and only when empty (rmdir refuses otherwise).
  if (wsfs::entry_is(parent_.get(), name_, fd_.get())) (void)::unlinkat(parent_.get(), name_.c_str(), AT_REMOVEDIR);
}

// A fresh tmpfs as a detached mount (fsopen, fsconfig, fsmount): root
// directory 0700 and owned by the run's ids from the start, nosuid and
// nodev. Nothing is mounted anywhere on the host.
Expected<Workspace> Workspace::create_tmpfs(const WorkspaceOptions& options) {
  Workspace ws;
  ws.owner_ = options.owner;
  ws.tmpfs_bytes_ = *options.tmpfs_bytes;
  ws.has_tmp_ = options.tmpfs_mount_point && options.make_tmp;
  if (options.tmpfs_mount_point) {
    // The mount point: root's, 0700, never chown'ed. The run reaches the
    // tmpfs's root (its own) through it; on the host nobody else enters.
    if (auto st = ws.make_dir_in_base(options); !st) return std::move(st).error();
    ws.mount_point_ = true;  // from here on an early return removes it
  } else {
    std::uint64_t bits = next_name_bits();
    if (bits == 0 && ::getrandom(&bits, sizeof bits, 0) != sizeof bits) return errno_error("workspace: getrandom");
    ws.name_ = "corral-" + hex64(bits);
  }
  const std::string who = "workspace: tmpfs of " + std::to_string(ws.tmpfs_bytes_) + " bytes (workspace_bytes)";
  std::optional<detail::TmpfsOwner> owner;
  if (ws.owner_) owner = detail::TmpfsOwner{ws.owner_->uid, ws.owner_->gid};
  auto mounted = detail::fsmount_tmpfs(who, "corral-workspace", ws.tmpfs_bytes_, "0700", owner);
  if (!mounted) return std::move(mounted).error();
  ws.dir_ = std::move(*mounted);
  struct stat st {};
  if (::fstat(ws.dir_.get(), &st) != 0) return errno_error(who + ": stat its root");
  ws.dev_ = st.st_dev;
  ws.ino_ = st.st_ino;
  // HOME, and TMPDIR for tier process (a container has a /tmp of its own).
  for (const char* sub : {"home", "tmp"}) {
    if (!ws.has_tmp_ && std::strcmp(sub, "tmp") == 0) continue;
    if (::mkdirat(ws.dir_.get(), sub, 0700) != 0) return errno_error(who + ": create " + sub);
    if (ws.owner_ && ::fchownat(ws.dir_.get(), sub, ws.owner_->uid, ws.owner_->gid, AT_SYMLINK_NOFOLLOW) != 0)
      return errno_error(who + ": chown " + sub);
  }
  if (options.tmpfs_mount_point && options.tmpfs_on_host) {
    // Attached below the base, which is private (workspace_base.cpp): the
    // mount propagates nowhere.
    if (::syscall(SYS_move_mount, ws.dir_.get(), "", ws.base_fd(), ws.name_.c_str(), MOVE_MOUNT_F_EMPTY_PATH) != 0)
      return errno_error(who + ": mount it on " + quoted(ws.path_));
    ws.mounted_on_host_ = true;
  }
  return ws;
}

std::string Workspace::label() const { return on_tmpfs() ? "tmpfs workspace " + name_ : quoted(path_); }

Status Workspace::explain_full(Status st) const {
  if (st || !on_tmpfs() || st.error().code() != ENOSPC) return st;
  return Error(ENOSPC, st.error().message() + " (the workspace is a tmpfs of workspace_bytes=" +
                           std::to_string(tmpfs_bytes_) + ")");
}

// A fresh corral-[<tag>-]<16 hex> directory (0700) in the options' base:
// the base held (shared, or opened for this workspace), name_ and path_ set.
Status Workspace::make_dir_in_base(const WorkspaceOptions& options) {
  const std::string base = options.base ? options.base->path() : default_base(options.base_dir);
  const std::string who = "workspace: base directory " + quoted(base);
  if (options.base) {
    shared_base_ = options.base;
  } else {
    base_.reset(::open(base.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!base_) return errno_error(who);
  }
  auto name = make_unique_dir(base_fd(), name_prefix(options).c_str(), 0700, who);
  if (!name) return std::move(name).error();
  name_ = std::move(*name);
  path_ = join(base, name_);
  return {};
}

Expected<Workspace> Workspace::create(const WorkspaceOptions& options) {
  if (options.tmpfs_bytes) {
    if (*options.tmpfs_bytes == 0) return Error::invalid("workspace: a tmpfs workspace needs a size above 0");
    return create_tmpfs(options);
  }
  if (options.by_name && options.base) return create_by_name(options, name_prefix(options));
  Workspace ws;
  ws.owner_ = options.owner;
  ws.has_tmp_ = options.make_tmp;
  if (auto st = ws.make_dir_in_base(options); !st) return std::move(st).error();
  // From here on `ws` owns the directory: an early return removes it.
  ws.dir_.reset(::openat(ws.base_fd(), ws.name_.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct stat st {};
  if (!ws.dir_ || ::fstat(ws.dir_.get(), &st) != 0) {
    Error e = errno_error("workspace: open " + quoted(ws.path_));
    ws.dir_.reset();
    (void)::unlinkat(ws.base_fd(), ws.name_.c_str(), AT_REMOVEDIR);
    return e;
  }
  ws.dev_ = st.st_dev;
  ws.ino_ = st.st_ino;
  // Exactly 0700 whatever the umask; nobody else can write in it, so the
  // subdirectory names below cannot have been planted. A umask can only
  // take bits away: when the directory came out 0700 (the fstat above),
  // the umask spared the owner's bits and the subdirectories, made the same
  // way just after, come out 0700 too; no chmod then (three calls a run).
  // The *at calls below go through the O_PATH fd (a dirfd may be O_PATH;
  // fchownat takes it with AT_EMPTY_PATH): only fchmod needs the directory
  // opened for reading, so it is opened only when the umask took bits.
  const bool umask_spared = (st.st_mode & 07777) == 0700;
  if (!umask_spared) {
    UniqueFd rd(::openat(ws.dir_.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!rd || ::fchmod(rd.get(), 0700) != 0) return errno_error("workspace: chmod " + quoted(ws.path_));
  }
  const int dir = ws.dir_.get();
  for (const char* sub : {"home", "tmp"}) {
    if (!options.make_tmp && std::strcmp(sub, "tmp") == 0) continue;
    if (::mkdirat(dir, sub, 0700) != 0 || (!umask_spared && ::fchmodat(dir, sub, 0700, 0) != 0))
      return errno_error("workspace: create " + quoted(ws.path_ + "/" + sub));
    if (ws.owner_ && ::fchownat(dir, sub, ws.owner_->uid, ws.owner_->gid, AT_SYMLINK_NOFOLLOW) != 0)
      return errno_error("workspace: chown " + quoted(ws.path_ + "/" + sub));
  }
  if (ws.owner_ && ::fchownat(dir, "", ws.owner_->uid, ws.owner_->gid, AT_EMPTY_PATH) != 0)
    return errno_error("workspace: chown " + quoted(ws.path_));
  return ws;
}

// The tree made by name below the shared base (WorkspaceOptions::by_name),
// released from the start. The base is our euid's and nobody else can
// write in it (WorkspaceBase::open), so the name we just made is ours to
// reach by path: the root's identity (fstatat, no link followed) is kept
// for reacquire() and remove() to check, and home/ and tmp/ are made and
// chown'ed through "<name>/home", before any program of the run exists.
Expected<Workspace> Workspace::create_by_name(const WorkspaceOptions& options, const std::string& prefix) {
  Workspace ws;
  ws.owner_ = options.owner;
  ws.shared_base_ = options.base;
  ws.by_name_ = true;
  ws.has_tmp_ = options.make_tmp;
  const int base = ws.base_fd();
  auto name = make_unique_dir(base, prefix.c_str(), 0700, "workspace: base directory " + quoted(options.base->path()));
  if (!name) return std::move(name).error();
  ws.name_ = std::move(*name);
  ws.path_ = join(options.base->path(), ws.name_);
  struct stat st {};
  if (::fstatat(base, ws.name_.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode)) {
    Error e = errno_error("workspace: stat " + quoted(ws.path_));
    (void)::unlinkat(base, ws.name_.c_str(), AT_REMOVEDIR);
    return e;  // ws holds nothing: removed() already
  }
  // From here on `ws` owns the directory (released, found by name): an
  // early return removes it.
  ws.dev_ = st.st_dev;
  ws.ino_ = st.st_ino;
  ws.released_ = true;
  // The umask can only take bits away: as in create(), when the root came
  // out 0700 the subdirectories do too, and no chmod is made.
  const bool umask_spared = (st.st_mode & 07777) == 0700;
  if (!umask_spared && ::fchmodat(base, ws.name_.c_str(), 0700, 0) != 0)
    return errno_error("workspace: chmod " + quoted(ws.path_));
  for (const char* sub : {"home", "tmp"}) {
    if (!ws.has_tmp_ && std::strcmp(sub, "tmp") == 0) continue;
    const std::string rel = ws.name_ + "/" + sub;
    if (::mkdirat(base, rel.c_str(), 0700) != 0 || (!umask_spared && ::fchmodat(base, rel.c_str(), 0700, 0) != 0))
      return errno_error("workspace: create " + quoted(ws.path_ + "/" + sub));
    if (ws.owner_ && ::fchownat(base, rel.c_str(), ws.owner_->uid, ws.owner_->gid, AT_SYMLINK_NOFOLLOW) != 0)
      return errno_error("workspace: chown " + quoted(ws.path_ + "/" + sub));
  }
  if (ws.owner_ && ::fchownat(base, ws.name_.c_str(), ws.owner_->uid, ws.owner_->gid, AT_SYMLINK_NOFOLLOW) != 0)
    return errno_error("workspace: chown " + quoted(ws.path_));
  return ws;
}

Workspace::Workspace(Workspace&& other) noexcept
    : path_(std::move(other.path_)),
      name_(std::move(other.name_)),
      base_(std::move(other.base_)),
      shared_base_(std::move(other.shared_base_)),
      dir_(std::move(other.dir_)),
      dev_(other.dev_),
      ino_(other.ino_),
      released_(std::exchange(other.released_, false)),
      owner_(other.owner_),
      tmpfs_bytes_(other.tmpfs_bytes_),
      by_name_(other.by_name_),
      has_tmp_(other.has_tmp_),
      mount_point_(std::exchange(other.mount_point_, false)),
      mounted_on_host_(std::exchange(other.mounted_on_host_, false)) {}

Workspace& Workspace::operator=(Workspace&& other) noexcept {
  if (this != &other) {
    if (!removed()) (void)remove();
    path_ = std::move(other.path_);
    name_ = std::move(other.name_);
    base_ = std::move(other.base_);
    shared_base_ = std::move(other.shared_base_);
    dir_ = std::move(other.dir_);
    dev_ = other.dev_;
    ino_ = other.ino_;
    released_ = std::exchange(other.released_, false);
    owner_ = other.owner_;
    tmpfs_bytes_ = other.tmpfs_bytes_;
    by_name_ = other.by_name_;
    has_tmp_ = other.has_tmp_;
    mount_point_ = std::exchange(other.mount_point_, false);
    mounted_on_host_ = std::exchange(other.mounted_on_host_, false);
  }
  return *this;
}

Status Workspace::release_fd() {
  if (released_ || removed() || (on_tmpfs() && !mounted_on_host_)) return {};
  if (!shared_base_)
    return Error(EINVAL, "workspace: " + label() + ": release_fd needs a shared WorkspaceBase (found by name later)");
  dir_.reset();
  released_ = true;
  return {};
}

Status Workspace::reacquire() {
  if (!released_) return {};
  UniqueFd fd(::openat(base_fd(), name_.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct stat st {};
  if (!fd || ::fstat(fd.get(), &st) != 0 || st.st_dev != dev_ || st.st_ino != ino_)
    return Error(ENOENT, "workspace: reopen " + quoted(path_) +
                             ": the directory was moved or replaced while released; it was left untouched");
  dir_ = std::move(fd);
  released_ = false;
  return {};
}

Workspace::~Workspace() {
  if (!removed()) (void)remove();
}

Status Workspace::remove() { return remove_walk(nullptr, nullptr); }

Expected<Workspace::Removal> Workspace::remove_or_hand_off(std::function<void()> once_gone) {
  std::size_t budget = kEntriesInCaller;
  bool unfinished = false;
  Status st = remove_walk(&budget, &unfinished);
  if (!unfinished) {
    if (once_gone) once_gone();
    if (!st) return std::move(st).error();
    return Removal::done;
  }
  // Only the fds go along: the job never touches this object. The entry is
  // removed only if it is still the directory we emptied (as remove_walk).
  struct Rest {
    UniqueFd dir, base;
    std::shared_ptr<const WorkspaceBase> shared_base;
    std::string name;
  };
  auto rest = std::make_shared<Rest>(Rest{std::move(dir_), std::move(base_), std::move(shared_base_), name_});
  detail::run_in_background([rest, once_gone = std::move(once_gone)] {
    Errors ignored;  // nobody is there to be told
    (void)remove_contents(rest->dir.get(), ignored);
    const int base = rest->shared_base ? rest->shared_base->fd() : rest->base.get();
    if (entry_is(base, rest->name, rest->dir.get())) (void)::unlinkat(base, rest->name.c_str(), AT_REMOVEDIR);
    rest->dir.reset();
    if (once_gone) once_gone();
  });
  return Removal::in_background;
}

Status Workspace::remove_walk(std::size_t* budget, bool* unfinished) {
  if (removed()) return {};
  if (on_tmpfs() && !dir_ && !released_) return remove_mount_point();  // its creation failed half-way
  if (released_ && mounted_on_host_ && tmpfs_emptied_by_name()) {
    released_ = false;
    return remove_mount_point();
  }
  if (released_ && by_name_ && remove_by_name()) return {};
  if (auto st = reacquire(); !st) return st;
  if (on_tmpfs()) return remove_tmpfs();
  if (remove_if_empty()) return {};
  Errors errors;
  if (!remove_contents(dir_.get(), errors, budget)) {
    *unfinished = true;  // the caller hands dir_ on: what is left is not ours to report
    return {};
  }
  if (errors.first) {
    // Keep the fds: a later remove() (or the destructor) may try again.
    std::string more = errors.more ? " (and " + std::to_string(errors.more) + " more errors)" : "";
    return Error(errors.first->code(), "workspace: remove " + label() + ": " + errors.first->message() + more);
  }
  // The owner uid may have renamed the root inside a sticky base: remove
  // the entry only if it is still our directory.
  const bool ours = entry_is(base_fd(), name_, dir_.get());
  Status result;
  if (!ours)
    result = Error(ENOENT, "workspace: remove " + quoted(path_) +
                               ": the directory was moved or replaced; its contents were removed, it was left");
  else if (::unlinkat(base_fd(), name_.c_str(), AT_REMOVEDIR) != 0)
    result = errno_error("workspace: remove " + quoted(path_));
  if (!result && result.error().code() != ENOENT) return result;
  dir_.reset();
  base_.reset();
  shared_base_.reset();
  return result;
}

// A tmpfs is unmounted and its mount point removed here, so nothing on the
// host reaches it but dir_; emptying it and closing dir_ run on the
// background thread (background_work.hpp). A run that filled its workspace
// with 263,000 empty files cost the supervisor's loop 1.1 s of unlinks
// here, and the kernel's teardown at the last close ~0.3 s more. Emptied
// first still, so its memory is back even if a reference to it outlives
// ours (a mount of it in some namespace's copy).
Status Workspace::remove_tmpfs() {
  UniqueFd last = std::move(dir_);
  if (auto st = remove_mount_point(); !st) {
    dir_ = std::move(last);  // a later remove() tries again
    return st;
  }
  auto root = std::make_shared<UniqueFd>(std::move(last));
  detail::run_in_background([root] {
    Errors ignored;  // nothing reaches it to be told: it goes with the close either way
    remove_contents(root->get(), ignored);
  });
  return {};
}

// The directory a tmpfs went over (on the host, or in the run's mount
// namespace). Nothing was written to it; rmdir never follows a symlink and
// refuses anything not empty, so a name someone swapped in loses nothing.
Status Workspace::remove_mount_point() {
  if (!mount_point_) return {};
  // EINVAL: not mounted there (any more).
  if (mounted_on_host_) {
    if (int e = unmount_workspace_at(path_); e && e != ENOENT)
      return Error::from_errno(e, "workspace: unmount the tmpfs on " + quoted(path_));
    mounted_on_host_ = false;
  }
  if (::unlinkat(base_fd(), name_.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT)
    return errno_error("workspace: remove the tmpfs's mount point " + quoted(path_));
  mount_point_ = false;
  base_.reset();
  shared_base_.reset();
  return {};
}

// rmdir of home/ and tmp/ (the ones made) at `at`, below `prefix` ("" or
// "<name>/"): refused, and so kept, when not empty or not directories.
void Workspace::remove_subdirs(int at, const std::string& prefix) const {
  for (const char* sub : {"home", "tmp"})
    if (has_tmp_ || std::strcmp(sub, "tmp") != 0) (void)::unlinkat(at, (prefix + sub).c_str(), AT_REMOVEDIR);
}

// The common end of a run: the child left only the empty home/ and tmp/.
// rmdir them and then the root by its name (still our inode: same check as
// remove() makes), without the walk's opens, listings and fstats. rmdir
// never follows a symlink and refuses a non-empty directory or a mount
// point, so anything else the child left makes this return false and the
// walk removes it.
bool Workspace::remove_if_empty() {
  remove_subdirs(dir_.get(), "");
  struct stat mine {}, entry {};
  if (::fstat(dir_.get(), &mine) != 0 || ::fstatat(base_fd(), name_.c_str(), &entry, AT_SYMLINK_NOFOLLOW) != 0 ||
      !same_inode(mine, entry) || ::unlinkat(base_fd(), name_.c_str(), AT_REMOVEDIR) != 0)
    return false;
  dir_.reset();
  base_.reset();
  shared_base_.reset();
  return true;
}

// remove_if_empty for a released workspace made by name: the root is still
// the inode create_by_name made (fstatat, no link followed; only our euid
// can rename in the base), then home/, tmp/ and the root go by name. The
// root's rmdir refuses whatever else the child left (a file, a symlink in
// place of home/, a 000 directory it made) and remove() goes on with the
// walk through fds; a root moved or replaced fails the check and
// reacquire() says so. A path through the root is walked only in the
// base, where no one with fewer rights than ours can swap the root for a
// link between the check and the rmdir.
bool Workspace::remove_by_name() {
  const int base = base_fd();
  struct stat entry {};
  if (::fstatat(base, name_.c_str(), &entry, AT_SYMLINK_NOFOLLOW) != 0 || entry.st_dev != dev_ ||
      entry.st_ino != ino_)
    return false;
  remove_subdirs(base, name_ + "/");
  if (::unlinkat(base, name_.c_str(), AT_REMOVEDIR) != 0) return false;
  released_ = false;
  base_.reset();
  shared_base_.reset();
  return true;
}

// The same for a tmpfs mounted on the host (tmpfs_on_host), up to its
// root, which is a mount: empty when it has no subdirectory left (nlink 2)
// and its size is that of "." and ".." alone (tmpfs counts 20 bytes an
// entry, mm/shmem.c BOGO_DIRENT_SIZE). Anything else is for the walk.
bool Workspace::tmpfs_emptied_by_name() {
  constexpr off_t kEmptyTmpfsDirSize = 2 * 20;
  const int base = base_fd();
  remove_subdirs(base, name_ + "/");
  struct stat root {};
  return ::fstatat(base, name_.c_str(), &root, AT_SYMLINK_NOFOLLOW) == 0 && root.st_dev == dev_ &&
         root.st_ino == ino_ && root.st_nlink == 2 && root.st_size == kEmptyTmpfsDirSize;
}

}  // namespace corral
