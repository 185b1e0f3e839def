// Internal: the profiles' conditions (shared by seccomp.cpp's libseccomp
// rules and the emitter) and corral's own BPF emitter (seccomp_bpf.cpp).
//
// Why an emitter of our own: every run of tier process (and every
// container) installs its filter with seccomp(2), and the kernel converts
// and JIT-compiles it on each install. libseccomp spells an argument check
// on "the low 32 bits are none of these values" as one masked comparison
// per aligned block of the complement (libseccomp 2.5 takes one comparison
// per argument in a rule): `personality` alone took 160 instructions and
// `socket` under host-network 106, of 475 for `default,host-network`. The
// emitter says the same in a few instructions each (load the argument,
// compare with each allowed value), and dispatches on the syscall number
// by a binary search over ranges of equal outcome. tests/seccomp_test.cpp
// runs both filters on every syscall number and a grid of arguments and
// requires the same answer.
#pragma once

#include <fcntl.h>
#include <linux/filter.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdint>
#include <vector>

#include "corral/status.hpp"

namespace corral::detail {

// When a row denies its syscall.
enum class When {
  always,
  clone_new_namespace,  // clone(2) flags (arg 0 on x86_64 and aarch64) with a CLONE_NEW* bit
  personality_change,   // persona other than the harmless ones below
  socket_not_unix,      // socket(2) or socketpair(2) domain other than AF_UNIX
  socket_not_unix_tcp,  // socket(2) other than AF_UNIX or TCP over AF_INET/AF_INET6
  socket_not_unix_inet, // socket(2) domain other than AF_UNIX, AF_INET, AF_INET6
  socket_not_host_net,  // socket(2) domain other than AF_UNIX, AF_INET, AF_INET6, AF_NETLINK
  tty_injection,        // ioctl(2) TIOCSTI / TIOCLINUX: typing into the controlling terminal
  // A mode with S_ISUID or S_ISGID (set_id_args says where): a file the
  // program makes set-id, which outlives the run wherever the host can
  // reach it (a writable bind, idmapped to the directory's owner; a
  // --write-path; the host's /tmp) and runs as its owner for anyone.
  set_id_mode_arg1,     // chmod, fchmod, creat, mkdir, mknod
  set_id_mode_arg2,     // fchmodat, fchmodat2, mkdirat, mknodat
  set_id_open,          // open(2): flags (arg 1) create a file, mode (arg 2)
  set_id_openat,        // openat(2): flags (arg 2) create a file, mode (arg 3)
};

// Where a set_id_* row reads its arguments. flags_arg < 0: no flags; the
// mode counts only when the flags create a file (O_CREAT, or O_TMPFILE's
// own bit), since open(2) ignores the mode otherwise and a caller may
// leave junk there.
struct SetIdArgs {
  int flags_arg;
  unsigned mode_arg;
};
constexpr SetIdArgs set_id_args(When when) {
  switch (when) {
    case When::set_id_mode_arg1: return {-1, 1};
    case When::set_id_mode_arg2: return {-1, 2};
    case When::set_id_open: return {1, 2};
    case When::set_id_openat: return {2, 3};
    default: return {-1, 0};
  }
}
// Each a bit of the low 32 (the kernel reads the mode as umode_t and the
// flags as int).
inline constexpr std::uint32_t kSetIdBits[] = {S_ISUID, S_ISGID};
// O_TMPFILE is that bit plus O_DIRECTORY (the kernel refuses the bit
// without it); glibc's __O_TMPFILE includes O_DIRECTORY too, so the bit is
// taken out of O_TMPFILE: a plain O_DIRECTORY open is no creation.
inline constexpr std::uint32_t kCreateFlags[] = {O_CREAT, O_TMPFILE & ~O_DIRECTORY};

// Values personality(2) may still take: PER_LINUX (0), PER_LINUX32 (8,
// which only changes what uname reports) and 0xffffffff, the query.
inline constexpr std::uint32_t kSafePersonas[] = {0x0, 0x8, 0xffffffff};

// CLONE_NEWTIME (0x80) is left out: in clone(2)'s flags that bit belongs to
// the exit signal (CSIGNAL), and a time namespace comes only from unshare
// or clone3, both denied whole. Each a single bit of the low 32.
inline constexpr std::uint64_t kCloneNewFlags[] = {CLONE_NEWNS,  CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC,
                                                   CLONE_NEWUSER, CLONE_NEWPID,   CLONE_NEWNET};

// The socket domains (low 32 bits of socket(2)'s arg 0) each socket rule
// lets through, sorted.
inline constexpr std::uint32_t kUnixInetDomains[] = {AF_UNIX, AF_INET, AF_INET6};
inline constexpr std::uint32_t kHostNetDomains[] = {AF_UNIX, AF_INET, AF_INET6, AF_NETLINK};
// tcp-only: an AF_INET/AF_INET6 socket's protocol (low 32 bits of arg 2).
inline constexpr std::uint32_t kTcpProtocols[] = {0, 6 /* IPPROTO_TCP */};

// One syscall's row for the emitter: deny with `action` (a SECCOMP_RET_*
// value) when `when` holds.
struct BpfRow {
  std::uint32_t nr;
  When when;
  std::uint32_t action;
};

// The filter for the native architecture: another architecture (or x32 on
// x86_64) is killed (SECCOMP_RET_KILL_PROCESS), a row's syscall meets its
// condition, everything else is allowed. At most one row per syscall.
// x86_64 only: elsewhere (or for a filter whose jumps would not fit) an
// Error with ENOTSUP, and the caller compiles through libseccomp.
Expected<std::vector<sock_filter>> emit_filter_bpf(std::vector<BpfRow> rows);

}  // namespace corral::detail
