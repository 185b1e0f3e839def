// The mount table reader (mountinfo.hpp). Parent side.
#include "mountinfo.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <unordered_map>

#include "corral/syscalls.hpp"
#include "text.hpp"

// Linux 6.8-6.11 interfaces; Debian 12's headers (6.1) have none of them.
#ifndef SYS_statmount
#define SYS_statmount 457  // the same number on every architecture
#endif

namespace corral::detail {
namespace {

std::string unescape_mount_path(std::string_view s) {
  auto octal = [&](std::size_t i, char max) { return i < s.size() && s[i] >= '0' && s[i] <= max; };
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && octal(i + 1, '3') && octal(i + 2, '7') && octal(i + 3, '7')) {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

constexpr unsigned kStatxMntIdUnique = 0x4000;      // STATX_MNT_ID_UNIQUE (6.8)
constexpr std::uint64_t kStatxAttrMountRoot = 0x2000;  // STATX_ATTR_MOUNT_ROOT (5.8)

// statmount's request and reply (include/uapi/linux/mount.h, 6.11): the
// fixed part up to the fields read here; strings are offsets into str.
struct MntIdReq {
  std::uint32_t size;
  std::uint32_t spare;
  std::uint64_t mnt_id;
  std::uint64_t param;
};
struct StatMount {
  std::uint32_t size;
  std::uint32_t mnt_opts;  // [str]
  std::uint64_t mask;
  std::uint32_t sb_dev_major, sb_dev_minor;
  std::uint64_t sb_magic;
  std::uint32_t sb_flags;
  std::uint32_t fs_type;  // [str]
  std::uint64_t mnt_id, mnt_parent_id;
  std::uint32_t mnt_id_old, mnt_parent_id_old;
  std::uint64_t mnt_attr, mnt_propagation, mnt_peer_group, mnt_master, propagate_from;
  std::uint32_t mnt_root;   // [str]
  std::uint32_t mnt_point;  // [str]
};
constexpr std::uint64_t kSbBasic = 0x1, kMntBasic = 0x2, kMntRoot = 0x8, kMntPoint = 0x10, kFsType = 0x20, kMntOpts = 0x80;
// The reply's strings follow its fixed part (512 bytes in 6.11's layout).
constexpr std::size_t kStatMountFixed = 512;

}  // namespace

Expected<std::optional<MountInfoEntry>> mount_rooted_at(const std::string& path) {
  struct statx sx {};
  if (::statx(AT_FDCWD, path.c_str(), AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT, kStatxMntIdUnique, &sx) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return std::optional<MountInfoEntry>();
    return Error::from_errno(errno, "statx '" + path + "'");
  }
  if (!(sx.stx_mask & kStatxMntIdUnique) || !(sx.stx_attributes_mask & kStatxAttrMountRoot))
    return Error(ENOSYS, "statx '" + path + "': no unique mount id (Linux before 6.8)");
  if (!(sx.stx_attributes & kStatxAttrMountRoot)) return std::optional<MountInfoEntry>();
  alignas(8) char buf[kStatMountFixed + 4096];
  auto* sm = reinterpret_cast<StatMount*>(buf);
  MntIdReq req{sizeof(MntIdReq), 0, sx.stx_mnt_id, kSbBasic | kMntBasic | kMntRoot | kMntPoint | kFsType | kMntOpts};
  long rc = sys::call(SYS_statmount, reinterpret_cast<long>(&req), reinterpret_cast<long>(buf), sizeof buf, 0);
  if (rc < 0) return Error::from_errno(sys::error_of(rc), "statmount '" + path + "'");
  const std::uint64_t need = kSbBasic | kMntBasic | kMntRoot | kMntPoint | kFsType;
  if ((sm->mask & need) != need) return Error(EOPNOTSUPP, "statmount '" + path + "': the kernel left out a field asked");
  const std::size_t end = std::min<std::size_t>(sm->size, sizeof buf);
  auto str = [&](std::uint32_t off) -> std::string {
    const std::size_t at = kStatMountFixed + off;
    if (at >= end) return {};
    return std::string(buf + at, ::strnlen(buf + at, end - at));
  };
  MountInfoEntry e;
  e.id = std::to_string(sm->mnt_id_old);
  e.dev = std::to_string(sm->sb_dev_major) + ":" + std::to_string(sm->sb_dev_minor);
  e.root = str(sm->mnt_root);
  e.mount_point = str(sm->mnt_point);
  e.fstype = str(sm->fs_type);
  // A filesystem without options of its own (cgroup2) is given without
  // the mask bit, on 6.11 as before it: only a type that has them needs it.
  if (sm->mask & kMntOpts) {
    for (auto opt : split(str(sm->mnt_opts), ','))
      if (!opt.empty()) e.super_options.emplace_back(opt);
  } else if (e.fstype != "cgroup2") {
    return Error(EOPNOTSUPP, "statmount '" + path + "': no filesystem options (Linux before 6.11)");
  }
  return std::optional<MountInfoEntry>(std::move(e));
}

std::vector<MountInfoEntry> parse_mountinfo(std::string_view text, bool (*keep_fstype)(std::string_view)) {
  std::vector<MountInfoEntry> out;
  for (auto line : split(text, '\n')) {
    if (keep_fstype) {
      // Paths are escaped (a space is \040), so " - " is only the separator.
      auto sep = line.find(" - ");
      if (sep == std::string_view::npos) continue;
      auto fstype = line.substr(sep + 3);
      fstype = fstype.substr(0, fstype.find(' '));
      if (!keep_fstype(fstype)) continue;
    }
    // id parent major:minor root mount-point options [optional...] - fstype source super-options
    auto f = split(line, ' ');
    std::size_t dash = 6;
    while (dash < f.size() && f[dash] != "-") ++dash;
    if (dash + 3 >= f.size()) continue;  // no separator, or not the three fields after it
    MountInfoEntry m;
    m.id = std::string(f[0]);
    m.dev = std::string(f[2]);
    m.root = unescape_mount_path(f[3]);
    m.mount_point = unescape_mount_path(f[4]);
    m.mount_options = std::string(f[5]);
    m.fstype = std::string(f[dash + 1]);
    m.source = unescape_mount_path(f[dash + 2]);
    for (auto opt : split(f[dash + 3], ',')) m.super_options.emplace_back(opt);
    out.push_back(std::move(m));
  }
  return out;
}

std::vector<bool> mounts_out_of_reach(std::string_view table, const std::vector<std::string>& ids) {
  // Each line's id, parent id and mount point, as printed: escaped alike,
  // so compared alike ('/' is never escaped).
  struct Link {
    std::string_view id, parent, mount_point;
  };
  std::vector<Link> links;
  for (auto line : split(table, '\n')) {
    std::string_view f[5];
    std::size_t n = 0, pos = 0;
    while (n < 5 && pos <= line.size()) {
      std::size_t sp = std::min(line.find(' ', pos), line.size());
      f[n++] = line.substr(pos, sp - pos);
      pos = sp + 1;
    }
    if (n == 5 && !f[4].empty()) links.push_back({f[0], f[1], f[4]});
  }
  std::unordered_map<std::string_view, const Link*> by_id;
  std::unordered_map<std::string_view, std::vector<const Link*>> on;  // parent id -> mounts made on it
  for (const auto& l : links) {
    by_id[l.id] = &l;
    on[l.parent].push_back(&l);
  }
  // Covered: a mount on its root, or one on a directory above its mount
  // point in the filesystem it is mounted on (whenever made: a move can
  // bring an older one there). A mount at "/" is never counted either way:
  // a process's root stays on the mount it is, whatever is mounted over it.
  // `from`: the mount on x the walk came up from, which covering x's root
  // is the way in, not in the way.
  auto covered = [&](const Link& x, const Link* from) {
    if (x.mount_point == "/") return false;
    if (auto it = on.find(x.id); it != on.end())
      for (const Link* n : it->second)
        if (n != from && n->mount_point == x.mount_point) return true;
    if (auto it = on.find(x.parent); it != on.end())
      for (const Link* n : it->second)
        if (n != &x && n->mount_point != "/" && n->mount_point != x.mount_point &&
            mount_point_under(x.mount_point, n->mount_point))
          return true;
    return false;
  };
  std::vector<bool> out;
  out.reserve(ids.size());
  for (const auto& id : ids) {
    bool hidden = false;
    auto it = by_id.find(id);
    const Link* x = it == by_id.end() ? nullptr : it->second;
    const Link* from = nullptr;
    // Up the parents, to the root of what this process sees (whose parent
    // is not listed, or is itself); bounded, should the table be torn.
    for (std::size_t depth = 0; x && !hidden && depth < links.size(); ++depth) {
      hidden = covered(*x, from);
      auto up = x->parent == x->id ? by_id.end() : by_id.find(x->parent);
      from = x;
      x = up == by_id.end() ? nullptr : up->second;
    }
    out.push_back(hidden);
  }
  return out;
}

bool mount_point_under(std::string_view mount_point, std::string_view dir) noexcept {
  if (dir == "/") return !mount_point.empty() && mount_point[0] == '/';
  if (mount_point.size() < dir.size() || mount_point.compare(0, dir.size(), dir) != 0) return false;
  return mount_point.size() == dir.size() || mount_point[dir.size()] == '/';
}

}  // namespace corral::detail
