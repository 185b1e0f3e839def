// custom_sandbox.cpp: a sandbox assembled by hand from corral's C++ modules,
// the way someone building their own tool would, without the run layer.
//
// What it shows: the recipe. (1) Describe what to enforce, (2) prepare it in
// the parent, where allocation, libseccomp, libcap and good error messages
// are allowed, (3) clone a child that only applies the prepared pieces with
// raw system calls and execs, (4) wait on its pidfd with a deadline and kill
// its whole group when it passes. The child shares our memory
// (CLONE_VM|CLONE_VFORK, posix_spawn's trick), so it writes its failure
// straight into `Sandbox` and touches nothing else.
//
// Build and run against an installed corral (the C++ API is in libcorral.a):
//   c++ -std=c++20 -o custom_sandbox custom_sandbox.cpp $(pkg-config --cflags --libs corral-static)
//   ./custom_sandbox sh -c 'id; ulimit -n; echo hi > out; echo no > /tmp/escape'
// The program runs in a fresh workspace (removed afterwards) with CPU 5 s,
// address space 1 GiB, 64 fds, 16 MiB files, writes confined to the
// workspace, no network, the seccomp default profile, a 10 s deadline and, as
// root, a uid of its own (64 processes at most) and no capabilities.
// Exit: the program's status, 128+N for signal N, 125 when the sandbox could
// not be set up.
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <corral/capabilities.hpp>
#include <corral/landlock.hpp>
#include <corral/privilege.hpp>
#include <corral/process.hpp>
#include <corral/rlimits.hpp>
#include <corral/seccomp.hpp>
#include <corral/syscalls.hpp>
#include <corral/workspace.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

using namespace corral;

// Everything the child reads, prepared by the parent before clone.
struct Sandbox {
  RlimitSet rlimits;
  std::optional<CapabilityDrop> caps;      // root only: nothing to drop otherwise
  std::optional<PrivilegeDrop> privilege;  // root only: a uid of the run's own
  LandlockRuleset landlock;
  SeccompProgram seccomp;
  const char* cwd;
  const char* path;
  char** argv;
  char** envp;
  sigset_t signal_mask;                    // the mask to restore before exec
  const char* failed_step = nullptr;       // written by the child
  int failed_errno = 0;
};

// The child: async-signal-safe, raw system calls on prepared data only. The
// order matters: each step may need what a later one takes away.
int child_main(void* arg) noexcept {
  auto* s = static_cast<Sandbox*>(arg);
  auto fail = [s](const char* step, int err) noexcept { s->failed_step = step, s->failed_errno = err; return 125; };
  if (int e = sys::error_of(sys::call(SYS_rt_sigprocmask, SIG_SETMASK, (long)&s->signal_mask, 0, 8)))
    return fail("sigprocmask", e);
  if (int e = become_session_leader_in_child()) return fail("setsid", e);  // pgid = pid: group kill
  if (int e = apply_landlock_in_child(s->landlock)) return fail("landlock", e);  // needs no privilege
  // RLIMIT_NPROC is checked at execve against the new uid, so setting it here binds that uid.
  if (int e = apply_rlimits_in_child(s->rlimits)) return fail("rlimits", e);
  if (s->caps && s->privilege)  // the bounding set needs CAP_SETPCAP, which the uid change removes
    if (int e = drop_bounding_set_in_child(*s->caps)) return fail("bounding set", e);
  if (s->privilege)  // needs CAP_SETUID/CAP_SETGID; verifies root cannot be regained
    if (int e = apply_privilege_drop_in_child(*s->privilege)) return fail("privilege drop", e);
  if (s->caps)  // what is left: permitted, effective, inheritable, ambient; no_new_privs
    if (int e = clear_capabilities_in_child(*s->caps)) return fail("capabilities", e);
  if (int e = sys::error_of(sys::call(SYS_chdir, (long)s->cwd))) return fail("chdir", e);
  if (int e = apply_seccomp_in_child(s->seccomp)) return fail("seccomp", e);  // last: it may deny the above
  return fail("execve", sys::error_of(sys::call(SYS_execve, (long)s->path, (long)s->argv, (long)s->envp)));
}

// A tool built on corral stops at the first Error; its message names the step.
// It throws (never exit()) so the destructors run: the workspace is removed.
struct SetupFailed {};
[[noreturn]] void die(const Error& e) {
  std::fprintf(stderr, "custom_sandbox: %s\n", e.message().c_str());
  throw SetupFailed{};
}
template <class T>
T must(Expected<T> v) {
  if (!v) die(v.error());
  return std::move(v).value();
}
void must(const Status& st) {
  if (!st) die(st.error());
}

