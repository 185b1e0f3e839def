// Integration tests of the container tier: real runs through the Supervisor
// (and the CLI), each guarantee observed from inside the sandbox by
// tests/helpers/inside.c (bound read-only at /helpers) or from the host.
// Rootful cases run as root; rootless ones as uid 65534 in a forked child.
#include <arpa/inet.h>
#include <dirent.h>
#include <grp.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>

#include <algorithm>
#include <climits>
#include <functional>
#include <map>

#include "corral/cgroup.hpp"
#include "corral/container.hpp"
#include "corral/enforcement.hpp"
#include "corral/json.hpp"
#include "corral/supervisor.hpp"
#include "corral/syscalls.hpp"
#include "support.hpp"

using namespace corral;
using corral_test::TempDir;

namespace {

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

// The host facts, probed once per test process.
const HostFacts& host() {
  static HostFacts h = probe_host();
  return h;
}

#define SKIP_UNLESS_CONTAINER()                                                               \
  do {                                                                                        \
    if (!host().user_namespaces || !host().pivot_root)                                        \
      cr_skip_test("no container tier on this host: %s", host().container_probe.c_str());     \
  } while (0)

#define SKIP_UNLESS_CGROUP(ctl)                                                                \
  do {                                                                                         \
    if (!host().cgroup_##ctl) cr_skip_test("no per-run " #ctl " cgroup: %s", host().cgroup_summary.c_str()); \
  } while (0)

std::string helpers_dir() {
  char buf[PATH_MAX];
  return realpath(corral_test::helper("").c_str(), buf) ? std::string(buf) : corral_test::helper("");
}

// One supervisor per test, workspaces under a private base (mode 0755: the
// run's host uid must reach its workspace).
struct Harness {
  TempDir base;
  std::unique_ptr<Supervisor> sup;
  Harness() {
    chmod(base.path().c_str(), 0755);
    SupervisorOptions o;
    o.workspace_base = base.path();
    auto s = Supervisor::create(o);
    cr_assert(s.ok(), "supervisor: %s", s.ok() ? "" : s.error().message().c_str());
    sup = std::move(*s);
  }
  Result run(Request r) {
    auto res = sup->run(std::move(r));
    cr_assert(res.ok(), "run refused: %s", res.ok() ? "" : res.error().message().c_str());
    return std::move(*res);
  }
  std::size_t leftovers() const {
    std::size_t n = 0;
    DIR* d = opendir(base.path().c_str());
    while (dirent* e = d ? readdir(d) : nullptr) n += std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, "..");
    if (d) closedir(d);
    return n;
  }
};

// A container-tier request with the test helpers at /helpers.
Request boxed(std::vector<std::string> argv) {
  Request r;
  r.tier = Tier::container;
  r.argv = std::move(argv);
  r.binds.push_back(MountBind{helpers_dir(), "/helpers", false});
  return r;
}

std::map<std::string, std::string> kv(const std::string& text) {
  std::map<std::string, std::string> m;
  std::size_t i = 0;
  while (i < text.size()) {
    std::size_t nl = text.find('\n', i);
    if (nl == std::string::npos) nl = text.size();
    std::string line = text.substr(i, nl - i);
    if (auto eq = line.find('='); eq != std::string::npos) m[line.substr(0, eq)] = line.substr(eq + 1);
    i = nl + 1;
  }
  return m;
}

// "" or the list of observations that differ from `want`.
std::string mismatches(const Result& r, const std::map<std::string, std::string>& want) {
  if (r.outcome != Outcome::exited || r.exit_code != 0)
    return "the run ended " + std::string(to_string(r.outcome)) + ": " + r.detail + "\nstdout: " +
           r.stdout_capture.text + "\nstderr: " + r.stderr_capture.text;
  auto got = kv(r.stdout_capture.text);
  std::string bad;
  for (const auto& [k, v] : want) {
    auto it = got.find(k);
    std::string g = it == got.end() ? "<missing>" : it->second;
    if (g != v) bad += "\n  " + k + ": expected '" + v + "', got '" + g + "'";
  }
  return bad.empty() ? "" : "unexpected observations:" + bad + "\nstdout:\n" + r.stdout_capture.text;
}

#define EXPECT_EMPTY(expr)                                     \
  do {                                                         \
    std::string msg_ = (expr);                                 \
    cr_assert(msg_.empty(), "%s", msg_.c_str());               \
  } while (0)

// A listener on the host's 127.0.0.1; the port in *port.
int host_listener(in_port_t* port) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (s < 0 || bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) || listen(s, 4) ||
      getsockname(s, reinterpret_cast<sockaddr*>(&a), &len))
    return -1;
  *port = ntohs(a.sin_port);
  return s;
}

