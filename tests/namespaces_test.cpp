// Namespaces on real children: ids, pid 1, network, hostname, rootless,
// leaks, and what prepare refuses. The mount tree's own tests are in
// mount_tree_test.cpp.
#include <sched.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/utsname.h>

#include "sandbox_harness.hpp"

using namespace corral;
using namespace harness;

namespace {

constexpr uid_t kRootfulOutside = 54321;

uid_t outside_uid(bool rootless) { return rootless ? own_uid() : kRootfulOutside; }
gid_t outside_gid(bool rootless) { return rootless ? own_gid() : kRootfulOutside; }

// A workspace the outside id can write into.
struct Workspace {
  corral_test::TempDir dir;
  explicit Workspace(bool rootless) {
    (void)chown(dir.path().c_str(), outside_uid(rootless), outside_gid(rootless));
  }
};

NamespaceSpec spec_for(bool rootless, const Workspace& ws) {
  NamespaceSpec spec;
  spec.map({1000, 1000, outside_uid(rootless), outside_gid(rootless)})
      .mounts(MountTreeSpec().workspace(ws.dir.path()));
  return spec;
}

// How many processes the reader's /proc lists; when that is not
// `expected`, each one's pid, name, state and uids too, so a failure says
// what was seen.
std::string count_pids(int expected) {
  std::string all = listing("/proc"), seen;
  int n = 0;
  for (std::size_t i = 0; i <= all.size();) {
    std::size_t c = std::min(all.find(',', i), all.size());
    std::string name = all.substr(i, c - i);
    if (!name.empty() && name.find_first_not_of("0123456789") == std::string::npos) {
      ++n;
      std::string status = corral_test::read_file("/proc/" + name + "/status"), line, about;
      std::istringstream in(status);
      while (std::getline(in, line))
        if (line.rfind("Name:", 0) == 0 || line.rfind("State:", 0) == 0 || line.rfind("Uid:", 0) == 0)
          about += " " + line;
      seen += (seen.empty() ? "" : "; ") + name + about;
    }
    i = c + 1;
  }
  return n == expected ? std::to_string(n) : std::to_string(n) + " (" + seen + ")";
}

// The interface names in /proc/net/dev (the netns of the reader), after
// its two header lines.
std::string interfaces() {
  std::istringstream in(corral_test::read_file("/proc/net/dev"));
  std::string line, names;
  for (int n = 0; std::getline(in, line); ++n) {
    if (n < 2) continue;
    std::string name = line.substr(0, line.find(':'));
    name.erase(0, name.find_first_not_of(' '));
    names += (names.empty() ? "" : ",") + name;
  }
  return names;
}

// Ids, pid view, network and hostname as the program sees them, plus a file
// written to the workspace whose host owner the caller checks.
Program identity_probe(in_port_t host_port) {
  return [host_port](int out) {
    struct utsname u;
    uname(&u);
    say(out, "uid", std::to_string(getuid()));
    say(out, "gid", std::to_string(getgid()));
    say(out, "groups", std::to_string(getgroups(0, nullptr)));
    say(out, "pid", std::to_string(getpid()));
    say(out, "ppid", std::to_string(getppid()));
    say(out, "pids", count_pids(1));
    say(out, "interfaces", interfaces());
    say(out, "host_listener", tcp_connect(host_port));
    in_port_t inner_port = 0;
    int inner = corral_test::tcp_listen(&inner_port);
    say(out, "lo_listener", inner < 0 ? "listen failed" : tcp_connect(inner_port));
    say(out, "hostname", u.nodename);
    say(out, "workspace_write", try_create("/workspace/owned"));
    return 0;
  };
}

// Everything the user/pid/net/uts namespaces promise, as root or rootless.
std::string check_identity(bool rootless) {
  Workspace ws(rootless);
  in_port_t port = 0;
  int listener = corral_test::tcp_listen(&port);
  if (listener < 0) return "host listener failed";
  auto s = run(spec_for(rootless, ws), identity_probe(port));
  close(listener);
  // Rootful children drop inherited groups; rootless ones cannot (setgroups
  // is denied to them) and keep their creator's, a documented limitation.
  std::string groups = rootless ? std::to_string(getgroups(0, nullptr)) : "0";
  std::string r = expect(s, {{"uid", "1000"},
                             {"gid", "1000"},
                             {"groups", groups},
                             {"pid", "2"},
                             {"ppid", "1"},
                             {"pids", "1"},  // the program: nothing of the host, and pid 1 is not its to see
                             {"interfaces", "lo"},
                             {"host_listener", "ECONNREFUSED"},
                             {"lo_listener", "ok"},
                             {"hostname", "corral"},
                             {"workspace_write", "ok"}});
  if (!r.empty()) return r;
  struct stat st;
  if (stat((ws.dir / "owned").c_str(), &st) != 0) return "the file written inside is not on the host";
  if (st.st_uid != outside_uid(rootless) || st.st_gid != outside_gid(rootless))
    return "host owner of the file written inside: " + std::to_string(st.st_uid) + ":" +
           std::to_string(st.st_gid) + ", expected " + std::to_string(outside_uid(rootless)) + ":" +
           std::to_string(outside_gid(rootless));
  return "";
}

std::string run_true(const NamespaceSpec& spec) {
  auto s = run(spec, [](int) {
    char* argv[] = {const_cast<char*>("true"), nullptr};
    char* envp[] = {nullptr};
    execve("/bin/true", argv, envp);
    return 126;
  });
  return ran_clean(s);
}

}  // namespace

