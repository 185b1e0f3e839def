// seccomp: named syscall-filter profiles, compiled to BPF in the parent by
// libseccomp and installed in the child by one seccomp(2) call.
//
// Describe (SeccompSpec: profile names) -> prepare in the parent
// (SeccompProgram: the BPF in owned memory) -> apply in the child
// (apply_seccomp_in_child). Profiles are deny-lists on top of "allow":
// a denied call fails with an errno the program can handle (EPERM, EACCES,
// or ENOSYS for clone3 and openat2 so that libc falls back to clone(2) and
// openat(2), whose arguments the filter can inspect). The filter is for the native architecture only; a
// syscall made through another ABI (i386 int 0x80, x32 on x86_64) kills
// the process.
#pragma once

#include <linux/filter.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "corral/status.hpp"

namespace corral {

// Known profiles:
//   default     the deny-list: kernel modules, kexec, bpf, perf, userfaultfd,
//               keyrings, ptrace and process_vm_*, the mount family,
//               namespace creation (unshare, setns, clone with CLONE_NEW*),
//               io_uring, personality changes, clock setting, swap, reboot,
//               TIOCSTI/TIOCLINUX ioctls, and similar host-wide calls;
//               and set-user/group-id modes (systemd's RestrictSUIDSGID=):
//               chmod, fchmod, fchmodat, fchmodat2, mkdir, mkdirat, mknod,
//               mknodat, creat with S_ISUID or S_ISGID, and open/openat
//               creating a file (O_CREAT, O_TMPFILE) with them, EPERM; a
//               set-id file would outlive the run where the host reaches it
//               (a writable bind is idmapped to the directory's owner).
//               openat2, whose mode seccomp cannot read: ENOSYS, so libc
//               falls back to openat.
//   The network profiles allow-list socket families, one per network
//   policy; socket(2) for any other family fails with EACCES, and so does
//   socketpair(2) for any family but AF_UNIX. io_uring is denied in each
//   (its IORING_OP_SOCKET makes sockets without the socket syscall).
//   no-network    AF_UNIX only: a closed network.
//   tcp-only      AF_UNIX, and TCP over AF_INET/AF_INET6 (an egress
//                 allow-list that Landlock's TCP rules narrow to ports).
//   inet-only     AF_UNIX, AF_INET, AF_INET6: a network namespace of the
//                 run's own (lo up), where IP reaches only that namespace.
//   host-network  AF_UNIX, AF_INET, AF_INET6, AF_NETLINK: the host's network
//                 (netlink for getifaddrs and getaddrinfo's AI_ADDRCONFIG).
//   Nothing else in any of them: not vsock (no network namespace isolates
//   it), packet, bluetooth, AF_ALG, AF_KEY, XDP, nor a family a later
//   kernel adds.
std::vector<std::string> seccomp_profiles();

// One row of a profile, for reports: "ptrace" denied with EPERM, or
// "clone" denied with EPERM when "flags include CLONE_NEW*".
struct SeccompDenial {
  std::string syscall;
  int errno_value = 0;
  std::string condition;  // empty: always
};

// What `profile` denies, in table order; unknown names are an Error that
// lists the known ones.
Expected<std::vector<SeccompDenial>> seccomp_profile_denials(std::string_view profile);
// The same as one line per errno: "default denies with EPERM: kexec_load, ...,
// clone (flags include CLONE_NEW*); with ENOSYS: clone3".
Expected<std::string> describe_seccomp_profile(std::string_view profile);

// The profiles to merge into one filter, in order; a repeated name counts
// once. No profile at all is refused by prepare().
class SeccompSpec {
 public:
  SeccompSpec& profile(std::string name);
  const std::vector<std::string>& profiles() const { return profiles_; }
  // The network profiles' socket(2)/socketpair(2) refusals become
  // SECCOMP_RET_USER_NOTIF instead of a fixed errno: the caller waits
  // until whoever holds the filter's listener answers (the supervisor,
  // with the same EACCES, counting them so the Result can say corral
  // refused them). Needs a kernel and libseccomp with user notification
  // (Linux 5.0, libseccomp API level 6); prepare() fails without.
  SeccompSpec& notify_socket_refusals(bool on);
  bool socket_refusals_notified() const { return notify_socket_refusals_; }

 private:
  std::vector<std::string> profiles_;
  bool notify_socket_refusals_ = false;
};

// A compiled filter. Owns its BPF; fprog() points into that storage and
// stays valid across moves. Move-only.
class SeccompProgram {
 public:
  SeccompProgram() = default;
  SeccompProgram(SeccompProgram&& other) noexcept;
  SeccompProgram& operator=(SeccompProgram&& other) noexcept;
  SeccompProgram(const SeccompProgram&) = delete;
  SeccompProgram& operator=(const SeccompProgram&) = delete;

