// host_probe: what this host can do, asked of the kernel once per process
// (host_probe.hpp). The answers are HostFacts (host.hpp), plain data the
// run layer sets a run up against and the policy layer's enforcement map
// (enforcement.hpp) reads.
#include "corral/host_probe.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "corral/capabilities.hpp"
#include "corral/cgroup.hpp"
#include "corral/landlock.hpp"
#include "corral/ns_template.hpp"
#include "corral/privilege.hpp"
#include "corral/process.hpp"
#include "corral/syscalls.hpp"
#include "corral/workspace_base.hpp"

namespace corral {
namespace {

// What `container` needs first, tried in a throwaway child rather than
// trusted from sysctls (distributions gate user namespaces differently):
// a user namespace with a private mount namespace, a tmpfs mounted in it
// (on /tmp, the mount tree's staging directory) and pivot_root into that
// tmpfs. The child reports the first step that failed and its errno.
struct ContainerProbe {
  bool user_namespaces = false;
  bool pivot_root = false;
  std::string failed;  // "" or "pivot_root: Operation not permitted"
  std::string how;
};

// The probe child's steps, raw syscalls on its own stack: it shares our
// memory (CLONE_VM|CLONE_VFORK) and must touch nothing else. The namespaces
// come from clone3 itself (unshare would refuse a CLONE_VM child).
struct ProbeSteps {
  int failed_step = 0;  // 0: all passed; else the 1-based step below
  int err = 0;
};

int probe_container_in_child(void* arg) noexcept {
  auto* out = static_cast<ProbeSteps*>(arg);
  auto step = [&](int n, long r) {
    if (r >= 0) return false;
    out->failed_step = n;
    out->err = sys::error_of(r);
    return true;
  };
  if (step(2, sys::call(SYS_mount, 0, reinterpret_cast<long>("/"), 0, MS_REC | MS_PRIVATE, 0))) return 1;
  if (step(3, sys::call(SYS_mount, reinterpret_cast<long>("tmpfs"), reinterpret_cast<long>("/tmp"),
                        reinterpret_cast<long>("tmpfs"), MS_NOSUID | MS_NODEV, reinterpret_cast<long>("size=64k"))))
    return 1;
  if (step(4, sys::call(SYS_chdir, reinterpret_cast<long>("/tmp")))) return 1;
  if (step(4, sys::call(SYS_pivot_root, reinterpret_cast<long>("."), reinterpret_cast<long>(".")))) return 1;
  return 0;
}

// A vfork-style child: no copy of our page tables (a fork cost ~0.25 ms of
// a one-run `corral run --tier container`), and we sleep the few
// microseconds it runs.
ContainerProbe probe_container() {
  ContainerProbe out;
  static const char* const kSteps[] = {"", "clone3(CLONE_NEWUSER|CLONE_NEWNS)", "make / private",
                                       "mount tmpfs on /tmp", "pivot_root into it"};
  auto stack = ChildStack::allocate(64 * 1024);
  if (!stack) {
    out.failed = "probe: " + stack.error().message();
    return out;
  }
  ProbeSteps steps;
  CloneSpec spec;
  spec.flags = CLONE_NEWUSER | CLONE_NEWNS;
  spec.share_memory = true;
  spec.stack = &*stack;
  auto child = clone_child(spec, probe_container_in_child, &steps);
  if (!child) {
    // EPERM/EINVAL/ENOSPC here is the host refusing user namespaces.
    out.failed = std::string(kSteps[1]) + ": " + strerror(child.error().code());
    return out;
  }
  auto end = wait_exit(*child, true);
  out.how = "a throwaway user + mount namespace, a tmpfs and pivot_root";
  if (steps.failed_step >= 2 && steps.failed_step <= 4) {
    out.user_namespaces = true;
    out.failed = std::string(kSteps[steps.failed_step]) + ": " + strerror(steps.err);
  } else if (end && *end && (*end)->exited && (*end)->exit_code == 0) {
    out.user_namespaces = out.pivot_root = true;
  } else {
    out.failed = "probe: the child ended without a report";
  }
  return out;
}

int return_zero_in_child(void*) noexcept { return 0; }

// The light probe (see probe_host): a template `dir` shows mount
// namespaces and pivot_root; a CLONE_VM child made with CLONE_NEWUSER
// shows user namespaces, and costs no copy of the host's mount table.
ContainerProbe probe_user_namespace(const std::string& dir) {
  ContainerProbe out;
  out.how = "a user namespace; mount namespaces and pivot_root shown by the namespace template " + dir;
  auto stack = ChildStack::allocate(16 * 1024);
  if (!stack) {
    out.failed = "probe: " + stack.error().message();
    return out;
  }
  CloneSpec spec;
  spec.flags = CLONE_NEWUSER;
  spec.share_memory = true;
  spec.stack = &*stack;
  auto child = clone_child(spec, return_zero_in_child, nullptr);
  if (!child) {
    out.failed = std::string("clone3(CLONE_NEWUSER): ") + strerror(child.error().code());
    return out;
  }
  auto end = wait_exit(*child, true);
  if (end && *end && (*end)->exited && (*end)->exit_code == 0)
    out.user_namespaces = out.pivot_root = true;
  else
    out.failed = "probe: the child ended without a report";
  return out;
}

ContainerProbe probe_container_for(const HostFacts& h, std::string_view root) {
  if (!h.root) return probe_container();
  std::string dir = live_ns_template(root);
  if (dir.empty()) return probe_container();
  // A live user namespace template was made on this boot too, by a root
  // helper's unshare(CLONE_NEWUSER): nothing is left to try.
  if (std::string user = live_userns_template(root); !user.empty()) {
    ContainerProbe shown;
    shown.user_namespaces = shown.pivot_root = true;
    shown.how = "shown by the namespace templates " + dir + " (mount namespaces, pivot_root) and " + user +
                " (user namespaces)";
    return shown;
  }
  return probe_user_namespace(dir);
}

bool probe_io_uring() {
  // io_uring_setup with bad arguments: EFAULT means the call exists.
  long r = sys::call(SYS_io_uring_setup, 1, 0);
  return r == -EFAULT || r >= 0;
}

// The cgroup module decides: a backend exists only where we may create
// groups (root, or a delegated subtree), and has() says which controllers.
// Only the container tier (and a session's exec) makes a cgroup per run: a
// process tier run does not pay for reading the mount table.
void probe_cgroup_facts(HostFacts& h) {
  CgroupProbeSources sources;
  sources.kernel_release = h.kernel;
  h.cgroups = probe_cgroups(sources);
  h.cgroup_memory = h.cgroups.backend != CgroupVersion::none && h.cgroups.has("memory");
  h.cgroup_pids = h.cgroups.backend != CgroupVersion::none && h.cgroups.has("pids");
  h.cgroup_summary = h.cgroups.describe();
}

}  // namespace

void probe_container_facts(HostFacts& h, std::string_view template_root) {
  if (h.containers_probed) return;
  // The host does not change under us: asked once per process (for the
  // usual template root; another root is asked afresh).
  ContainerProbe probed;
  if (template_root == kTemplateRoot) {
    static const ContainerProbe once = probe_container_for(h, template_root);
    probed = once;
  } else {
    probed = probe_container_for(h, template_root);
  }
  h.user_namespaces = probed.user_namespaces;
  h.pivot_root = probed.pivot_root;
  h.container_probe = probed.failed;
  h.container_probe_how = probed.how;
  probe_cgroup_facts(h);
  h.containers_probed = true;
}

void note_live_session(HostFacts& h) {
  if (h.containers_probed) return;
  h.user_namespaces = h.pivot_root = true;
  h.container_probe.clear();
  h.container_probe_how = "shown by a live session (its sandbox was made on this host)";
  probe_cgroup_facts(h);  // an exec makes a cgroup of its own below the session's
  h.containers_probed = true;
}

void set_workspace_facts(HostFacts& h, const std::string& given) {
  auto c = choose_workspace_base(given, /*prepare=*/false);
  h.workspace_base = c.path;
  h.workspace_source = c.source;
  h.workspace_tmpfs = c.tmpfs;
  h.workspace_note = c.note;
}

HostFacts probe_host(bool with_containers, bool with_workspace) {
  HostFacts h;
  // One capget for the three (is_root_capable() asks for two).
  const std::uint64_t caps = effective_capabilities();
  auto holds = [&](int cap) { return ((caps >> cap) & 1) != 0; };
  h.root = geteuid() == 0 && holds(7 /* CAP_SETUID */) && holds(6 /* CAP_SETGID */);
  h.cap_sys_resource = holds(24 /* CAP_SYS_RESOURCE */);
  {
    // execve(2), "Capabilities during execve": no file capabilities, so
    // uid 0 gets its bounding set and any other uid its ambient set.
    const bool uid0 = getuid() == 0 || geteuid() == 0;
    auto program_has = [&](int cap) {
      return uid0 ? prctl(PR_CAPBSET_READ, cap, 0, 0, 0) == 1
                  : prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, cap, 0, 0) == 1;
    };
    h.program_raises_rlimits = program_has(24 /* CAP_SYS_RESOURCE */);
    h.program_nproc_exempt = getuid() == 0 || h.program_raises_rlimits || program_has(21 /* CAP_SYS_ADMIN */);
  }
  h.cap_sys_admin = holds(21 /* CAP_SYS_ADMIN */);
  h.landlock_abi = landlock_abi();
  h.seccomp = prctl(PR_GET_SECCOMP, 0, 0, 0, 0) >= 0;
  h.io_uring = probe_io_uring();
  long pidfd = sys::call(SYS_pidfd_open, getpid(), 0);
  h.pidfd = pidfd >= 0;
  if (pidfd >= 0) close(static_cast<int>(pidfd));
  struct utsname u;
  if (uname(&u) == 0) h.kernel = u.release;
  if (with_containers) probe_container_facts(h);
  if (with_workspace) set_workspace_facts(h, "");
  return h;
}

}  // namespace corral
