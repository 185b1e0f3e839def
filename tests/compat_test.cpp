// What ordinary programs expect of their environment, in the tiers that
// change it (issue: real programs run unmodified): pseudo-terminals, the
// public /etc files, a user name, sockets that fail the way a network
// without interfaces does, POSIX semaphores, 32-bit programs. The helper is
// tests/helpers/compat.c; `make compat` runs CPython's own suite on top.
#define CONTAINER_TEST_STAGED 1  // boxed() stages the helper: root runs enter the template
#include "container_support.hpp"
#include "corral/json.hpp"

using namespace container_test;

namespace {

Request in_process(std::vector<std::string> args) {
  Request r;
  r.tier = Tier::os_process;
  r.argv = {corral_test::helper("compat")};
  r.argv.insert(r.argv.end(), args.begin(), args.end());
  return r;
}

// The container request built per run (a bind makes the tree the run's own,
// with a network namespace of its own), where boxed() may enter the template.
Request bound(std::vector<std::string> argv) {
  Request r = boxed(std::move(argv));
  r.binds.push_back(MountBind{helpers_dir(), "/helpers", false});
  return r;
}

std::string ok_or(const Result& r, const std::map<std::string, std::string>& want) { return mismatches(r, want); }

}  // namespace

// A private devpts instance in every container: before it, /dev/ptmx was
// missing and openpty failed ("out of pty devices").
Test(compat, a_pty_round_trip_in_the_container_template_and_per_run) {
  SKIP_UNLESS_CONTAINER();
  Harness h;
  const std::map<std::string, std::string> want{
      {"pty", "ok"}, {"pty_name", "/dev/pts/0"}, {"tty_no_ctty", "ENXIO"}, {"tty_with_pty", "ok"}};
  EXPECT_EMPTY(ok_or(h.run(boxed({"/helpers/compat", "pty"})), want));
  EXPECT_EMPTY(ok_or(h.run(bound({"/helpers/compat", "pty"})), want));
}

// Write confinement used to refuse /dev/ptmx (EACCES): a pty is not a host
// file to protect.
Test(compat, a_pty_round_trip_in_tier_process_with_confined_writes) {
  CORRAL_SKIP_UNLESS_ROOT();
  if (host().landlock_abi < 1) cr_skip_test("no Landlock: write confinement is unsupported here");
  Harness h;
  Request r = in_process({"pty"});
  r.confine_writes = true;
  EXPECT_EMPTY(ok_or(h.run(std::move(r)), {{"pty", "ok"}, {"tty_no_ctty", "ENXIO"}, {"tty_with_pty", "ok"}}));
}

// The container's /etc carries the public name-service tables (getaddrinfo
// with a service name, getprotobyname) and never the secret files.
Test(compat, the_container_etc_has_public_files_and_never_secret_ones) {
  SKIP_UNLESS_CONTAINER();
  Harness h;
  std::map<std::string, std::string> want;
  std::vector<std::string> args{"/helpers/compat", "files"};
  for (const char* pub : {"/etc/services", "/etc/protocols", "/etc/ssl/certs", "/etc/mime.types"})
    if (access(pub, R_OK) == 0) want[pub] = "ok", args.push_back(pub);
  for (const char* secret : {"/etc/shadow", "/etc/gshadow", "/etc/sudoers", "/etc/ssh/ssh_host_ed25519_key",
                             "/etc/ssh/ssh_host_rsa_key", "/etc/ssl/private", "/etc/machine-id", "/etc/subuid"})
    want[secret] = "ENOENT", args.push_back(secret);
  cr_assert(want.size() > 8, "the host has none of the public files this test looks for");
  EXPECT_EMPTY(ok_or(h.run(boxed(args)), want));
}

