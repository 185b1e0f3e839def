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

// The landlock module's probe and child-safe ruleset (landlock.hpp): one
// rights table, one ABI probe, for the library and the C ABI alike.
int corral_landlock_abi(void) { return corral::landlock_abi(); }

int corral_confine_writes(const char* const* paths, size_t count) {
  return neg(corral::confine_writes_in_child(paths, count));
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