Test(namespaces, rootful_ids_pids_net_and_hostname) {
  CORRAL_SKIP_UNLESS_ROOT();
  EXPECT_EMPTY(check_identity(false));
}

Test(namespaces, rootless_ids_pids_net_and_hostname) {
  CORRAL_SKIP_UNLESS_ROOTLESS_USERNS();
  EXPECT_EMPTY(as_user(true, [] { return check_identity(true); }));
}

// pid 1 must be out of the program's reach before any code of the program
// runs. Before, pid 1 hardened (harden_pid1: fds closed, then no
// capabilities, then not dumpable) beside the already running program.
// The program's own first steps hold the namespace's capabilities, so
// commoncap's check let them seize a pid 1 that still held the same; and a
// program that had exec'd, capabilities gone, could seize a pid 1 caught
// between its capset and its PR_SET_DUMPABLE, then write pid 1's report
// (the program's end as the supervisor reads it). The program here seizes
// pid 1 as its first act, on one CPU, many times (the old order let it in
// 2-3% of runs). Rootless is the case that needs the order: there the id
// switch changes no host id, so nothing else had turned pid 1 non-dumpable.
std::string pid1_seizable_by_program(bool rootless, int runs) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(sched_getcpu() < 0 ? 0 : sched_getcpu(), &one);
  if (sched_setaffinity(0, sizeof one, &one) != 0) return std::string("sched_setaffinity: ") + strerror(errno);
  Workspace ws(rootless);
  for (int i = 0; i < runs; ++i) {
    auto s = run(spec_for(rootless, ws), [](int out) {
      long r = ptrace(PTRACE_SEIZE, 1, nullptr, nullptr);
      int err = errno;
      say(out, "seize_pid1", r == 0 ? std::string("seized") : std::string(strerrorname_np(err)));
      return 0;
    });
    std::string e = expect(s, {{"seize_pid1", "EPERM"}});
    if (!e.empty()) return "run " + std::to_string(i + 1) + " of " + std::to_string(runs) + ": " + e;
  }
  return "";
}

Test(namespaces, rootless_pid1_is_out_of_the_programs_reach_from_its_first_instruction) {
  CORRAL_SKIP_UNLESS_ROOTLESS_USERNS();
  EXPECT_EMPTY(as_user(true, [] { return pid1_seizable_by_program(true, 250); }));
}

Test(namespaces, rootful_pid1_is_out_of_the_programs_reach_from_its_first_instruction) {
  CORRAL_SKIP_UNLESS_ROOT();
  EXPECT_EMPTY(in_child(false, [] { return pid1_seizable_by_program(false, 100); }));
}

Test(namespaces, rootless_runs_a_dynamic_binary) {
  CORRAL_SKIP_UNLESS_ROOTLESS_USERNS();
  EXPECT_EMPTY(as_user(true, [] {
    Workspace ws(true);
    return run_true(spec_for(true, ws));
  }));
}

Test(namespaces, rootful_drops_the_groups_it_inherits) {
  // Left in place, root's supplementary gid 0 would keep granting group
  // access to host files from inside the user namespace.
  CORRAL_SKIP_UNLESS_ROOT();
  EXPECT_EMPTY(in_child(false, [] {
    gid_t groups[] = {0, 4242};
    if (setgroups(2, groups) != 0) return std::string("setgroups: ") + strerror(errno);
    auto s = run(NamespaceSpec().mount(false), [](int out) {
      say(out, "groups", std::to_string(getgroups(0, nullptr)));
      return 0;
    });
    return expect(s, {{"groups", "0"}});
  }));
}