  const sock_fprog* fprog() const noexcept { return &fprog_; }
  std::size_t instruction_count() const noexcept { return filter_.size(); }
  const std::vector<std::string>& profiles() const { return profiles_; }
  // Syscalls the profiles name that this architecture does not have (so
  // there is nothing to deny): recorded, not silently dropped.
  const std::vector<std::string>& skipped_syscalls() const { return skipped_; }
  std::size_t denied_syscall_count() const { return denied_; }
  // "seccomp: default, no-network (68 syscalls denied, 2 absent on x86_64: ...; 190 BPF instructions)"
  std::string describe() const;
  // True when prepare() took the filter compiled into libcorral at build
  // time instead of compiling it now (the same BPF; see prepare()).
  bool prebuilt() const noexcept { return prebuilt_; }
  // Some refusal notifies (SeccompSpec::notify_socket_refusals and a
  // profile with socket rows): applying it yields a listener fd.
  bool notifies() const noexcept { return notifies_; }

 private:
  friend Expected<SeccompProgram> prepare(const SeccompSpec&);
  friend Expected<SeccompProgram> compile_with_libseccomp(const SeccompSpec&);
  friend Expected<SeccompProgram> compile_seccomp_bpf(const SeccompSpec&);
  void repoint() noexcept;

  std::vector<sock_filter> filter_;
  sock_fprog fprog_{0, nullptr};
  std::vector<std::string> profiles_;
  std::vector<std::string> skipped_;
  std::size_t denied_ = 0;
  bool prebuilt_ = false;
  bool notifies_ = false;
};

// Parent side: merge the profiles into one filter for the native
// architecture (other architectures: kill the process) and hold its BPF in
// memory. Errors name the profile or the step:
// "seccomp: unknown profile 'nonet' (known: default, no-network)".
// The combinations the tiers use (default; default + one network
// profile; each single profile) were compiled when libcorral was built;
// prepare() returns that BPF when the running libseccomp version and the
// architecture are the ones it was built with and the kernel takes the
// filter's actions (KILL_PROCESS; USER_NOTIF for a notifying filter).
// Otherwise it compiles: compile_seccomp_bpf where it can, libseccomp
// where not (another architecture, a kernel without those actions).
Expected<SeccompProgram> prepare(const SeccompSpec& spec);

// The filter written by corral's own BPF emitter (src/seccomp_bpf.hpp):
// the decisions libseccomp's filter makes, for every syscall number and
// argument, in a fraction of its instructions (`default,host-network`: 119
// against 475), which is what the kernel converts and JIT-compiles at each
// install. x86_64; elsewhere an Error with ENOTSUP. The build makes the
// prebuilt filters with it; tests hold its decisions to libseccomp's.
Expected<SeccompProgram> compile_seccomp_bpf(const SeccompSpec& spec);

// The same filter compiled through libseccomp now (the reference the
// emitter's decisions are tested against; the compile on other
// architectures).
Expected<SeccompProgram> compile_with_libseccomp(const SeccompSpec& spec);

// Child side, between clone and exec (a CLONE_VM child too): raw
// prctl(PR_SET_NO_NEW_PRIVS, 1) — seccomp(2) requires it without
// CAP_SYS_ADMIN, and it keeps setuid binaries from shedding the filter —
// then seccomp(SECCOMP_SET_MODE_FILTER, flags, prog). Async-signal-safe: raw
// syscalls only, no allocation. Returns 0 or a positive errno. The filter
// is inherited across fork and exec and cannot be removed.
// A program that notifies() is installed with SECCOMP_FILTER_FLAG_NEW_LISTENER
// and its listener fd (O_CLOEXEC) stored in *listener; `listener` must then
// be given (EINVAL otherwise). EBUSY: a filter already on this process has
// a listener (the kernel allows one per chain; corral itself runs under a
// notifying sandbox) — apply a plain program instead.
int apply_seccomp_in_child(const SeccompProgram& program, int* listener = nullptr) noexcept;
// The seccomp(2) call alone, for a child that has set no_new_privs already
// (clear_capabilities_in_child and apply_landlock_in_child set it): one
// prctl fewer. Only after such a step: a caller holding CAP_SYS_ADMIN gets
// its filter without no_new_privs (seccomp(2)), which nothing would notice.
int install_seccomp_in_child(const SeccompProgram& program, int* listener = nullptr) noexcept;

// Parent side, on a listener a notifying filter gave: receive one
// notification and answer it with `err` (the call fails with it, as the
// plain filter's SCMP_ACT_ERRNO would). Call when the listener polls
// readable: then it does not block. Returns the syscall number answered;
// an Error with ENOENT when the caller was killed before it was received
// or answered (nothing to count).
// When nobody holds the listener any more, the kernel fails a notifying
// call at once with ENOSYS (seccomp_unotify(2)): a run never hangs on a
// supervisor that is gone.
Expected<int> refuse_seccomp_notification(int listener, int err);
// "socket", "socketpair" for the syscalls a notifying filter notifies
// (this architecture's numbers); "" for any other.
std::string_view seccomp_notified_syscall_name(int nr);

}  // namespace corral
