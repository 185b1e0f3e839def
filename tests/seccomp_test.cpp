#include "corral/seccomp.hpp"

#include <linux/io_uring.h>
#include <linux/keyctl.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>

#include <cstring>
#include <set>

// support.hpp (sys/wait.h) first: syscalls.hpp #defines P_PIDFD, which
// glibc 2.36 declares as an idtype_t enumerator.
#include "support.hpp"
#include "corral/syscalls.hpp"

using namespace corral;
using corral_test::run_in_child;

namespace {

constexpr int kApplyFailed = 250;
constexpr int kNoChild = 251;

SeccompProgram must_prepare(std::initializer_list<const char*> profiles) {
  SeccompSpec spec;
  for (const char* p : profiles) spec.profile(p);
  auto prog = prepare(spec);
  cr_assert(prog.ok(), "prepare: %s", prog.error().message().c_str());
  return std::move(prog).value();
}

// In a forked child: install the filter (when given), run op, exit with 0
// when op returned >= 0 or with the errno it failed with.
int errno_under(const SeccompProgram* prog, const std::function<long()>& op) {
  auto end = run_in_child([&] {
    if (prog && apply_seccomp_in_child(*prog) != 0) return kApplyFailed;
    return op() < 0 ? errno : 0;
  });
  return end.exited ? end.code : kNoChild;
}

struct Probe {
  const char* what;
  std::function<long()> op;
  int want;  // errno under the filter; 0 = succeeds
};

// Each probe in its own child, so one denial cannot hide the next.
void expect_probes(const SeccompProgram& prog, const std::vector<Probe>& probes) {
  for (const auto& p : probes) {
    int got = errno_under(&prog, p.op);
    cr_expect_eq(got, p.want, "%s: got %d (%s), want %d (%s)", p.what, got, strerror(got), p.want,
                 strerror(p.want));
  }
}

// clone(2) without a new stack behaves like fork: the child side exits at once.
long raw_clone(unsigned long flags) {
  long r = syscall(SYS_clone, flags, 0, 0, 0, 0);
  if (r == 0) _exit(0);
  if (r > 0) waitpid(static_cast<pid_t>(r), nullptr, 0);
  return r;
}

long raw_clone3() {
  clone_args args{};
  args.exit_signal = SIGCHLD;
  long r = syscall(SYS_clone3, &args, sizeof args);
  if (r == 0) _exit(0);
  if (r > 0) waitpid(static_cast<pid_t>(r), nullptr, 0);
  return r;
}

long io_uring_setup_probe() {
  io_uring_params params{};
  long fd = syscall(SYS_io_uring_setup, 4, &params);
  if (fd >= 0) close(static_cast<int>(fd));
  return fd;
}

long socket_probe(int domain, int type) {
  int s = socket(domain, type | SOCK_CLOEXEC, 0);
  if (s >= 0) close(s);
  return s;
}

void expect_mentions(const std::string& text, std::initializer_list<const char*> words) {
  for (const char* w : words)
    cr_assert(text.find(w) != std::string::npos, "'%s' not in: %s", w, text.c_str());
}

// The high half of a 32-bit argument, which the kernel ignores and a naive
// filter compares.
constexpr unsigned long kHigh = 1UL << 32;

}  // namespace

Test(seccomp, every_profile_compiles_to_bpf) {
  auto names = seccomp_profiles();
  cr_assert_geq(names.size(), 2u);
  for (const auto& name : names) {
    auto prog = must_prepare({name.c_str()});
    cr_assert_gt(prog.instruction_count(), 1u, "%s: empty BPF", name.c_str());
    cr_assert_eq(prog.fprog()->len, prog.instruction_count());
    cr_assert_not_null(prog.fprog()->filter);
    cr_assert_gt(prog.denied_syscall_count(), 0u);
  }
}