// Everything the sandbox shows one program, observed once.
Result observe(Harness& h) {
  in_port_t port = 0;
  int listener = host_listener(&port);
  cr_assert(listener >= 0, "host listener: %s", strerror(errno));
  Result r = h.run(boxed({"/helpers/inside", "observe", std::to_string(port)}));
  close(listener);
  return r;
}

// Run groups the process `pid` made (default: this test process), in every
// hierarchy the probe uses.
std::size_t my_run_cgroups(pid_t pid = getpid()) {
  const CgroupProbe& p = host().cgroups;
  std::vector<std::string> parents;
  if (p.backend == CgroupVersion::v2) parents.push_back(p.v2_own_dir + "/corral");
  for (const auto& h : p.v1)
    if (!h.own_dir.empty()) parents.push_back(h.own_dir + "/corral");
  std::string mine = "-" + std::to_string(pid) + "-";
  std::size_t n = 0;
  for (const auto& dir : parents) {
    DIR* d = opendir(dir.c_str());
    while (dirent* e = d ? readdir(d) : nullptr) n += contains(e->d_name, mine);
    if (d) closedir(d);
  }
  return n;
}

std::size_t mount_count() {
  std::string text = corral_test::read_file("/proc/self/mountinfo");
  return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
}

// Host processes whose command line contains `marker`.
std::size_t host_processes_with(const std::string& marker) {
  std::size_t n = 0;
  DIR* d = opendir("/proc");
  while (dirent* e = d ? readdir(d) : nullptr) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::string cmd = corral_test::read_file("/proc/" + std::string(e->d_name) + "/cmdline");
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    n += contains(cmd, marker);
  }
  if (d) closedir(d);
  return n;
}