Test(namespaces, custom_hostname_and_ids) {
  CORRAL_SKIP_UNLESS_ROOT();
  NamespaceSpec spec;
  spec.hostname("box-7.test").map({0, 0, kRootfulOutside, kRootfulOutside});
  auto s = run(spec, [](int out) {
    struct utsname u;
    uname(&u);
    say(out, "hostname", u.nodename);
    say(out, "uid", std::to_string(getuid()));
    say(out, "uid_map", corral_test::read_file("/proc/self/uid_map").substr(0, 30));
    return 0;
  });
  auto kv = s.kv();
  EXPECT_EMPTY(expect(s, {{"hostname", "box-7.test"}, {"uid", "0"}}));
  // "0 54321 1" with the kernel's padding.
  cr_assert(kv["uid_map"].find("54321") != std::string::npos, "%s", kv["uid_map"].c_str());
}

Test(namespaces, pid1_passes_the_exit_code_and_reports_it) {
  CORRAL_SKIP_UNLESS_ROOT();
  auto s = run(NamespaceSpec(), [](int) { return 7; });
  cr_assert(s.error.empty(), "%s", s.error.c_str());
  cr_assert(s.pid1.exited);
  cr_assert_eq(s.pid1.code, 7);
  cr_assert(s.reported);
  cr_assert(WIFEXITED(s.report.wait_status) && WEXITSTATUS(s.report.wait_status) == 7);
}

Test(namespaces, pid1_turns_a_signal_death_into_128_plus_n) {
  CORRAL_SKIP_UNLESS_ROOT();
  auto s = run(NamespaceSpec(), [](int) {
    kill(getpid(), SIGKILL);  // the program is pid 2: not protected like an init
    return 0;
  });
  cr_assert(s.error.empty(), "%s", s.error.c_str());
  cr_assert_eq(s.pid1.code, kPid1SignalExitBase + SIGKILL);
  cr_assert(s.reported);
  cr_assert(WIFSIGNALED(s.report.wait_status));
  cr_assert_eq(WTERMSIG(s.report.wait_status), SIGKILL);
}

Test(namespaces, pid1_forwards_sigterm_to_the_program) {
  CORRAL_SKIP_UNLESS_ROOT();
  auto program = [](int out) {
    say(out, "ready", "1");
    for (;;) pause();  // SIGTERM at its default action ends it
    return 0;
  };
  auto hook = [](pid_t pid1, int out) {
    char c;
    while (read(out, &c, 1) == 1 && c != '\n') {
    }
    kill(pid1, SIGTERM);  // to pid 1, from outside its namespace
  };
  auto s = run(NamespaceSpec(), program, hook);
  cr_assert(s.error.empty(), "%s", s.error.c_str());
  cr_assert_not(s.timed_out, "SIGTERM was not forwarded");
  cr_assert_eq(s.pid1.code, kPid1SignalExitBase + SIGTERM);
  cr_assert(s.reported && WIFSIGNALED(s.report.wait_status) && WTERMSIG(s.report.wait_status) == SIGTERM);
}

namespace {

// The program starts a setsid'ed, double-forked escapee that holds the out
// pipe for 30 s (and reports its pid, which is the host's number when there
// is no pid namespace), waits until it runs, then exits.
int escape_and_exit(int out) {
  int started[2];
  if (pipe(started) != 0) return 1;
  if (fork() == 0) {
    setsid();
    if (fork() == 0) {
      say(out, "escapee", std::to_string(getpid()));
      close(started[1]);  // with the read below: "I am running"
      sleep(30);
      _exit(0);
    }
    _exit(0);
  }
  close(started[1]);
  char c;
  (void)read(started[0], &c, 1);
  wait(nullptr);
  return 0;
}

}  // namespace

Test(namespaces, pid1_exit_kills_a_setsid_double_fork_escapee) {
  CORRAL_SKIP_UNLESS_ROOT();
  double start = now_ms();
  auto s = run(NamespaceSpec(), escape_and_exit, {}, 5000);
  EXPECT_EMPTY(ran_clean(s));  // includes: the out pipe reached EOF, so no holder is left
  cr_assert_lt(now_ms() - start, 5000.0);
  cr_assert(!s.kv()["escapee"].empty(), "the escapee never started");
}

