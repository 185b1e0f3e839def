// corral's own seccomp BPF (src/seccomp_bpf.cpp) against libseccomp's
// compile of the same profiles: run both programs in a classic-BPF
// interpreter on every syscall number (and the x32 and foreign-arch ones)
// and on a grid of arguments for the syscalls whose arguments the profiles
// look at; every answer must be the same. The kernel tests of what the
// installed filters refuse are seccomp_test.cpp's.
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <fcntl.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "support.hpp"
#include "corral/seccomp.hpp"

using namespace corral;

namespace {

struct Input {
  std::uint32_t nr, arch;
  std::uint64_t args[6];
};

// The subset of classic BPF a seccomp filter uses (loads from
// seccomp_data, ALU on A with a constant, jumps, returns). Anything else,
// or running off the end, fails the test.
std::uint32_t run_bpf(const sock_fprog& prog, const Input& in) {
  std::uint32_t data[16] = {};
  data[0] = in.nr;
  data[1] = in.arch;
  for (int i = 0; i < 6; ++i) {
    data[4 + 2 * i] = static_cast<std::uint32_t>(in.args[i]);
    data[5 + 2 * i] = static_cast<std::uint32_t>(in.args[i] >> 32);
  }
  std::uint32_t a = 0;
  for (unsigned pc = 0; pc < prog.len; ++pc) {
    const sock_filter& f = prog.filter[pc];
    switch (f.code) {
      case BPF_LD | BPF_W | BPF_ABS:
        cr_assert(f.k % 4 == 0 && f.k < 64, "load at %u", f.k);
        a = data[f.k / 4];
        break;
      case BPF_ALU | BPF_AND | BPF_K: a &= f.k; break;
      case BPF_ALU | BPF_OR | BPF_K: a |= f.k; break;
      case BPF_JMP | BPF_JA: pc += f.k; break;
      case BPF_JMP | BPF_JEQ | BPF_K: pc += a == f.k ? f.jt : f.jf; break;
      case BPF_JMP | BPF_JGT | BPF_K: pc += a > f.k ? f.jt : f.jf; break;
      case BPF_JMP | BPF_JGE | BPF_K: pc += a >= f.k ? f.jt : f.jf; break;
      case BPF_JMP | BPF_JSET | BPF_K: pc += (a & f.k) ? f.jt : f.jf; break;
      case BPF_RET | BPF_K: return f.k;
      default: cr_assert_fail("instruction %u: opcode 0x%x not interpreted", pc, f.code);
    }
  }
  cr_assert_fail("ran off the end of the filter");
  return 0;
}

// Argument values around every boundary the profiles draw: the allowed
// personas, socket domains, types and protocols, the tty ioctls, each
// CLONE_NEW* bit; each also with the high word set.
std::vector<std::uint64_t> edge_values() {
  std::vector<std::uint64_t> low = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 15, 16, 17, 18, 31, 32, 0x11, 0x86, 200,
                                    SOCK_STREAM | SOCK_CLOEXEC, SOCK_DGRAM | SOCK_NONBLOCK, SOCK_RAW, SOCK_SEQPACKET,
                                    TIOCSTI, TIOCLINUX, TIOCSTI + 1, TIOCLINUX - 1, TCGETS, SIGCHLD, 0x80,
                                    CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER,
                                    CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWNS | SIGCHLD, CLONE_VM | CLONE_FS | SIGCHLD,
                                    0x7fffffff, 0x80000000, 0x80000008, 0xfffffff7, 0xfffffffe, 0xffffffff};
  std::vector<std::uint64_t> out;
  for (std::uint64_t high : {std::uint64_t{0}, std::uint64_t{1} << 32, std::uint64_t{0xffffffff} << 32})
    for (std::uint64_t v : low) out.push_back(high | v);
  return out;
}

