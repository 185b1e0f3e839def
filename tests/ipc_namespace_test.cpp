// Unit tests of ipc_namespace.hpp: a held IPC namespace is checked for
// POSIX queues through one mount of its mqueue filesystem, made once and
// kept with the hold, whose listing shows the queues of that namespace as
// they are at each check. Each test runs in a forked child: setns and
// unshare change the namespace of the calling thread, and the child is
// single-threaded.
#include <fcntl.h>
#include <mqueue.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "corral/ipc_namespace.hpp"
#include "support.hpp"

using corral::HeldIpcNamespace;

namespace {

// The mount id of what `fd` refers to (statx STATX_MNT_ID); 0 if unknown.
std::uint64_t mount_id_of(int fd) {
  struct statx stx {};
  if (::statx(fd, "", AT_EMPTY_PATH, STATX_MNT_ID, &stx) != 0 || !(stx.stx_mask & STATX_MNT_ID)) return 0;
  return stx.stx_mnt_id;
}

// Makes the POSIX queue `name` in the calling thread's IPC namespace.
bool make_queue(const char* name) {
  struct mq_attr attr {};
  attr.mq_maxmsg = 1;
  attr.mq_msgsize = 8;
  const mqd_t q = ::mq_open(name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600, &attr);
  if (q == static_cast<mqd_t>(-1)) return false;
  ::mq_close(q);
  return true;
}

// Runs `steps` in a child with an IPC namespace of its own; fails the test
// with the step that failed.
void in_own_ipc_namespace(const std::function<int(int)>& steps) {
  auto rep = corral_test::run_in_child_reporting([&](int report_fd) {
    if (::unshare(CLONE_NEWIPC) != 0) {
      corral_test::report(report_fd, "unshare(CLONE_NEWIPC) failed");
      return 100;
    }
    return steps(report_fd);
  });
  cr_assert(rep.end.exited, "child killed by signal %d", rep.end.signal);
  cr_assert_eq(rep.end.code, 0, "step %d failed: %s", rep.end.code, rep.output.c_str());
}

}  // namespace

TestSuite(ipc_namespace, .timeout = 30);

// The mount is made with the hold, and every check lists through it: no
// mount is made or dropped per check (that unmount is what cost a run
// 300 µs), and the listing is live: a queue made after the mount, and
// removed again, is seen and then not.
Test(ipc_namespace, a_held_namespace_is_checked_through_the_one_mount_it_was_held_with) {
  CORRAL_SKIP_UNLESS_ROOT();
  in_own_ipc_namespace([](int report_fd) {
    HeldIpcNamespace held = corral::hold_own_ipc_namespace();
    if (!held) return 1;
    if (!held.mqueue) return 2;
    const int mount_fd = held.mqueue.get();
    const std::uint64_t mount = mount_id_of(mount_fd);
    if (mount == 0) return 3;
    if (!corral::enter_ipc_namespace_if_empty(held)) return 4;  // fresh: empty
    if (!make_queue("/corral-held-test")) return 5;
    if (corral::enter_ipc_namespace_if_empty(held)) return 6;  // the queue, made after the mount, is seen
    if (::mq_unlink("/corral-held-test") != 0) return 7;
    if (!corral::enter_ipc_namespace_if_empty(held)) return 8;  // and gone once removed
    if (held.mqueue.get() != mount_fd || mount_id_of(held.mqueue.get()) != mount) {
      corral_test::report(report_fd, "the checks replaced the hold's mount");
      return 9;
    }
    return 0;
  });
}

// The checks are of the held namespace, not of the caller's: a queue in
// the namespace the caller moved on to is not the held one's, and a hold
// that lost its mount gets one of the held namespace at its next check.
Test(ipc_namespace, a_check_looks_at_the_held_namespace_whichever_the_caller_is_in) {
  CORRAL_SKIP_UNLESS_ROOT();
  in_own_ipc_namespace([](int report_fd) {
    HeldIpcNamespace held = corral::hold_own_ipc_namespace();
    if (!held || !held.mqueue) return 1;
    if (::unshare(CLONE_NEWIPC) != 0) return 2;  // the caller moves on
    if (!make_queue("/corral-elsewhere")) return 3;
    if (!corral::enter_ipc_namespace_if_empty(held)) {  // enters the held one: empty
      corral_test::report(report_fd, "a queue of another namespace was taken as the held one's");
      return 4;
    }
    if (!make_queue("/corral-held")) return 5;  // in the held one now
    held.mqueue.reset();                         // no mount: the check makes one
    if (::unshare(CLONE_NEWIPC) != 0) return 6;
    if (corral::enter_ipc_namespace_if_empty(held)) {
      corral_test::report(report_fd, "the mount made at the check missed the held namespace's queue");
      return 7;
    }
    if (!held.mqueue) return 8;  // kept for the next check
    return 0;
  });
}
