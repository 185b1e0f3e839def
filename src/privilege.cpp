#include "corral/privilege.hpp"

#include <linux/capability.h>
#include <unistd.h>

#include <fcntl.h>

#include <cerrno>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "corral/capabilities.hpp"
#include "corral/syscalls.hpp"

namespace corral {
namespace {

constexpr std::uint64_t kNoId = static_cast<uid_t>(-1);  // 4294967295: "unchanged" to set*id

std::string ids(uid_t uid, gid_t gid) {
  return "uid " + std::to_string(uid) + " gid " + std::to_string(gid);
}

// The (inside, count) ranges of /proc/self/uid_map or gid_map ("inside
// outside count" lines). In the initial namespace the map is
// "0 0 4294967295", so every id but -1 is mapped. False: no map file.
bool read_map(const char* map_file, std::vector<std::pair<std::uint64_t, std::uint64_t>>& ranges) {
  int fd = ::open(map_file, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[4096];
  std::size_t len = 0;
  for (;;) {
    const std::size_t asked = sizeof buf - 1 - len;
    ssize_t n = ::read(fd, buf + len, asked);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    len += static_cast<std::size_t>(n);
    if (len == sizeof buf - 1) break;  // a map has at most 340 lines of ~33 bytes; more is not ours to parse
    // A short read was the end (one read a map instead of two): the
    // kernel's seq_file stops short of what was asked only when its lines
    // ran out or its page-sized buffer could not take the next line, and
    // then it holds at least a page less one line (at most 33 bytes).
    if (asked > 64 && static_cast<std::size_t>(n) < asked - 64) break;
  }
  ::close(fd);
  buf[len] = '\0';
  const char* p = buf;
  for (;;) {
    char* end = nullptr;
    std::uint64_t v[3];
    int got = 0;
    for (; got < 3; ++got) {
      v[got] = std::strtoull(p, &end, 10);
      if (end == p) break;
      p = end;
    }
    if (got < 3) break;
    ranges.emplace_back(v[0], v[2]);
  }
  return true;
}

bool mapped(const std::vector<std::pair<std::uint64_t, std::uint64_t>>& ranges, bool read, std::uint64_t id) {
  if (!read) return true;
  for (const auto& [inside, count] : ranges)
    if (id >= inside && id - inside < count) return true;
  return false;
}

}  // namespace

PrivilegeFacts read_privilege_facts() {
  PrivilegeFacts f;
  if (getresuid(&f.ruid, &f.euid, &f.suid) != 0 || getresgid(&f.rgid, &f.egid, &f.sgid) != 0) f.ids_errno = errno;
  f.uid_map_read = read_map("/proc/self/uid_map", f.uid_ranges);
  f.gid_map_read = read_map("/proc/self/gid_map", f.gid_ranges);
  const std::uint64_t caps = effective_capabilities();
  f.cap_setuid = (caps >> CAP_SETUID) & 1;
  f.cap_setgid = (caps >> CAP_SETGID) & 1;
  return f;
}

bool is_root_capable() noexcept {
  return geteuid() == 0 && has_effective_capability(CAP_SETUID) && has_effective_capability(CAP_SETGID);
}

Expected<PrivilegeDrop> prepare_privilege_drop(uid_t uid, gid_t gid) {
  return prepare_privilege_drop(uid, gid, read_privilege_facts());
}

Expected<PrivilegeDrop> prepare_privilege_drop(uid_t uid, gid_t gid, const PrivilegeFacts& f) {
  const std::string who = "privilege: drop to " + ids(uid, gid);
  if (uid == kNoId) return Error::invalid(who + ": uid 4294967295 is out of range (max 4294967294)");
  if (gid == kNoId) return Error::invalid(who + ": gid 4294967295 is out of range (max 4294967294)");
  // Before the same-identity shortcut: a root caller naming its own ids
  // would otherwise "drop" to root and keep it.
  if (uid == 0) return Error::invalid(who + ": uid 0 is root; a run is never root");
  if (gid == 0) return Error::invalid(who + ": gid 0 is root's group; choose an unprivileged gid");

  if (f.ids_errno) return Error::from_errno(f.ids_errno, who + ": getresuid");
  PrivilegeDrop drop;
  drop.uid_ = uid;
  drop.gid_ = gid;
  if (f.ruid == uid && f.euid == uid && f.suid == uid && f.rgid == gid && f.egid == gid && f.sgid == gid) {
    drop.changes_ = false;  // already exactly this identity: verify only
    return drop;
  }
  if (!mapped(f.uid_ranges, f.uid_map_read, uid))
    return Error::invalid(who + ": uid " + std::to_string(uid) + " is not mapped in this user namespace");
  if (!mapped(f.gid_ranges, f.gid_map_read, gid))
    return Error::invalid(who + ": gid " + std::to_string(gid) + " is not mapped in this user namespace");
  if (!f.cap_setuid || !f.cap_setgid)
    return Error(EPERM, who + ": needs root (CAP_SETUID and CAP_SETGID); running as " + ids(f.euid, f.egid) +
                            " without them");
  return drop;
}

namespace {

// The drop itself, shared by the prepared path and the C ABI. Child side;
// async-signal-safe: raw syscalls only, errno untouched.
int drop_ids_in_child(uid_t uid, gid_t gid, bool change_groups) noexcept {
  // Root's uid or group as the target is no drop at all.
  if (uid == 0 || gid == 0) return EINVAL;
  const long u = uid, g = gid;
  long r;
  if (change_groups) {
    // Supplementary groups first: root's groups would survive the uid change.
    r = sys::call(SYS_setgroups, 0, 0);
    if (int err = sys::error_of(r)) return err;
  }
  // gid before uid: changing the gid needs CAP_SETGID, which a non-zero
  // uid loses.
  r = sys::call(SYS_setresgid, g, g, g);
  if (int err = sys::error_of(r)) return err;
  r = sys::call(SYS_setresuid, u, u, u);
  if (int err = sys::error_of(r)) return err;

  // Verify instead of trusting: the ids stuck, the groups are gone, and
  // root cannot be regained.
  uid_t ru = 0, eu = 0, su = 0;
  gid_t rg = 0, eg = 0, sg = 0;
  if (sys::call(SYS_getresuid, reinterpret_cast<long>(&ru), reinterpret_cast<long>(&eu),
                reinterpret_cast<long>(&su)) != 0 ||
      sys::call(SYS_getresgid, reinterpret_cast<long>(&rg), reinterpret_cast<long>(&eg),
                reinterpret_cast<long>(&sg)) != 0)
    return ENOTRECOVERABLE;
  if (ru != uid || eu != uid || su != uid) return ENOTRECOVERABLE;
  if (rg != gid || eg != gid || sg != gid) return ENOTRECOVERABLE;
  if (change_groups && sys::call(SYS_getgroups, 0, 0) != 0) return ENOTRECOVERABLE;
  // Either call succeeding means CAP_SETUID/CAP_SETGID survived the change
  // (SECBIT_KEEP_CAPS or SECBIT_NO_SETUID_FIXUP set by the caller, or ids
  // that did not change): the process may be root again.
  if (sys::call(SYS_setresuid, 0, 0, 0) == 0) return ENOTRECOVERABLE;
  if (sys::call(SYS_setresgid, 0, 0, 0) == 0) return ENOTRECOVERABLE;
  return 0;
}

}  // namespace

// Runs in the child; async-signal-safe: raw syscalls only, errno untouched.
int apply_privilege_drop_in_child(const PrivilegeDrop& drop) noexcept {
  return drop_ids_in_child(drop.uid(), drop.gid(), drop.changes_identity());
}

int drop_privileges_now(uid_t uid, gid_t gid) noexcept {
  if (uid == static_cast<uid_t>(-1) || gid == static_cast<gid_t>(-1)) return EINVAL;
  if (uid == 0 || gid == 0) return EINVAL;
  uid_t ru = 0, eu = 0, su = 0;
  gid_t rg = 0, eg = 0, sg = 0;
  sys::call(SYS_getresuid, reinterpret_cast<long>(&ru), reinterpret_cast<long>(&eu), reinterpret_cast<long>(&su));
  sys::call(SYS_getresgid, reinterpret_cast<long>(&rg), reinterpret_cast<long>(&eg), reinterpret_cast<long>(&sg));
  bool same = ru == uid && eu == uid && su == uid && rg == gid && eg == gid && sg == gid;
  return drop_ids_in_child(uid, gid, !same);
}

// UidPool: src/uid_pool.cpp.

}  // namespace corral