void expect_same_decisions(const std::vector<std::string>& profiles, bool notify) {
  SeccompSpec spec;
  std::string key;
  for (const auto& p : profiles) spec.profile(p), key += (key.empty() ? "" : ",") + p;
  spec.notify_socket_refusals(notify);
  if (notify) key += " (notifying)";
  auto ours = compile_seccomp_bpf(spec);
  auto ref = compile_with_libseccomp(spec);
  cr_assert(ours.ok(), "%s: emitter: %s", key.c_str(), ours.error().message().c_str());
  cr_assert(ref.ok(), "%s: libseccomp: %s", key.c_str(), ref.error().message().c_str());
  cr_assert_eq(ours->denied_syscall_count(), ref->denied_syscall_count(), "%s", key.c_str());
  cr_assert(ours->skipped_syscalls() == ref->skipped_syscalls(), "%s: skipped lists differ", key.c_str());
  cr_assert_eq(ours->notifies(), ref->notifies(), "%s", key.c_str());

  std::size_t compared = 0;
  auto same = [&](const Input& in) {
    std::uint32_t a = run_bpf(*ours->fprog(), in), b = run_bpf(*ref->fprog(), in);
    ++compared;
    if (a != b)
      cr_assert_fail("%s: nr %u arch 0x%x args {0x%llx, 0x%llx, 0x%llx}: emitter 0x%x, libseccomp 0x%x", key.c_str(),
                     in.nr, in.arch, static_cast<unsigned long long>(in.args[0]),
                     static_cast<unsigned long long>(in.args[1]), static_cast<unsigned long long>(in.args[2]), a, b);
  };

  std::mt19937_64 rng(20261202);
  std::vector<std::uint32_t> numbers;
  for (std::uint32_t nr = 0; nr < 1024; ++nr) numbers.push_back(nr);
  for (std::uint32_t nr = 0x40000000; nr < 0x40000000 + 600; ++nr) numbers.push_back(nr);
  for (std::uint32_t nr : {0x3fffffffu, 0x7fffffffu, 0x80000000u, 0xfffffffeu, 0xffffffffu}) numbers.push_back(nr);
  for (std::uint32_t arch : {std::uint32_t{AUDIT_ARCH_X86_64}, std::uint32_t{AUDIT_ARCH_I386}, std::uint32_t{AUDIT_ARCH_AARCH64}, 0u})
    for (std::uint32_t nr : numbers)
      for (int k = 0; k < 3; ++k) {
        Input in{nr, arch, {}};
        for (auto& arg : in.args) arg = k == 0 ? 0 : k == 1 ? ~std::uint64_t{0} : rng();
        same(in);
      }

  // The syscalls whose arguments a row looks at: every pair of edge values
  // in the first two arguments, a few in the third.
  const auto edges = edge_values();
  for (const char* name : {"clone", "personality", "socket", "socketpair", "ioctl"}) {
    int nr = seccomp_syscall_resolve_name(name);
    cr_assert_geq(nr, 0, "%s has no number here", name);
    for (std::uint64_t a0 : edges)
      for (std::uint64_t a1 : edges)
        for (std::uint64_t a2 : {std::uint64_t{0}, std::uint64_t{6}, std::uint64_t{17}, std::uint64_t{0x100000006},
                                 std::uint64_t{0xffffffff}})
          same(Input{static_cast<std::uint32_t>(nr), AUDIT_ARCH_X86_64, {a0, a1, a2, rng(), rng(), rng()}});
  }
  // The set-id rows read a mode in arg 1, 2 or 3 and open's flags in arg 1
  // or 2: every pair of the first four arguments from mode and flag values.
  std::vector<std::uint64_t> modes;
  for (std::uint64_t high : {std::uint64_t{0}, std::uint64_t{1} << 32, std::uint64_t{0xffffffff} << 32})
    for (std::uint64_t v : std::initializer_list<std::uint64_t>{0, 0644, 0755, 01777, 02000, 02755, 04000, 04755, 06755, 07777, 0xffffffff & ~06000u,
                            O_CREAT, O_CREAT | O_EXCL | O_WRONLY, O_TMPFILE | O_WRONLY, O_TMPFILE & ~O_DIRECTORY, O_DIRECTORY, O_DIRECTORY | 06000,
                            O_RDONLY | O_CLOEXEC, O_CREAT | 04000, 0xffffffff})
      modes.push_back(high | v);
  for (const char* name : {"chmod", "fchmod", "creat", "mkdir", "mknod", "fchmodat", "fchmodat2", "mkdirat", "mknodat",
                           "open", "openat"}) {
    int nr = seccomp_syscall_resolve_name(name);
    if (nr < 0) continue;  // skipped by both: the lists are compared above
    for (unsigned i = 0; i < 4; ++i)
      for (unsigned j = i + 1; j < 4; ++j)
        for (std::uint64_t ai : modes)
          for (std::uint64_t aj : modes) {
            Input in{static_cast<std::uint32_t>(nr), AUDIT_ARCH_X86_64, {rng(), rng(), rng(), rng(), rng(), rng()}};
            in.args[i] = ai;
            in.args[j] = aj;
            same(in);
          }
  }
  cr_log_info("%s: %zu inputs, %zu instructions against libseccomp's %zu", key.c_str(), compared,
              ours->instruction_count(), ref->instruction_count());
}

}  // namespace

// Every combination the tiers and the C ABI install (the prebuilt ones).
Test(seccomp_bpf, the_emitters_filters_decide_as_libseccomps_do) {
#if !defined(__x86_64__)
  cr_skip_test("the emitter writes x86_64 filters only");
#endif
  const std::vector<std::pair<std::vector<std::string>, bool>> combos = {
      {{"default"}, false},
      {{"no-network"}, false},
      {{"tcp-only"}, false},
      {{"inet-only"}, false},
      {{"host-network"}, false},
      {{"default", "no-network"}, false},
      {{"default", "tcp-only"}, false},
      {{"default", "inet-only"}, false},
      {{"default", "host-network"}, false},
      {{"default", "no-network"}, true},
      {{"default", "tcp-only"}, true},
      {{"no-network", "default"}, false},
  };
  for (const auto& [profiles, notify] : combos) expect_same_decisions(profiles, notify);
}

// Two rows for one syscall (two network profiles: two socket rules) is
// libseccomp's to merge: the emitter declines, and prepare() compiles
// through libseccomp.
Test(seccomp_bpf, two_rows_for_one_syscall_go_to_libseccomp) {
#if !defined(__x86_64__)
  cr_skip_test("the emitter writes x86_64 filters only");
#endif
  SeccompSpec spec;
  spec.profile("no-network").profile("host-network");
  auto ours = compile_seccomp_bpf(spec);
  cr_assert(!ours.ok());
  cr_assert_eq(ours.error().code(), ENOTSUP, "%s", ours.error().message().c_str());
  auto prepared = prepare(spec);
  cr_assert(prepared.ok(), "%s", prepared.error().message().c_str());
  auto ref = compile_with_libseccomp(spec);
  cr_assert(ref.ok());
  cr_assert_eq(prepared->instruction_count(), ref->instruction_count());
}
