#include "corral/capabilities.hpp"

#include <fcntl.h>
#include <linux/capability.h>
#include <linux/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "corral/syscalls.hpp"

namespace corral {
namespace {

// The highest capability number this kernel knows: /proc/sys/kernel/
// cap_last_cap in one read, or without /proc a binary search with
// PR_CAPBSET_READ (EINVAL past the last), -1 when neither answers. Not
// libcap's cap_max_bits: calling it links libcap's start-up probe (six
// PR_CAPBSET_READs) into every process that runs corral, run or not.
int kernel_last_cap() {
  // A kernel that knows exactly our headers' capabilities, the common case:
  // it reads the last one and calls the next EINVAL. Two calls instead of
  // the file's open, read and close.
  if (sys::call(SYS_prctl, PR_CAPBSET_READ, CAP_LAST_CAP, 0, 0, 0) >= 0 &&
      sys::call(SYS_prctl, PR_CAPBSET_READ, CAP_LAST_CAP + 1, 0, 0, 0) == -EINVAL)
    return CAP_LAST_CAP;
  int fd = ::open("/proc/sys/kernel/cap_last_cap", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    char buf[16];
    ssize_t n = ::read(fd, buf, sizeof buf - 1);
    ::close(fd);
    if (n > 0) {
      buf[n] = '\0';
      char* end = nullptr;
      long v = std::strtol(buf, &end, 10);
      if (end != buf && v >= 0 && v <= 63) return static_cast<int>(v);
    }
  }
  if (sys::call(SYS_prctl, PR_CAPBSET_READ, 0, 0, 0, 0) < 0) return -1;
  int known = 0, unknown = 64;
  while (unknown - known > 1) {
    int mid = (known + unknown) / 2;
    if (sys::call(SYS_prctl, PR_CAPBSET_READ, mid, 0, 0, 0) >= 0) known = mid;
    else unknown = mid;
  }
  return known;
}

}  // namespace

std::uint64_t effective_capabilities() noexcept {
  // capget with pid 0 reads the calling thread's sets: capabilities are per
  // thread, and a forked child inherits this thread's. One raw call
  // (libcap's cap_get_proc asks the kernel's version first: two, and a
  // malloc).
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (sys::call(SYS_capget, reinterpret_cast<long>(&header), reinterpret_cast<long>(data)) != 0) return 0;
  return (std::uint64_t{data[1].effective} << 32) | data[0].effective;
}

bool has_effective_capability(int cap) noexcept {
  return cap >= 0 && cap < 64 && ((effective_capabilities() >> cap) & 1) != 0;
}

Expected<CapabilityDrop> prepare_capability_drop() {
  // The kernel's count, so a kernel newer than our headers still has its
  // new capabilities dropped; the headers' when larger (dropping more is
  // safe: the child skips a number the kernel calls EINVAL).
  int from_kernel = kernel_last_cap();
  int last = from_kernel > CAP_LAST_CAP ? from_kernel : CAP_LAST_CAP;
  if (last < 0 || last > 63)
    return Error(ENOTSUP, "capabilities: cannot tell how many capabilities this kernel has (cap_last_cap " +
                              std::to_string(from_kernel) + ")");
  if (!has_effective_capability(CAP_SETPCAP))
    return Error(EPERM, "capabilities: emptying the bounding set needs CAP_SETPCAP, which is not effective "
                        "(euid " + std::to_string(geteuid()) + ")");
  CapabilityDrop drop;
  drop.last_cap_ = last;
  return drop;
}

// Runs in the child; async-signal-safe: raw syscalls only.
int drop_bounding_set_in_child(const CapabilityDrop& drop) noexcept {
  long r = sys::call(SYS_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  if (int err = sys::error_of(r); err != 0 && err != EINVAL) return err;
  for (int cap = 0; cap <= drop.last_cap(); ++cap) {
    r = sys::call(SYS_prctl, PR_CAPBSET_DROP, cap, 0, 0, 0);
    int err = sys::error_of(r);
    if (err == EINVAL) continue;  // a number this kernel does not know
    if (err != 0) return err;     // EPERM: no CAP_SETPCAP
  }
  return 0;
}

// Runs in the child; async-signal-safe: raw syscalls only.
int drop_bounding_set_in_child(const CapabilityDrop& drop, std::uint64_t present) noexcept {
  for (int cap = 0; cap <= drop.last_cap(); ++cap) {
    if (((present >> cap) & 1) == 0) continue;
    int err = sys::error_of(sys::call(SYS_prctl, PR_CAPBSET_DROP, cap, 0, 0, 0));
    if (err == EINVAL) continue;  // a number this kernel does not know
    if (err != 0) return err;     // EPERM: no CAP_SETPCAP
  }
  return 0;
}

// The calling thread only: capabilities are a thread's own (credentials are
// per task), so the process's other threads keep their bounding sets.
std::uint64_t empty_thread_bounding_set(const CapabilityDrop& drop) noexcept {
  std::uint64_t left = 0;
  for (int cap = 0; cap <= drop.last_cap(); ++cap) {
    int err = sys::error_of(sys::call(SYS_prctl, PR_CAPBSET_DROP, cap, 0, 0, 0));
    if (err != 0 && err != EINVAL) left |= std::uint64_t{1} << cap;
  }
  return left;
}

// Runs in the child; async-signal-safe: raw syscalls only.
int clear_capabilities_in_child(const CapabilityDrop&) noexcept {
  // Version 3 takes two 32-bit words per set; all zero empties permitted,
  // effective and inheritable. Lowering never needs a capability. It
  // empties the ambient set too: the kernel keeps ambient within permitted
  // and inheritable (cap_capset in security/commoncap.c masks it with
  // their intersection, Linux 4.3+), so no PR_CAP_AMBIENT call is needed.
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  long r = sys::call(SYS_capset, reinterpret_cast<long>(&header), reinterpret_cast<long>(data));
  if (int err = sys::error_of(r)) return err;
  // Linux 3.5+. After this, execve never adds privileges (setuid bits and
  // file capabilities are ignored), and seccomp/landlock need no CAP_SYS_ADMIN.
  r = sys::call(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
  return sys::error_of(r);
}

// Runs in the child; async-signal-safe. Bounding first: it needs
// CAP_SETPCAP, which the capset below removes.
int apply_capability_drop_in_child(const CapabilityDrop& drop) noexcept {
  if (int err = drop_bounding_set_in_child(drop)) return err;
  return clear_capabilities_in_child(drop);
}

// Child side / preexec hook; async-signal-safe. Without a prepared object
// the number of capabilities is found by dropping until the kernel says
// EINVAL. Without CAP_SETPCAP the bounding set cannot shrink; that is only
// acceptable when we hold no capability at all, since no_new_privs then
// keeps exec from gaining any.
int drop_all_capabilities_now() noexcept {
  sys::call(SYS_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  for (int cap = 0; cap < 64; ++cap) {
    int err = sys::error_of(sys::call(SYS_prctl, PR_CAPBSET_DROP, cap, 0, 0, 0));
    if (err == EINVAL) break;
    if (err == EPERM) {
      __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
      __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
      if (sys::call(SYS_capget, reinterpret_cast<long>(&header), reinterpret_cast<long>(data)) != 0) return EPERM;
      for (const auto& d : data)
        if (d.permitted || d.effective) return EPERM;
      break;
    }
    if (err != 0) return err;
  }
  return clear_capabilities_in_child(CapabilityDrop());
}

}  // namespace corral