// The CLI's exit code for `corral ARGS...` (output discarded).
int cli(const std::vector<std::string>& args) {
  std::string bin = corral_test::build_dir() + "/bin/corral";
  pid_t pid = fork();
  if (pid == 0) {
    int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    dup2(null, 2);
    std::vector<char*> argv{bin.data()};
    std::vector<std::string> copy = args;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(bin.c_str(), argv.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Run body as uid/gid 65534 in a forked child (dumpable again, as a process
// that never changed ids is, so it may write its own child's id maps).
// Returns what body returned: "" means fine.
std::string as_nobody(const std::function<std::string()>& body) {
  int p[2];
  if (pipe2(p, O_CLOEXEC)) return "pipe2 failed";
  pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    std::string r;
    if (setgroups(0, nullptr) || setresgid(65534, 65534, 65534) || setresuid(65534, 65534, 65534) ||
        prctl(PR_SET_DUMPABLE, 1, 0, 0, 0))
      r = std::string("dropping to 65534: ") + strerror(errno);
    else
      r = body();
    corral::sys::write_all(p[1], r.data(), r.size());
    _exit(0);
  }
  close(p[1]);
  std::string r;
  char buf[4096];
  ssize_t n;
  while ((n = read(p[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
    if (n > 0) r.append(buf, static_cast<std::size_t>(n));
  close(p[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status)) return "the rootless test child died (signal " + std::to_string(WTERMSIG(status)) + ")";
  return r;
}

}  // namespace

// ---- what the program sees -------------------------------------------------------

Test(container, no_capabilities_and_no_new_privs_inside) {
  SKIP_UNLESS_CONTAINER();
  Harness h;
  EXPECT_EMPTY(mismatches(observe(h), {{"CapEff", "0000000000000000"},
                                       {"CapBnd", "0000000000000000"},
                                       {"CapPrm", "0000000000000000"},
                                       {"CapAmb", "0000000000000000"},
                                       {"NoNewPrivs", "1"},
                                       {"Seccomp", "2"}}));
}

Test(container, runs_as_a_non_root_uid_in_its_own_pid_and_uts_namespaces) {
  SKIP_UNLESS_CONTAINER();
  Harness h;
  EXPECT_EMPTY(mismatches(observe(h), {{"uid", "65534"},
                                       {"gid", "65534"},
                                       {"proc_pids", "1,2"},
                                       {"hostname", "corral"},
                                       {"cwd", "/workspace"}}));
}

Test(container, network_is_loopback_only_and_cannot_reach_the_hosts_listener) {
  SKIP_UNLESS_CONTAINER();
  Harness h;
  // The listener is on the host's 127.0.0.1; the sandbox's own lo has none.
  EXPECT_EMPTY(mismatches(observe(h), {{"net_devices", "lo"}, {"connect", "ECONNREFUSED"}}));
}

Test(container, the_root_is_read_only_and_the_host_is_invisible) {
  SKIP_UNLESS_CONTAINER();
  Harness h;
  EXPECT_EMPTY(mismatches(observe(h), {{"write_usr", "EROFS"},
                                       {"write_etc", "EROFS"},
                                       {"write_root", "EROFS"},
                                       {"write_tmp", "ok"},
                                       {"write_workspace", "ok"},
                                       {"see_root_home", "ENOENT"},
                                       {"see_home", "ENOENT"},
                                       {"see_sys", "ENOENT"}}));
}

Test(container, unshare_mount_and_io_uring_are_denied) {
  SKIP_UNLESS_CONTAINER();
  Harness h;
  EXPECT_EMPTY(mismatches(observe(h), {{"unshare_user", "EPERM"},
                                       {"unshare_ns", "EPERM"},
                                       {"mount", "EPERM"},
                                       {"io_uring_setup", "EPERM"}}));
}

Test(container, files_it_writes_belong_to_an_unprivileged_host_uid) {
  SKIP_UNLESS_CONTAINER();
  CORRAL_SKIP_UNLESS_ROOT();
  Harness h;
  TempDir shared;
  chmod(shared.path().c_str(), 0777);
  Request r = boxed({"/helpers/inside", "write", "/shared/out.txt", "hello"});
  r.binds.push_back(MountBind{shared.path(), "/shared", true});
  Result res = h.run(std::move(r));
  cr_assert_eq(res.outcome, Outcome::exited, "%s", res.detail.c_str());
  cr_assert_eq(res.exit_code, 0, "%s", res.stdout_capture.text.c_str());
  struct stat st;
  cr_assert_eq(stat((shared / "out.txt").c_str(), &st), 0);
  cr_assert_neq(st.st_uid, 0u, "the sandbox wrote as host root");
  cr_assert_geq(st.st_uid, 200000u, "host owner %u is not one of the run uids", st.st_uid);
  cr_assert_eq(corral_test::read_file(shared / "out.txt"), "hello");
}

Test(container, user_names_the_uid_inside_and_root_is_refused) {
  SKIP_UNLESS_CONTAINER();
  Harness h;
  Request r = boxed({"/helpers/inside", "observe", "1"});
  r.user = 1000;
  auto got = kv(h.run(std::move(r)).stdout_capture.text);
  cr_assert_eq(got["uid"], "1000");
  cr_assert_eq(got["CapEff"], "0000000000000000");
  Request root = boxed({"true"});
  root.user = 0;
  auto refused = h.sup->run(std::move(root));
  cr_assert(!refused.ok());
  cr_assert(contains(refused.error().message(), "user 0"), "%s", refused.error().message().c_str());
}

// ---- how runs end ---------------------------------------------------------------------

Test(container, an_allocation_over_the_memory_ceiling_is_killed_oom) {
  SKIP_UNLESS_CONTAINER();
  SKIP_UNLESS_CGROUP(memory);
  Harness h;
  Request r = boxed({"/helpers/inside", "alloc", std::to_string(1ull << 30)});
  r.limits.set(Limit::memory_bytes, 128ull << 20);
  Result res = h.run(std::move(r));
  cr_assert_eq(res.outcome, Outcome::killed_oom, "%s: %s", std::string(to_string(res.outcome)).c_str(),
               res.detail.c_str());
  cr_assert_eq(res.signal, SIGKILL);
  cr_assert(!contains(res.stdout_capture.text, "allocated"));
  cr_assert_leq(res.max_rss_bytes, (128ull << 20) + (4ull << 20), "peak %llu", (unsigned long long)res.max_rss_bytes);
  cr_assert_geq(res.max_rss_bytes, 64ull << 20, "peak %llu", (unsigned long long)res.max_rss_bytes);
  cr_assert_eq(cli_exit_code(res), 137);
}

Test(container, a_plain_sigkill_is_not_an_oom_and_exit_137_is_an_exit) {
  SKIP_UNLESS_CONTAINER();
  Harness h;
  Request killed = boxed({"sh", "-c", "kill -9 $$"});
  killed.limits.set(Limit::memory_bytes, 128ull << 20);
  Result k = h.run(std::move(killed));
  cr_assert_eq(k.outcome, Outcome::signaled, "%s", k.detail.c_str());
  cr_assert_eq(k.signal, SIGKILL);
  // pid 1 exits 137 both times; only its report tells them apart.
  Result e = h.run(boxed({"/helpers/inside", "exit", "137"}));
  cr_assert_eq(e.outcome, Outcome::exited, "%s", e.detail.c_str());
  cr_assert_eq(e.exit_code, 137);
  Result t = h.run(boxed({"sh", "-c", "kill -TERM $$"}));
  cr_assert_eq(t.outcome, Outcome::signaled, "%s", t.detail.c_str());
  cr_assert_eq(t.signal, SIGTERM);
}

Test(container, rlimit_kills_are_mapped_through_pid_1) {
  SKIP_UNLESS_CONTAINER();
  Harness h;
  Request cpu = boxed({"/helpers/hostile", "spin"});
  cpu.limits.set(Limit::cpu_seconds, 1);
  Result c = h.run(std::move(cpu));
  cr_assert_eq(c.outcome, Outcome::killed_resource, "%s", c.detail.c_str());
  cr_assert_eq(c.resource, "cpu_seconds");
  cr_assert_eq(c.signal, SIGXCPU);
  // The cgroup's count (cpuacct.usage) and RLIMIT_CPU's sampling disagree by
  // a little on this VM; what matters is that the spin was counted.
  cr_assert_geq(c.cpu_seconds, 0.5, "cpu %.3f (the cgroup's count)", c.cpu_seconds);
  Request file = boxed({"/helpers/hostile", "write-file", "big", "5000"});
  file.limits.set(Limit::file_bytes, 1000);
  Result f = h.run(std::move(file));
  cr_assert_eq(f.outcome, Outcome::killed_resource, "%s", f.detail.c_str());
  cr_assert_eq(f.resource, "file_bytes");
}

Test(container, a_fork_bomb_is_contained_by_the_pids_ceiling) {
  SKIP_UNLESS_CONTAINER();
  SKIP_UNLESS_CGROUP(pids);
  Harness h;
  Request r = boxed({"/helpers/hostile", "fork-bomb", "500"});
  r.limits.set(Limit::process_count, 16);
  Result res = h.run(std::move(r));
  cr_assert_eq(res.outcome, Outcome::exited, "%s", res.detail.c_str());
  int forked = -1;
  std::sscanf(res.stdout_capture.text.c_str(), "forked %d", &forked);
  // pid 1 and the program count too.
  cr_assert(forked >= 1 && forked <= 14, "forked %d: %s", forked, res.stdout_capture.text.c_str());
  cr_assert(contains(res.detail, "pids.max refused"), "%s", res.detail.c_str());
}

Test(container, a_setsid_double_fork_escapee_is_gone_when_the_run_returns) {
  SKIP_UNLESS_CONTAINER();
  Harness h;
  std::string marker = "escape-marker-" + std::to_string(getpid());
  Result res = h.run(boxed({"/helpers/hostile", "setsid-escape", marker}));
  cr_assert_eq(res.outcome, Outcome::exited, "%s", res.detail.c_str());
  cr_assert(contains(res.stdout_capture.text, "escapee"), "%s", res.stdout_capture.text.c_str());
  cr_assert_eq(host_processes_with(marker), 0u, "the escapee survived the run");
  cr_assert_eq(my_run_cgroups(), 0u);
}

Test(container, a_deadline_forwards_sigterm_then_kills_everything) {
  SKIP_UNLESS_CONTAINER();
  Harness h;
  Request r = boxed({"sh", "-c", "trap 'echo got-term; exit 3' TERM; sleep 30 & wait"});
  r.limits.set(Limit::wall_seconds, 1);
  Result res = h.run(std::move(r));
  cr_assert_eq(res.outcome, Outcome::killed_timeout, "%s", res.detail.c_str());
  cr_assert(contains(res.stdout_capture.text, "got-term"), "pid 1 did not forward SIGTERM: '%s'",
            res.stdout_capture.text.c_str());
  cr_assert_lt(res.wall_seconds, 1.9);
  cr_assert_eq(cli_exit_code(res), 124);
  Request stubborn = boxed({"/helpers/hostile", "ignore-term"});
  stubborn.limits.set(Limit::wall_seconds, 1);
  stubborn.grace_seconds = 0.2;
  Result s = h.run(std::move(stubborn));
  cr_assert_eq(s.outcome, Outcome::killed_timeout, "%s", s.detail.c_str());
  cr_assert_lt(s.wall_seconds, 2.0);
  cr_assert_eq(my_run_cgroups(), 0u);
  cr_assert_eq(h.leftovers(), 0u);
}

Test(container, a_killed_supervisor_takes_its_sandboxes_with_it) {
  SKIP_UNLESS_CONTAINER();
  TempDir base;
  chmod(base.path().c_str(), 0755);
  std::string marker = "orphan-marker-" + std::to_string(getpid());
  int ready[2];
  cr_assert_eq(pipe2(ready, O_CLOEXEC), 0);
  pid_t sup_pid = fork();
  if (sup_pid == 0) {
    SupervisorOptions o;
    o.workspace_base = base.path();
    auto sup = Supervisor::create(o);
    if (!sup) _exit(1);
    auto h = (*sup)->submit(boxed({"/helpers/hostile", "ignore-term", marker}));
    if (!h) _exit(2);
    (void)!write(ready[1], "x", 1);  // the program has exec'd: submit waits for that
    for (;;) pause();
  }
  close(ready[1]);
  char byte;
  cr_assert_eq(read(ready[0], &byte, 1), 1, "the supervisor child did not start its run");
  close(ready[0]);
  cr_assert_eq(host_processes_with(marker), 1u, "the sandboxed program is not running");
  kill(sup_pid, SIGKILL);
  waitpid(sup_pid, nullptr, 0);
  std::size_t left = 1;
  for (int i = 0; i < 100 && (left = host_processes_with(marker)) != 0; ++i) usleep(20000);
  cr_assert_eq(left, 0u, "the sandbox outlived its supervisor");
  // Its cgroup stays until a sweep: the supervisor died before removing it.
  for (int i = 0; i < 100 && my_run_cgroups(sup_pid) != 0; ++i) {
    (void)sweep_stale_run_cgroups(host().cgroups, CgroupSpec{});
    usleep(20000);
  }
  cr_assert_eq(my_run_cgroups(sup_pid), 0u, "the dead supervisor's cgroup was not swept");
}

Test(container, outputs_are_collected_after_exit_and_after_a_kill) {
  SKIP_UNLESS_CONTAINER();
  Harness h;
  Request done = boxed({"sh", "-c", "echo data > out.txt"});
  done.outputs = {"out.txt"};
  Result d = h.run(std::move(done));
  cr_assert_eq(d.outcome, Outcome::exited, "%s", d.detail.c_str());
  cr_assert_eq(d.artifacts.size(), 1u, "%s", d.detail.c_str());
  Request killed = boxed({"sh", "-c", "echo data > out.txt; sleep 30"});
  killed.outputs = {"out.txt"};
  killed.limits.set(Limit::wall_seconds, 1);
  killed.grace_seconds = 0.1;
  Result k = h.run(std::move(killed));
  cr_assert_eq(k.outcome, Outcome::killed_timeout);
  cr_assert_eq(k.artifacts.size(), 1u);
  cr_assert_eq(k.artifacts[0].name, "out.txt");
  cr_assert_eq(k.artifacts[0].bytes, 5u);
  cr_assert_eq(h.leftovers(), 0u);
}

Test(container, stdin_env_and_secrets_work_as_in_the_process_tier) {
  SKIP_UNLESS_CONTAINER();
  setenv("CORRAL_CONTAINER_SECRET", "s3cr3t-value-xyz", 1);
  Harness h;
  Request r = boxed({"sh", "-c", "read line; echo \"$line $GREETING $CORRAL_CONTAINER_SECRET $HOME $TMPDIR\""});
  r.stdin_text = "from-stdin\n";
  r.env["GREETING"] = "hi";
  r.secrets.push_back(SecretRef{"CORRAL_CONTAINER_SECRET", "", {}});
  Result res = h.run(std::move(r));
  cr_assert_eq(res.stdout_capture.text, "from-stdin hi *** /workspace/home /tmp\n", "%s",
               res.stdout_capture.text.c_str());
}

Test(container, cancel_ends_the_run_and_removes_its_cgroup) {
  SKIP_UNLESS_CONTAINER();
  Harness h;
  std::shared_ptr<Result> result;
  RunCallbacks cb;
  cb.on_result = [&](const Result& r) { result = std::make_shared<Result>(r); };
  auto handle = h.sup->submit(boxed({"sleep", "30"}), cb);
  cr_assert(handle.ok(), "%s", handle.ok() ? "" : handle.error().message().c_str());
  (void)h.sup->run_once(0.1);
  handle->cancel();
  cr_assert(h.sup->run_until_idle().ok());
  cr_assert(result);
  cr_assert_eq(result->outcome, Outcome::cancelled, "%s", result->detail.c_str());
  cr_assert_eq(my_run_cgroups(), 0u);
  cr_assert_eq(h.leftovers(), 0u);
}

// ---- failures are named -----------------------------------------------------------

Test(container, a_missing_program_is_spawn_failed_at_execve) {
  SKIP_UNLESS_CONTAINER();
  Harness h;
  Result res = h.run(boxed({"/no/such/program"}));
  cr_assert_eq(res.outcome, Outcome::spawn_failed);
  cr_assert_eq(res.spawn_stage, "execve");
  cr_assert_eq(res.spawn_errno, ENOENT);
  cr_assert_eq(cli_exit_code(res), 125);
  cr_assert_eq(my_run_cgroups(), 0u);
}

Test(container, a_mount_the_child_cannot_make_is_spawn_failed_naming_the_step) {
  SKIP_UNLESS_CONTAINER();
  CORRAL_SKIP_UNLESS_ROOT();
  Harness h;
  // Root can resolve it when preparing; the run's own uid cannot search it.
  TempDir locked;
  mkdir((locked / "inner").c_str(), 0755);
  chmod(locked.path().c_str(), 0700);
  Request r = boxed({"true"});
  r.binds.push_back(MountBind{locked / "inner", "/data", false});
  Result res = h.run(std::move(r));
  cr_assert_eq(res.outcome, Outcome::spawn_failed, "%s", res.detail.c_str());
  cr_assert_eq(res.spawn_stage, "namespaces");
  cr_assert_eq(res.spawn_errno, EACCES);
  cr_assert(contains(res.detail, "bind /data") && contains(res.detail, "openat2"), "%s", res.detail.c_str());
  cr_assert_eq(my_run_cgroups(), 0u);
  cr_assert_eq(h.leftovers(), 0u);
}

Test(container, bad_requests_are_refused_naming_the_field) {
  SKIP_UNLESS_CONTAINER();
  Harness h;
  Request missing = boxed({"true"});
  missing.binds.push_back(MountBind{"/no/such/source", "/x", false});
  auto m = h.sup->run(std::move(missing));
  cr_assert(!m.ok());
  cr_assert(contains(m.error().message(), "/no/such/source"), "%s", m.error().message().c_str());

  Request process = boxed({"true"});
  process.tier = Tier::os_process;
  auto p = h.sup->run(std::move(process));
  cr_assert(!p.ok());
  cr_assert(contains(p.error().message(), "need tier container"), "%s", p.error().message().c_str());

  Request writes = boxed({"true"});
  writes.write_paths.push_back("/tmp");
  auto w = h.sup->run(std::move(writes));
  cr_assert(!w.ok());
  cr_assert(contains(w.error().message(), "--bind"), "%s", w.error().message().c_str());
  cr_assert_eq(h.leftovers(), 0u);
  cr_assert_eq(my_run_cgroups(), 0u);
}

Test(container, a_rootfs_replaces_the_host_system_binds) {
  SKIP_UNLESS_CONTAINER();
  Harness h;
  TempDir rootfs;
  chmod(rootfs.path().c_str(), 0755);
  mkdir((rootfs / "usr").c_str(), 0755);
  mkdir((rootfs / "data").c_str(), 0755);
  corral_test::write_file(rootfs / "data/marker", "from the rootfs\n");
  chmod((rootfs / "data/marker").c_str(), 0644);
  for (const char* link : {"bin", "lib", "lib64"})
    symlink((std::string("usr/") + link).c_str(), (rootfs / link).c_str());
  Request r = boxed({"sh", "-c", "cat /data/marker; test -e /etc && echo etc-present; ls /"});
  r.rootfs = rootfs.path();
  r.binds.push_back(MountBind{"/usr", "/usr", false});  // the rootfs's empty usr/ gets the host's
  Result res = h.run(std::move(r));
  cr_assert_eq(res.outcome, Outcome::exited, "%s: %s", res.detail.c_str(), res.stderr_capture.text.c_str());
  cr_assert(contains(res.stdout_capture.text, "from the rootfs"), "%s", res.stdout_capture.text.c_str());
  cr_assert(!contains(res.stdout_capture.text, "etc-present"), "the generated /etc appeared with a rootfs");
  cr_assert(contains(res.stdout_capture.text, "workspace"), "%s", res.stdout_capture.text.c_str());
}

Test(container, batch_jobs_carry_the_container_fields) {
  auto job = request_from_json(R"({"argv":["true"],"tier":"container","rootfs":"/srv/root",)"
                               R"("ro_binds":["/data:/in"],"binds":["/out"],"user":1000})");
  cr_assert(job.ok(), "%s", job.ok() ? "" : job.error().message().c_str());
  cr_assert_eq(job->tier, Tier::container);
  cr_assert_eq(*job->rootfs, "/srv/root");
  cr_assert_eq(job->binds.size(), 2u);
  // JSON object keys come in sorted order: "binds" before "ro_binds".
  cr_assert(job->binds[0].writable && job->binds[0].target == "/out");
  cr_assert(!job->binds[1].writable && job->binds[1].target == "/in" && job->binds[1].source == "/data");
  cr_assert_eq(*job->user, 1000u);
  auto host_net = request_from_json(R"({"argv":["true"],"tier":"container","net":"host"})");
  cr_assert(!host_net.ok());
  cr_assert(contains(host_net.error().message(), "empty network namespace"), "%s",
            host_net.error().message().c_str());
  auto bad_bind = request_from_json(R"({"argv":["true"],"binds":["relative"]})");
  cr_assert(!bad_bind.ok());
  cr_assert(contains(bad_bind.error().message(), "'relative'"), "%s", bad_bind.error().message().c_str());
  auto bad_user = request_from_json(R"({"argv":["true"],"user":-1})");
  cr_assert(!bad_user.ok());
  cr_assert(contains(bad_user.error().message(), "user"), "%s", bad_user.error().message().c_str());
}

Test(container, bind_specs_parse_and_bad_ones_are_named) {
  auto plain = parse_bind_spec("/data", false);
  cr_assert(plain.ok());
  cr_assert_eq(plain->source, "/data");
  cr_assert_eq(plain->target, "/data");
  cr_assert(!plain->writable);
  auto moved = parse_bind_spec("/srv/a:b:/in", true);
  cr_assert(moved.ok());
  cr_assert_eq(moved->source, "/srv/a:b");
  cr_assert_eq(moved->target, "/in");
  cr_assert(moved->writable);
  auto relative = parse_bind_spec("data", false);
  cr_assert(!relative.ok());
  cr_assert(contains(relative.error().message(), "'data'"), "%s", relative.error().message().c_str());
  auto empty = parse_bind_spec(":/in", false);
  cr_assert(!empty.ok());
  cr_assert(contains(empty.error().message(), "source is empty"), "%s", empty.error().message().c_str());
}

// ---- nothing left behind; the CLI ----------------------------------------------------

Test(container, no_cgroup_no_mount_and_no_workspace_left_after_200_runs) {
  SKIP_UNLESS_CONTAINER();
  Harness h;
  std::size_t mounts = mount_count();
  for (int i = 0; i < 200; ++i) {
    Request r;
    r.tier = Tier::container;
    r.argv = {"/bin/true"};
    r.limits.set(Limit::memory_bytes, 64ull << 20);
    Result res = h.run(std::move(r));
    cr_assert_eq(res.outcome, Outcome::exited, "run %d: %s", i, res.detail.c_str());
  }
  cr_assert_eq(my_run_cgroups(), 0u);
  cr_assert_eq(mount_count(), mounts, "host mounts changed");
  cr_assert_eq(h.leftovers(), 0u);
}

Test(container, untrusted_runs_in_the_container_tier_and_is_refused_below_it) {
  SKIP_UNLESS_CONTAINER();
  cr_assert_eq(cli({"run", "--untrusted", "--tier", "container", "--", "true"}), 0);
  cr_assert_eq(cli({"run", "--untrusted", "--tier", "container", "--", "sh", "-c", "exit 7"}), 7);
  cr_assert_eq(cli({"run", "--untrusted", "--tier", "process", "--", "true"}), 2);
  cr_assert_eq(cli({"run", "--untrusted", "--", "true"}), 2);
  cr_assert_eq(cli({"run", "--tier", "container", "--net", "host", "--", "true"}), 2);
  cr_assert_eq(cli({"run", "--tier", "container", "--ro-bind", "relative", "--", "true"}), 2);
}

Test(container, enforcement_names_what_the_host_gives_the_tier) {
  auto map = enforcement_summary(host(), Tier::container);
  cr_assert_eq(map["namespaces"], host().user_namespaces && host().pivot_root ? "hard" : "unsupported");
  cr_assert_eq(map["memory_bytes"], host().cgroup_memory ? "cgroup" : "unsupported");
  cr_assert_eq(map["process_count"], host().cgroup_pids ? "cgroup" : "unsupported");
  cr_assert_eq(map["reaps_descendants"], "container");
  cr_assert_eq(enforcement_summary(host(), Tier::os_process)["namespaces"], "unsupported");
}

Test(container, a_host_without_user_namespaces_refuses_the_tier_naming_why) {
  HostFacts facts = host();
  facts.user_namespaces = facts.pivot_root = false;
  facts.container_probe = "unshare(CLONE_NEWUSER|CLONE_NEWNS): Operation not permitted";
  Request r;
  r.tier = Tier::container;
  r.argv = {"true"};
  r.acknowledged.insert("namespaces");  // no acknowledgement runs a container without them
  std::vector<std::string> warnings;
  auto st = check_enforceable(facts, r, default_limits(), warnings);
  cr_assert(!st.ok());
  cr_assert_eq(st.error().code(), ENOTSUP);  // the CLI's exit 2
  cr_assert(contains(st.error().message(), "unshare(CLONE_NEWUSER|CLONE_NEWNS): Operation not permitted"), "%s",
            st.error().message().c_str());
  cr_assert(contains(st.error().message(), "user.max_user_namespaces"), "%s", st.error().message().c_str());
  r.tier = Tier::os_process;
  cr_assert(check_enforceable(facts, r, default_limits(), warnings).ok());
}

// ---- rootless: corral itself runs as uid 65534 ---------------------------------------

Test(container, rootless_runs_map_the_callers_own_id) {
  SKIP_UNLESS_CONTAINER();
  CORRAL_SKIP_UNLESS_ROOT();
  TempDir base;
  chown(base.path().c_str(), 65534, 65534);
  std::string helpers = helpers_dir();
  EXPECT_EMPTY(as_nobody([&]() -> std::string {
    HostFacts facts = probe_host();
    if (!facts.user_namespaces || !facts.pivot_root) return "";  // checked as root above; nothing to add
    SupervisorOptions o;
    o.workspace_base = base.path();
    auto sup = Supervisor::create(o);
    if (!sup) return "supervisor: " + sup.error().message();
    Request r = boxed({"/helpers/inside", "observe", "1"});
    r.binds[0].source = helpers;
    auto res = (*sup)->run(std::move(r));
    if (!res) return "refused: " + res.error().message();
    return mismatches(*res, {{"uid", "65534"},
                             {"CapEff", "0000000000000000"},
                             {"CapBnd", "0000000000000000"},
                             {"NoNewPrivs", "1"},
                             {"proc_pids", "1,2"},
                             {"net_devices", "lo"},
                             {"write_usr", "EROFS"},
                             {"unshare_user", "EPERM"}});
  }));
}

Test(container, rootless_memory_ceiling_is_refused_unless_acknowledged) {
  SKIP_UNLESS_CONTAINER();
  CORRAL_SKIP_UNLESS_ROOT();
  TempDir base;
  chown(base.path().c_str(), 65534, 65534);
  std::string skipped;
  std::string failure = as_nobody([&]() -> std::string {
    HostFacts facts = probe_host();
    if (facts.cgroup_memory) return "SKIP: uid 65534 has a delegated memory cgroup here";
    auto map = enforcement_map(facts, Tier::container);
    for (const auto& e : map)
      if (e.name == "memory_bytes" && (e.how != "unsupported" || !contains(e.note, "delegated")))
        return "enforcement says memory_bytes " + e.how + ": " + e.note;
    SupervisorOptions o;
    o.workspace_base = base.path();
    auto sup = Supervisor::create(o);
    if (!sup) return "supervisor: " + sup.error().message();
    Request r;
    r.tier = Tier::container;
    r.argv = {"true"};
    r.limits.set(Limit::memory_bytes, 64ull << 20);
    auto refused = (*sup)->run(r);
    if (refused) return "a memory ceiling nobody enforces was not refused";
    if (!contains(refused.error().message(), "memory_bytes"))
      return "the refusal does not name memory_bytes: " + refused.error().message();
    r.acknowledged.insert("memory_bytes");
    auto ran = (*sup)->run(std::move(r));
    if (!ran) return "acknowledged run refused: " + ran.error().message();
    if (ran->outcome != Outcome::exited) return "acknowledged run: " + ran->detail;
    if (!contains(ran->detail, "memory_bytes=67108864 (acknowledged) is not enforced"))
      return "the detail does not say what was not enforced: " + ran->detail;
    return "";
  });
  if (failure.rfind("SKIP: ", 0) == 0) cr_skip_test("%s", failure.c_str() + 6);
  EXPECT_EMPTY(failure);
}
