// The filesystem a `container` run sees: a fresh root on a size-capped
// tmpfs holding read-only binds of the host's /usr (and /bin, /lib*, /sbin
// as the host has them: symlinks into usr on a merged-/usr system), a
// generated minimal /etc, a fresh /proc, a minimal /dev, a private /tmp and
// the workspace bound read-write. Nothing else of the host is visible.
//
// Prepare (parent): validate and canonicalize every path, look at what the
// host has, and turn the whole tree into a flat list of MountSteps whose
// strings live in one arena owned by PreparedMountTree.
// Apply (child, inside a new mount namespace, with CAP_SYS_ADMIN in the
// user namespace that owns it): execute the steps with raw syscalls, and on
// failure report which step and which call failed, so the parent can say
// "mount tree: step 6 'bind /usr (ro)': open_tree: Operation not permitted".
//
// Binds use the new mount API (open_tree(OPEN_TREE_CLONE|AT_RECURSIVE) +
// mount_setattr + move_mount; kernel >= 5.12): the read-only flag is set on
// the detached copy, recursively, before it is attached, so no submount of a
// bound tree is ever visible writable. The source is opened with openat2
// RESOLVE_NO_SYMLINKS on its canonical path (kernel >= 5.6).
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "corral/fd.hpp"
#include "corral/status.hpp"

namespace corral {

// Caller's description of the tree. Setters only record; prepare_mount_tree()
// validates everything and returns the first problem.
class MountTreeSpec {
 public:
  struct Bind {
    std::string source;  // host path
    std::string target;  // absolute path inside
    bool writable = false;
    // The source is already resolved (the door's realpath, checked against
    // the operator's prefixes): opened as given with no symlink followed,
    // never realpath'd again, so a link swapped in after the check fails.
    bool resolved = false;
    // >= 0: a detached mount the caller made from the source (an idmapped
    // copy, container.hpp); the child attaches it at `target`. The fd stays
    // the caller's.
    int fd = -1;
  };
  struct Tmpfs {
    std::string target;
    std::uint64_t bytes = 0;
  };

  // Use DIR's top-level entries (read-only) instead of the host's /usr, /bin,
  // /lib* and the generated /etc. /proc, /dev, /tmp and the workspace are
  // still provided fresh.
  MountTreeSpec& rootfs(std::string dir) { rootfs_ = std::move(dir); return *this; }
  // The host directory bound read-write at `inside` (default /workspace),
  // which becomes the cwd unless cwd() says otherwise.
  MountTreeSpec& workspace(std::string host_dir, std::string inside = "/workspace") {
    workspace_ = std::move(host_dir);
    workspace_inside_ = std::move(inside);
    return *this;
  }
  // Instead of a host directory: a detached mount (an fsmount'ed tmpfs, as
  // Workspace::create with tmpfs_bytes makes) the child attaches at
  // `inside` with move_mount. The fd stays the caller's; once attached, the
  // mount lives in the run's mount namespace and the fd still reaches it.
  MountTreeSpec& workspace_mount(int detached_fd, std::string inside = "/workspace") {
    workspace_.clear();
    workspace_mount_fd_ = detached_fd;
    workspace_inside_ = std::move(inside);
    return *this;
  }
  MountTreeSpec& ro_bind(std::string source, std::string target) {
    binds_.push_back({std::move(source), std::move(target), false});
    return *this;
  }
  MountTreeSpec& bind(std::string source, std::string target) {
    binds_.push_back({std::move(source), std::move(target), true});
    return *this;
  }
  // A detached mount `fd` (made from the host path `source`; the mount
  // point is a directory or a file as the fd is) attached at `target`.
  MountTreeSpec& attach(int fd, std::string source, std::string target, bool writable) {
    binds_.push_back({std::move(source), std::move(target), writable, true, fd});
    return *this;
  }
  // A bind whose source the door resolved (Bind::resolved).
  MountTreeSpec& bind_resolved(std::string source, std::string target, bool writable) {
    binds_.push_back({std::move(source), std::move(target), writable, true, -1});
    return *this;
  }
  // A tmpfs of `bytes` at `target` (absolute inside), mode 1777.
  MountTreeSpec& tmpfs(std::string target, std::uint64_t bytes) {
    tmpfs_.push_back({std::move(target), bytes});
    return *this;
  }
  // A host character device (a path under /dev, no symlink in it) bound at
  // the same path inside; the only mount without nodev.
  MountTreeSpec& dev_bind(std::string path) { dev_binds_.push_back(std::move(path)); return *this; }
  MountTreeSpec& cwd(std::string inside) { cwd_ = std::move(inside); return *this; }
  // tmpfs ceilings. The root holds only directories and the /etc files.
  MountTreeSpec& root_bytes(std::uint64_t n) { root_bytes_ = n; return *this; }
  MountTreeSpec& tmp_bytes(std::uint64_t n) { tmp_bytes_ = n; return *this; }
  MountTreeSpec& shm_bytes(std::uint64_t n) { shm_bytes_ = n; return *this; }
  // Mount a fresh /proc (default on). It shows the run's processes only when
  // the child is also in a new pid namespace.
  MountTreeSpec& proc(bool on) { proc_ = on; return *this; }
  // An existing host directory the child mounts the new root's tmpfs on
  // before pivot_root (only inside its own mount namespace; the host never
  // sees it). Default /tmp, as bubblewrap does.
  MountTreeSpec& staging_dir(std::string dir) { staging_ = std::move(dir); return *this; }