Test(seccomp, default_denies_host_wide_calls) {
  auto prog = must_prepare({"default"});
  expect_probes(prog, {
      {"unshare(CLONE_NEWUSER)", [] { return long(unshare(CLONE_NEWUSER)); }, EPERM},
      {"mount", [] { return long(mount("none", "/nonexistent-corral", "tmpfs", 0, nullptr)); }, EPERM},
      {"ptrace(PTRACE_TRACEME)", [] { return ptrace(PTRACE_TRACEME, 0, nullptr, nullptr); }, EPERM},
      {"io_uring_setup", io_uring_setup_probe, EPERM},
      {"keyctl", [] { return syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0); }, EPERM},
      {"bpf", [] { return syscall(SYS_bpf, -1, nullptr, 0); }, EPERM},
      {"personality(PER_BSD)", [] { return syscall(SYS_personality, PER_BSD); }, EPERM},
      {"personality(7)", [] { return syscall(SYS_personality, 7); }, EPERM},
      {"personality(9)", [] { return syscall(SYS_personality, 9); }, EPERM},
      {"personality(0xfffffffe)", [] { return syscall(SYS_personality, 0xfffffffeUL); }, EPERM},
      {"personality(PER_BSD | high bits)", [] { return syscall(SYS_personality, kHigh | PER_BSD); }, EPERM},
      {"setns", [] { return long(setns(-1, 0)); }, EPERM},
      {"perf_event_open", [] { return syscall(SYS_perf_event_open, nullptr, 0, -1, -1, 0); }, EPERM},
      {"ioctl(TIOCSTI)", [] { char c = 'x'; return syscall(SYS_ioctl, -1, TIOCSTI, &c); }, EPERM},
      {"ioctl(TIOCSTI | high bits)", [] { char c = 'x'; return syscall(SYS_ioctl, -1, kHigh | TIOCSTI, &c); }, EPERM},
      {"clock_settime", [] { timespec t{}; return long(clock_settime(CLOCK_REALTIME, &t)); }, EPERM},
  });
}

Test(seccomp, denied_probes_behave_differently_without_the_filter) {
  // The control for the test above: unfiltered, these calls do not answer EPERM.
  auto ptrace_me = [] { return ptrace(PTRACE_TRACEME, 0, nullptr, nullptr); };
  cr_assert_eq(errno_under(nullptr, ptrace_me), 0);
  cr_assert_eq(errno_under(nullptr, [] { return syscall(SYS_ioctl, -1, TIOCSTI, nullptr); }), EBADF);
  cr_assert_eq(errno_under(nullptr, [] { return syscall(SYS_personality, 0xffffffffUL); }), 0);
}

Test(seccomp, default_keeps_plain_programs_working) {
  auto prog = must_prepare({"default"});
  expect_probes(prog, {
      {"getpid", [] { return long(getpid()); }, 0},
      {"write", [] { return long(write(STDERR_FILENO, "", 0)); }, 0},
      {"personality(0xffffffff)", [] { return syscall(SYS_personality, 0xffffffffUL); }, 0},
      {"personality(PER_LINUX)", [] { return syscall(SYS_personality, PER_LINUX); }, 0},
      {"personality(PER_LINUX32)", [] { return syscall(SYS_personality, PER_LINUX32); }, 0},
      {"ioctl(FIONREAD)", [] { int n; return syscall(SYS_ioctl, STDIN_FILENO, FIONREAD, &n) < 0 && errno != ENOTTY && errno != EINVAL ? -1L : 0L; }, 0},
      {"fork", [] { return raw_clone(SIGCHLD); }, 0},
      {"pthread_create (clone3 -> clone fallback)", [] {
         pthread_t t;
         int err = pthread_create(&t, nullptr, [](void*) -> void* { return nullptr; }, nullptr);
         if (err) return (errno = err), -1L;
         return long(pthread_join(t, nullptr));
       }, 0},
  });
  auto end = run_in_child([&] {
    if (apply_seccomp_in_child(prog) != 0) return kApplyFailed;
    execl("/bin/sh", "sh", "-c", "/bin/true && exit 3", (char*)nullptr);
    return 127;
  });
  cr_assert(end.exited && end.code == 3, "/bin/sh under default: exit %d signal %d", end.code,
            end.signal);
}

Test(seccomp, status_shows_filter_mode_after_apply) {
  auto prog = must_prepare({"default"});
  auto mode_in_child = [&](bool apply) {
    return run_in_child([&] {
      if (apply && apply_seccomp_in_child(prog) != 0) return kApplyFailed;
      auto mode = corral_test::proc_status_field("self", "Seccomp");
      auto nnp = corral_test::proc_status_field("self", "NoNewPrivs");
      return mode == "2" && nnp == "1" ? 2 : mode == "0" ? 0 : 99;
    });
  };
  cr_assert_eq(mode_in_child(false).code, 0, "the test process already runs under seccomp");
  cr_assert_eq(mode_in_child(true).code, 2, "Seccomp: 2 / NoNewPrivs: 1 not seen after apply");
}

