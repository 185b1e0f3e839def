// What a container's mount tree shows of the host (mount_tree.hpp): the
// system directories mirrored read-only, a generated /etc with an
// allow-list of the host's entries, a rootfs's entries, and /dev with the
// standard nodes and the operator's devices. Parent side: every entry
// becomes a step of the tree the child carries out.
#include <dirent.h>
#include <limits.h>
#include <unistd.h>

#include <algorithm>

#include "mount_tree_builder.hpp"
#include "tmpfs_options.hpp"

namespace corral::mount_tree_detail {
namespace {

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

// Mirror one host entry (`host` is its path on the host, `inside` where it
// goes): a symlink stays a symlink with the same target, a directory or file
// becomes a read-only bind of its canonical path. Anything else is skipped.
// `in_canonical_dir`: host's directory is canonical (no symlink on the way
// to it) and its last component is a plain name, so a host that is not
// itself a symlink is its own canonical path: one lstat, no realpath (which
// readlinks every component) and no second stat, for each of the ~40
// entries every container run's tree is built from. The identity goes to
// the builder for the template's fingerprint.
Status mirror_entry(Builder& b, const std::string& host, const std::string& inside, bool required,
                    bool in_canonical_dir) {
  struct stat st;
  b.consult(host);
  const HostKind kind = host_kind(host, &st);
  switch (kind) {
    case HostKind::symlink: {
      char buf[PATH_MAX];
      ssize_t n = ::readlink(host.c_str(), buf, sizeof buf - 1);
      if (n < 0) return Error::from_errno(errno, "mount tree: readlink '" + host + "'");
      b.symlink(std::string(buf, static_cast<std::size_t>(n)), inside);
      return {};
    }
    case HostKind::directory:
    case HostKind::file: {
      if (in_canonical_dir) {
        b.note_identity(host, st);
        b.bind(host, inside, kReadOnly, kind == HostKind::directory);
        return {};
      }
      auto canon = canonical_host(host, "host entry");
      if (!canon) return std::move(canon).error();
      b.consult(*canon);
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

}  // namespace

Status add_host_system(Builder& b, const EtcIdentity& who) {
  for (auto name : kSystemEntries) {
    if (!b.scan_host) break;
    std::string n(name);
    if (auto st = mirror_entry(b, "/" + n, "/" + n, name == "usr", true); !st) return st;
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
  if (!b.scan_host) return {};
  std::vector<std::string> names(std::begin(kHostEtc), std::end(kHostEtc));
  b.consult("/etc", /*listed=*/true);
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
  // /etc a directory of its own (no symlink): its plain entries are canonical.
  const bool etc_canonical = host_kind("/etc") == HostKind::directory;
  for (const auto& n : names)
    if (auto st = mirror_entry(b, "/etc/" + n, "/etc/" + n, false, etc_canonical && n.find('/') == std::string::npos);
        !st)
      return st;
  return {};
}

Status add_rootfs(Builder& b, const std::string& rootfs) {
  auto canon = canonical_host(rootfs, "rootfs");
  if (!canon) return std::move(canon).error();
  if (host_kind(*canon) != HostKind::directory)
    return Error(ENOTDIR, "mount tree: rootfs '" + rootfs + "' is not a directory");
  b.consult(rootfs);
  b.consult(*canon, /*listed=*/true);
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
    if (auto st = mirror_entry(b, base + "/" + n, "/" + n, false, true); !st) return st;
  return {};
}

void add_dev(Builder& b, const MountTreeSpec& spec, Builder& fresh, const std::vector<DevBind>& devices) {
  b.mkdir("/dev");
  b.tmpfs("/dev", MS_NOSUID | MS_NOEXEC, "size=64k,nr_inodes=64,mode=0755");
  // mknod is refused in a user namespace; the host's nodes are bound onto
  // empty files instead. The bind keeps the host devtmpfs superblock, whose
  // device nodes stay usable (no nodev on it).
  for (auto node : kDevNodes) {
    if (!b.scan_host) break;
    std::string host = "/dev/" + std::string(node);
    b.consult(host);
    struct stat st;
    if (host_kind(host, &st) != HostKind::chardev) continue;
    b.note_identity(host, st);
    b.bind(host, host, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, false);
  }
  
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
  fresh.tmpfs("/dev/shm", MS_NOSUID | MS_NODEV, detail::tmpfs_mount_data(spec.shm_bytes(), "1777"));
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

}  // namespace corral::mount_tree_detail
