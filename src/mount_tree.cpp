#include "corral/mount_tree.hpp"

// <linux/mount.h> rather than <sys/mount.h>: glibc 2.36's header clashes
// with the kernel's, and the kernel's has the new mount API (struct
// mount_attr, MOUNT_ATTR_*, OPEN_TREE_*, MOVE_MOUNT_*).
#include <dirent.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <set>

#include "corral/fd.hpp"
#include "corral/syscalls.hpp"

namespace corral {
namespace {

// Where the host's root sits between the first pivot_root and its detach.
constexpr std::string_view kOldRoot = "/.oldroot";

// The host entries a host-mode tree mirrors, as the host has them.
constexpr std::string_view kSystemEntries[] = {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"};
// /etc entries programs need and that say nothing secret, carried
// read-only as the host has them: the loader's, the name-service tables
// nsswitch.conf below names (services, protocols: getaddrinfo with a
// service name, getprotobyname), time zone, MIME and magic databases, the
// public CA certificates (not /etc/ssl/private), and the directories that
// /usr's own symlinks point into (/usr/lib/jvm/*/conf/security/java.security
// -> /etc/java-*, /usr/lib/python3.*/sitecustomize.py -> /etc/python3.*,
// /usr/lib/ssl/certs -> /etc/ssl/certs). An allow-list, never a copy of /etc
// minus a deny-list: shadow, gshadow, ssh host keys, sudoers, machine-id,
// resolv.conf and whatever a site adds stay out.
constexpr std::string_view kHostEtc[] = {
    "ld.so.cache", "ld.so.conf",     "ld.so.conf.d",         "alternatives",    "localtime",      "timezone",
    "services",    "protocols",      "rpc",                  "networks",        "ethertypes",     "host.conf",
    "gai.conf",    "mime.types",     "magic",                "magic.mime",      "locale.alias",   "os-release",
    "debian_version", "shells",      "inputrc",              "bash.bashrc",     "profile",        "terminfo",
    "xml",         "sgml",           "groff",                "fonts",           "ca-certificates.conf",
    "ssl/certs",   "ssl/openssl.cnf"};
// /etc directories carried by name prefix (one per installed version).
constexpr std::string_view kHostEtcPrefixes[] = {"java-", "python3"};
// tty: a process with no controlling terminal gets ENXIO from it, one
// with a pty as its terminal (login_tty after openpty) that pty.
constexpr std::string_view kDevNodes[] = {"null", "zero", "full", "random", "urandom", "tty"};
// rootfs entries the tree provides itself (or never shows).
constexpr std::string_view kRootfsSkipped[] = {"proc", "dev", "tmp", "sys", ".oldroot"};

constexpr std::uint64_t kReadOnly = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
constexpr std::uint64_t kWritable = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;

enum class HostKind { missing, directory, file, symlink, chardev, other };

HostKind host_kind(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return HostKind::missing;
  if (S_ISDIR(st.st_mode)) return HostKind::directory;
  if (S_ISREG(st.st_mode)) return HostKind::file;
  if (S_ISLNK(st.st_mode)) return HostKind::symlink;
  if (S_ISCHR(st.st_mode)) return HostKind::chardev;
  return HostKind::other;
}

Expected<std::string> canonical_host(const std::string& path, std::string_view what) {
  if (path.empty()) return Error::invalid("mount tree: " + std::string(what) + ": empty host path");
  char buf[PATH_MAX];
  if (!::realpath(path.c_str(), buf))
    return Error::from_errno(errno, "mount tree: " + std::string(what) + " '" + path + "'");
  return std::string(buf);
}

// An absolute path inside the sandbox, without "."/".." or doubled slashes.
// `who` names it in messages ("mount tree: cwd 'x'").
Expected<std::string> normalize_inside(const std::string& path, const std::string& who) {
  if (path.empty() || path.front() != '/') return Error::invalid(who + ": must be an absolute path");
  std::string out;
  std::size_t i = 0;
  while (i < path.size()) {
    while (i < path.size() && path[i] == '/') ++i;
    std::size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    std::string_view part(path.data() + i, j - i);
    if (part == "." || part == "..") return Error::invalid(who + ": '.' and '..' are not allowed");
    if (!part.empty()) {
      out += '/';
      out += part;
    }
    i = j;
  }
  if (out.empty()) out = "/";
  if (out == kOldRoot || out.rfind(std::string(kOldRoot) + "/", 0) == 0)
    return Error::invalid(who + ": " + std::string(kOldRoot) + " is reserved");
  return out;
}

std::string etc_passwd(const EtcIdentity& who) {
  std::string out;
  if (who.uid != 0) out += "root:x:0:0:root:/root:/usr/sbin/nologin\n";
  out += who.user + ":x:" + std::to_string(who.uid) + ":" + std::to_string(who.gid) + ":" + who.user +
         ":/workspace:/bin/sh\n";
  // Unmapped host ids show as 65534 inside; give them a name.
  if (who.uid != 65534) out += "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
  return out;
}

std::string etc_group(const EtcIdentity& who) {
  std::string out;
  if (who.gid != 0) out += "root:x:0:\n";
  out += who.user + ":x:" + std::to_string(who.gid) + ":\n";
  if (who.gid != 65534) out += "nogroup:x:65534:\n";
  return out;
}

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

  void setattr(const std::string& target, std::uint64_t attr, std::string_view what) {
    MountStep st{MountOp::setattr};
    st.what = s(what);
    st.target = s(target);
    st.attr = attr;
    tree.add_step(st);
  }

 private:
  std::set<std::string> made_;
};

// Mirror one host entry (`host` is its path on the host, `inside` where it
// goes): a symlink stays a symlink with the same target, a directory or file
// becomes a read-only bind of its canonical path. Anything else is skipped.
Status mirror_entry(Builder& b, const std::string& host, const std::string& inside, bool required) {
  switch (host_kind(host)) {
    case HostKind::symlink: {
      char buf[PATH_MAX];
      ssize_t n = ::readlink(host.c_str(), buf, sizeof buf - 1);
      if (n < 0) return Error::from_errno(errno, "mount tree: readlink '" + host + "'");
      b.symlink(std::string(buf, static_cast<std::size_t>(n)), inside);
      return {};
    }
    case HostKind::directory:
    case HostKind::file: {
      auto canon = canonical_host(host, "host entry");
      if (!canon) return std::move(canon).error();
      b.bind(*canon, inside, kReadOnly, host_kind(*canon) == HostKind::directory);
      return {};
    }
    case HostKind::missing:
      if (required) return Error(ENOENT, "mount tree: the host has no " + host);
      return {};
    default:
      return {};
  }
}

Status add_host_system(Builder& b, const EtcIdentity& who) {
  for (auto name : kSystemEntries) {
    std::string n(name);
    if (auto st = mirror_entry(b, "/" + n, "/" + n, name == "usr"); !st) return st;
  }
  b.mkdir("/etc");
  b.write_file("/etc/passwd", etc_passwd(who));
  b.write_file("/etc/group", etc_group(who));
  b.write_file("/etc/hostname", who.hostname + "\n");
  b.write_file("/etc/hosts", "127.0.0.1\tlocalhost " + who.hostname +
                                 "\n::1\tlocalhost ip6-localhost ip6-loopback\n");
  b.write_file("/etc/nsswitch.conf",
               "passwd: files\ngroup: files\nshadow: files\nhosts: files\nnetworks: files\n"
               "protocols: files\nservices: files\n");
  std::vector<std::string> names(std::begin(kHostEtc), std::end(kHostEtc));
  if (DIR* dir = ::opendir("/etc")) {
    std::vector<std::string> versioned;
    while (struct dirent* e = ::readdir(dir)) {
      std::string_view n = e->d_name;
      for (auto prefix : kHostEtcPrefixes)
        if (n.size() > prefix.size() && n.substr(0, prefix.size()) == prefix) versioned.emplace_back(n);
    }
    ::closedir(dir);
    // readdir's order is the directory's; the base tree's fingerprint is not.
    std::sort(versioned.begin(), versioned.end());
    names.insert(names.end(), versioned.begin(), versioned.end());
  }
  for (const auto& n : names)
    if (auto st = mirror_entry(b, "/etc/" + n, "/etc/" + n, false); !st) return st;
  return {};
}

Status add_rootfs(Builder& b, const std::string& rootfs) {
  auto canon = canonical_host(rootfs, "rootfs");
  if (!canon) return std::move(canon).error();
  if (host_kind(*canon) != HostKind::directory)
    return Error(ENOTDIR, "mount tree: rootfs '" + rootfs + "' is not a directory");
  DIR* dir = ::opendir(canon->c_str());
  if (!dir) return Error::from_errno(errno, "mount tree: rootfs '" + rootfs + "'");
  std::vector<std::string> names;
  while (struct dirent* e = ::readdir(dir)) {
    std::string_view n = e->d_name;
    if (n == "." || n == ".." ||
        std::find(std::begin(kRootfsSkipped), std::end(kRootfsSkipped), n) != std::end(kRootfsSkipped))
      continue;
    names.emplace_back(n);
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());
  std::string base = *canon == "/" ? "" : *canon;
  for (const auto& n : names)
    if (auto st = mirror_entry(b, base + "/" + n, "/" + n, false); !st) return st;
  return {};
}

// `fresh`: where the per-run /dev/shm goes (`b` itself, or the per-run half
// of a split tree; see prepare_split_mount_tree).
struct DevBind {
  std::string path;
  struct stat st;
};

void add_dev(Builder& b, const MountTreeSpec& spec, Builder& fresh, const std::vector<DevBind>& devices) {
  b.mkdir("/dev");
  b.tmpfs("/dev", MS_NOSUID | MS_NOEXEC, "size=64k,nr_inodes=64,mode=0755");
  // mknod is refused in a user namespace; the host's nodes are bound onto
  // empty files instead. The bind keeps the host devtmpfs superblock, whose
  // device nodes stay usable (no nodev on it).
  for (auto node : kDevNodes) {
    std::string host = "/dev/" + std::string(node);
    if (host_kind(host) != HostKind::chardev) continue;
    b.bind(host, host, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, false);
  }
  // The operator's devices: the only mounts without nodev. The device
  // cgroup (cgroup.hpp) is what limits the run to exactly these.
  for (const auto& dev : devices) b.bind(dev.path, dev.path, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, false, &dev.st);
  b.symlink("/proc/self/fd", "/dev/fd");
  b.symlink("/proc/self/fd/0", "/dev/stdin");
  b.symlink("/proc/self/fd/1", "/dev/stdout");
  b.symlink("/proc/self/fd/2", "/dev/stderr");
  // A devpts instance of the run's own (newinstance; bubblewrap's --dev
  // does the same): its ptys are numbered from 0 and none of the host's
  // terminals is in it. ptmxmode=0666 because the instance's ptmx node is
  // the only way in; /dev/ptmx points at it. No gid= option: the host's tty
  // group is not mapped in the user namespace, and a pty's slave then
  // belongs to its opener's group, which is all a program needs.
  b.mkdir("/dev/pts", 0755);
  b.symlink("pts/ptmx", "/dev/ptmx");
  fresh.mount("mount devpts on /dev/pts", "devpts", "/dev/pts", MS_NOSUID | MS_NOEXEC,
              "newinstance,ptmxmode=0666,mode=0620");
  b.mkdir("/dev/shm", 01777);
  fresh.tmpfs("/dev/shm", MS_NOSUID | MS_NODEV, "size=" + std::to_string(spec.shm_bytes()) + ",mode=1777");
  b.setattr("/dev", MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, "make /dev read-only");
}

// The operator's devices: character devices under /dev, opened without
// following a symlink; their identity goes into the bind step.
Expected<std::vector<DevBind>> check_dev_binds(const MountTreeSpec& spec) {
  std::vector<DevBind> out;
  for (const auto& path : spec.dev_binds()) {
    std::string what = "dev_bind '" + path + "'";
    auto inside = normalize_inside(path, "mount tree: " + what);
    if (!inside) return std::move(inside).error();
    if (inside->rfind("/dev/", 0) != 0 || *inside == "/dev/shm" || inside->rfind("/dev/shm/", 0) == 0)
      return Error::invalid("mount tree: " + what + ": a device is a path under /dev (not /dev/shm)");
    auto src = open_bind_source(*inside, true, what);
    if (!src) return std::move(src).error();
    if (!S_ISCHR(src->st.st_mode))
      return Error::invalid("mount tree: " + what + ": not a character device");
    out.push_back({*inside, src->st});
  }
  return out;
}

Status check_sizes(const MountTreeSpec& spec) {
  struct {
    const char* name;
    std::uint64_t value;
  } sizes[] = {{"root_bytes", spec.root_bytes()}, {"tmp_bytes", spec.tmp_bytes()}, {"shm_bytes", spec.shm_bytes()}};
  for (const auto& s : sizes)
    if (s.value < 4096) return Error::invalid("mount tree: " + std::string(s.name) + " must be at least 4096");
  return {};
}

}  // namespace

std::uint32_t PreparedMountTree::add_string(std::string_view s) {
  auto off = static_cast<std::uint32_t>(arena_.size());
  arena_.append(s);
  arena_.push_back('\0');
  return off;
}

const char* mount_call_name(MountCall call) noexcept {
  switch (call) {
    case MountCall::none: return "none";
    case MountCall::mount: return "mount";
    case MountCall::openat2: return "openat2";
    case MountCall::open_tree: return "open_tree";
    case MountCall::mount_setattr: return "mount_setattr";
    case MountCall::move_mount: return "move_mount";
    case MountCall::mkdir: return "mkdir";
    case MountCall::open: return "open";
    case MountCall::write: return "write";
    case MountCall::symlink: return "symlink";
    case MountCall::pivot_root: return "pivot_root";
    case MountCall::chdir: return "chdir";
    case MountCall::umount2: return "umount2";
    case MountCall::rmdir: return "rmdir";
    case MountCall::fstat: return "fstat (the source changed since it was opened)";
  }
  return "?";
}

std::string PreparedMountTree::describe() const {
  std::string out;
  for (std::size_t i = 0; i < steps_.size(); ++i) {
    out += std::to_string(i);
    out += ' ';
    out += str(steps_[i].what);
    out += '\n';
  }
  return out;
}

Error PreparedMountTree::error_for(const MountFailure& f) const {
  std::string step = "mount tree: step " + std::to_string(f.step);
  if (f.step >= 0 && static_cast<std::size_t>(f.step) < steps_.size())
    step += std::string(" '") + str(steps_[static_cast<std::size_t>(f.step)].what) + "'";
  step += ": ";
  step += mount_call_name(f.call);
  return Error::from_errno(f.err, step);
}

Expected<BindSource> open_bind_source(const std::string& path, bool resolved, std::string_view what) {
  const std::string who = "mount tree: " + std::string(what) + " '" + path + "'";
  if (path.empty() || path.front() != '/') {
    if (resolved || path.empty()) return Error::invalid(who + ": not an absolute path");
  }
  auto open_nofollow = [](const std::string& p) {
    struct open_how how{};
    // Not O_NOFOLLOW: with O_PATH it would open a trailing symlink itself;
    // RESOLVE_NO_SYMLINKS refuses it (ELOOP) like any other in the path.
    how.flags = O_PATH | O_CLOEXEC;
    how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
    return sys::call(SYS_openat2, AT_FDCWD, reinterpret_cast<long>(p.c_str()), reinterpret_cast<long>(&how), sizeof how);
  };
  BindSource out;
  out.canonical = path;
  long fd = path.front() == '/' ? open_nofollow(path) : -ELOOP;
  if (fd == -ELOOP && !resolved) {
    // The operator's own path with a link in it: what it names now.
    auto canon = canonical_host(path, what);
    if (!canon) return std::move(canon).error();
    out.canonical = *canon;
    fd = open_nofollow(out.canonical);
  }
  if (fd < 0)
    return Error::from_errno(sys::error_of(fd), who + (fd == -ELOOP ? ": a symlink in the path (refused: it was "
                                                                      "resolved and checked without one)"
                                                                    : ""));
  out.fd.reset(static_cast<int>(fd));
  if (::fstat(out.fd.get(), &out.st) != 0) return Error::from_errno(errno, who + ": fstat");
  // A path opened as given may still hold "." or ".." or doubled slashes;
  // the child re-opens it under /.oldroot, so it must be canonical.
  if (out.canonical != path) return out;
  auto canon = canonical_host(path, what);
  if (!canon) return std::move(canon).error();
  out.canonical = *canon;
  return out;
}

namespace {

// The workspace as a detached, recursive mount the child attaches (split
// trees: the child cannot see the host to bind it itself). Parent side.
Expected<UniqueFd> open_detached_workspace(const std::string& host) {
  MountCall failed = MountCall::none;
  long fd = open_detached_tree(host.c_str(), kWritable, &failed);
  if (fd < 0)
    return Error::from_errno(sys::error_of(fd), "mount tree: workspace '" + host + "': " + mount_call_name(failed));
  return UniqueFd(static_cast<int>(fd));
}

// Both trees: everything in `b`, or with `run` set (a split tree), the
// per-run mounts in `run` and only their mount points in `b`.
Status build_tree(const MountTreeSpec& spec, const EtcIdentity& who, Builder& b, Builder* run, UniqueFd* workspace_fd) {
  if (auto st = check_sizes(spec); !st) return st;
  auto staging = canonical_host(spec.staging_dir(), "staging dir");
  if (!staging) return std::move(staging).error();
  if (host_kind(*staging) != HostKind::directory || *staging == "/")
    return Error::invalid("mount tree: staging dir '" + spec.staging_dir() + "' must be a directory other than /");

  const std::string old_root = *staging + std::string(kOldRoot);
  b.add(MountOp::make_private, "make every mount private", "/");
  b.tmpfs(*staging, MS_NOSUID | MS_NODEV, "size=" + std::to_string(spec.root_bytes()) + ",mode=0755");
  b.add(MountOp::mkdir, "mkdir " + old_root, old_root, {}, 0700);
  b.add(MountOp::pivot_root, "pivot_root into the new root", old_root, *staging);

  if (spec.rootfs().empty()) {
    if (auto st = add_host_system(b, who); !st) return st;
  } else {
    if (auto st = add_rootfs(b, spec.rootfs()); !st) return st;
  }
  // Where what each run gets fresh goes: `run` for a split tree.
  Builder& fresh = run ? *run : b;
  auto devices = check_dev_binds(spec);
  if (!devices) return std::move(devices).error();
  if (run && !devices->empty())
    return Error::invalid("mount tree: a split tree takes no dev_binds (they would become part of the shared base)");
  add_dev(b, spec, fresh, *devices);
  if (spec.proc()) {
    // Mounted while the host's /proc is still attached under /.oldroot: in a
    // user namespace the kernel allows a new proc mount only where one is
    // already fully visible (mount_too_revealing). A split tree's per-run
    // proc is mounted by a child still in the host's user namespace, where
    // that rule does not apply.
    b.mkdir("/proc", 0555);
    fresh.mount("mount proc on /proc", "proc", "/proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, {});
  }
  b.mkdir("/tmp", 01777);
  fresh.tmpfs("/tmp", MS_NOSUID | MS_NODEV, "size=" + std::to_string(spec.tmp_bytes()) + ",mode=1777");

  std::string cwd = "/";
  if (spec.workspace_mount_fd() >= 0) {
    auto inside = normalize_inside(spec.workspace_inside(),
                                   "mount tree: workspace at '" + spec.workspace_inside() + "'");
    if (!inside) return std::move(inside).error();
    if (*inside == "/") return Error::invalid("mount tree: workspace cannot be mounted on /");
    b.mkdir_parents(*inside);
    b.mkdir(*inside);
    fresh.attach(spec.workspace_mount_fd(), *inside, "the run's tmpfs");
    cwd = *inside;
  } else if (!spec.workspace().empty()) {
    auto inside = normalize_inside(spec.workspace_inside(),
                                   "mount tree: workspace at '" + spec.workspace_inside() + "'");
    if (!inside) return std::move(inside).error();
    if (*inside == "/") return Error::invalid("mount tree: workspace cannot be mounted on /");
    auto host = canonical_host(spec.workspace(), "workspace");
    if (!host) return std::move(host).error();
    if (host_kind(*host) != HostKind::directory)
      return Error(ENOTDIR, "mount tree: workspace '" + spec.workspace() + "' is not a directory");
    if (run) {
      auto fd = open_detached_workspace(*host);
      if (!fd) return std::move(fd).error();
      *workspace_fd = std::move(*fd);
      b.mkdir_parents(*inside);
      b.mkdir(*inside);
      run->attach(workspace_fd->get(), *inside, *host);
    } else {
      b.bind(*host, *inside, kWritable, true);
    }
    cwd = *inside;
  }
  if (run && !spec.binds().empty())
    return Error::invalid("mount tree: a split tree takes no binds (they would become part of the shared base)");
  for (const auto& bind : spec.binds()) {
    std::string what = std::string(bind.writable ? "bind" : "ro_bind") + " '" + bind.source + "' -> '" + bind.target + "'";
    auto inside = normalize_inside(bind.target, "mount tree: " + what);
    if (!inside) return std::move(inside).error();
    if (*inside == "/") return Error::invalid("mount tree: " + what + ": cannot bind over /");
    if (bind.fd >= 0) {
      // The caller's detached copy (an idmapped one): the mount point as it is.
      struct stat st;
      if (::fstat(bind.fd, &st) != 0) return Error::from_errno(errno, "mount tree: " + what + ": fstat");
      b.mkdir_parents(*inside);
      if (S_ISDIR(st.st_mode)) b.mkdir(*inside);
      else b.add(MountOp::touch, "create mount point " + *inside, *inside, {}, 0644);
      b.attach(bind.fd, *inside, bind.source, bind.writable ? "rw, idmapped" : "ro, idmapped");
      continue;
    }
    // Opened here without following a symlink; the child binds the same
    // inode or fails (the step carries its identity).
    auto src = open_bind_source(bind.source, bind.resolved, what + ": source");
    if (!src) return std::move(src).error();
    if (!S_ISDIR(src->st.st_mode) && !S_ISREG(src->st.st_mode))
      return Error::invalid("mount tree: " + what + ": source is neither a directory nor a regular file" +
                            (S_ISCHR(src->st.st_mode) ? " (a device: --dev-bind)" : ""));
    b.bind(src->canonical, *inside, bind.writable ? kWritable : kReadOnly, S_ISDIR(src->st.st_mode), &src->st);
  }
  for (const auto& t : spec.tmpfs()) {
    std::string what = "tmpfs '" + t.target + "'";
    auto inside = normalize_inside(t.target, "mount tree: " + what);
    if (!inside) return std::move(inside).error();
    if (*inside == "/" || *inside == "/proc" || inside->rfind("/proc/", 0) == 0 || *inside == "/dev" ||
        inside->rfind("/dev/", 0) == 0)
      return Error::invalid("mount tree: " + what + ": not on /, /proc or /dev");
    if (t.bytes < 4096) return Error::invalid("mount tree: " + what + ": the size must be at least 4096 bytes");
    // The mount point may be under the workspace or a bind, which a split
    // tree's per-run half attaches: made on both sides (EEXIST is fine).
    for (Builder* side : {&b, run}) {
      if (!side) continue;
      side->mkdir_parents(*inside);
      side->mkdir(*inside, 01777);
    }
    fresh.tmpfs(*inside, MS_NOSUID | MS_NODEV, "size=" + std::to_string(t.bytes) + ",mode=1777");
  }
  b.add(MountOp::detach, "detach the host's root", std::string(kOldRoot));
  b.add(MountOp::rmdir, "rmdir " + std::string(kOldRoot), std::string(kOldRoot));
  b.setattr("/", kReadOnly, "make / read-only");
  if (!spec.cwd().empty()) {
    auto inside = normalize_inside(spec.cwd(), "mount tree: cwd '" + spec.cwd() + "'");
    if (!inside) return std::move(inside).error();
    cwd = *inside;
  }
  fresh.add(MountOp::chdir, "chdir " + cwd, cwd);
  return {};
}

}  // namespace

Expected<PreparedMountTree> prepare_mount_tree(const MountTreeSpec& spec, const EtcIdentity& who) {
  Builder b;
  if (auto st = build_tree(spec, who, b, nullptr, nullptr); !st) return std::move(st).error();
  return std::move(b.tree);
}

Expected<SplitMountTree> prepare_split_mount_tree(const MountTreeSpec& spec, const EtcIdentity& who) {
  Builder base, run;
  SplitMountTree out;
  if (auto st = build_tree(spec, who, base, &run, &out.workspace_fd); !st) return std::move(st).error();
  out.base = std::move(base.tree);
  out.per_run = std::move(run.tree);
  // What the base was built from: its steps (paths, /etc contents, sizes)
  // and the identity of every host entry it binds, so a replaced file (an
  // ldconfig run renames a new ld.so.cache into place) makes a new base.
  const PreparedMountTree& b = out.base;
  auto field = [&](std::uint32_t off, std::uint32_t len = 0) {
    if (off == kNoString) return std::string("-");
    return len ? std::string(b.str(off), len) : std::string(b.str(off));
  };
  for (const auto& st : b.steps()) {
    out.fingerprint += std::to_string(static_cast<int>(st.op)) + " " + field(st.source) + " " + field(st.target) +
                       " " + field(st.fstype) + " " + std::to_string(st.flags) + " " + std::to_string(st.attr) +
                       " " + std::to_string(st.mode) + " " + field(st.data, st.data_len) + "\n";
  }
  for (const auto& st : b.steps()) {
    if (st.op != MountOp::bind) continue;
    const char* src = out.base.str(st.source);
    struct stat sb;
    std::string host = std::string(src).substr(kOldRoot.size());
    if (host.empty()) host = "/";
    if (::stat(host.c_str(), &sb) != 0) return Error::from_errno(errno, "mount tree: stat '" + host + "'");
    out.fingerprint += host + " " + std::to_string(sb.st_dev) + ":" + std::to_string(sb.st_ino) + "\n";
  }
  return out;
}

}  // namespace corral
