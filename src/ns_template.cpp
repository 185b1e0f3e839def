#include "corral/ns_template.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/nsfs.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "corral/sha256.hpp"
#include "corral/syscalls.hpp"
#include "holding_helper.hpp"

namespace corral {
namespace {

constexpr long kNsfsMagic = 0x6e736673;  // NSFS_MAGIC, <linux/magic.h>
constexpr const char* kUsersDir = "users";

Error template_error(int err, const std::string& what) {
  return Error::from_errno(err, "namespace template: " + what);
}

// A directory we own that nobody else can write: what we bind the
// namespaces under, and what a run trusts when it enters them.
Status ensure_private_dir(const std::string& path, mode_t mode) {
  if (::mkdir(path.c_str(), mode) != 0 && errno != EEXIST) return template_error(errno, "mkdir '" + path + "'");
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return template_error(errno, "stat '" + path + "'");
  if (!S_ISDIR(st.st_mode)) return template_error(ENOTDIR, "'" + path + "' is not a directory");
  if (st.st_uid != ::geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)))
    return template_error(EPERM, "'" + path + "' must be ours and writable by nobody else");
  return {};
}

Status ensure_root(std::string_view root) {
  std::string path(root);
  auto slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0)
    if (auto st = ensure_private_dir(path.substr(0, slash), 0755); !st) return st;
  return ensure_private_dir(path, 0700);
}

// An nsfs file of the given kind (CLONE_NEWNS, CLONE_NEWNET), or an empty fd.
UniqueFd open_ns(const std::string& path, int kind) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) return {};
  struct statfs fs;
  if (::fstatfs(fd.get(), &fs) != 0 || fs.f_type != kNsfsMagic) return {};
  if (::ioctl(fd.get(), NS_GET_NSTYPE) != kind) return {};
  return fd;
}

bool open_existing(const std::string& dir, NsTemplate& out) {
  out.mnt = open_ns(dir + "/mnt", CLONE_NEWNS);
  if (!out.mnt) return false;
  out.net = open_ns(dir + "/net", CLONE_NEWNET);
  return static_cast<bool>(out.net);
}

void unbind_and_unlink(const std::string& path) {
  while (::umount2(path.c_str(), MNT_DETACH) == 0) {
  }
  ::unlink(path.c_str());
}

// Whatever a crashed maker or an old boot left: both files unmounted and gone.
void clear_dir(const std::string& dir) {
  for (const char* name : {"mnt", "net"}) unbind_and_unlink(dir + "/" + name);
  ::rmdir(dir.c_str());
}

Status touch(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_CREAT | O_RDONLY | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return template_error(errno, "create '" + path + "'");
  return {};
}

struct HelperRecord {
  int unshare_err = 0;
  int tree_err = 0;
  MountFailure failure;
};

// A helper in a new mount and network namespace builds `base` there; its
// namespaces are bound onto dir/{mnt,net}.
Status make_template(const PreparedMountTree& base, const std::string& dir) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return template_error(errno, "mkdir '" + dir + "'");
  for (const char* name : {"/mnt", "/net"})
    if (auto st = touch(dir + name); !st) return st;
  Status result = with_holding_helper<HelperRecord>(
      template_error,
      [&base]() noexcept {
        HelperRecord rec;
        rec.unshare_err = sys::error_of(sys::call(SYS_unshare, CLONE_NEWNS | CLONE_NEWNET));
        if (!rec.unshare_err) rec.tree_err = apply_mount_tree_in_child(base, &rec.failure);
        return rec;
      },
      [&](pid_t pid, const HelperRecord& rec) -> Status {
        if (rec.unshare_err) return template_error(rec.unshare_err, "unshare(CLONE_NEWNS|CLONE_NEWNET)");
        if (rec.tree_err) return base.error_for(rec.failure).context("namespace template");
        for (const char* name : {"mnt", "net"}) {
          std::string src = "/proc/" + std::to_string(pid) + "/ns/" + name;
          std::string dst = dir + "/" + name;
          if (::mount(src.c_str(), dst.c_str(), nullptr, MS_BIND, nullptr) != 0)
            return template_error(errno, "bind " + src + " on " + dst);
        }
        return {};
      });
  if (!result) clear_dir(dir);
  return result;
}

