// Integration tests of the container tier, part 1: each guarantee observed
// from inside the sandbox by tests/helpers/inside.c (bound read-only at
// /helpers) through real Supervisor runs, and how runs end (OOM, signals,
// rlimits, pids, escapees, deadlines, cancel, a killed supervisor).
#include "cmdline_mark.hpp"
#include "host_view.hpp"
#include "container_support.hpp"

using namespace corral;
using namespace container_test;
using corral_test::TempDir;

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

// A signal the supervisor's process ignores (the CLI ignores SIGPIPE) is
// back to SIG_DFL in the program: the container spawn resets the set the
// supervisor's Spawner read when it was made (not re-read per run).
Test(container, signals_the_supervisor_ignores_are_default_in_the_program) {
  SKIP_UNLESS_CONTAINER();
  struct sigaction ign {}, old {};
  ign.sa_handler = SIG_IGN;
  sigaction(SIGUSR2, &ign, &old);
  Harness h;
  Result r = h.run(boxed({"/bin/grep", "SigIgn", "/proc/self/status"}));
  sigaction(SIGUSR2, &old, nullptr);
  cr_assert_eq(r.outcome, Outcome::exited, "%s", r.detail.c_str());
  // Only SIGUSR2's bit is ours to judge: under `make test` the program was
  // once seen with signal 32 (glibc's internal SIGCANCEL, which sigaction
  // cannot set) ignored, from outside this test; see the issue note.
  auto at = r.stdout_capture.text.find("SigIgn:\t");
  cr_assert(at != std::string::npos, "no SigIgn line: %s", r.stdout_capture.text.c_str());
  std::uint64_t ignored = std::stoull(r.stdout_capture.text.substr(at + 8, 16), nullptr, 16);
  cr_assert((ignored & (std::uint64_t{1} << (SIGUSR2 - 1))) == 0, "SIGUSR2 still ignored in the program: %s",
            r.stdout_capture.text.c_str());
}

Test(container, as_root_the_program_has_no_supplementary_groups) {
  SKIP_UNLESS_CONTAINER();
  if (geteuid() != 0) cr_skip_test("not root: a rootless run keeps its creator's groups (setgroups is denied to it)");
  Harness h;
  EXPECT_EMPTY(mismatches(observe(h), {{"Groups", ""}}));
}

// pid 1 as the host sees it: the run's own unprivileged uid and no groups,
// never root (in the namespace template it starts as host root and drops).
Test(container, pid_1_runs_as_the_runs_host_uid) {
  SKIP_UNLESS_CONTAINER();
  if (geteuid() != 0) cr_skip_test("not root: pid 1 runs as the caller");
  Harness h;
  std::shared_ptr<Result> result;
  RunHandle handle = submit_boxed(h, {"sleep", "30"}, &result);
  std::string status;
  for (int i = 0; i < 250 && status.empty(); ++i) {
    (void)h.sup->run_once(0.02);
    DIR* d = opendir("/proc");
    while (dirent* e = d ? readdir(d) : nullptr) {
      if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
      std::string st = corral_test::read_file("/proc/" + std::string(e->d_name) + "/status");
      if (contains(st, "Name:\tcorral-init\n") && contains(st, "\nPPid:\t" + std::to_string(getpid()) + "\n")) status = st;
    }
    if (d) closedir(d);
  }
  handle.cancel();
  cr_assert(h.sup->run_until_idle().ok());
  cr_assert(!status.empty(), "no pid 1 (corral-init) of ours showed up");
  unsigned uid = 0;
  auto at = status.find("\nUid:\t");
  cr_assert(at != std::string::npos);
  std::sscanf(status.c_str() + at, "\nUid:\t%u", &uid);
  cr_assert_geq(uid, 200000u, "pid 1 runs as host uid %u", uid);
  auto groups = status.find("\nGroups:");
  cr_assert(groups != std::string::npos);
  std::string line = status.substr(groups + 8, status.find('\n', groups + 1) - groups - 8);
  cr_assert(line.find_first_not_of(" \t") == std::string::npos, "pid 1 kept groups '%s'", line.c_str());
}