// USER and LOGNAME are in the clean environment (getpass.getuser()); the
// container's user resolves through its generated /etc/passwd.
Test(compat, the_clean_environment_names_the_user) {
  Harness h;
  Result c = h.run(in_process({"whoami"}));
  auto seen = kv(c.stdout_capture.text);
  cr_expect(seen["USER"] != "-" && seen["USER"] == seen["LOGNAME"], "process: %s", c.stdout_capture.text.c_str());
  if (geteuid() == 0) cr_expect(seen["USER"].rfind("corral-2", 0) == 0, "process as root: %s", seen["USER"].c_str());
  if (!host().user_namespaces || !host().pivot_root) return;
  EXPECT_EMPTY(ok_or(h.run(boxed({"/helpers/compat", "whoami"})),
                     {{"USER", "sandbox"}, {"LOGNAME", "sandbox"}, {"pw_name", "sandbox"}, {"HOME", "/workspace/home"}}));
}

// Without USER in corral's environment a run as us (tier none) is named by
// our passwd entry, the one the program's own getpwuid finds (corral reads
// /etc/passwd itself, NSS only when the file has no line for the uid).
Test(compat, without_USER_a_run_as_us_is_named_by_our_passwd_entry) {
  unsetenv("USER");
  Harness h;
  Request r = in_process({"whoami"});
  r.tier = Tier::none;
  Result c = h.run(r);
  auto seen = kv(c.stdout_capture.text);
  cr_assert(!seen["pw_name"].empty() && seen["pw_name"] != "ENOENT", "no passwd entry for our uid: %s",
            c.stdout_capture.text.c_str());
  cr_expect_eq(seen["USER"], seen["pw_name"], "%s", c.stdout_capture.text.c_str());
  cr_expect_eq(seen["LOGNAME"], seen["pw_name"], "%s", c.stdout_capture.text.c_str());
}

// Without --loopback a container's socket(AF_INET) is made and fails where
// a network with no interface up fails (it was EACCES at socket()); with
// it, a program binds and connects to itself on 127.0.0.1. The Result says
// which network the run had.
Test(compat, container_sockets_fail_at_connect_and_loopback_works) {
  SKIP_UNLESS_CONTAINER();
  Harness h;
  Result closed = h.run(boxed({"/helpers/compat", "loopback"}));
  if (in_template()) {
    EXPECT_EMPTY(ok_or(closed, {{"socket", "ok"}, {"connect", "ENETUNREACH"}}));
    cr_expect_eq(closed.enforcement.at("network"), "empty_namespace");
  } else {
    cr_expect_eq(closed.enforcement.at("network"), "loopback");
  }
  Request r = boxed({"/helpers/compat", "loopback"});
  r.loopback = true;
  Result open = h.run(std::move(r));
  EXPECT_EMPTY(ok_or(open, {{"socket", "ok"}, {"bind", "ok"}, {"connect", "ok"}, {"roundtrip", "ok"}}));
  cr_expect_eq(open.enforcement.at("network"), "loopback");
}

Test(compat, process_tier_network_is_named_in_the_result) {
  Harness h;
  Result host_net = h.run(in_process({"loopback"}));
  cr_expect_eq(host_net.enforcement.at("network"), "host");
  Request r = in_process({"loopback"});
  r.net = NetworkAccess::none;
  Result none = h.run(std::move(r));
  cr_expect_eq(none.enforcement.at("network"), "none");
  EXPECT_EMPTY(ok_or(none, {{"socket", "EACCES"}}));
}