Test(seccomp, no_network_allows_only_unix_sockets) {
  auto prog = must_prepare({"no-network"});
  expect_probes(prog, {
      {"socket(AF_INET, SOCK_STREAM)", [] { return socket_probe(AF_INET, SOCK_STREAM); }, EACCES},
      {"socket(AF_INET6, SOCK_DGRAM)", [] { return socket_probe(AF_INET6, SOCK_DGRAM); }, EACCES},
      {"socket(AF_NETLINK)", [] { return socket_probe(AF_NETLINK, SOCK_RAW); }, EACCES},
      {"socket(AF_UNIX | high bits)", [] { return syscall(SYS_socket, kHigh | AF_UNIX, SOCK_STREAM, 0); }, EACCES},
      {"io_uring_setup (IORING_OP_SOCKET)", io_uring_setup_probe, EPERM},
      {"socket(AF_UNIX)", [] { return socket_probe(AF_UNIX, SOCK_STREAM); }, 0},
      {"socketpair(AF_UNIX)", [] {
         int sv[2];
         long r = socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv);
         if (r == 0) close(sv[0]), close(sv[1]);
         return r;
       }, 0},
  });
  // Without the filter the same call works: the denial is the filter's.
  cr_assert_eq(errno_under(nullptr, [] { return socket_probe(AF_INET, SOCK_STREAM); }), 0);
}