Test(namespaces, without_a_pid_namespace_the_escapee_survives) {
  // The control for the test above: the same program outlives its parent
  // when nothing reaps the namespace, so the EOF above means something.
  CORRAL_SKIP_UNLESS_ROOT();
  NamespaceSpec spec;
  spec.pid(false);
  spec.mounts(MountTreeSpec().proc(false));
  auto s = run(spec, escape_and_exit, {}, 1000);
  cr_assert(s.timed_out, "expected the escapee to hold the pipe");
  pid_t escapee = static_cast<pid_t>(std::stol(s.kv()["escapee"]));
  cr_assert_gt(escapee, 1);
  cr_assert_eq(kill(escapee, SIGKILL), 0);
}

Test(namespaces, fifty_sandboxes_leave_no_mounts_and_are_quick) {
  CORRAL_SKIP_UNLESS_ROOT();
  std::string before = corral_test::read_file("/proc/self/mountinfo");
  Workspace ws(false);
  NamespaceSpec spec = spec_for(false, ws);
  constexpr int kRuns = 50;
  double start = now_ms();
  for (int i = 0; i < kRuns; ++i) EXPECT_EMPTY(run_true(spec));
  double per_run = (now_ms() - start) / kRuns;
  cr_log_info("namespaces: prepare + clone3 (all namespaces) + mount tree + exec /bin/true + wait: %.2f ms per sandbox",
              per_run);
  std::string after = corral_test::read_file("/proc/self/mountinfo");
  cr_assert_str_eq(after.c_str(), before.c_str());
  cr_assert_lt(per_run, 250.0);
}

namespace {
// A fork-like clone3 with the namespaces' flags: 0 in the child.
long clone_for(const PreparedNamespaces& ns) {
  clone_args args{};
  args.flags = ns.clone_flags();
  args.exit_signal = SIGCHLD;
  return sys::call(SYS_clone3, reinterpret_cast<long>(&args), sizeof args);
}
}  // namespace

Test(namespaces, a_parent_that_gives_up_releases_the_child_with_an_error) {
  CORRAL_SKIP_UNLESS_ROOT();
  auto ns = prepare_namespaces(NamespaceSpec());
  cr_assert(ns.ok(), "%s", ns.error().message().c_str());
  int err[2];
  cr_assert_eq(pipe2(err, O_CLOEXEC), 0);
  long pid = clone_for(*ns);
  if (pid == 0) {
    NsFailure f;
    int e = apply_namespaces_in_child(*ns, -1, &f);
    sys::write_all(err[1], &f, sizeof f);
    _exit(e == 0 ? 0 : 125);
  }
  close(err[1]);
  cr_assert_gt(pid, 0);
  ns->abandon();
  NsFailure f;
  cr_assert_eq(read(err[0], &f, sizeof f), (ssize_t)sizeof f);
  waitpid(static_cast<pid_t>(pid), nullptr, 0);
  cr_assert_eq(f.stage, NsStage::sync);
  cr_assert_eq(f.err, ECANCELED);
  std::string msg = ns->error_for(f).message();
  cr_assert(msg.find("wait for the parent") != std::string::npos, "%s", msg.c_str());
}

// The ProgramFunction form: the program is made with CLONE_VM beside pid 1
// and runs the function on a stack of its own; what it returns is the
// program's exit status, which pid 1 reports. Without a pid namespace it is
// refused, naming the stage.
namespace {
int exit_with_41(void* arg, int err) noexcept {
  if (err) return 100 + err;
  // The program's own pid inside (2: pid 1 is the namespace's init).
  *static_cast<long*>(arg) = sys::call(SYS_getpid);
  return sys::call(SYS_getpid) == 2 ? 41 : 99;
}
}  // namespace

Test(namespaces, a_program_function_runs_under_pid_1_and_its_status_is_reported) {
  CORRAL_SKIP_UNLESS_ROOT();
  NamespaceSpec spec;
  spec.user(false).net(false).mount(false).pid(true);
  auto ns = prepare_namespaces(spec);
  cr_assert(ns.ok(), "%s", ns.error().message().c_str());
  int rep[2];
  cr_assert_eq(pipe2(rep, O_CLOEXEC), 0);
  long pid = clone_for(*ns);
  if (pid == 0) {
    long seen = 0;
    NsFailure f;
    int e = apply_namespaces_in_child(*ns, rep[1], &f, exit_with_41, &seen);
    _exit(e == 0 ? 124 : 125);  // never: pid 1 does not return, and the split did not fail
  }
  close(rep[1]);
  cr_assert_gt(pid, 0);
  cr_assert(ns->finish_in_parent(static_cast<pid_t>(pid)).ok());
  Pid1Report report;
  cr_assert_eq(read(rep[0], &report, sizeof report), (ssize_t)sizeof report);
  close(rep[0]);
  int status = 0;
  waitpid(static_cast<pid_t>(pid), &status, 0);
  cr_assert_eq(report.magic, kPid1ReportMagic);
  cr_assert(WIFEXITED(report.wait_status) && WEXITSTATUS(report.wait_status) == 41,
            "the program ended with wait status %#x", report.wait_status);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 41, "pid 1 exited %#x", status);

  auto flat = prepare_namespaces(NamespaceSpec().user(false).net(false).mount(false).pid(false));
  cr_assert(flat.ok(), "%s", flat.error().message().c_str());
  EXPECT_EMPTY(corral_test::in_child(false, [&]() -> std::string {
    long seen = 0;
    NsFailure f;
    int e = apply_namespaces_in_child(*flat, -1, &f, exit_with_41, &seen);
    if (e != EINVAL || f.stage != NsStage::pid1) return "no pid namespace: got " + std::to_string(e);
    return seen == 0 ? "" : "the program function ran without the split";
  }));
}

