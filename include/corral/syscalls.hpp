// Raw system calls and the kernel constants Debian 12's 6.1 headers lack.
//
// Everything a child runs between clone and exec goes through sys::call():
// it returns the kernel's answer (negative errno on failure) and never
// touches errno. That matters because a CLONE_VM child shares the parent's
// memory, TLS included: glibc wrappers would write the parent's errno, and
// the set*id wrappers would broadcast to the parent's threads.
#pragma once

#include <fcntl.h>
#include <linux/close_range.h>
#include <linux/landlock.h>
#include <linux/openat2.h>
#include <linux/sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>

#include <cstdint>

namespace corral::sys {

#if defined(__x86_64__)
inline long call(long nr, long a = 0, long b = 0, long c = 0, long d = 0, long e = 0,
                 long f = 0) noexcept {
  long ret;
  register long r10 __asm__("r10") = d;
  register long r8 __asm__("r8") = e;
  register long r9 __asm__("r9") = f;
  __asm__ volatile("syscall"
                   : "=a"(ret)
                   : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                   : "rcx", "r11", "memory");
  return ret;
}
#elif defined(__aarch64__)
inline long call(long nr, long a = 0, long b = 0, long c = 0, long d = 0, long e = 0,
                 long f = 0) noexcept {
  register long x8 __asm__("x8") = nr;
  register long x0 __asm__("x0") = a;
  register long x1 __asm__("x1") = b;
  register long x2 __asm__("x2") = c;
  register long x3 __asm__("x3") = d;
  register long x4 __asm__("x4") = e;
  register long x5 __asm__("x5") = f;
  __asm__ volatile("svc 0"
                   : "+r"(x0)
                   : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5)
                   : "memory");
  return x0;
}
#else
#error "corral supports x86_64 and aarch64"
#endif

// The errno of a raw call's result, or 0 when it succeeded.
inline int error_of(long ret) noexcept {
  return (ret < 0 && ret > -4096) ? static_cast<int>(-ret) : 0;
}

// Write a whole buffer with raw write(2); child-safe. Returns 0 or errno.
inline int write_all(int fd, const void* buf, unsigned long len) noexcept {
  const char* p = static_cast<const char*>(buf);
  while (len > 0) {
    long n = call(SYS_write, fd, reinterpret_cast<long>(p), static_cast<long>(len));
    if (n == -4 /* EINTR */) continue;
    if (n < 0) return static_cast<int>(-n);
    p += n;
    len -= static_cast<unsigned long>(n);
  }
  return 0;
}

// ---- Signals and time in a child between clone and exec (spawn.cpp,
// container_spawn.cpp). Raw syscalls only: async-signal-safe, no errno.

// The kernel's struct sigaction (not glibc's): handler, flags, restorer, mask.
struct KernelSigaction {
  void (*handler)(int);
  unsigned long flags;
  void (*restorer)();
  std::uint64_t mask;
};