Test(container, the_workspace_has_home_but_no_tmp_the_run_has_its_own_tmp) {
  SKIP_UNLESS_CONTAINER();
  Harness h;
  Result r = h.run(boxed({"sh", "-c", "ls -a /workspace; echo TMPDIR=$TMPDIR"}));
  cr_assert_eq(r.outcome, Outcome::exited, "%s", r.detail.c_str());
  const std::string& out = r.stdout_capture.text;
  cr_assert(contains(out, "\nhome\n"), "%s", out.c_str());
  cr_assert(!contains(out, "\ntmp\n"), "a tmp/ in the workspace:\n%s", out.c_str());
  cr_assert(contains(out, "TMPDIR=/tmp\n"), "%s", out.c_str());
}

// As root the workspace is a tmpfs of workspace_bytes (default 1 GiB): a
// write past it fails inside, what was written before is still collected,
// and nothing of the run's is made under the workspace base on the host.
Test(container, as_root_the_workspace_is_a_tmpfs_of_workspace_bytes) {
  SKIP_UNLESS_CONTAINER();
  CORRAL_SKIP_UNLESS_ROOT();
  Harness h;
  Result d = h.run(boxed({"sh", "-c", "grep ' /workspace ' /proc/self/mountinfo"}));
  cr_assert_eq(d.outcome, Outcome::exited, "%s", d.detail.c_str());
  cr_assert(contains(d.stdout_capture.text, " - tmpfs corral-workspace ") &&
                contains(d.stdout_capture.text, "size=1048576k"),
            "%s", d.stdout_capture.text.c_str());
  cr_assert_eq(d.limits.get(Limit::workspace_bytes).value_or(0), 1ull << 30);
  cr_assert_eq(d.enforcement["workspace_bytes"], "hard");

  Request r = boxed({"sh", "-c",
                     "echo kept > out.txt;"
                     " if head -c 3000000 /dev/zero > big.bin 2> /tmp/err.txt; then echo WROTE; else echo FULL; fi;"
                     " grep -c 'No space left' /tmp/err.txt; rm -f big.bin; sleep 0.3"});
  r.limits.set(Limit::workspace_bytes, 1 << 20);
  r.outputs = {"out.txt"};
  std::shared_ptr<Result> res;
  RunCallbacks cb;
  cb.on_result = [&res](const Result& x) { res = std::make_shared<Result>(x); };
  auto handle = h.sup->submit(std::move(r), cb);
  cr_assert(handle.ok(), "%s", handle.ok() ? "" : handle.error().message().c_str());
  // While it runs: nothing of it under the base.
  cr_assert_eq(h.leftovers(), 0u, "a container run made a directory under the workspace base");
  while (!res) cr_assert(h.sup->run_once(1).ok());
  cr_assert_eq(res->outcome, Outcome::exited, "%s", res->detail.c_str());
  cr_assert(contains(res->stdout_capture.text, "FULL\n1\n"), "%s", res->stdout_capture.text.c_str());
  cr_assert_eq(res->artifacts.size(), 1u, "%s", res->detail.c_str());
  cr_assert_eq(res->artifacts[0].bytes, 5u);
  cr_assert_eq(h.leftovers(), 0u);
}

// An input larger than workspace_bytes is refused before anything runs,
// naming the limit.
Test(container, an_input_over_workspace_bytes_is_refused_naming_the_limit) {
  SKIP_UNLESS_CONTAINER();
  CORRAL_SKIP_UNLESS_ROOT();
  Harness h;
  Request r = boxed({"true"});
  Input in;
  in.name = "big.bin";
  in.bytes = std::string(200000, 'x');
  r.inputs.push_back(std::move(in));
  r.limits.set(Limit::workspace_bytes, 65536);
  // A run that did not start (spawn_failed, stage inputs): nothing ran.
  Result res = h.run(std::move(r));
  cr_assert(res.outcome == Outcome::spawn_failed && res.spawn_stage == "inputs",
            "a 200 kB input fit a 64 KiB workspace: %s", res.detail.c_str());
  cr_assert(contains(res.detail, "workspace_bytes=65536") && contains(res.detail, "big.bin"), "%s", res.detail.c_str());
  cr_assert_eq(h.leftovers(), 0u);
}