int main(int argc, char** argv) try {
  if (argc < 2) return std::fprintf(stderr, "usage: custom_sandbox PROGRAM [ARGS...]\n"), 2;
  std::string path = argv[1];  // execvp's search, done in the parent
  if (path.find('/') == std::string::npos)
    for (std::string dir : {"/usr/local/bin", "/usr/bin", "/bin"})
      if (access((dir + "/" + argv[1]).c_str(), X_OK) == 0) {
        path = dir + "/" + argv[1];
        break;
      }

  // 1-2. Describe and prepare, in the parent.
  Sandbox s{};
  std::optional<UidPool::Lease> lease;
  UidPool pool;  // 200000..265535, one uid per sandbox in flight
  if (is_root_capable()) {
    lease = must(pool.acquire());
    s.privilege = must(prepare_privilege_drop(lease->uid(), lease->gid()));
    s.caps = must(prepare_capability_drop());
  }
  std::optional<WorkspaceOwner> owner;
  if (lease) owner = WorkspaceOwner{lease->uid(), lease->gid()};
  Workspace ws = must(Workspace::create({"", owner}));  // removed when `ws` goes

  s.rlimits.set(RLIMIT_CPU, 5, 6).set(RLIMIT_AS, 1ull << 30).set(RLIMIT_NOFILE, 64).set(RLIMIT_FSIZE, 16 << 20);
  if (lease) s.rlimits.set(RLIMIT_NPROC, 64);  // counts per uid: bounds only a uid of our own
  must(s.rlimits.status());
  must(check_rlimits_allowed(s.rlimits));  // a hard limit the child could not set fails here, by name

  LandlockSpec fs;
  fs.allow_writes(ws.path()).allow_writes("/dev/null").restrict_tcp(true);  // no TCP bind/connect (ABI 4)
  if (landlock_abi() >= 6) fs.scope_signals(true).scope_abstract_unix(true);  // best effort, said below
  s.landlock = must(prepare(fs));
  s.seccomp = must(prepare(SeccompSpec().profile("default").profile("no-network")));

  std::vector<std::string> env = {"PATH=/usr/bin:/bin", "HOME=" + ws.home(), "TMPDIR=" + ws.tmp()};
  std::vector<char*> envp, args(argv + 1, argv + argc);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr), args.push_back(nullptr);
  s.cwd = ws.path().c_str(), s.path = path.c_str(), s.argv = args.data(), s.envp = envp.data();
  std::fprintf(stderr, "custom_sandbox: %s\ncustom_sandbox: %s\ncustom_sandbox: %s\n", ws.path().c_str(),
               s.landlock.describe().c_str(), s.seccomp.describe().c_str());
  if (!lease) std::fprintf(stderr, "custom_sandbox: not root: same uid, no capabilities to drop\n");

  // 3. Clone. Signals stay blocked while the child runs on our memory, so no
  // handler of ours can run on its stack; it restores the mask before exec.
  ChildStack stack = must(ChildStack::allocate());
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &s.signal_mask);
  auto child = clone_child(CloneSpec{0, true, &stack, -1}, child_main, &s);
  pthread_sigmask(SIG_SETMASK, &s.signal_mask, nullptr);
  Pidfd pidfd = must(std::move(child));
  if (s.failed_step) {  // the vfork-style clone returned after the child exited
    (void)wait_exit(pidfd);
    std::fprintf(stderr, "custom_sandbox: %s failed: %s\n", s.failed_step, strerror(s.failed_errno));
    return 125;
  }

  // 4. Supervise: the pidfd becomes readable when the child exits.
  pollfd p{pidfd.fd(), POLLIN, 0};
  if (poll(&p, 1, 10'000) == 0) {
    std::fprintf(stderr, "custom_sandbox: deadline passed: SIGKILL to the group\n");
    kill_group(pidfd, SIGKILL);
  }
  ExitStatus st = *must(wait_exit(pidfd));  // blocking: always a value
  std::fprintf(stderr, "custom_sandbox: %s %d (cpu %.2f s, max rss %llu KiB)\n", st.exited ? "exited" : "signal",
               st.exited ? st.exit_code : st.signal, st.cpu_seconds(), (unsigned long long)st.max_rss_bytes() / 1024);
  return st.exited ? st.exit_code : 128 + st.signal;
} catch (const SetupFailed&) {
  return 125;
}