// ---- what prepare refuses -------------------------------------------------------

namespace {

std::string refusal(const NamespaceSpec& spec, const std::string& needle) {
  auto ns = prepare_namespaces(spec);
  if (ns.ok()) return "accepted a spec it should refuse (" + needle + ")";
  if (ns.error().message().find(needle) == std::string::npos)
    return "message '" + ns.error().message() + "' does not mention '" + needle + "'";
  return "";
}

}  // namespace

Test(namespaces, refuses_bad_hostnames_by_name) {
  EXPECT_EMPTY(refusal(NamespaceSpec().hostname(""), "hostname ''"));
  EXPECT_EMPTY(refusal(NamespaceSpec().hostname("a b"), "hostname 'a b': only letters"));
  EXPECT_EMPTY(refusal(NamespaceSpec().hostname(std::string(65, 'x')), "1 to 64"));
}

Test(namespaces, refuses_a_map_to_host_root) {
  CORRAL_SKIP_UNLESS_ROOT();
  EXPECT_EMPTY(refusal(NamespaceSpec().map({1000, 1000, 0, 0}), "host root"));
  EXPECT_EMPTY(refusal(NamespaceSpec().map({1000, 1000, 5000, 0}), "host root"));
  EXPECT_EMPTY(refusal(NamespaceSpec().map({static_cast<uid_t>(-1), 1000, 5000, 5000}), "id -1"));
}

Test(namespaces, rootless_refuses_foreign_ids_and_missing_user_ns) {
  EXPECT_EMPTY(as_user(true, [] {
    std::string own = std::to_string(own_uid()) + ":" + std::to_string(own_gid());
    std::string r = refusal(NamespaceSpec().map({1000, 1000, 4242, 4242}), "only our own ids " + own);
    if (r.empty()) r = refusal(NamespaceSpec().user(false), "need a user namespace");
    return r;
  }));
}

Test(namespaces, refuses_a_fresh_proc_without_a_pid_namespace) {
  EXPECT_EMPTY(refusal(NamespaceSpec().pid(false), "a fresh /proc in a user namespace needs a pid namespace"));
}

Test(namespaces, rootful_without_a_user_namespace_still_builds_the_tree) {
  CORRAL_SKIP_UNLESS_ROOT();
  NamespaceSpec spec;
  spec.user(false);
  auto s = run(spec, [](int out) {
    say(out, "uid", std::to_string(getuid()));
    say(out, "pids", count_pids(2));
    say(out, "create /usr/x", try_create("/usr/corral-probe"));
    return 0;
  });
  EXPECT_EMPTY(expect(s, {{"uid", "0"}, {"pids", "2"}, {"create /usr/x", "EROFS"}}));
}

Test(namespaces, refuses_a_bad_mount_tree_with_context) {
  NamespaceSpec spec;
  spec.mounts(MountTreeSpec().workspace("/nonexistent/corral-ws"));
  EXPECT_EMPTY(refusal(spec, "namespaces: mount tree: workspace '/nonexistent/corral-ws'"));
}

Test(namespaces, clone_flags_follow_the_spec) {
  auto all = prepare_namespaces(NamespaceSpec());
  cr_assert(all.ok(), "%s", all.error().message().c_str());
  std::uint64_t want = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS |
                       CLONE_NEWCGROUP;
  cr_assert_eq(all->clone_flags(), want);
  auto some = prepare_namespaces(NamespaceSpec().net(false).ipc(false).cgroup(false));
  cr_assert(some.ok());
  cr_assert_eq(some->clone_flags(), CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWUTS);
  cr_assert_eq(all->rootless(), geteuid() != 0);
}
