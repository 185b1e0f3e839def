// The C ABI (corral.h): thin wrappers over the mechanism modules' apply
// halves. Child-side entry points use raw syscalls only.
#include "corral/corral.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include <cstring>
#include <new>
#include <string>

#include "corral/capabilities.hpp"
#include "corral/landlock.hpp"
#include "corral/privilege.hpp"
#include "corral/reaper.hpp"
#include "corral/seccomp.hpp"
#include "corral/syscalls.hpp"

struct corral_seccomp {
  corral::SeccompProgram program;
};

namespace {

int neg(int err) { return err == 0 ? 0 : -err; }

// Write rights a Landlock ABI knows; what the ABI lacks is left out, as the
// kernel's sandboxer does.
std::uint64_t write_rights(int abi) {
  std::uint64_t rights = LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR |
                         LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_MAKE_CHAR |
                         LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG |
                         LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO |
                         LANDLOCK_ACCESS_FS_MAKE_BLOCK | LANDLOCK_ACCESS_FS_MAKE_SYM;
  if (abi >= 2) rights |= LANDLOCK_ACCESS_FS_REFER;
  if (abi >= 3) rights |= LANDLOCK_ACCESS_FS_TRUNCATE;
  return rights;
}

constexpr std::uint64_t kReadRights =
    LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR;

}  // namespace

extern "C" {

int corral_apply_rlimits(const struct corral_rlimit* limits, size_t count) {
  if (count > 0 && limits == nullptr) return -EINVAL;
  for (size_t i = 0; i < count; ++i) {
    struct { std::uint64_t cur, max; } lim = {limits[i].soft, limits[i].hard};
    long r = corral::sys::call(SYS_prlimit64, 0, limits[i].resource, reinterpret_cast<long>(&lim), 0);
    if (r < 0) return static_cast<int>(r);
  }
  return 0;
}

int corral_drop_privileges(uid_t uid, gid_t gid) {
  return neg(corral::drop_privileges_now(uid, gid));
}

int corral_drop_capabilities(void) {
  return neg(corral::drop_all_capabilities_now());
}

int corral_landlock_abi(void) {
  long abi = corral::sys::call(SYS_landlock_create_ruleset, 0, 0, LANDLOCK_CREATE_RULESET_VERSION);
  return abi < 0 ? 0 : static_cast<int>(abi);
}

int corral_confine_writes(const char* const* paths, size_t count) {
  using corral::sys::call;
  if (count > 0 && paths == nullptr) return -EINVAL;
  int abi = corral_landlock_abi();
  if (abi < 1) return -EOPNOTSUPP;
  std::uint64_t write = write_rights(abi);
  corral::sys::landlock_ruleset_attr_v6 attr{};
  attr.handled_access_fs = write | kReadRights;
  long ruleset = call(SYS_landlock_create_ruleset, reinterpret_cast<long>(&attr), 8, 0);
  if (ruleset < 0) return static_cast<int>(ruleset);
  auto add = [&](const char* path, std::uint64_t rights) -> long {
    long fd = call(SYS_openat, AT_FDCWD, reinterpret_cast<long>(path), O_PATH | O_CLOEXEC);
    if (fd < 0) return fd;
    struct landlock_path_beneath_attr rule;
    rule.allowed_access = rights;
    rule.parent_fd = static_cast<int>(fd);
    long r = call(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, reinterpret_cast<long>(&rule), 0);
    if (r == -EINVAL) {
      // A file, not a directory: only file rights apply beneath it.
      rule.allowed_access = rights & (LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_READ_FILE |
                                      LANDLOCK_ACCESS_FS_EXECUTE | (abi >= 3 ? LANDLOCK_ACCESS_FS_TRUNCATE : 0));
      r = call(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, reinterpret_cast<long>(&rule), 0);
    }
    call(SYS_close, fd);
    return r;
  };
  long r = add("/", kReadRights);
  for (size_t i = 0; r >= 0 && i < count; ++i) {
    if (paths[i] == nullptr) r = -EINVAL;
    else r = add(paths[i], write | kReadRights);
  }
  if (r >= 0) r = call(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
  if (r >= 0) r = call(SYS_landlock_restrict_self, ruleset, 0);
  call(SYS_close, ruleset);
  return r < 0 ? static_cast<int>(r) : 0;
}

int corral_become_subreaper(void) {
  return neg(corral::become_subreaper_in_child());
}

int corral_seccomp_prepare(const char* profile, struct corral_seccomp** out) {
  if (profile == nullptr || out == nullptr) return -EINVAL;
  *out = nullptr;
  corral::SeccompSpec spec;
  std::string list(profile);
  std::size_t start = 0;
  while (start <= list.size()) {
    std::size_t comma = list.find(',', start);
    std::string name = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!name.empty()) spec.profile(name);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  auto program = corral::prepare(spec);
  if (!program) return -program.error().code();
  auto* prepared = new (std::nothrow) corral_seccomp{std::move(*program)};
  if (prepared == nullptr) return -ENOMEM;
  *out = prepared;
  return 0;
}

int corral_seccomp_apply(const struct corral_seccomp* prepared) {
  if (prepared == nullptr) return -EINVAL;
  return neg(corral::apply_seccomp_in_child(prepared->program));
}

void corral_seccomp_free(struct corral_seccomp* prepared) { delete prepared; }

const char* corral_version(void) { return CORRAL_VERSION; }

}  // extern "C"