  const std::string& rootfs() const { return rootfs_; }
  const std::string& workspace() const { return workspace_; }
  const std::string& workspace_inside() const { return workspace_inside_; }
  int workspace_mount_fd() const { return workspace_mount_fd_; }
  const std::vector<Bind>& binds() const { return binds_; }
  const std::vector<Tmpfs>& tmpfs() const { return tmpfs_; }
  const std::vector<std::string>& dev_binds() const { return dev_binds_; }
  const std::string& cwd() const { return cwd_; }
  std::uint64_t root_bytes() const { return root_bytes_; }
  std::uint64_t tmp_bytes() const { return tmp_bytes_; }
  std::uint64_t shm_bytes() const { return shm_bytes_; }
  bool proc() const { return proc_; }
  const std::string& staging_dir() const { return staging_; }

 private:
  std::string rootfs_;
  std::string workspace_;
  std::string workspace_inside_ = "/workspace";
  int workspace_mount_fd_ = -1;
  std::vector<Bind> binds_;
  std::vector<Tmpfs> tmpfs_;
  std::vector<std::string> dev_binds_;
  std::string cwd_;
  std::uint64_t root_bytes_ = 4ull << 20;
  std::uint64_t tmp_bytes_ = 64ull << 20;
  std::uint64_t shm_bytes_ = 16ull << 20;
  bool proc_ = true;
  std::string staging_ = "/tmp";
};

// Who the generated /etc/passwd and /etc/group describe: the uid/gid the
// program runs as inside the user namespace.
struct EtcIdentity {
  uid_t uid = 1000;
  gid_t gid = 1000;
  std::string user = "sandbox";
  std::string hostname = "corral";
};

enum class MountOp : std::uint8_t {
  make_private,  // mount(NULL, "/", NULL, MS_REC|MS_PRIVATE, NULL)
  mount,         // mount(source, target, fstype, flags, data)
  bind,          // openat2(source) -> open_tree(clone, recursive) -> mount_setattr(attr) -> move_mount(target)
  setattr,       // mount_setattr(target, attr): flags on an attached mount, not recursive
  mkdir,         // mkdir(target, mode); an existing entry is fine
  touch,         // an empty file as a bind target; an existing one is fine
  write_file,    // create target (must not exist) with `data` as contents
  symlink,       // symlink(source, target)
  pivot_root,    // pivot_root(source, target); chdir("/")
  detach,        // umount2(target, MNT_DETACH)
  rmdir,         // rmdir(target)
  chdir,         // chdir(target)
  attach,        // move_mount(fd, target): a detached mount the parent made
};

// Strings are offsets into PreparedMountTree's arena (kNoString = none), so
// the tree can be copied or moved without dangling pointers.
inline constexpr std::uint32_t kNoString = 0xffffffffu;

struct MountStep {
  MountOp op;
  std::uint32_t mode = 0;          // mkdir/touch/write_file
  std::uint32_t source = kNoString;
  std::uint32_t target = kNoString;
  std::uint32_t fstype = kNoString;
  std::uint32_t data = kNoString;  // mount data, or file contents
  std::uint32_t data_len = 0;
  std::uint32_t what = kNoString;  // "bind /usr (ro)": for error messages
  unsigned long flags = 0;         // MS_* for mount
  std::uint64_t attr = 0;          // MOUNT_ATTR_* for bind/setattr
  int fd = -1;                     // attach: the detached mount (the child's copy of the parent's fd)
  // bind: the source's st_dev/st_ino as the parent opened it (0: unchecked);
  // the child refuses another file at that path (ESTALE).
  std::uint64_t dev = 0, ino = 0;
};

// Which syscall of a step failed.
enum class MountCall : std::uint8_t {
  none, mount, openat2, open_tree, mount_setattr, move_mount, mkdir, open, write,
  symlink, pivot_root, chdir, umount2, rmdir, fstat,
};

// The fixed record a failing child reports: step index, the call, errno.
struct MountFailure {
  std::int32_t step = -1;
  std::int32_t err = 0;
  MountCall call = MountCall::none;
};

class PreparedMountTree {
 public:
  const std::vector<MountStep>& steps() const { return steps_; }
  // The string at an arena offset, or nullptr for kNoString.
  const char* str(std::uint32_t off) const noexcept {
    return off == kNoString ? nullptr : arena_.data() + off;
  }
  // One line per step ("3 mount tmpfs on /.oldroot ..."): for debugging and tests.
  std::string describe() const;
  // "mount tree: step 6 'bind /usr (ro)': open_tree: Operation not permitted"
  Error error_for(const MountFailure& failure) const;