// CLOCK_MONOTONIC in nanoseconds through the raw syscall (no vDSO lookup
// that might touch shared state); async-signal-safe.
inline std::uint64_t monotonic_ns() noexcept {
  struct timespec ts {};
  call(SYS_clock_gettime, CLOCK_MONOTONIC, reinterpret_cast<long>(&ts));
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

// Back to SIG_DFL for every signal 1..63 whose bit is set in `mask`: after
// CLONE_CLEAR_SIGHAND, what the parent ignored stays ignored across exec
// unless reset. Best effort, as a failed reset of a valid signal cannot
// happen; async-signal-safe.
inline void reset_signals_to_default(std::uint64_t mask) noexcept {
  for (int sig = 1; sig < 64; ++sig) {
    if (!(mask & (std::uint64_t{1} << sig))) continue;
    KernelSigaction dfl{SIG_DFL, 0, nullptr, 0};
    call(SYS_rt_sigaction, sig, reinterpret_cast<long>(&dfl), 0, 8);
  }
}

// An empty signal mask; returns 0 or errno. Async-signal-safe.
inline int unblock_all_signals() noexcept {
  std::uint64_t empty = 0;
  return error_of(call(SYS_rt_sigprocmask, SIG_SETMASK, reinterpret_cast<long>(&empty), 0, 8));
}

// A program's fds just before execve: sources[0..2] become 0-2, the error
// pipe becomes `error_at` (CLOEXEC, so execve closing it tells the parent
// the exec happened) and `error_fd` is updated to it; every fd above is
// closed. The four are first lifted above `lift_above`, so none is
// overwritten while it is still needed. Returns 0 or errno; async-signal-safe.
inline int install_program_fds(const int sources[3], int& error_fd, int error_at, long lift_above) noexcept {
  const int srcs[4] = {sources[0], sources[1], sources[2], error_fd};
  long lifted[4];
  for (int i = 0; i < 4; ++i) {
    lifted[i] = call(SYS_fcntl, srcs[i], F_DUPFD_CLOEXEC, lift_above);
    if (lifted[i] < 0) return error_of(lifted[i]);
  }
  error_fd = static_cast<int>(lifted[3]);
  for (int i = 0; i < 3; ++i)
    if (int e = error_of(call(SYS_dup3, lifted[i], i, 0))) return e;
  if (int e = error_of(call(SYS_dup3, lifted[3], error_at, O_CLOEXEC))) return e;
  error_fd = error_at;
  return error_of(call(SYS_close_range, static_cast<unsigned>(error_at) + 1, ~0u, 0));
}

// chdir(2) that follows no magic link (/proc/<pid>/fd/N, cwd, root, exe).
// A child between clone and exec may still hold its spawner's fds, and a
// program may plant `/proc/self/fd/N` as a directory a later run or exec
// starts in (a shared bind, a session's /workspace): chdir would follow it
// to a host directory outside the sandbox's root, and the program would
// start there. Plain symlinks resolve as chdir's do. Returns 0 or errno;
// async-signal-safe.
inline int chdir_no_magiclinks(const char* path) noexcept {
  struct open_how how {};
  how.flags = O_PATH | O_DIRECTORY | O_CLOEXEC;
  how.resolve = RESOLVE_NO_MAGICLINKS;
  long fd = call(SYS_openat2, AT_FDCWD, reinterpret_cast<long>(path), reinterpret_cast<long>(&how), sizeof how);
  if (fd < 0) return error_of(fd);
  long ret = call(SYS_fchdir, fd);
  call(SYS_close, fd);
  return error_of(ret);
}

}  // namespace corral::sys

// ---- Landlock: ABI 2..7 constants (kernel 5.19 .. 6.15); the 6.1 headers stop at ABI 2.
#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14)  // ABI 3
#endif
#ifndef LANDLOCK_ACCESS_FS_IOCTL_DEV
#define LANDLOCK_ACCESS_FS_IOCTL_DEV (1ULL << 15)  // ABI 5
#endif
#ifndef LANDLOCK_ACCESS_NET_BIND_TCP
#define LANDLOCK_ACCESS_NET_BIND_TCP (1ULL << 0)  // ABI 4
#define LANDLOCK_ACCESS_NET_CONNECT_TCP (1ULL << 1)
#endif
#ifndef LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET
#define LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET (1ULL << 0)  // ABI 6
#define LANDLOCK_SCOPE_SIGNAL (1ULL << 1)
#endif
#ifndef LANDLOCK_RESTRICT_SELF_LOG_SAME_EXEC_OFF
#define LANDLOCK_RESTRICT_SELF_LOG_SAME_EXEC_OFF (1U << 0)  // ABI 7
#define LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON (1U << 1)
#define LANDLOCK_RESTRICT_SELF_LOG_SUBDOMAINS_OFF (1U << 2)
#endif
// LANDLOCK_RULE_NET_PORT is an enum value in newer headers, absent in 6.1.
#define CORRAL_LANDLOCK_RULE_NET_PORT 2

namespace corral::sys {
// The full ruleset attribute (ABI 6 layout); the 6.1 header has only the
// first field. The kernel accepts a shorter size from older ABIs.
struct landlock_ruleset_attr_v6 {
  std::uint64_t handled_access_fs;
  std::uint64_t handled_access_net;
  std::uint64_t scoped;
};
struct landlock_net_port_attr {
  std::uint64_t allowed_access;
  std::uint64_t port;
};
}  // namespace corral::sys

// ---- clone3 and friends (all in 6.1 headers; kept here for older ones).
#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif
#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif
#ifndef CLONE_CLEAR_SIGHAND
#define CLONE_CLEAR_SIGHAND 0x100000000ULL
#endif
#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif
#ifndef CLOSE_RANGE_UNSHARE
#define CLOSE_RANGE_UNSHARE (1U << 1)
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif
// P_PIDFD (waitid on a pidfd, kernel 5.4) is an idtype_t enumerator in
// glibc >= 2.36; do not #define it here.