Test(container, runs_as_a_non_root_uid_in_its_own_pid_and_uts_namespaces) {
  SKIP_UNLESS_CONTAINER();
  Harness h;
  EXPECT_EMPTY(mismatches(observe(h), {{"uid", "65534"},
                                       {"gid", "65534"},
                                       {"proc_pids", "2"},  // pid 1 is not the program's to see
                                       {"hostname", "corral"},
                                       {"cwd", "/workspace"}}));
}

Test(container, network_is_loopback_only_and_cannot_reach_the_hosts_listener) {
  SKIP_UNLESS_CONTAINER();
  Harness h;
  // The listener is on the host's 127.0.0.1; the sandbox's own lo has none.
  // In the template's shared namespace lo is down: the socket is made and
  // the connect finds no route, as in any namespace with no interface up.
  EXPECT_EMPTY(mismatches(observe(h), {{"net_devices", "lo"}, {"connect", in_template() ? "ENETUNREACH" : "ECONNREFUSED"}}));
}

// Socket families are an allow-list, not what the network namespace
// happens to contain: vsock (which no network namespace isolates: it
// reaches the host), netlink, packet and the rest are refused by the filter
// in the template's namespace (AF_UNIX only) and in one of the run's own
// (AF_UNIX and IP on its own lo; with binds, as here without staging).
Test(container, sockets_are_an_allow_list_of_families) {
  SKIP_UNLESS_CONTAINER();
  Harness h;
  Result r = h.run(boxed({"/helpers/inside", "families"}));
  EXPECT_EMPTY(mismatches(r, corral_test::socket_families_allowing(true, false)));
}