// Each network profile is an allow-list of families: what it allows
// works, and everything else is refused with the filter's EACCES whether
// this kernel has the family or not (unfiltered: vsock and packet open,
// AF_ALG or bluetooth may be EAFNOSUPPORT, family 200 is). socketpair(2):
// AF_UNIX only (unfiltered, AF_INET's is EOPNOTSUPP).
Test(seccomp, network_profiles_allow_their_families_and_nothing_else) {
  struct Case {
    const char* profile;
    bool inet, tcp_only, netlink;
  };
  for (const Case& c : {Case{"no-network", false, false, false}, Case{"tcp-only", false, true, false},
                        Case{"inet-only", true, false, false}, Case{"host-network", true, false, true}}) {
    auto prog = must_prepare({"default", c.profile});
    cr_assert(prog.prebuilt(), "default,%s is a tier's combination: it must be prebuilt", c.profile);
    auto allowed = [](bool yes) { return yes ? 0 : EACCES; };
    std::vector<Probe> probes = {
        {"socket(AF_UNIX)", [] { return socket_probe(AF_UNIX, SOCK_STREAM); }, 0},
        {"socket(AF_INET, SOCK_STREAM)", [] { return socket_probe(AF_INET, SOCK_STREAM); }, allowed(c.inet || c.tcp_only)},
        {"socket(AF_INET6, SOCK_DGRAM)", [] { return socket_probe(AF_INET6, SOCK_DGRAM); }, allowed(c.inet)},
        {"socket(AF_NETLINK)", [] { return socket_probe(AF_NETLINK, SOCK_RAW); }, allowed(c.netlink)},
        {"socket(AF_VSOCK)", [] { return socket_probe(AF_VSOCK, SOCK_STREAM); }, EACCES},
        {"socket(AF_VSOCK | high bits)", [] { return syscall(SYS_socket, kHigh | AF_VSOCK, SOCK_STREAM, 0); }, EACCES},
        {"socket(AF_PACKET)", [] { return socket_probe(AF_PACKET, SOCK_RAW); }, EACCES},
        {"socket(AF_ALG)", [] { return socket_probe(AF_ALG, SOCK_SEQPACKET); }, EACCES},
        {"socket(AF_BLUETOOTH)", [] { return socket_probe(AF_BLUETOOTH, SOCK_STREAM); }, EACCES},
        {"socket(AF_KEY)", [] { return socket_probe(AF_KEY, SOCK_RAW); }, EACCES},
        {"socket(AF_XDP)", [] { return socket_probe(AF_XDP, SOCK_RAW); }, EACCES},
        {"socket(200)", [] { return socket_probe(200, SOCK_STREAM); }, EACCES},
        {"socketpair(AF_UNIX)", [] {
           int sv[2];
           long r = socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv);
           if (r == 0) close(sv[0]), close(sv[1]);
           return r;
         }, 0},
        {"socketpair(AF_INET)", [] {
           int sv[2];
           return long(socketpair(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
         }, EACCES},
        {"socketpair(AF_TIPC)", [] {
           int sv[2];
           return long(socketpair(AF_TIPC, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv));
         }, EACCES},
    };
    cr_log_info("profile %s", c.profile);
    expect_probes(prog, probes);
  }
  // Unfiltered, vsock opens here or the kernel lacks it: never EACCES.
  int vsock = errno_under(nullptr, [] { return socket_probe(AF_VSOCK, SOCK_STREAM); });
  cr_assert_neq(vsock, EACCES, "EACCES from the kernel itself: the probes above would prove nothing");
}

Test(seccomp, namespace_clones_are_refused) {
  auto prog = must_prepare({"default"});
  expect_probes(prog, {
      {"clone(CLONE_NEWNS)", [] { return raw_clone(CLONE_NEWNS | SIGCHLD); }, EPERM},
      {"clone(CLONE_NEWUSER)", [] { return raw_clone(CLONE_NEWUSER | SIGCHLD); }, EPERM},
      {"clone(CLONE_NEWNET | CLONE_NEWPID)", [] { return raw_clone(CLONE_NEWNET | CLONE_NEWPID | SIGCHLD); }, EPERM},
      {"clone3", raw_clone3, ENOSYS},
      {"clone(SIGCHLD)", [] { return raw_clone(SIGCHLD); }, 0},
  });
  cr_assert_eq(errno_under(nullptr, raw_clone3), 0, "clone3 fails even without the filter");
}

Test(seccomp, profiles_compose_into_one_filter) {
  auto prog = must_prepare({"default", "no-network", "default"});
  cr_assert_eq(prog.profiles().size(), 2u, "a repeated profile was counted twice");
  expect_probes(prog, {
      {"ptrace", [] { return ptrace(PTRACE_TRACEME, 0, nullptr, nullptr); }, EPERM},
      {"socket(AF_INET)", [] { return socket_probe(AF_INET, SOCK_STREAM); }, EACCES},
      {"socket(AF_UNIX)", [] { return socket_probe(AF_UNIX, SOCK_DGRAM); }, 0},
  });
  expect_mentions(prog.describe(), {"default, no-network", "BPF instructions"});
}

// prepare() answers the tiers' combinations from the filters compiled at
// build time; they must be exactly what the build's compiler makes now
// (corral's emitter, or libseccomp where it has none), or a stale table
// would install a filter nobody reviewed. seccomp_bpf_test.cpp holds the
// emitter's decisions to libseccomp's.
Test(seccomp, prebuilt_filters_are_what_the_build_compiles_now) {
  struct Combo {
    std::vector<std::string> profiles;
    bool notify;
  };
  const std::vector<Combo> combos = {
      {{"default"}, false},           {{"no-network"}, false},          {{"tcp-only"}, false},
      {{"inet-only"}, false},         {{"host-network"}, false},        {{"default", "no-network"}, false},
      {{"default", "tcp-only"}, false}, {{"default", "inet-only"}, false}, {{"default", "host-network"}, false},
      {{"default", "no-network"}, true}, {{"default", "tcp-only"}, true}};
  for (const auto& combo : combos) {
    SeccompSpec spec;
    std::string key;
    for (const auto& p : combo.profiles) spec.profile(p), key += key.empty() ? p : "," + p;
    spec.notify_socket_refusals(combo.notify);
    if (combo.notify) key += " (notifying)";
    auto built = prepare(spec);
    auto fresh = compile_seccomp_bpf(spec);
    if (!fresh && fresh.error().code() == ENOTSUP) fresh = compile_with_libseccomp(spec);
    cr_assert(built.ok() && fresh.ok(), "%s: did not prepare", key.c_str());
    // Same build host, same libseccomp: the table must be in use here.
    cr_assert(built->prebuilt(), "%s: prepare() compiled instead of using the build's filter", key.c_str());
    cr_assert(!fresh->prebuilt());
    cr_assert_eq(built->notifies(), combo.notify, "%s: notifies() is %d", key.c_str(), built->notifies());
    cr_assert_eq(fresh->notifies(), combo.notify);
    cr_assert_eq(built->instruction_count(), fresh->instruction_count(), "%s: length differs", key.c_str());
    cr_assert_eq(std::memcmp(built->fprog()->filter, fresh->fprog()->filter,
                             fresh->instruction_count() * sizeof(sock_filter)),
                 0, "%s: BPF differs from a fresh compile's", key.c_str());
    cr_assert_eq(built->denied_syscall_count(), fresh->denied_syscall_count());
    cr_assert(built->skipped_syscalls() == fresh->skipped_syscalls(), "%s: skipped list differs", key.c_str());
    cr_assert(built->describe() == fresh->describe(), "%s: %s vs %s", key.c_str(), built->describe().c_str(),
              fresh->describe().c_str());
  }
}

namespace {

// A forked child installs the notifying no-network filter and hands its
// listener to us through its pidfd; then, when told, calls socket(AF_INET)
// `calls` times and exits with how many failed with `want`. We answer
// (answer = true) or close our copy of the listener first.
struct NoticeRun {
  int matched = -1;     // the child's count of calls that failed with `want`
  int answered = 0;     // notifications we answered
  std::string seen;     // syscall names answered
};

NoticeRun notice_round_trip(int calls, bool answer, int want) {
  SeccompSpec spec;
  spec.profile("default").profile("no-network").notify_socket_refusals(true);
  auto prog = prepare(spec);
  cr_assert(prog.ok() && prog->notifies(), "no notifying filter: %s", prog.ok() ? "" : prog.error().message().c_str());
  int to_parent[2], to_child[2];
  cr_assert(pipe(to_parent) == 0 && pipe(to_child) == 0);
  pid_t pid = fork();
  if (pid == 0) {
    int listener = -1;
    if (apply_seccomp_in_child(*prog, &listener) != 0) _exit(kApplyFailed);
    (void)!write(to_parent[1], &listener, sizeof listener);
    char go;
    if (read(to_child[0], &go, 1) != 1) _exit(kNoChild);
    close(listener);  // the parent's copy is the one that answers (or is gone)
    int matched = 0;
    for (int i = 0; i < calls; ++i) {
      int fd = socket(AF_INET, SOCK_STREAM, 0);
      if (fd < 0 && errno == want) ++matched;
      if (fd >= 0) close(fd);
    }
    _exit(matched);
  }
  int child_fd = -1;
  cr_assert_eq(read(to_parent[0], &child_fd, sizeof child_fd), static_cast<ssize_t>(sizeof child_fd));
  int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  int listener = static_cast<int>(syscall(SYS_pidfd_getfd, pidfd, child_fd, 0));
  cr_assert(listener >= 0, "pidfd_getfd: %s", strerror(errno));
  if (!answer) close(listener);
  (void)!write(to_child[1], "g", 1);
  NoticeRun out;
  while (answer) {
    pollfd p{listener, POLLIN, 0};
    cr_assert_eq(poll(&p, 1, 10000), 1, "no notification within 10 s");
    if (!(p.revents & POLLIN)) break;  // POLLHUP: the child is gone
    auto nr = refuse_seccomp_notification(listener, EACCES);
    cr_assert(nr.ok(), "%s", nr.ok() ? "" : nr.error().message().c_str());
    ++out.answered;
    out.seen = std::string(seccomp_notified_syscall_name(*nr));
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (answer) close(listener);
  close(pidfd);
  for (int fd : {to_parent[0], to_parent[1], to_child[0], to_child[1]}) close(fd);
  out.matched = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

}  // namespace

// The notifying filter refuses as the plain one does, through whoever holds
// the listener: each socket(AF_INET) waits for the answer and gets its EACCES.
Test(seccomp, a_notifying_filter_refuses_through_its_listener) {
  NoticeRun r = notice_round_trip(3, true, EACCES);
  cr_expect_eq(r.matched, 3, "EACCES %d times of 3", r.matched);
  cr_expect_eq(r.answered, 3);
  cr_expect_eq(r.seen, "socket");
  // Applied without a place to put the listener: refused (EINVAL), never a
  // filter whose refusals nobody could answer.
  SeccompSpec spec;
  spec.profile("default").profile("no-network").notify_socket_refusals(true);
  auto prog = prepare(spec);
  cr_assert(prog.ok());
  cr_expect_eq(errno_under(&*prog, [] { return socket_probe(AF_UNIX, SOCK_STREAM); }), kApplyFailed,
               "a notifying filter applied without a listener must be refused, not leave calls unanswered");
}

// With nobody holding the listener (the supervisor gone) the kernel fails a
// notifying call at once with ENOSYS: a run never waits on an answer that
// cannot come.
Test(seccomp, a_notifying_filter_without_a_listener_fails_fast) {
  NoticeRun r = notice_round_trip(3, false, ENOSYS);
  cr_expect_eq(r.matched, 3, "ENOSYS %d times of 3", r.matched);
}

Test(seccomp, a_combination_outside_the_table_is_compiled) {
  auto prog = must_prepare({"no-network", "default"});
  cr_assert(!prog.prebuilt(), "no-network,default is not a built combination");
  expect_probes(prog, {
      {"ptrace", [] { return ptrace(PTRACE_TRACEME, 0, nullptr, nullptr); }, EPERM},
      {"socket(AF_INET)", [] { return socket_probe(AF_INET, SOCK_STREAM); }, EACCES},
  });
}

Test(seccomp, unknown_profile_is_named_with_the_known_ones) {
  auto prog = prepare(SeccompSpec().profile("default").profile("nonet"));
  cr_assert(!prog.ok());
  expect_mentions(prog.error().message(), {"unknown profile 'nonet'", "default", "no-network"});
  auto none = prepare(SeccompSpec());
  cr_assert(!none.ok());
  expect_mentions(none.error().message(), {"no profile"});
  auto described = describe_seccomp_profile("strict");
  cr_assert(!described.ok());
  expect_mentions(described.error().message(), {"'strict'", "no-network"});
}

Test(seccomp, describe_lists_what_a_profile_denies) {
  auto def = describe_seccomp_profile("default");
  cr_assert(def.ok());
  expect_mentions(*def, {"EPERM:", "kexec_load", "ptrace", "bpf", "io_uring_setup",
                         "clone (flags include CLONE_NEW*)", "ENOSYS: clone3"});
  auto nonet = describe_seccomp_profile("no-network");
  cr_assert(nonet.ok());
  expect_mentions(*nonet, {"EACCES: socket (domain other than AF_UNIX)", "socketpair (domain other than AF_UNIX)"});
  auto inet = describe_seccomp_profile("inet-only");
  cr_assert(inet.ok());
  expect_mentions(*inet, {"socket (domain other than AF_UNIX, AF_INET, AF_INET6)"});
}

Test(seccomp, skipped_syscalls_are_exactly_the_ones_this_arch_lacks) {
  auto prog = must_prepare({"default"});
  auto denials = seccomp_profile_denials("default");
  cr_assert(denials.ok());
  std::set<std::string> names;
  for (const auto& d : *denials) names.insert(d.syscall);
  std::set<std::string> skipped(prog.skipped_syscalls().begin(), prog.skipped_syscalls().end());
  for (const auto& name : names) {
    bool absent = seccomp_syscall_resolve_name(name.c_str()) < 0;
    cr_assert_eq(absent, skipped.count(name) == 1, "%s: absent=%d but skipped=%zu", name.c_str(),
                 absent, skipped.count(name));
  }
  cr_assert_eq(prog.denied_syscall_count() + skipped.size(), names.size());
}

Test(seccomp, other_syscall_abis_kill_the_process) {
#if defined(__x86_64__)
  auto prog = must_prepare({"default"});
  // int 0x80: the i386 ABI (getpid is 20 there); seccomp sees AUDIT_ARCH_I386.
  // Its kernel entry returns with r8-r11 zeroed, hence their clobbers (an -O1
  // sanitizer build kept a pointer in one and crashed).
  auto i386_getpid = [] {
    long ret;
    __asm__ volatile("int $0x80" : "=a"(ret) : "a"(20L) : "memory", "r8", "r9", "r10", "r11");
    return ret;
  };
  // SIGSEGV at its default in the child: a sanitizer's handler would turn
  // "no IA-32 emulation" into an exit code and the test would not skip.
  auto plain = run_in_child([&] {
    signal(SIGSEGV, SIG_DFL);
    return i386_getpid() > 0 ? 0 : 1;
  });
  if (!plain.exited) cr_skip_test("no IA-32 emulation here (int 0x80 gives signal %d)", plain.signal);
  // Made from a second thread: KILL_PROCESS takes the whole child down, a
  // mere KILL_THREAD would let the main thread exit 0.
  auto filtered = run_in_child([&] {
    if (apply_seccomp_in_child(prog) != 0) return kApplyFailed;
    pthread_t t;
    if (pthread_create(&t, nullptr, [](void*) -> void* {
          long ret;
          __asm__ volatile("int $0x80" : "=a"(ret) : "a"(20L) : "memory", "r8", "r9", "r10", "r11");
          return reinterpret_cast<void*>(ret);
        }, nullptr) != 0)
      return 2;
    pthread_join(t, nullptr);
    return 0;
  });
  cr_assert(!filtered.exited && filtered.signal == SIGSYS,
            "i386 syscall from a thread under the filter: exit %d signal %d", filtered.code,
            filtered.signal);
  // x32 numbers arrive as AUDIT_ARCH_X86_64 with bit 30 set.
  auto x32 = run_in_child([&] {
    if (apply_seccomp_in_child(prog) != 0) return kApplyFailed;
    return syscall(0x40000000L | SYS_getpid) >= 0 ? 0 : 1;
  });
  cr_assert(!x32.exited && x32.signal == SIGSYS, "x32 syscall under the filter: exit %d signal %d",
            x32.code, x32.signal);
#else
  cr_skip_test("only x86_64 has a second syscall ABI to probe");
#endif
}

Test(seccomp, program_survives_a_move_and_empty_one_is_refused) {
  auto first = must_prepare({"no-network"});
  std::size_t n = first.instruction_count();
  SeccompProgram moved(std::move(first));
  SeccompProgram assigned;
  assigned = std::move(moved);
  cr_assert_eq(assigned.fprog()->len, n);
  cr_assert_eq(moved.fprog()->len, 0u);
  cr_assert_eq(errno_under(&assigned, [] { return socket_probe(AF_INET, SOCK_STREAM); }), EACCES);
  SeccompProgram empty;
  cr_assert_eq(apply_seccomp_in_child(empty), EINVAL);
}

namespace {

// In a fork: a filter of the test's own that fails seccomp(2) with EPERM
// for every operation except those `allow_op` lets through, then prepare()
// of `default` (notifying or not). Exit 0: prebuilt; 1: compiled; 2: failed.
int prepare_under_seccomp_gate(bool allow_action_avail, bool notify) {
  std::vector<sock_filter> f = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_seccomp, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[0])),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SECCOMP_GET_ACTION_AVAIL, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, allow_action_avail ? SECCOMP_RET_ALLOW : SECCOMP_RET_ERRNO | EPERM),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
  };
  sock_fprog prog{static_cast<unsigned short>(f.size()), f.data()};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0)
    return 3;
  SeccompSpec spec;
  spec.profile("default").profile("no-network");
  spec.notify_socket_refusals(notify);
  auto made = prepare(spec);
  if (!made) return 2;
  return made->prebuilt() ? 0 : 1;
}

}  // namespace

