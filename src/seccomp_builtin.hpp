// Internal: the seccomp filters compiled at build time (src/gen/seccomp_gen.cpp
// writes $(BUILD)/gen/seccomp_builtin.inc), so that prepare() of the tiers'
// profiles costs no libseccomp compilation: 0.4-0.75 ms per process, a
// tenth of a one-run `corral run --tier container`. Runs in the parent.
#pragma once

#include <linux/filter.h>

#include <cstddef>

namespace corral::detail {

struct BuiltinSeccomp {
  const char* profiles;  // "default,no-network": the merged profiles, in order
  const sock_filter* bpf;
  std::size_t length;    // instructions
  const char* skipped;   // comma-separated syscalls absent on this architecture
  std::size_t denied;    // distinct syscalls denied
  bool notify;           // SeccompSpec::notify_socket_refusals: the socket refusals notify
};

// What the filters were compiled against. A build-time filter is used only
// when the running libseccomp and the native architecture are the same and
// the kernel takes the actions the filter returns (KILL_PROCESS; USER_NOTIF
// for a notifying one), so it is the BPF prepare() would have produced
// itself (tests/seccomp_test.cpp compares the two). api_level is the build
// host's, for the record: it decides whether libseccomp compiles, not what.
struct BuiltinSeccompOrigin {
  unsigned major, minor, micro;  // seccomp_version()
  unsigned api_level;            // seccomp_api_get()
  unsigned arch;                 // seccomp_arch_native()
};

const BuiltinSeccomp* builtin_seccomp_table(std::size_t* count) noexcept;
const BuiltinSeccompOrigin& builtin_seccomp_origin() noexcept;

}  // namespace corral::detail
