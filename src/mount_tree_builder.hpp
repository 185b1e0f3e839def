// Internal to the mount tree's two sources (mount_tree.cpp: the tree and
// its binds, workspace, tmpfs and cwd; mount_tree_host.cpp: what a tree
// shows of the host, its system entries, the /etc allow-list, /dev): the
// step builder both write into and the path helpers both use. Parent side
// only; not installed.
#pragma once

// <linux/mount.h> rather than <sys/mount.h>: glibc 2.36's header clashes
// with the kernel's, and the kernel's has the new mount API (struct
// mount_attr, MOUNT_ATTR_*, OPEN_TREE_*, MOVE_MOUNT_*).
#include <linux/mount.h>
#include <sys/stat.h>

#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "corral/mount_tree.hpp"

namespace corral::mount_tree_detail {

// Where the host's root sits between the first pivot_root and its detach.
constexpr std::string_view kOldRoot = "/.oldroot";

constexpr std::uint64_t kReadOnly = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
constexpr std::uint64_t kWritable = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;

enum class HostKind { missing, directory, file, symlink, chardev, other };

// lstat(2)'s answer as a kind; `st` (when given) gets the stat.
HostKind host_kind(const std::string& path, struct stat* st = nullptr);

// realpath(3) of a host path; errors name `what`.
Expected<std::string> canonical_host(const std::string& path, std::string_view what);

// An absolute path inside the sandbox, without "."/".." or doubled slashes.
// `who` names it in messages ("mount tree: cwd 'x'").
Expected<std::string> normalize_inside(const std::string& path, const std::string& who);

class Builder {
 public:
  PreparedMountTree tree;

  std::uint32_t s(std::string_view v) { return tree.add_string(v); }

  void add(MountOp op, std::string_view what, std::string_view target, std::string_view source = {},
           std::uint32_t mode = 0) {
    MountStep st{op};
    st.what = s(what);
    if (!target.empty()) st.target = s(target);
    if (!source.empty()) st.source = s(source);
    st.mode = mode;
    tree.add_step(st);
  }

  void mount(std::string_view what, std::string_view fstype, std::string_view target, unsigned long flags,
             std::string_view data) {
    MountStep st{MountOp::mount};
    st.what = s(what);
    st.source = s(fstype);
    st.fstype = st.source;
    st.target = s(target);
    st.flags = flags;
    if (!data.empty()) st.data = s(data);
    tree.add_step(st);
  }

  void tmpfs(std::string_view target, unsigned long flags, std::string options) {
    mount("mount tmpfs on " + std::string(target), "tmpfs", target, flags, options);
  }

  void mkdir(const std::string& target, std::uint32_t mode = 0755) {
    if (!made_.insert(target).second) return;
    add(MountOp::mkdir, "mkdir " + target, target, {}, mode);
  }

  // mkdir every ancestor of `target` (not target itself).
  void mkdir_parents(const std::string& target) {
    for (std::size_t i = target.find('/', 1); i != std::string::npos; i = target.find('/', i + 1))
      mkdir(target.substr(0, i));
  }

  void write_file(const std::string& target, const std::string& contents) {
    MountStep st{MountOp::write_file};
    st.what = s("write " + target);
    st.target = s(target);
    st.data = s(contents);
    st.data_len = static_cast<std::uint32_t>(contents.size());
    st.mode = 0644;
    tree.add_step(st);
  }

  void symlink(const std::string& link_target, const std::string& at) {
    mkdir_parents(at);
    add(MountOp::symlink, "symlink " + at + " -> " + link_target, at, link_target);
  }

  // Bind the (canonical) host path `host` at `inside`, creating the mount
  // point as a directory or an empty file to match the source.
  void bind(const std::string& host, const std::string& inside, std::uint64_t attr, bool is_dir,
            const struct stat* identity = nullptr) {
    mkdir_parents(inside);
    if (is_dir) {
      mkdir(inside);
    } else {
      add(MountOp::touch, "create mount point " + inside, inside, {}, 0644);
    }
    MountStep st{MountOp::bind};
    std::string mode = (attr & MOUNT_ATTR_RDONLY) ? "ro" : "rw";
    st.what = s("bind " + inside + " (" + mode + ", from " + host + ")");
    st.source = s(std::string(kOldRoot) + (host == "/" ? "" : host));
    st.target = s(inside);
    st.attr = attr;
    if (identity) {
      st.dev = identity->st_dev;
      st.ino = identity->st_ino;
    }
    tree.add_step(st);
  }

  // Attach the detached mount `fd` (open_tree'd by the parent) at `inside`.
  void attach(int fd, const std::string& inside, const std::string& host, std::string_view how = "rw") {
    MountStep st{MountOp::attach};
    st.what = s("bind " + inside + " (" + std::string(how) + ", from " + host + ")");
    st.target = s(inside);
    st.fd = fd;
    tree.add_step(st);
  }

  // A bind source's identity as it was just lstat'ed (canonical, not a
  // symlink): the split tree's fingerprint takes it instead of a stat of
  // its own.
  void note_identity(const std::string& host, const struct stat& st) {
    identities_.emplace(host, std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino));
  }
  // "dev:ino" of `host` as noted, or empty.
  std::string identity_of(const std::string& host) const {
    auto it = identities_.find(host);
    return it == identities_.end() ? std::string() : it->second;
  }

  // Whether the host is looked at (HostScan::full); with skip only what
  // the spec and the identity give goes into the steps.
  bool scan_host = true;
  // A host path the scan looked up: every directory above it is one whose
  // change (an entry added, removed, renamed) could change what the scan
  // finds (SplitMountTree::scanned_dirs). `listed`: `path` itself was read
  // as a directory too.
  void consult(const std::string& path, bool listed = false) {
    if (listed) scanned_.insert(path);
    for (std::size_t i = path.rfind('/'); i != std::string::npos && i > 0; i = path.rfind('/', i - 1))
      scanned_.insert(path.substr(0, i));
    if (!path.empty() && path[0] == '/') scanned_.insert("/");
  }
  const std::set<std::string>& scanned() const { return scanned_; }

  void setattr(const std::string& target, std::uint64_t attr, std::string_view what) {
    MountStep st{MountOp::setattr};
    st.what = s(what);
    st.target = s(target);
    st.attr = attr;
    tree.add_step(st);
  }

 private:
  std::set<std::string> made_;
  std::map<std::string, std::string> identities_;
  std::set<std::string> scanned_;
};

// An operator's device (--dev-bind): its path and the identity it was opened with.
struct DevBind {
  std::string path;
  struct stat st;
};

// mount_tree_host.cpp: the host's system entries and a generated /etc for `who`.
Status add_host_system(Builder& b, const EtcIdentity& who);
// Every entry of `rootfs` (but what the tree provides itself), mirrored.
Status add_rootfs(Builder& b, const std::string& rootfs);
// /dev: a tmpfs with the standard nodes and `devices` bound; `fresh` gets
// the per-run mounts (devpts, /dev/shm): `b` itself, or the per-run half of
// a split tree (prepare_split_mount_tree).
void add_dev(Builder& b, const MountTreeSpec& spec, Builder& fresh, const std::vector<DevBind>& devices);
// The operator's devices: character devices under /dev, opened without
// following a symlink; their identity goes into the bind step.
Expected<std::vector<DevBind>> check_dev_binds(const MountTreeSpec& spec);

}  // namespace corral::mount_tree_detail