// prepare() decides whether the prebuilt filters apply from the kernel's
// answer for the actions they return (SECCOMP_GET_ACTION_AVAIL), not from
// libseccomp's API-level probe (nine seccomp calls per process, a share of
// every one-shot `corral run --tier process`). A process where every other
// seccomp operation fails still gets the prebuilt filter, plain and
// notifying; one where the kernel's answer is no compiles instead.
Test(seccomp, prebuilt_filters_need_only_the_kernels_action_answer) {
  // Each in a fork of its own: the answer is kept per process.
  auto plain = run_in_child([] {
    auto prog = prepare(SeccompSpec().profile("default"));
    return prog && prog->prebuilt() ? 0 : 1;
  });
  if (!plain.exited || plain.code != 0) cr_skip_test("this libcorral has no prebuilt filters for this host's libseccomp");
  for (bool notify : {false, true}) {
    auto only_avail = run_in_child([&] { return prepare_under_seccomp_gate(true, notify); });
    cr_assert(only_avail.exited, "child did not exit");
    cr_assert_eq(only_avail.code, 0,
                 "notify=%d: prepare() %s with only SECCOMP_GET_ACTION_AVAIL answered (3: gate not installed)",
                 notify, only_avail.code == 1 ? "compiled" : "failed");
    auto refused = run_in_child([&] { return prepare_under_seccomp_gate(false, notify); });
    cr_assert(refused.exited, "child did not exit");
    cr_assert_neq(refused.code, 0, "notify=%d: prebuilt filter used though the kernel did not say it takes its actions",
                  notify);
    cr_assert_neq(refused.code, 3, "gate not installed");
  }
}
