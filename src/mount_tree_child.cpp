// The child side of mount_tree.hpp: the steps run with raw syscalls only
// (async-signal-safe, no allocation), and the detached copy both sides use.
#include <fcntl.h>
#include <linux/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "corral/mount_tree.hpp"
#include "corral/syscalls.hpp"

namespace corral {

long open_detached_tree(const char* source, std::uint64_t attr, MountCall* failed) noexcept {
  return open_detached_tree_checked(source, attr, 0, 0, failed);
}

long open_detached_tree_checked(const char* source, std::uint64_t attr, std::uint64_t dev, std::uint64_t ino,
                                MountCall* failed) noexcept {
  struct open_how how;
  std::memset(&how, 0, sizeof how);
  how.flags = O_PATH | O_CLOEXEC;
  how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  long fd = sys::call(SYS_openat2, AT_FDCWD, reinterpret_cast<long>(source), reinterpret_cast<long>(&how),
                      sizeof how);
  if (fd < 0) {
    *failed = MountCall::openat2;
    return fd;
  }
  if (dev != 0 || ino != 0) {
    // The parent opened (and the door checked) this inode; a rename or a
    // mount since then put another one here.
    struct stat st;
    long ret = sys::call(SYS_newfstatat, fd, reinterpret_cast<long>(""), reinterpret_cast<long>(&st), AT_EMPTY_PATH);
    if (ret < 0 || st.st_dev != dev || st.st_ino != ino) {
      sys::call(SYS_close, fd);
      *failed = MountCall::fstat;
      return ret < 0 ? ret : -ESTALE;
    }
  }
  long tree = sys::call(SYS_open_tree, fd, reinterpret_cast<long>(""),
                        OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH | AT_RECURSIVE);
  sys::call(SYS_close, fd);
  if (tree < 0) {
    *failed = MountCall::open_tree;
    return tree;
  }
  if (attr != 0) {
    struct mount_attr ma;
    std::memset(&ma, 0, sizeof ma);
    ma.attr_set = attr;
    long ret = sys::call(SYS_mount_setattr, tree, reinterpret_cast<long>(""), AT_EMPTY_PATH | AT_RECURSIVE,
                         reinterpret_cast<long>(&ma), sizeof ma);
    if (ret < 0) {
      sys::call(SYS_close, tree);
      *failed = MountCall::mount_setattr;
      return ret;
    }
  }
  return tree;
}

namespace {

// umount(2): lazy unmount; an enum in glibc's <sys/mount.h>, which we avoid.
constexpr long kMntDetach = 2;

struct StepResult {
  int err;
  MountCall call;
};

inline StepResult fail(long ret, MountCall call) noexcept { return {sys::error_of(ret), call}; }

StepResult do_bind(const MountStep& st, const char* source, const char* target) noexcept {
  MountCall failed = MountCall::none;
  long tree = open_detached_tree_checked(source, st.attr, st.dev, st.ino, &failed);
  if (tree < 0) return fail(tree, failed);
  long ret = sys::call(SYS_move_mount, tree, reinterpret_cast<long>(""), AT_FDCWD, reinterpret_cast<long>(target),
                       MOVE_MOUNT_F_EMPTY_PATH);
  sys::call(SYS_close, tree);
  return fail(ret, MountCall::move_mount);
}

StepResult create_file(const MountStep& st, const char* target, const char* data) noexcept {
  bool write = st.op == MountOp::write_file;
  long flags = O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW | (write ? O_WRONLY : O_RDONLY);
  long fd = sys::call(SYS_openat, AT_FDCWD, reinterpret_cast<long>(target), flags, st.mode);
  if (fd == -EEXIST && !write) return {0, MountCall::none};
  if (fd < 0) return fail(fd, MountCall::open);
  int err = write ? sys::write_all(static_cast<int>(fd), data, st.data_len) : 0;
  sys::call(SYS_close, fd);
  return {err, err ? MountCall::write : MountCall::none};
}

StepResult run_step(const PreparedMountTree& t, const MountStep& st) noexcept {
  const char* src = t.str(st.source);
  const char* tgt = t.str(st.target);
  auto L = [](const void* p) { return reinterpret_cast<long>(p); };
  long ret = 0;
  switch (st.op) {
    case MountOp::make_private:
      ret = sys::call(SYS_mount, 0, L("/"), 0, MS_REC | MS_PRIVATE, 0);
      return fail(ret, MountCall::mount);
    case MountOp::mount:
      ret = sys::call(SYS_mount, L(src), L(tgt), L(t.str(st.fstype)), static_cast<long>(st.flags),
                      L(t.str(st.data)));
      return fail(ret, MountCall::mount);
    case MountOp::bind:
      return do_bind(st, src, tgt);
    case MountOp::setattr: {
      struct mount_attr ma;
      std::memset(&ma, 0, sizeof ma);
      ma.attr_set = st.attr;
      ret = sys::call(SYS_mount_setattr, AT_FDCWD, L(tgt), 0, L(&ma), sizeof ma);
      return fail(ret, MountCall::mount_setattr);
    }
    case MountOp::mkdir:
      ret = sys::call(SYS_mkdirat, AT_FDCWD, L(tgt), st.mode);
      return fail(ret == -EEXIST ? 0 : ret, MountCall::mkdir);
    case MountOp::touch:
    case MountOp::write_file:
      return create_file(st, tgt, t.str(st.data));
    case MountOp::symlink:
      ret = sys::call(SYS_symlinkat, L(src), AT_FDCWD, L(tgt));
      return fail(ret, MountCall::symlink);
    case MountOp::pivot_root:
      ret = sys::call(SYS_pivot_root, L(src), L(tgt));
      if (ret < 0) return fail(ret, MountCall::pivot_root);
      ret = sys::call(SYS_chdir, L("/"));
      return fail(ret, MountCall::chdir);
    case MountOp::detach:
      ret = sys::call(SYS_umount2, L(tgt), kMntDetach);
      return fail(ret, MountCall::umount2);
    case MountOp::rmdir:
      ret = sys::call(SYS_unlinkat, AT_FDCWD, L(tgt), AT_REMOVEDIR);
      return fail(ret, MountCall::rmdir);
    case MountOp::chdir:
      // The cwd may lie in a bind another run writes (syscalls.hpp).
      return fail(-sys::chdir_no_magiclinks(tgt), MountCall::chdir);
    case MountOp::attach:
      ret = sys::call(SYS_move_mount, st.fd, L(""), AT_FDCWD, L(tgt), MOVE_MOUNT_F_EMPTY_PATH);
      return fail(ret, MountCall::move_mount);
  }
  return {EINVAL, MountCall::none};
}

}  // namespace

// Child side; async-signal-safe (raw syscalls, no allocation: the vector and
// arena are only read).
int apply_mount_tree_in_child(const PreparedMountTree& tree, MountFailure* failure) noexcept {
  long old_umask = sys::call(SYS_umask, 0);
  const auto& steps = tree.steps();
  StepResult r{0, MountCall::none};
  std::size_t i = 0;
  for (; i < steps.size(); ++i) {
    r = run_step(tree, steps[i]);
    if (r.err != 0) break;
  }
  sys::call(SYS_umask, old_umask);
  if (r.err != 0 && failure) {
    failure->step = static_cast<std::int32_t>(i);
    failure->err = r.err;
    failure->call = r.call;
  }
  return r.err;
}

}  // namespace corral
