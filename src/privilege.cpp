#include "corral/privilege.hpp"

#include <linux/capability.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "corral/capabilities.hpp"
#include "corral/syscalls.hpp"

namespace corral {
namespace {

constexpr std::uint64_t kNoId = static_cast<uid_t>(-1);  // 4294967295: "unchanged" to set*id

std::string ids(uid_t uid, gid_t gid) {
  return "uid " + std::to_string(uid) + " gid " + std::to_string(gid);
}

// Whether `id` is mapped in this process's user namespace (/proc/self/uid_map
// or gid_map: "inside outside count" lines). In the initial namespace the
// map is "0 0 4294967295", so every id but -1 is. No map file: assume yes.
bool mapped(const char* map_file, std::uint64_t id) {
  std::ifstream in(map_file);
  if (!in) return true;
  std::uint64_t inside = 0, outside = 0, count = 0;
  while (in >> inside >> outside >> count)
    if (id >= inside && id - inside < count) return true;
  return false;
}

}  // namespace

bool is_root_capable() noexcept {
  return geteuid() == 0 && has_effective_capability(CAP_SETUID) && has_effective_capability(CAP_SETGID);
}

Expected<PrivilegeDrop> prepare_privilege_drop(uid_t uid, gid_t gid) {
  const std::string who = "privilege: drop to " + ids(uid, gid);
  if (uid == kNoId) return Error::invalid(who + ": uid 4294967295 is out of range (max 4294967294)");
  if (gid == kNoId) return Error::invalid(who + ": gid 4294967295 is out of range (max 4294967294)");
  // Before the same-identity shortcut: a root caller naming its own ids
  // would otherwise "drop" to root and keep it.
  if (uid == 0) return Error::invalid(who + ": uid 0 is root; a run is never root");
  if (gid == 0) return Error::invalid(who + ": gid 0 is root's group; choose an unprivileged gid");

  uid_t ru, eu, su;
  gid_t rg, eg, sg;
  if (getresuid(&ru, &eu, &su) != 0 || getresgid(&rg, &eg, &sg) != 0)
    return Error::from_errno(errno, who + ": getresuid");
  PrivilegeDrop drop;
  drop.uid_ = uid;
  drop.gid_ = gid;
  if (ru == uid && eu == uid && su == uid && rg == gid && eg == gid && sg == gid) {
    drop.changes_ = false;  // already exactly this identity: verify only
    return drop;
  }
  if (!mapped("/proc/self/uid_map", uid))
    return Error::invalid(who + ": uid " + std::to_string(uid) + " is not mapped in this user namespace");
  if (!mapped("/proc/self/gid_map", gid))
    return Error::invalid(who + ": gid " + std::to_string(gid) + " is not mapped in this user namespace");
  if (!has_effective_capability(CAP_SETUID) || !has_effective_capability(CAP_SETGID))
    return Error(EPERM, who + ": needs root (CAP_SETUID and CAP_SETGID); running as " + ids(eu, eg) +
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