// Under --net none a program's socket(AF_INET) fails with EACCES, which
// used to say nothing about who refused it: the supervisor now answers the
// seccomp filter's notification (the same EACCES, each time) and the Result
// counts the refusals. A run that makes no socket call has no count.
Test(compat, refused_socket_calls_are_counted_in_the_result) {
  Harness h;
  Request r = in_process({"sockets", "3"});
  r.net = NetworkAccess::none;
  Result res = h.run(std::move(r));
  EXPECT_EMPTY(ok_or(res, {{"socket_eacces", "3"}, {"socket_other", "-"}}));
  cr_expect_eq(res.refused_syscalls.size(), 1u, "refused_syscalls: %zu entries", res.refused_syscalls.size());
  cr_expect_eq(res.refused_syscalls["socket"], 3u, "socket refusals counted: %llu",
               static_cast<unsigned long long>(res.refused_syscalls["socket"]));
  cr_expect(contains(res.detail, "3 socket() calls refused by corral (network none)"), "%s", res.detail.c_str());
  cr_expect(contains(result_to_json(res), "\"refused_syscalls\":{\"socket\":3}"), "%s", result_to_json(res).c_str());

  Request quiet = in_process({"whoami"});
  quiet.net = NetworkAccess::none;
  Result q = h.run(std::move(quiet));
  cr_expect(q.refused_syscalls.empty(), "a run without socket calls has a count");
  cr_expect(!contains(q.detail, "refused"), "%s", q.detail.c_str());
  cr_expect(contains(result_to_json(q), "\"refused_syscalls\":{}"));

  // With the host's network nothing is refused, and nothing counted.
  Result open = h.run(in_process({"sockets", "3"}));
  EXPECT_EMPTY(ok_or(open, {{"socket_eacces", "0"}}));
  cr_expect(open.refused_syscalls.empty());
}

// A hostile flood: 100,000 refused socket calls, each one waiting for the
// supervisor's answer, all answered (EACCES every time, none left hanging)
// and counted, while the same supervisor serves a neighbour run to its end
// (which finishes first: its three refusals are not queued behind the flood).
Test(compat, a_flood_of_refused_socket_calls_is_answered_and_counted, .timeout = 240) {
  Harness h;
  std::vector<std::string> order;
  std::map<std::string, Result> results;
  auto submit = [&](const std::string& name, std::vector<std::string> args) {
    Request r = in_process(std::move(args));
    r.net = NetworkAccess::none;
    r.limits.set(Limit::wall_seconds, 200);
    RunCallbacks cb;
    cb.on_result = [&, name](const Result& res) {
      order.push_back(name);
      results[name] = res;
    };
    auto handle = h.sup->submit(std::move(r), cb);
    cr_assert(handle.ok(), "%s", handle.ok() ? "" : handle.error().message().c_str());
    return std::move(*handle);
  };
  auto flood = submit("flood", {"sockets", "100000"});
  // Let the flood get going before the neighbour starts.
  for (int i = 0; i < 20; ++i) (void)h.sup->run_once(0.005);
  auto neighbour = submit("neighbour", {"sockets", "3"});
  cr_assert(h.sup->run_until_idle().ok());
  cr_assert_eq(order.size(), 2u);
  EXPECT_EMPTY(ok_or(results["flood"], {{"socket_eacces", "100000"}, {"socket_other", "-"}}));
  cr_expect_eq(results["flood"].refused_syscalls["socket"], 100000u);
  EXPECT_EMPTY(ok_or(results["neighbour"], {{"socket_eacces", "3"}}));
  cr_expect_eq(results["neighbour"].refused_syscalls["socket"], 3u);
  cr_expect_eq(order.front(), "neighbour", "the neighbour waited for the flood to end");
}

