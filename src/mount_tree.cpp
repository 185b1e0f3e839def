#include "corral/mount_tree.hpp"

// The tree itself (steps, strings, the bind sources, the workspace, binds,
// tmpfs, cwd). What it shows of the host is mount_tree_host.cpp; the step
// builder both use is mount_tree_builder.hpp.
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

#include "mount_tree_builder.hpp"
#include "mountinfo.hpp"
#include "tmpfs_options.hpp"

namespace corral {

namespace mount_tree_detail {

HostKind host_kind(const std::string& path, struct stat* out) {
  struct stat local;
  struct stat& st = out ? *out : local;
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

}  // namespace mount_tree_detail

using namespace mount_tree_detail;

namespace {

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
  // Without a host scan the staging dir is named as given (a key, never applied).
  Expected<std::string> staging = spec.staging_dir();
  if (b.scan_host) {
    b.consult(spec.staging_dir());
    staging = canonical_host(spec.staging_dir(), "staging dir");
    if (!staging) return std::move(staging).error();
    b.consult(*staging);
    if (host_kind(*staging) != HostKind::directory || *staging == "/")
      return Error::invalid("mount tree: staging dir '" + spec.staging_dir() + "' must be a directory other than /");
  }

  const std::string old_root = *staging + std::string(kOldRoot);
  b.add(MountOp::make_private, "make every mount private", "/");
  b.tmpfs(*staging, MS_NOSUID | MS_NODEV, detail::tmpfs_mount_data(spec.root_bytes(), "0755"));
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
    // hidepid=ptraceable (proc(5), Linux 5.8; the binds need 5.12): a
    // process is listed only to those that may ptrace it. pid 1 of a
    // template run shares the supervisor's memory, so its cmdline is the
    // supervisor's argv; a session exec's child shows its caller's until it
    // execs; other execs of a session share the uid. None of those passes
    // the ptrace check (another Landlock domain or user namespace), and
    // /proc/PID/cmdline is readable by anyone who sees the PID.
    b.mkdir("/proc", 0555);
    fresh.mount("mount proc on /proc", "proc", "/proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=ptraceable");
  }
  b.mkdir("/tmp", 01777);
  fresh.tmpfs("/tmp", MS_NOSUID | MS_NODEV, detail::tmpfs_mount_data(spec.tmp_bytes(), "1777"));

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
    fresh.tmpfs(*inside, MS_NOSUID | MS_NODEV, detail::tmpfs_mount_data(t.bytes, "1777"));
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

Expected<SplitMountTree> prepare_split_mount_tree(const MountTreeSpec& spec, const EtcIdentity& who,
                                                  HostScan scan) {
  Builder base, run;
  SplitMountTree out;
  if (scan == HostScan::skip) {
    if (!spec.rootfs().empty())
      return Error::invalid("mount tree: a rootfs tree is built from its entries: it cannot skip the host scan");
    base.scan_host = false;
  }
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
  std::vector<std::string> bound;
  for (const auto& st : b.steps()) {
    if (st.op != MountOp::bind) continue;
    const char* src = out.base.str(st.source);
    std::string host = std::string(src).substr(kOldRoot.size());
    if (host.empty()) host = "/";
    std::string id = base.identity_of(host);
    if (id.empty()) {
      base.consult(host);
      struct stat sb;
      if (::stat(host.c_str(), &sb) != 0) return Error::from_errno(errno, "mount tree: stat '" + host + "'");
      id = std::to_string(sb.st_dev) + ":" + std::to_string(sb.st_ino);
    }
    out.fingerprint += host + " " + id + "\n";
    bound.push_back(std::move(host));
  }
  // And every host mount at or below a bound entry, as the table shows it
  // now. A bind copies the mounts under its source as they are when the
  // template is made (open_tree AT_RECURSIVE), and a template outlives
  // them: without this line a tmpfs mounted under /usr after the template
  // was made never showed in a run, and one unmounted since still did,
  // kept alive by the template's copy. Mount ids are reused after an
  // unmount, so the line carries what the mount shows too (device, root,
  // source, options): a new filesystem on the old id gets another device
  // number while the template holds the old one.
  if (scan != HostScan::skip && !bound.empty()) {
    auto table = detail::read_to_end("/proc/self/mountinfo");
    if (!table) return std::move(table).error().context("mount tree: the host's mounts under its binds");
    for (const auto& m : detail::parse_mountinfo(*table)) {
      bool under = std::any_of(bound.begin(), bound.end(),
                               [&](const std::string& h) { return detail::mount_point_under(m.mount_point, h); });
      if (!under) continue;
      out.fingerprint += "mount " + m.mount_point + " " + m.id + " " + m.dev + " " + m.root + " " + m.mount_options +
                         " " + m.fstype + " " + m.source + "\n";
    }
  }
  if (base.scan_host) out.scanned_dirs.assign(base.scanned().begin(), base.scanned().end());
  return out;
}

}  // namespace corral
