// SpawnThread (spawn_thread.hpp): the children it clones start with an
// empty bounding set and each in an IPC namespace no other child was
// given; the calling thread keeps its own of both.
#include "corral/spawn_thread.hpp"

#include <fcntl.h>
#include <linux/capability.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "corral/syscalls.hpp"
#include "support.hpp"

using namespace corral;

namespace {

// What a child saw of itself, written through the shared memory of a
// CLONE_VM child before it execs `sleep` (alive, its namespace cannot be
// freed and its number handed out again while the test compares them).
struct Seen {
  char ipc[64] = {};
  long ipc_len = -1;
  int bounding_caps = -1;  // capabilities its bounding set still holds
  int last_cap = 40;
};

int look_then_sleep(void* p) noexcept {
  auto* s = static_cast<Seen*>(p);
  s->ipc_len = sys::call(SYS_readlinkat, AT_FDCWD, reinterpret_cast<long>("/proc/thread-self/ns/ipc"),
                         reinterpret_cast<long>(s->ipc), sizeof s->ipc - 1);
  int held = 0;
  for (int cap = 0; cap <= s->last_cap; ++cap) held += sys::call(SYS_prctl, PR_CAPBSET_READ, cap, 0, 0, 0) == 1;
  s->bounding_caps = held;
  static char* const argv[] = {const_cast<char*>("sleep"), const_cast<char*>("30"), nullptr};
  static char* const envp[] = {nullptr};
  sys::call(SYS_execve, reinterpret_cast<long>("/bin/sleep"), reinterpret_cast<long>(argv),
            reinterpret_cast<long>(envp));
  return 127;
}

std::string ns_of(const std::string& path) {
  char buf[64];
  ssize_t n = readlink(path.c_str(), buf, sizeof buf);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "";
}

}  // namespace

Test(spawn_thread, children_get_no_bounding_set_and_a_namespace_each) {
  CORRAL_SKIP_UNLESS_ROOT();
  if (!corral::has_effective_capability(CAP_SYS_ADMIN) || !corral::has_effective_capability(CAP_SETPCAP))
    cr_skip_test("needs CAP_SYS_ADMIN (IPC namespaces) and CAP_SETPCAP (the bounding set)");
  auto drop = prepare_capability_drop();
  cr_assert(drop.ok(), "%s", drop.ok() ? "" : drop.error().message().c_str());
  const std::string ours = ns_of("/proc/thread-self/ns/ipc");
  const std::string our_bounding = corral_test::proc_status_field("thread-self", "CapBnd");
  auto thread = SpawnThread::start(*drop, /*fresh_ipc=*/true);
  cr_assert(thread.ok());
  auto stack = ChildStack::allocate();
  cr_assert(stack.ok());

  std::set<std::string> namespaces{ours};
  std::vector<Pidfd> children;
  for (int i = 0; i < 4; ++i) {
    Seen seen;
    seen.last_cap = drop->last_cap();
    CloneSpec spec;
    spec.flags = CLONE_NEWIPC;  // what a process-tier plan asks for
    spec.share_memory = true;
    spec.stack = &*stack;
    auto cloned = (*thread)->clone(spec, look_then_sleep, &seen);
    cr_assert(cloned.pidfd.ok(), "%s", cloned.pidfd.ok() ? "" : cloned.pidfd.error().message().c_str());
    children.push_back(std::move(*cloned.pidfd));
    cr_assert_gt(seen.ipc_len, 0, "child %d could not read its IPC namespace", i);
    const std::string ns(seen.ipc, static_cast<std::size_t>(seen.ipc_len));
    cr_expect(namespaces.insert(ns).second, "child %d was given %s, which ours or an earlier child had", i,
              ns.c_str());
    cr_expect_eq(seen.bounding_caps, 0, "child %d kept %d capabilities in its bounding set", i, seen.bounding_caps);
  }
  cr_expect((*thread)->ready());
  cr_expect_eq((*thread)->bounding_set(), 0u);
  // The thread's namespace is its own; ours and our bounding set did not move.
  cr_expect_eq(ns_of("/proc/thread-self/ns/ipc"), ours);
  cr_expect_eq(corral_test::proc_status_field("thread-self", "CapBnd"), our_bounding);
  cr_expect_neq(our_bounding, "0000000000000000");
  for (auto& child : children) {
    child.send_signal(SIGKILL);
    (void)wait_exit(child, true);
  }
}

// Started without fresh_ipc (a host whose runs get no IPC namespace), the
// thread gives its children ours, and still no bounding set.
Test(spawn_thread, without_fresh_ipc_children_share_ours) {
  CORRAL_SKIP_UNLESS_ROOT();
  if (!corral::has_effective_capability(CAP_SETPCAP)) cr_skip_test("needs CAP_SETPCAP (the bounding set)");
  auto drop = prepare_capability_drop();
  cr_assert(drop.ok());
  auto thread = SpawnThread::start(*drop, /*fresh_ipc=*/false);
  cr_assert(thread.ok());
  auto stack = ChildStack::allocate();
  cr_assert(stack.ok());
  Seen seen;
  seen.last_cap = drop->last_cap();
  CloneSpec spec;
  spec.share_memory = true;
  spec.stack = &*stack;
  auto cloned = (*thread)->clone(spec, look_then_sleep, &seen);
  cr_assert(cloned.pidfd.ok());
  cr_expect_eq(std::string(seen.ipc, static_cast<std::size_t>(std::max(seen.ipc_len, 0L))),
               ns_of("/proc/thread-self/ns/ipc"));
  cr_expect_eq(seen.bounding_caps, 0);
  cloned.pidfd->send_signal(SIGKILL);
  (void)wait_exit(*cloned.pidfd, true);
}