// POSIX semaphores (Python's multiprocessing locks) live in /dev/shm,
// which --confine-writes used to leave outside the write set (sem_open:
// EACCES). As root each confined run now has a /dev/shm of its own, a tmpfs
// in its mount namespace: writable, seen by neither the host nor a
// neighbour, gone with the run. Naming /dev/shm as a write path keeps the
// host's (and shares it).
Test(compat, confined_writes_get_a_dev_shm_of_the_runs_own) {
  CORRAL_SKIP_UNLESS_ROOT();
  if (host().landlock_abi < 1) cr_skip_test("no Landlock: write confinement is unsupported here");
  Harness h;
  auto confined = [](std::vector<std::string> args) {
    Request r = in_process(std::move(args));
    r.confine_writes = true;
    return r;
  };
  EXPECT_EMPTY(ok_or(h.run(confined({"semaphore"})), {{"sem_open", "ok"}}));
  Request py;
  py.tier = Tier::os_process;
  py.confine_writes = true;
  py.argv = {"python3", "-c", "import multiprocessing; l = multiprocessing.Lock(); l.acquire(); l.release(); print('lock=ok')"};
  Result pr = h.run(std::move(py));
  cr_expect(contains(pr.stdout_capture.text, "lock=ok"), "multiprocessing.Lock(): %s %s", pr.stdout_capture.text.c_str(),
            pr.stderr_capture.text.c_str());

  // A run holds its file in /dev/shm while the host and a neighbour look.
  const std::string name = "corral-compat-shm-" + std::to_string(getpid());
  const std::string host_path = "/dev/shm/" + name;
  std::string seen;
  std::shared_ptr<Result> held;
  RunCallbacks cb;
  cb.on_output = [&](StreamId, std::string_view data) { seen.append(data); };
  cb.on_result = [&](const Result& r) { held = std::make_shared<Result>(r); };
  auto handle = h.sup->submit(confined({"shm-write", name, "30"}), cb);
  cr_assert(handle.ok(), "%s", handle.ok() ? "" : handle.error().message().c_str());
  for (int i = 0; i < 2000 && !contains(seen, "shm_write=") && !held; ++i) (void)h.sup->run_once(0.01);
  cr_assert(contains(seen, "shm_write=ok"), "the run could not write its /dev/shm: %s", seen.c_str());
  cr_expect_neq(access(host_path.c_str(), F_OK), 0, "the run's file is in the host's /dev/shm");
  EXPECT_EMPTY(ok_or(h.run(confined({"shm-look", name})), {{"shm_look", "ENOENT"}}));
  EXPECT_EMPTY(ok_or(h.run(in_process({"shm-look", name})), {{"shm_look", "ENOENT"}}));
  handle->cancel();
  cr_assert(h.sup->run_until_idle().ok());
  cr_expect_neq(access(host_path.c_str(), F_OK), 0);

  // --write-path /dev/shm: the host's, as before (what it leaves stays).
  Request shared = confined({"shm-write", name});
  shared.write_paths.push_back("/dev/shm");
  EXPECT_EMPTY(ok_or(h.run(std::move(shared)), {{"shm_write", "ok"}}));
  cr_expect_eq(access(host_path.c_str(), F_OK), 0, "--write-path /dev/shm did not reach the host's");
  unlink(host_path.c_str());
  SKIP_UNLESS_CONTAINER();
  EXPECT_EMPTY(ok_or(h.run(boxed({"/helpers/compat", "semaphore"})), {{"sem_open", "ok"}}));
}

// A 32-bit program used to die of SIGSYS at its first system call (the
// filter is x86_64's; this host may not even run IA-32 code): now it is
// refused before anything runs, naming why. The program here is an ELF32
// header only: it is never executed.
Test(compat, a_32bit_program_is_refused_naming_why) {
  TempDir dir;
  chmod(dir.path().c_str(), 0755);
  std::string prog = dir.path() + "/i386";
  unsigned char elf[52] = {0x7f, 'E', 'L', 'F', 1 /* ELFCLASS32 */, 1, 1};
  elf[16] = 2;  // ET_EXEC
  elf[18] = 3;  // EM_386
  int fd = open(prog.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0755);
  cr_assert(fd >= 0 && write(fd, elf, sizeof elf) == static_cast<ssize_t>(sizeof elf));
  close(fd);
  Harness h;
  Request r;
  r.tier = Tier::os_process;
  r.argv = {prog};
  auto res = h.sup->run(std::move(r));
  cr_assert(!res.ok(), "a 32-bit program ran: outcome %s", res.ok() ? std::string(to_string(res->outcome)).c_str() : "");
  cr_expect(contains(res.error().message(), "32-bit program"), "%s", res.error().message().c_str());
  Request none;
  none.tier = Tier::none;  // no filter: the kernel decides
  none.argv = {prog};
  cr_expect(h.sup->run(std::move(none)).ok());
}