// Of `paths`, keep the newest `kept` - 1 besides `keep` (by mtime), so with
// the new one there are at most `kept`; `remove` takes the rest.
template <class Remove>
void keep_newest(const std::vector<std::string>& paths, const std::string& keep, int kept, Remove remove) {
  std::vector<std::pair<long long, std::string>> aged;
  for (const auto& path : paths) {
    struct stat st;
    if (path != keep && ::lstat(path.c_str(), &st) == 0)
      aged.emplace_back(static_cast<long long>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec, path);
  }
  std::sort(aged.begin(), aged.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
  for (std::size_t i = static_cast<std::size_t>(kept) - 1; i < aged.size(); ++i) remove(aged[i].second);
}

// root/.lock, held exclusively: one maker at a time. The directories are
// ours alone (ensure_root), so the lock file is too.
Expected<UniqueFd> lock_root(std::string_view root) {
  std::string lock_path = std::string(root) + "/.lock";
  UniqueFd lock(::open(lock_path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!lock) return template_error(errno, "open '" + lock_path + "'");
  while (::flock(lock.get(), LOCK_EX) != 0)
    if (errno != EINTR) return template_error(errno, "flock '" + lock_path + "'");
  return lock;
}

// The templates beyond the kept number, and the other templates of
// `family_prefix` ("<family hash>-"; "" for none).
void remove_old_templates(std::string_view root, const std::string& keep, const std::string& family_prefix) {
  auto listed = list_ns_templates(root);
  if (!listed) return;
  if (!family_prefix.empty()) {
    const std::string prefix = std::string(root) + "/" + family_prefix;
    std::vector<std::string> others;
    for (auto& dir : *listed) {
      if (dir != keep && dir.compare(0, prefix.size(), prefix) == 0)
        clear_dir(dir);
      else
        others.push_back(std::move(dir));
    }
    *listed = std::move(others);
  }
  keep_newest(*listed, keep, kKeptTemplates, clear_dir);
}

}  // namespace

Expected<NsTemplate> open_ns_template(const PreparedMountTree& base, const std::string& fingerprint,
                                      std::string_view root, const std::string& family) {
  NsTemplate out;
  const std::string root_s(root);
  const std::string name = ns_template_name(fingerprint, family);
  const std::string family_prefix = family.empty() ? "" : name.substr(0, 9);
  out.dir = root_s + "/" + name;
  if (open_existing(out.dir, out)) return out;

  if (auto st = ensure_root(root); !st) return std::move(st).error();
  auto lock = lock_root(root);
  if (!lock) return std::move(lock).error();
  if (open_existing(out.dir, out)) return out;  // another caller made it while we waited

  clear_dir(out.dir);
  if (auto st = make_template(base, out.dir); !st) return std::move(st).error();
  remove_old_templates(root, out.dir, family_prefix);
  if (!open_existing(out.dir, out))
    return template_error(ENOENT, "'" + out.dir + "' was made but does not open as two namespaces");
  out.created = true;
  return out;
}

std::string ns_template_name(const std::string& fingerprint, const std::string& family) {
  if (family.empty()) return Sha256::hex_of(fingerprint).substr(0, 24);
  return Sha256::hex_of(family).substr(0, 8) + "-" + Sha256::hex_of(fingerprint).substr(0, 16);
}

bool is_ns_template_name(std::string_view name) {
  auto hex = [](std::string_view s) {
    return std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
  };
  if (name.size() == 24) return hex(name);
  return name.size() == 25 && name[8] == '-' && hex(name.substr(0, 8)) && hex(name.substr(9));
}

bool open_ns_template_at(const std::string& dir, NsTemplate& out) { return open_existing(dir, out); }

namespace {

// The entries of `dir` but dot files and `skip`, as full paths, sorted; none
// when it does not exist.
Expected<std::vector<std::string>> list_entries(const std::string& dir, std::string_view skip) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) {
    if (errno == ENOENT) return out;
    return template_error(errno, "open '" + dir + "'");
  }
  while (struct dirent* e = ::readdir(d)) {
    std::string_view name = e->d_name;
    if (!name.empty() && name[0] != '.' && name != skip) out.push_back(dir + "/" + std::string(name));
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

// The first entry of `dir` (dot files and `skip` aside) that `live` takes,
// as a full path, in directory order; "" when none. For the container
// probe, which every process that runs a container asks: one getdents64
// into a buffer on the stack, no sort and no list of names, and the first
// live entry ends it (list_entries reads them all, sorted, for the callers
// that need them all: the sweep, the removal, keep_newest).
template <class Live>
std::string first_live_entry(const std::string& dir, std::string_view skip, Live live) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return "";
  alignas(struct dirent64) char buf[4096];
  for (;;) {
    ssize_t n = ::getdents64(fd.get(), buf, sizeof buf);
    if (n <= 0) return "";
    for (ssize_t at = 0; at < n;) {
      const auto* e = reinterpret_cast<const struct dirent64*>(buf + at);
      at += e->d_reclen;
      std::string_view name = e->d_name;
      if (name.empty() || name[0] == '.' || name == skip) continue;
      std::string path = dir + "/" + std::string(name);
      if (live(path)) return path;
    }
  }
}

}  // namespace