Test(container, with_loopback_sockets_are_an_allow_list_of_families_too) {
  SKIP_UNLESS_CONTAINER();
  Harness h;
  Request r = boxed({"/helpers/inside", "families"});
  r.loopback = true;
  EXPECT_EMPTY(mismatches(h.run(std::move(r)), corral_test::socket_families_allowing(true, false)));
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

// pid 1 shares the supervisor's memory in the template (container.hpp,
// spawn_container): the program, same host uid as pid 1, must not reach it
// through the ptrace access check /proc/1/{maps,environ,mem} go through.
// The same check decides what the program's /proc lists
// (hidepid=ptraceable): pid 1 is not found there.
Test(container, the_program_cannot_read_pid_1s_memory) {
  SKIP_UNLESS_CONTAINER();
  Harness h;
  EXPECT_EMPTY(mismatches(observe(h), {{"read_pid1_maps", "ENOENT"},
                                       {"read_pid1_environ", "ENOENT"},
                                       {"read_pid1_mem", "ENOENT"}}));
}

// pid 1 of a template run shares our memory, argv strings included, and a
// run built per run has a copy of them: /proc/1/cmdline is our command
// line, which a library user's program may have called with a secret. The
// program's /proc lists only what it may ptrace (hidepid=ptraceable), and
// pid 1 is not that.
Test(container, the_program_sees_no_command_line_of_its_supervisor) {
  SKIP_UNLESS_CONTAINER();
  Harness h;
  corral_test::CmdlineMark mark("mark-5e1d7a");
  cr_assert(mark.ok(), "our argv is too short to mark");
  for (bool loopback : {false, true}) {
    Request r = boxed({"/helpers/inside", "cmdline-watch", "mark-5e1d7a", "0"});
    r.loopback = loopback;  // with it, a run built per run (pid 1 on a copy of our memory)
    Result res = h.run(std::move(r));
    cr_expect(contains(res.stdout_capture.text, "cmdline_seen=none\n"), "loopback=%d: %s %s", loopback,
              res.stdout_capture.text.c_str(), res.detail.c_str());
  }
}

// A template run's pid 1 runs on our memory (CLONE_VM), so its dumpable
// flag is ours: the kernel sets it to fs.suid_dumpable at every id change
// of a task on our memory (1 there: dumpable; a PR_SET_DUMPABLE 0 made
// after one is undone by the next run's), and a library user may set it.
// The program's ids map to pid 1's host uid and gid; what keeps it out
// whatever the flag says is its Landlock domain and its user namespace
// (pid1.cpp), and /proc does not list pid 1 to it. Set here once the
// program runs (a template spawn returns after its exec); a run built per
// run has a pid 1 of its own memory and holds either way.
Test(container, pid_1_stays_out_of_reach_when_the_supervisor_is_dumpable) {
  SKIP_UNLESS_CONTAINER();
  Harness h;
  std::shared_ptr<Result> result;
  RunHandle handle = submit_boxed(h, {"/helpers/inside", "pid1-reach", "3"}, &result);
  const int was = prctl(PR_GET_DUMPABLE);
  prctl(PR_SET_DUMPABLE, 1);
  while (!result) (void)h.sup->run_once(1);
  prctl(PR_SET_DUMPABLE, was);
  EXPECT_EMPTY(mismatches(*result, {{"pid1_mem", "ENOENT"}, {"pid1_environ", "ENOENT"}}));
}

// A template run's pid 1 and program run on our memory (CLONE_VM) on
// stacks the run maps: after the runs, none of them is left mapped.
Test(container, runs_leave_no_child_stack_mapped_in_the_supervisor) {
  SKIP_UNLESS_CONTAINER();
  Harness h;
  auto maps = [] {
    std::string text = corral_test::read_file("/proc/self/maps");
    return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
  };
  Result first = h.run(boxed({"/helpers/inside", "observe", "1"}));
  cr_assert_eq(first.outcome, Outcome::exited, "%s", first.detail.c_str());
  const std::size_t before = maps();
  for (int i = 0; i < 12; ++i) {
    Result r = h.run(boxed({"/helpers/inside", "observe", "1"}));
    cr_assert_eq(r.outcome, Outcome::exited, "run %d: %s", i, r.detail.c_str());
  }
  // Two stacks and two guard pages a run if they leaked: 48 entries here.
  cr_assert_lt(maps(), before + 12, "mappings grew from %zu to %zu over 12 runs", before, maps());
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

// A run's working directory (chdir) may lie in a bind that runs share and
// write. A link one of them planted there as `/proc/self/fd/N` must not
// take pid 1, which holds a copy of our fds until it has made the tree,
// into a directory we have open on the host: the program would start
// there, outside its root.
Test(container, a_chdir_follows_no_magic_link_out_of_the_root) {
  SKIP_UNLESS_CONTAINER();
  CORRAL_SKIP_UNLESS_ROOT();
  Harness h;
  TempDir shared;
  chmod(shared.path().c_str(), 0777);
  const int host_root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  cr_assert_geq(host_root, 0);
  Request plant = boxed({"/bin/ln", "-s", "/proc/self/fd/" + std::to_string(host_root), "/shared/escape"});
  plant.binds.push_back(MountBind{shared.path(), "/shared", true});
  Result planted = h.run(std::move(plant));
  cr_assert_eq(planted.exit_code, 0, "%s %s", planted.detail.c_str(), planted.stderr_capture.text.c_str());
  Request r = boxed({"/helpers/inside", "cwd-root"});
  r.binds.push_back(MountBind{shared.path(), "/shared", true});
  r.chdir = "/shared/escape";
  Result res = h.run(std::move(r));
  cr_expect(!contains(res.stdout_capture.text, "cwd_in_root=no"), "the program started outside its root: %s",
            res.stdout_capture.text.c_str());
  cr_expect_eq(res.outcome, Outcome::spawn_failed, "a run into the link ran: %s", res.stdout_capture.text.c_str());

  // From the host, not from what the program says: the working directory
  // of a program whose chdir is the link, read at /proc/PID/cwd. It never
  // runs; one whose chdir is the shared directory itself is seen there, so
  // the watch is not blind.
  struct stat host_root_st, shared_st;
  cr_assert_eq(fstat(host_root, &host_root_st), 0);
  cr_assert_eq(stat(shared.path().c_str(), &shared_st), 0);
  const std::vector<std::string> sleeper = {"/bin/sleep", "30.4721"};
  Request plain = boxed(sleeper);
  plain.binds.push_back(MountBind{shared.path(), "/shared", true});
  plain.chdir = "/shared";
  auto control = corral_test::see_from_host(*h.sup, std::move(plain));
  cr_assert(control.pid && control.cwd_ok, "the host never saw the program run: %s", control.result->detail.c_str());
  cr_expect(corral_test::same_file(control.cwd, shared_st), "the program in /shared is not in the shared directory");
  Request escape = boxed(sleeper);
  escape.binds.push_back(MountBind{shared.path(), "/shared", true});
  escape.chdir = "/shared/escape";
  auto seen = corral_test::see_from_host(*h.sup, std::move(escape));
  close(host_root);
  cr_expect(!(seen.cwd_ok && corral_test::same_file(seen.cwd, host_root_st)),
            "the host saw the program (pid %d) run in the host's /", static_cast<int>(seen.pid));
  cr_expect_eq(seen.pid, 0, "a program whose chdir is the link ran (pid %d)", static_cast<int>(seen.pid));
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
  // The supervisor's reading of the run's cgroup (SIGKILL at the limit)
  // and RLIMIT_CPU's SIGXCPU, passed on by pid 1, race for one process.
  cr_assert(c.signal == SIGKILL || c.signal == SIGXCPU, "signal %d", c.signal);
  // The cgroup's count (cpuacct.usage) and RLIMIT_CPU's sampling disagree by
  // a little on this VM; what matters is that the spin was counted.
  cr_assert_geq(c.cpu_seconds, 0.5, "cpu %.3f (the cgroup's count)", c.cpu_seconds);
  Request file = boxed({"/helpers/hostile", "write-file", "big", "5000"});
  file.limits.set(Limit::file_bytes, 1000);
  Result f = h.run(std::move(file));
  cr_assert_eq(f.outcome, Outcome::killed_resource, "%s", f.detail.c_str());
  cr_assert_eq(f.resource, "file_bytes");
}

// v1: a run joins a cpuacct group only when a cpu_seconds limit is read
// through it; without one its cpu_seconds is pid 1's rusage, which holds the
// CPU of the program's children as well (seen from the host: the groups
// are made by submit(), before it returns).
Test(container, a_cpuacct_group_is_made_only_for_a_cpu_limit_and_cpu_is_counted_without) {
  SKIP_UNLESS_CONTAINER();
  const CgroupProbe& p = host().cgroups;
  if (p.backend != CgroupVersion::v1 || p.v1_cpuacct < 0 || !p.v1[p.v1_cpuacct].writable)
    cr_skip_test("no writable v1 cpuacct hierarchy: %s", host().cgroup_summary.c_str());
  auto groups_in = [&](int hier) {
    std::size_t n = 0;
    const std::string mine = "-" + std::to_string(getpid()) + "-";
    DIR* d = opendir((p.v1[hier].own_dir + "/corral").c_str());
    while (dirent* e = d ? readdir(d) : nullptr) n += contains(e->d_name, mine);
    if (d) closedir(d);
    return n;
  };
  Harness h;
  // The work is a child's, which the shell waits for: a fixed amount of CPU.
  const std::string work = "( i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done ) & wait";
  for (bool limited : {false, true}) {
    Request r = boxed({"/bin/sh", "-c", work});
    if (limited) r.limits.set(Limit::cpu_seconds, 100);
    std::shared_ptr<Result> result;
    RunCallbacks cb;
    cb.on_result = [&result](const Result& res) { result = std::make_shared<Result>(res); };
    auto handle = h.sup->submit(std::move(r), cb);
    cr_assert(handle.ok(), "%s", handle ? "" : handle.error().message().c_str());
    const std::size_t cpuacct = groups_in(p.v1_cpuacct);
    if (p.v1_memory >= 0) cr_assert_eq(groups_in(p.v1_memory), 1u, "no memory group of the run");
    cr_assert(h.sup->run_until_idle().ok());
    cr_assert(result);
    cr_assert_eq(result->outcome, Outcome::exited, "%s", result->detail.c_str());
    cr_assert_eq(cpuacct, limited ? 1u : 0u, "%s: %zu cpuacct group(s) of the run",
                 limited ? "cpu_seconds=100" : "no cpu limit", cpuacct);
    cr_assert_gt(result->cpu_seconds, 0.02, "%s: cpu %.3f", limited ? "limited" : "unlimited", result->cpu_seconds);
  }
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

// A supervisor in a child process submits one sandboxed program and is
// SIGKILLed: once the program runs (`wait_for_program`), or right after
// submit returns, while the sandbox may still be in its set-up (submit does
// not wait for the exec). Nothing with the marker may outlive it.
void kill_supervisor_and_expect_no_survivor(bool wait_for_program, int attempt) {
  TempDir base;
  chmod(base.path().c_str(), 0755);
  std::string marker = "orphan-marker-" + std::to_string(getpid()) + "-" + std::to_string(attempt);
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
    (void)!write(ready[1], "x", 1);
    for (;;) pause();
  }
  close(ready[1]);
  char byte;
  cr_assert_eq(read(ready[0], &byte, 1), 1, "the supervisor child did not start its run");
  close(ready[0]);
  if (wait_for_program) {
    for (int i = 0; i < 250 && host_processes_with(marker) == 0; ++i) usleep(20000);
    cr_assert_eq(host_processes_with(marker), 1u, "the sandboxed program did not start");
  }
  kill(sup_pid, SIGKILL);
  waitpid(sup_pid, nullptr, 0);
  std::size_t left = 1;
  for (int i = 0; i < 100 && (left = host_processes_with(marker)) != 0; ++i) usleep(20000);
  cr_assert_eq(left, 0u, "the sandbox outlived its supervisor (attempt %d)", attempt);
  // Its cgroup stays until a sweep: the supervisor died before removing it.
  for (int i = 0; i < 100 && my_run_cgroups(sup_pid) != 0; ++i) {
    (void)sweep_stale_run_cgroups(host().cgroups, CgroupSpec{});
    usleep(20000);
  }
  cr_assert_eq(my_run_cgroups(sup_pid), 0u, "the dead supervisor's cgroup was not swept");
}

Test(container, a_killed_supervisor_takes_its_sandboxes_with_it) {
  SKIP_UNLESS_CONTAINER();
  kill_supervisor_and_expect_no_survivor(true, 0);
}

// The window between the child's release and its PR_SET_PDEATHSIG: no
// signal comes for a parent that is already dead, so the child checks a
// pidfd of it. Several tries land at different points of the set-up.
Test(container, a_supervisor_killed_during_the_sandbox_set_up_leaves_nothing) {
  SKIP_UNLESS_CONTAINER();
  for (int attempt = 1; attempt <= 8; ++attempt) kill_supervisor_and_expect_no_survivor(false, attempt);
}

// submit does not wait for the exec, so a cancel can land while the child
// is still in its set-up: the run still ends cancelled, with nothing left.
Test(container, a_cancel_during_the_set_up_ends_the_run_cleanly) {
  SKIP_UNLESS_CONTAINER();
  Harness h;
  for (int i = 0; i < 5; ++i) {
    std::shared_ptr<Result> result;
    RunHandle handle = submit_boxed(h, {"sleep", "30"}, &result);
    handle.cancel();
    cr_assert(h.sup->run_until_idle().ok());
    cr_assert(result);
    cr_assert_eq(result->outcome, Outcome::cancelled, "try %d: %s", i, result->detail.c_str());
    cr_assert(!contains(result->detail, "no record of why"), "try %d: %s", i, result->detail.c_str());
  }
  cr_assert_eq(my_run_cgroups(), 0u);
  cr_assert_eq(h.leftovers(), 0u);
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
  RunHandle handle = submit_boxed(h, {"sleep", "30"}, &result);
  (void)h.sup->run_once(0.1);
  handle.cancel();
  cr_assert(h.sup->run_until_idle().ok());
  cr_assert(result);
  cr_assert_eq(result->outcome, Outcome::cancelled, "%s", result->detail.c_str());
  cr_assert_eq(my_run_cgroups(), 0u);
  cr_assert_eq(h.leftovers(), 0u);
}
