// Installing a compiled filter (seccomp.hpp) and answering the
// notifications of a notifying one: the child's side between clone and exec
// (raw syscalls only) and the supervisor's listener. The profiles and their
// compilers are in seccomp.cpp.
#include <linux/seccomp.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "corral/seccomp.hpp"
#include "corral/syscalls.hpp"

namespace corral {

int apply_seccomp_in_child(const SeccompProgram& program, int* listener) noexcept {
  // Runs in the child between clone and exec: raw syscalls only, nothing
  // that touches errno or allocates. Order matters: no_new_privs first, or
  // seccomp(2) refuses an unprivileged caller with EACCES.
  const sock_fprog* fprog = program.fprog();
  if (fprog->len == 0 || fprog->filter == nullptr) return EINVAL;
  if (program.notifies() && listener == nullptr) return EINVAL;
  if (int err = sys::error_of(sys::call(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))) return err;
  return install_seccomp_in_child(program, listener);
}

int install_seccomp_in_child(const SeccompProgram& program, int* listener) noexcept {
  const sock_fprog* fprog = program.fprog();
  if (fprog->len == 0 || fprog->filter == nullptr) return EINVAL;
  // A filter that notifies needs someone to answer: without a listener
  // its callers would get ENOSYS.
  if (program.notifies() && listener == nullptr) return EINVAL;
  const long flags = program.notifies() ? SECCOMP_FILTER_FLAG_NEW_LISTENER : 0;
  long r = sys::call(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, reinterpret_cast<long>(fprog));
  if (r < 0) return sys::error_of(r);
  if (program.notifies()) *listener = static_cast<int>(r);  // O_CLOEXEC, the kernel's choice
  return 0;
}

namespace {

// The kernel's sizes of the notification structs (SECCOMP_GET_NOTIF_SIZES):
// what it copies out may be larger than this build's headers say.
struct NotifSizes {
  std::size_t notif = sizeof(seccomp_notif), resp = sizeof(seccomp_notif_resp);
};

const NotifSizes& notif_sizes() {
  static const NotifSizes sizes = [] {
    NotifSizes out;
    seccomp_notif_sizes s{};
    if (::syscall(SYS_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &s) == 0) {
      out.notif = std::max<std::size_t>(out.notif, s.seccomp_notif);
      out.resp = std::max<std::size_t>(out.resp, s.seccomp_notif_resp);
    }
    return out;
  }();
  return sizes;
}

}  // namespace

Expected<int> refuse_seccomp_notification(int listener, int err) {
  // 256 bytes hold both structs with room for the kernel to grow them;
  // RECV wants its buffer zeroed (EINVAL otherwise, since 5.5).
  constexpr std::size_t kRoom = 256;
  const NotifSizes& sizes = notif_sizes();
  if (sizes.notif > kRoom || sizes.resp > kRoom)
    return Error(EOVERFLOW, "seccomp: the kernel's notification is larger than corral's buffer");
  alignas(8) unsigned char buf[kRoom];
  std::memset(buf, 0, sizeof buf);
  auto* notif = reinterpret_cast<seccomp_notif*>(buf);
  // The poll said POLLIN: RECV does not block (a notification withdrawn
  // meanwhile, its caller killed, is ENOENT).
  if (::ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, notif) != 0)
    return Error::from_errno(errno, "seccomp: receive a notification");
  const std::uint64_t id = notif->id;
  const int nr = notif->data.nr;
  std::memset(buf, 0, sizeof buf);
  auto* resp = reinterpret_cast<seccomp_notif_resp*>(buf);
  resp->id = id;
  resp->error = -err;
  resp->val = 0;
  resp->flags = 0;
  // ENOENT: the caller was killed before the answer reached it.
  if (::ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, resp) != 0)
    return Error::from_errno(errno, "seccomp: answer a notification");
  return nr;
}

std::string_view seccomp_notified_syscall_name(int nr) {
  switch (nr) {
    case SYS_socket: return "socket";
    case SYS_socketpair: return "socketpair";
  }
  return "";
}

}  // namespace corral