Expected<std::vector<std::string>> list_ns_templates(std::string_view root) {
  return list_entries(std::string(root), kUsersDir);
}

std::string live_ns_template(std::string_view root) {
  return first_live_entry(std::string(root), kUsersDir, [](const std::string& dir) {
    NsTemplate t;
    return open_existing(dir, t);
  });
}

Expected<int> remove_ns_templates(std::string_view root) {
  auto dirs = list_ns_templates(root);
  if (!dirs) return std::move(dirs).error();
  auto users = list_userns_templates(root);
  if (!users) return std::move(users).error();
  int removed = 0;
  struct stat st;
  for (const auto& dir : *dirs) {
    clear_dir(dir);
    if (::lstat(dir.c_str(), &st) != 0) ++removed;
  }
  for (const auto& file : *users) {
    unbind_and_unlink(file);
    if (::lstat(file.c_str(), &st) != 0) ++removed;
  }
  remove_host_stamps(root);  // they name templates that are gone
  return removed;
}

// ---- user namespaces ------------------------------------------------------

namespace {

std::string users_dir(std::string_view root) { return std::string(root) + "/" + kUsersDir; }

std::string userns_path(const UserNsIds& ids, std::string_view root) {
  return users_dir(root) + "/" + std::to_string(ids.inside_uid) + "-" + std::to_string(ids.outside_uid) + "-" +
         std::to_string(ids.inside_gid) + "-" + std::to_string(ids.outside_gid);
}

Status write_proc(pid_t pid, const char* name, const std::string& text) {
  std::string path = "/proc/" + std::to_string(pid) + "/" + name;
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return template_error(errno, "open " + path);
  if (::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()))
    return template_error(errno, "write '" + text.substr(0, text.size() - 1) + "' to " + path);
  return {};
}

// A helper (root) in a new user namespace; we write its maps and bind it.
Status make_userns_template(const UserNsIds& ids, const std::string& path) {
  if (auto st = touch(path); !st) return st;
  Status result = with_holding_helper<int>(
      template_error,
      []() noexcept { return sys::error_of(sys::call(SYS_unshare, CLONE_NEWUSER)); },
      [&](pid_t pid, int err) -> Status {
        if (err) return template_error(err, "unshare(CLONE_NEWUSER)");
        auto line = [](long inside, long outside) {
          return std::to_string(inside) + " " + std::to_string(outside) + " 1\n";
        };
        if (auto st = write_proc(pid, "uid_map", line(ids.inside_uid, ids.outside_uid)); !st) return st;
        if (auto st = write_proc(pid, "gid_map", line(ids.inside_gid, ids.outside_gid)); !st) return st;
        std::string src = "/proc/" + std::to_string(pid) + "/ns/user";
        if (::mount(src.c_str(), path.c_str(), nullptr, MS_BIND, nullptr) != 0)
          return template_error(errno, "bind " + src + " on " + path);
        return {};
      });
  if (!result) unbind_and_unlink(path);
  return result;
}

void remove_old_userns_templates(std::string_view root, const std::string& keep) {
  auto listed = list_userns_templates(root);
  if (listed) keep_newest(*listed, keep, kKeptUserTemplates, unbind_and_unlink);
}

}  // namespace

Expected<UniqueFd> open_userns_template(const UserNsIds& ids, std::string_view root) {
  const std::string path = userns_path(ids, root);
  if (UniqueFd fd = open_ns(path, CLONE_NEWUSER)) return fd;
  if (auto st = ensure_root(root); !st) return std::move(st).error();
  if (auto st = ensure_private_dir(users_dir(root), 0700); !st) return std::move(st).error();
  auto lock = lock_root(root);
  if (!lock) return std::move(lock).error();
  if (UniqueFd fd = open_ns(path, CLONE_NEWUSER)) return fd;  // made while we waited
  unbind_and_unlink(path);
  if (auto st = make_userns_template(ids, path); !st) return std::move(st).error();
  remove_old_userns_templates(root, path);
  UniqueFd fd = open_ns(path, CLONE_NEWUSER);
  if (!fd) return template_error(ENOENT, "'" + path + "' was made but does not open as a user namespace");
  return fd;
}

Expected<std::vector<std::string>> list_userns_templates(std::string_view root) {
  return list_entries(users_dir(root), "");
}

std::string live_userns_template(std::string_view root) {
  return first_live_entry(users_dir(root), "", [](const std::string& f) {
    return static_cast<bool>(open_ns(f, CLONE_NEWUSER));
  });
}

}  // namespace corral