  // Used by prepare: append a string (with its NUL) and return its offset.
  std::uint32_t add_string(std::string_view s);
  void add_step(const MountStep& step) { steps_.push_back(step); }

 private:
  std::string arena_;
  std::vector<MountStep> steps_;
};

const char* mount_call_name(MountCall call) noexcept;

// Parent: validate the spec against the host and build the steps.
Expected<PreparedMountTree> prepare_mount_tree(const MountTreeSpec& spec, const EtcIdentity& who);

// The same tree in two parts, for a namespace template (ns_template.hpp):
// `base` is what every run shares — the root, the host entries or rootfs,
// /etc, /dev, the mount points — and ends with the host detached and /
// read-only; `per_run` mounts what each run gets fresh on a private copy of
// it: /proc, /tmp, /dev/shm and the workspace (attached from
// `workspace_fd`, a detached mount made here, since the copy cannot see the
// host), then the chdir. Refuses binds (they would become part of the shared
// base). `fingerprint` names the base: its steps plus the device and inode
// of every host entry it binds and the mountinfo line of every host mount
// at or below one (applying the base copies those as they are then).
// `scanned_dirs` are the host directories
// whose entries the scan looked up or listed, and their ancestors: while
// none of them changes (and no mount comes or goes) a scan would find the
// same entries (ns_template.hpp: the template's host stamp).
//
// HostScan::skip builds `per_run` (and `workspace_fd`) as usual but does
// not look at the host at all: `base` then holds only what the spec and
// `who` put there (the root, /etc's generated files, /dev's skeleton, the
// mount points) and is never to be applied, and `fingerprint` names that
// part alone: with the host stamp, the key that finds a template without a
// scan. A rootfs tree is always scanned (skip is refused).
struct SplitMountTree {
  PreparedMountTree base;
  PreparedMountTree per_run;
  UniqueFd workspace_fd;
  std::string fingerprint;
  std::vector<std::string> scanned_dirs;  // sorted; empty with HostScan::skip
};
enum class HostScan { full, skip };
Expected<SplitMountTree> prepare_split_mount_tree(const MountTreeSpec& spec, const EtcIdentity& who,
                                                  HostScan scan = HostScan::full);

// Either side, async-signal-safe: a detached, recursive copy of the mount
// at `source` (opened with openat2 RESOLVE_NO_SYMLINKS) with the
// MOUNT_ATTR_* `attr` set on all of it, as an O_CLOEXEC fd for move_mount;
// or a negative errno with *failed naming the call that failed.
long open_detached_tree(const char* source, std::uint64_t attr, MountCall* failed) noexcept;
// The same, refusing (ESTALE, *failed = fstat) a source whose st_dev/st_ino
// is not `dev`/`ino` (both 0: no check).
long open_detached_tree_checked(const char* source, std::uint64_t attr, std::uint64_t dev, std::uint64_t ino,
                                MountCall* failed) noexcept;

// Parent: open a bind source as an O_PATH fd without following a symlink,
// the last component included
// (openat2 RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS). Unless `resolved`, a
// path with a symlink in it is first resolved with realpath(3) (the
// operator's own path); a resolved one is opened as given or refused.
// `canonical` is the path opened; `st` what the fd is.
struct BindSource {
  UniqueFd fd;
  std::string canonical;
  struct stat st;
};
Expected<BindSource> open_bind_source(const std::string& path, bool resolved, std::string_view what);

// Child, async-signal-safe: raw syscalls only, no allocation. Must run in a
// new mount namespace (else it would rearrange the host's mounts; the first
// step makes "/" private recursively, so nothing propagates back), after the
// user namespace maps are written and the child has switched to the mapped
// ids (files it creates must be owned by a mapped id). Returns 0 or a
// positive errno and fills *failure (may be null). The umask is 0 while the
// steps run and restored afterwards.
int apply_mount_tree_in_child(const PreparedMountTree& tree, MountFailure* failure) noexcept;

}  // namespace corral
