// Integration tests of tier process's confinement through the supervisor,
// as root: a uid of the run's own, no capabilities, no_new_privs, the
// seccomp filter, an IPC namespace of the run's own; for one run, for runs
// side by side, and for runs one after another (those the supervisor clones
// from its spawn thread: spawn_thread.hpp). Helpers from
// tests/helpers/hostile.c.
#include <dirent.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/magic.h>
#include <mqueue.h>
#include <sched.h>
#include <sys/inotify.h>
#include <sys/msg.h>
#include <sys/prctl.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <tuple>
#include <cstring>
#include <set>
#include <sstream>

#include "corral/spawn_thread.hpp"
#include "corral/supervisor.hpp"
#include "corral/workspace_base.hpp"
#include "../src/background_work.hpp"
#include "support.hpp"
#include "supervisor_harness.hpp"

using namespace corral;
using corral_test::Harness;
using corral_test::req;
using corral_test::helper;
using corral_test::TempDir;

namespace {

// Whether /proc/sysvipc/KIND ("shm", "msg") of our IPC namespace, the
// host's, lists `key` (the first column).
bool host_ipc_has(const char* kind, key_t key) {
  std::istringstream in(corral_test::read_file(std::string("/proc/sysvipc/") + kind));
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    long long k = 0;
    if (std::istringstream(line) >> k && k == key) return true;
  }
  return false;
}

bool host_mqueue_has(key_t key) {
  std::string name = "/corral-" + std::to_string(key);
  mqd_t q = mq_open(name.c_str(), O_RDONLY);
  if (q == static_cast<mqd_t>(-1)) return false;
  mq_close(q);
  return true;
}

// Removes what an unconfined run left with `key` on the host.
void remove_host_ipc(key_t key) {
  int shm = shmget(key, 0, 0);
  if (shm >= 0) shmctl(shm, IPC_RMID, nullptr);
  int msg = msgget(key, 0);
  if (msg >= 0) msgctl(msg, IPC_RMID, nullptr);
  mq_unlink(("/corral-" + std::to_string(key)).c_str());
}

// From the host: while a `sleep` run of `h` is in flight, whether its IPC
// namespace (entered through /proc/PID/ns/ipc by a forked probe, not by
// corral's code) holds KEY's SysV segment, queue or semaphore set or the
// POSIX queue /corral-KEY. "none" when it holds none of them.
std::string objects_seen_from_host(Harness& h, key_t key) {
  RunCallbacks cb;
  auto handle = h.sup->submit(req(Tier::os_process, {"sleep", "5"}), std::move(cb));
  cr_assert(handle.ok(), "%s", handle.ok() ? "" : handle.error().message().c_str());
  pid_t pid = 0;
  auto t0 = std::chrono::steady_clock::now();
  while (pid == 0 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10)) {
    cr_assert(h.sup->run_once(0.01).ok());
    std::istringstream kids(corral_test::children_of(getpid()));
    for (pid_t p; kids >> p;)
      if (corral_test::read_file("/proc/" + std::to_string(p) + "/comm") == "sleep\n") pid = p;
  }
  cr_assert_gt(pid, 0, "the sleep run never showed among our children");
  const std::string ns = "/proc/" + std::to_string(pid) + "/ns/ipc";
  auto probe = corral_test::run_in_child_reporting([&](int report) {
    int fd = open(ns.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWIPC) != 0) return 2;
    const std::string name = "/corral-" + std::to_string(key);
    std::string seen;
    if (shmget(key, 0, 0) >= 0) seen += "shm ";
    if (msgget(key, 0) >= 0) seen += "msg ";
    if (semget(key, 0, 0) >= 0) seen += "sem ";
    mqd_t q = mq_open(name.c_str(), O_RDONLY);
    if (q != static_cast<mqd_t>(-1)) seen += "mq ";
    if (seen.empty()) seen = "none";
    return write(report, seen.data(), seen.size()) == static_cast<ssize_t>(seen.size()) ? 0 : 3;
  });
  handle->cancel();
  cr_assert(h.sup->run_until_idle().ok());
  cr_assert(probe.end.exited && probe.end.code == 0, "the probe could not enter %s", ns.c_str());
  return probe.output;
}

}  // namespace

Test(process_tier, drops_uid_capabilities_and_installs_seccomp) {
  CORRAL_SKIP_UNLESS_ROOT();
  Harness h;
  Result res = h.run(req(Tier::os_process, {"cat", "/proc/self/status"}));
  cr_assert_eq(res.outcome, Outcome::exited, "%s", res.detail.c_str());
  const std::string& s = res.stdout_capture.text;
  auto field = [&](const std::string& key) {
    auto pos = s.find("\n" + key + ":");
    cr_assert(pos != std::string::npos, "no %s", key.c_str());
    auto start = s.find_first_not_of(" \t", pos + key.size() + 2);
    return s.substr(start, s.find('\n', start) - start);
  };
  unsigned uid = std::stoul(field("Uid"));
  cr_assert_geq(uid, 200000u, "uid %u", uid);
  cr_assert(field("CapEff") == "0000000000000000", "CapEff %s", field("CapEff").c_str());
  cr_assert(field("CapBnd") == "0000000000000000", "CapBnd %s", field("CapBnd").c_str());
  cr_assert(field("NoNewPrivs") == "1");
  cr_assert(field("Seccomp") == "2");
}

// As root each process-tier run has an IPC namespace of its own: a SysV shm
// segment, a message queue and a POSIX queue made by one run are not on
// the host while it runs, not seen by a second run alive at the same time,
// and gone once it has ended (they would have outlived it on the host's
// IPC namespace, readable by the next run).
Test(process_tier, ipc_is_the_runs_own_and_dies_with_it) {
  CORRAL_SKIP_UNLESS_ROOT();
  Harness h;
  TempDir meet;
  chmod(meet.path().c_str(), 0777);
  const key_t key = 0x43520000 | ((getpid() & 0xffff) << 4);
  Result made, looked;
  RunCallbacks cb_made, cb_looked;
  cb_made.on_result = [&](const Result& r) { made = r; };
  cb_looked.on_result = [&](const Result& r) { looked = r; };
  auto a = h.sup->submit(req(Tier::os_process, {helper("hostile"), "ipc-make", std::to_string(key), meet.path()}),
                         cb_made);
  auto b = h.sup->submit(req(Tier::os_process, {helper("hostile"), "ipc-look", std::to_string(key), meet.path()}),
                         cb_looked);
  cr_assert(a.ok() && b.ok());
  // While the maker holds its objects: the host's namespace has none of them.
  auto t0 = std::chrono::steady_clock::now();
  while (access((meet / "made").c_str(), F_OK) != 0 &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20))
    cr_assert(h.sup->run_once(0.05).ok());
  const bool during = host_ipc_has("shm", key) || host_ipc_has("msg", key) || host_mqueue_has(key);
  cr_assert(h.sup->run_until_idle().ok());
  const bool after_shm = host_ipc_has("shm", key), after_msg = host_ipc_has("msg", key);
  const bool after_mq = host_mqueue_has(key);
  remove_host_ipc(key);

  cr_assert_str_eq(made.stdout_capture.text.c_str(), "shm=ok\nmsg=ok\nmq=ok\n", "maker: %s %s",
                   made.detail.c_str(), made.stderr_capture.text.c_str());
  cr_assert_eq(made.exit_code, 0, "the maker did not see the other run finish: %s", made.detail.c_str());
  cr_expect_str_eq(looked.stdout_capture.text.c_str(), "shm=ENOENT\nmsg=ENOENT\nmq=ENOENT\n",
                   "a concurrent run saw the first's IPC objects");
  cr_expect(!during, "the run's IPC objects were in the host's namespace while it ran");
  cr_expect(!after_shm, "the shm segment (key %d) outlived the run on the host", key);
  cr_expect(!after_msg, "the message queue (key %d) outlived the run on the host", key);
  cr_expect(!after_mq, "the POSIX queue /corral-%d outlived the run on the host", key);
}

// Runs one after another, as a loop of submits makes them: from the third
// on, the supervisor clones them from its spawn thread (spawn_thread.hpp),
// whose fresh IPC namespace each is born in. What a run leaves in its IPC
// namespace (SysV shm, message queue, POSIX queue, never removed) is seen
// by no later run, nor on the host: a namespace with an object in it is
// never given again.
Test(process_tier, runs_in_a_row_never_share_an_ipc_namespace) {
  CORRAL_SKIP_UNLESS_ROOT();
  Harness h;
  const key_t base = 0x43530000 | ((getpid() & 0xfff) << 4);
  for (int i = 0; i < 5; ++i) {
    const key_t key = base + i;
    TempDir meet;
    chmod(meet.path().c_str(), 0777);
    corral_test::write_file(meet / "done", "");  // the maker leaves at once
    Result made = h.run(req(Tier::os_process, {helper("hostile"), "ipc-make", std::to_string(key), meet.path()}));
    cr_assert_str_eq(made.stdout_capture.text.c_str(), "shm=ok\nmsg=ok\nmq=ok\n", "maker %d: %s %s", i,
                     made.detail.c_str(), made.stderr_capture.text.c_str());
    Result looked = h.run(req(Tier::os_process, {helper("hostile"), "ipc-look", std::to_string(key), meet.path()}));
    const bool on_host = host_ipc_has("shm", key) || host_ipc_has("msg", key) || host_mqueue_has(key);
    remove_host_ipc(key);
    cr_expect_str_eq(looked.stdout_capture.text.c_str(), "shm=ENOENT\nmsg=ENOENT\nmq=ENOENT\n",
                     "run %d saw what the run before it left in its IPC namespace", 2 * i + 1);
    cr_expect(!on_host, "the IPC objects of run %d are on the host", 2 * i);
  }
}

// The same, one kind of object at a time, for the namespaces a finished
// run left behind (ipc_namespace.hpp): a run that leaves a single SysV
// segment, message queue or semaphore set, or a single POSIX queue, makes
// its namespace one that is not handed on, and the runs after it (from
// the spawn thread, which takes kept namespaces first) find nothing. The
// runs that leave nothing pass theirs on, which is what makes a run
// cheaper: a namespace's first SysV object has id 0, a later one a higher
// id, so a run that makes (and removes) one shows whether it was first.
Test(process_tier, a_namespace_a_run_left_an_ipc_object_in_is_never_handed_on) {
  CORRAL_SKIP_UNLESS_ROOT();
  Harness h;
  const key_t base = 0x43540000 | ((getpid() & 0xfff) << 4);
  auto object_id = [&] {
    Result r = h.run(req(Tier::os_process, {helper("hostile"), "ipc-id"}));
    cr_assert_eq(r.exit_code, 0, "%s %s", r.detail.c_str(), r.stderr_capture.text.c_str());
    return std::stoi(r.stdout_capture.text);
  };
  // Warm: the spawn thread runs, with a namespace kept.
  for (int i = 0; i < 3; ++i) (void)object_id();
  int highest = 0;
  for (int i = 0; i < 4; ++i) highest = std::max(highest, object_id());
  cr_expect_gt(highest, 0, "four clean runs in a row each made the first object of its IPC namespace: none was handed on");
  const char* kinds[] = {"shm", "msg", "sem", "mq"};
  for (int k = 0; k < 4; ++k) {
    const key_t key = base + k;
    const std::string kind = kinds[k];
    Result left = h.run(req(Tier::os_process, {helper("hostile"), "ipc-leave", kind, std::to_string(key)}));
    cr_assert_str_eq(left.stdout_capture.text.c_str(), (kind + "=ok\n").c_str(), "%s: %s %s", kind.c_str(),
                     left.detail.c_str(), left.stderr_capture.text.c_str());
    // Seen from the host, the next two runs' namespaces (the second is the
    // first the spawn thread could have taken from its kept ones).
    for (int j = 0; j < 2; ++j)
      cr_expect_str_eq(objects_seen_from_host(h, key).c_str(), "none",
                       "from the host: run %d after the one that left a %s object has it", j + 1, kind.c_str());
    // Every namespace kept so far is tried by the next runs: as many finds
    // as the spawn thread keeps, and one more.
    for (std::size_t j = 0; j <= corral::SpawnThread::kKeptIpcNamespaces; ++j) {
      Result found = h.run(req(Tier::os_process, {helper("hostile"), "ipc-find", kind, std::to_string(key)}));
      cr_expect_str_eq(found.stdout_capture.text.c_str(), (kind + "=ENOENT\n").c_str(),
                       "run %zu after the one that left a %s object saw it", j + 1, kind.c_str());
    }
  }
  remove_host_ipc(base + 3);  // had a queue reached the host's namespace
}

// Runs one after another keep every drop, the ones cloned from the spawn
// thread too: no capability in any set, no_new_privs, the filter, a uid of
// their own. An ambient capability raised in the supervisor's thread (which
// the spawn thread inherits) reaches none of them: the uid change and the
// capset empty the ambient set, with no PR_CAP_AMBIENT call of the child's.
Test(process_tier, runs_in_a_row_drop_every_capability) {
  CORRAL_SKIP_UNLESS_ROOT();
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  cr_assert_eq(syscall(SYS_capget, &hdr, data), 0);
  data[CAP_TO_INDEX(CAP_NET_BIND_SERVICE)].inheritable |= CAP_TO_MASK(CAP_NET_BIND_SERVICE);
  cr_assert_eq(syscall(SYS_capset, &hdr, data), 0, "capset: %s", strerror(errno));
  cr_assert_eq(prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_NET_BIND_SERVICE, 0, 0), 0, "ambient raise: %s",
               strerror(errno));
  const std::string our_ambient = corral_test::proc_status_field("thread-self", "CapAmb");
  const std::string our_bounding = corral_test::proc_status_field("thread-self", "CapBnd");
  cr_assert_neq(our_ambient, "0000000000000000");
  Harness h;
  std::set<unsigned> uids;
  for (int i = 0; i < 5; ++i) {
    Result res = h.run(req(Tier::os_process, {"cat", "/proc/self/status"}));
    cr_assert_eq(res.outcome, Outcome::exited, "run %d: %s", i, res.detail.c_str());
    const std::string& s = res.stdout_capture.text;
    auto field = [&](const std::string& key) {
      auto pos = s.find("\n" + key + ":");
      cr_assert(pos != std::string::npos, "run %d: no %s", i, key.c_str());
      auto start = s.find_first_not_of(" \t", pos + key.size() + 2);
      return s.substr(start, s.find('\n', start) - start);
    };
    for (const char* set : {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"})
      cr_expect_eq(field(set), "0000000000000000", "run %d: %s %s", i, set, field(set).c_str());
    cr_expect_eq(field("NoNewPrivs"), "1", "run %d", i);
    cr_expect_eq(field("Seccomp"), "2", "run %d", i);
    unsigned uid = std::stoul(field("Uid"));
    cr_expect_geq(uid, 200000u, "run %d: uid %u", i, uid);
    uids.insert(uid);
  }
  // Ours are as they were: the drops were the children's (and the spawn
  // thread's own).
  cr_expect_eq(corral_test::proc_status_field("thread-self", "CapAmb"), our_ambient);
  cr_expect_eq(corral_test::proc_status_field("thread-self", "CapBnd"), our_bounding);
}

// As root a sized workspace is a tmpfs of the run's own, over its
// directory in a mount namespace of the run's own: a run cannot write past
// workspace_bytes (HOME and TMPDIR are in it too), where before it shared
// the base with every neighbour (corral's tmpfs, half of RAM) and
// workspace_bytes was refused as unsupported. The directory goes with the
// run.
Test(process_tier, a_sized_workspace_is_a_tmpfs_a_run_cannot_write_past) {
  CORRAL_SKIP_UNLESS_ROOT();
  Harness h;
  Request r = req(Tier::os_process,
                  {"/bin/sh", "-c",
                   "pwd; stat -f -c '%T %b %S' .; "
                   "dd if=/dev/zero of=\"$TMPDIR/a\" bs=1M count=3 2>/dev/null; echo tmp=$?; "
                   "dd if=/dev/zero of=\"$HOME/b\" bs=1M count=3 2>/dev/null; echo home=$?; "
                   "dd if=/dev/zero of=c bs=1M count=64 2>/dev/null; echo root=$?; "
                   "du -sk . | cut -f1"});
  r.limits.set(Limit::workspace_bytes, 8ull << 20);
  Result res = h.run(r);
  cr_assert_eq(res.outcome, Outcome::exited, "%s", res.detail.c_str());
  std::istringstream out(res.stdout_capture.text);
  std::string dir, fs, blocks, block_size, tmp, home, root, kib;
  out >> dir >> fs >> blocks >> block_size >> tmp >> home >> root >> kib;
  cr_expect_eq(fs, "tmpfs", "%s", res.stdout_capture.text.c_str());
  cr_expect_eq(std::stoull(blocks) * std::stoull(block_size), 8ull << 20, "%s", res.stdout_capture.text.c_str());
  cr_expect_eq(tmp, "tmp=0", "%s", res.stdout_capture.text.c_str());
  cr_expect_eq(home, "home=0", "%s", res.stdout_capture.text.c_str());
  cr_expect_eq(root, "root=1", "a write past workspace_bytes went through: %s", res.stdout_capture.text.c_str());
  cr_expect_leq(std::stoull(kib), 8192ull, "%s", res.stdout_capture.text.c_str());
  cr_expect_eq(res.limits.get(Limit::workspace_bytes).value_or(0), 8ull << 20);
  cr_expect_eq(res.enforcement["workspace_bytes"], "hard");
  cr_expect_neq(access(dir.c_str(), F_OK), 0, "the workspace's directory %s outlived the run", dir.c_str());
  // The mount was the run's namespace's only: none reached ours.
  cr_expect(!corral_test::contains(corral_test::read_file("/proc/self/mountinfo"), dir), "%s is mounted on the host",
            dir.c_str());
}

// --confine-writes gives the run a mount namespace anyway: its workspace
// is a tmpfs of the container's default size, Landlock lets it write
// there (the rule names the tmpfs, not the directory it covers), and a
// declared output is collected from it. An input larger than the size is
// refused before anything runs, naming the limit.
Test(process_tier, confined_writes_get_a_tmpfs_workspace_of_the_default_size) {
  CORRAL_SKIP_UNLESS_ROOT();
  Harness h;
  Request r = req(Tier::os_process, {"/bin/sh", "-c", "stat -f -c '%T %b %S' .; echo made > out.txt; echo x > \"$TMPDIR/t\" && echo tmp_ok"});
  r.confine_writes = true;
  r.outputs.push_back("out.txt");
  Result res = h.run(r);
  cr_assert_eq(res.outcome, Outcome::exited, "%s", res.detail.c_str());
  std::istringstream out(res.stdout_capture.text);
  std::string fs, blocks, block_size, tmp_ok;
  out >> fs >> blocks >> block_size >> tmp_ok;
  cr_expect_eq(fs, "tmpfs", "%s", res.stdout_capture.text.c_str());
  cr_expect_eq(std::stoull(blocks) * std::stoull(block_size), 1ull << 30, "%s", res.stdout_capture.text.c_str());
  cr_expect_eq(tmp_ok, "tmp_ok", "%s", res.stdout_capture.text.c_str());
  cr_assert_eq(res.artifacts.size(), 1u, "%s", res.detail.c_str());
  cr_expect_eq(res.artifacts[0].bytes, 5u);

  Request sized = req(Tier::os_process, {"/bin/true"});
  sized.limits.set(Limit::workspace_bytes, 65536);
  Input big;
  big.name = "big.bin";
  big.bytes = std::string(100000, 'x');
  sized.inputs.push_back(big);
  auto refused = h.sup->run(sized);
  std::string why = refused.ok() ? refused->detail : refused.error().message();
  cr_assert(!refused.ok() || refused->outcome != Outcome::exited, "a 100000-byte input went into 65536 bytes");
  cr_expect(corral_test::contains(why, "workspace_bytes=65536") && corral_test::contains(why, "big.bin"), "%s", why.c_str());
}

// As root in corral's own base, a run that asked for nothing gets a tmpfs
// of its own (1 GiB, as a container's) mounted over its directory for the
// run's time: two runs in flight have one each, neither is the base every
// run shares, so neither can fill its neighbour's. After the runs nothing
// is mounted there and the directories are gone. On the old code both
// workspaces were directories of the base (11.8 GiB here, half of RAM).
Test(process_tier, a_default_workspace_is_a_tmpfs_of_its_own_for_the_runs_time) {
  CORRAL_SKIP_UNLESS_ROOT();
  unsetenv("TMPDIR");  // corral's default base: its own tmpfs at /run/corral/workspaces
  auto sup = Supervisor::create();
  cr_assert(sup.ok(), "%s", sup.ok() ? "" : sup.error().message().c_str());
  TempDir meet;
  chmod(meet.path().c_str(), 0777);
  std::vector<Result> results;
  std::vector<RunHandle> handles;
  for (const char* name : {"a", "b"}) {
    Request r = req(Tier::os_process, {"/bin/sh", "-c",
                                       "dd if=/dev/zero of=mine bs=1M count=4 2>/dev/null; "
                                       "{ pwd; stat -f -c '%T %b %S %i' .; stat -c %d .; } > \"$0/$1.tmp\" && "
                                       "mv \"$0/$1.tmp\" \"$0/$1\" && sleep 5",
                                       meet.path(), name});
    RunCallbacks cb;
    cb.on_result = [&results](const Result& got) { results.push_back(got); };
    auto handle = (*sup)->submit(std::move(r), std::move(cb));
    cr_assert(handle.ok(), "%s", handle.ok() ? "" : handle.error().message().c_str());
    handles.push_back(std::move(*handle));
  }
  auto t0 = std::chrono::steady_clock::now();
  while ((access((meet / "a").c_str(), F_OK) != 0 || access((meet / "b").c_str(), F_OK) != 0) &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10))
    cr_assert((*sup)->run_once(0.01).ok());
  struct stat base {};
  cr_assert_eq(stat(kRootWorkspaceMount, &base), 0);
  std::vector<std::string> dirs;
  std::set<std::string> devices;
  const std::string mounts = corral_test::read_file("/proc/self/mountinfo");
  for (const char* name : {"a", "b"}) {
    std::istringstream said(corral_test::read_file(meet / name));
    std::string dir, type, blocks, block_size, fsid, dev;
    said >> dir >> type >> blocks >> block_size >> fsid >> dev;
    cr_assert(!dir.empty(), "run %s never said where its workspace is", name);
    cr_expect_eq(dir.rfind(std::string(kRootWorkspaceMount) + "/", 0), 0u, "%s", dir.c_str());
    cr_expect_eq(type, "tmpfs", "run %s: %s", name, type.c_str());
    cr_expect_eq(std::stoull(blocks) * std::stoull(block_size), 1ull << 30, "run %s: a tmpfs of %s blocks of %s", name,
                 blocks.c_str(), block_size.c_str());
    cr_expect_neq(std::stoull(dev), static_cast<unsigned long long>(base.st_dev),
                  "run %s's workspace is on the base every run shares", name);
    cr_expect(corral_test::contains(mounts, " " + dir + " "), "the host's mount table has nothing at %s", dir.c_str());
    devices.insert(dev);
    dirs.push_back(dir);
  }
  cr_expect_eq(devices.size(), 2u, "the two runs share one workspace filesystem");
  // The host's own view: each path is a tmpfs of 1 GiB; and, with the runs
  // in flight, the supervisor holds no fd of either (released as a
  // directory workspace is: the fd budget does not grow).
  for (const auto& dir : dirs) {
    struct statfs fs {};
    cr_expect(statfs(dir.c_str(), &fs) == 0 && fs.f_type == TMPFS_MAGIC &&
                  static_cast<unsigned long long>(fs.f_blocks) * fs.f_bsize == 1ull << 30,
              "from the host, %s is not a tmpfs of 1 GiB", dir.c_str());
    // Its inodes bounded too: one per 4 KiB of it plus 1024.
    cr_expect_eq(static_cast<unsigned long long>(fs.f_files), (1ull << 30) / 4096 + 1024,
                 "from the host, %s allows %llu inodes", dir.c_str(), static_cast<unsigned long long>(fs.f_files));
  }
  std::size_t held = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(d)) {
      char target[4096];
      ssize_t n = readlinkat(dirfd(d), e->d_name, target, sizeof target - 1);
      if (n <= 0) continue;
      const std::string link(target, static_cast<std::size_t>(n));
      for (const auto& dir : dirs) held += link == dir || link.rfind(dir + "/", 0) == 0;
    }
    closedir(d);
  }
  cr_expect_eq(held, 0u, "the supervisor holds %zu fds of its runs' workspaces while they run", held);
  for (auto& h : handles) h.cancel();
  cr_assert((*sup)->run_until_idle().ok());
  cr_assert_eq(results.size(), 2u);
  for (const Result& res : results) {
    cr_expect_eq(res.limits.get(Limit::workspace_bytes).value_or(0), 1ull << 30, "%s", res.detail.c_str());
    cr_expect_eq(res.enforcement.at("workspace_bytes"), "hard", "%s", res.detail.c_str());
  }
  const std::string after = corral_test::read_file("/proc/self/mountinfo");
  for (const auto& dir : dirs) {
    cr_expect(!corral_test::contains(after, " " + dir + " "), "%s is still mounted after its run", dir.c_str());
    cr_expect_neq(access(dir.c_str(), F_OK), 0, "%s outlived its run", dir.c_str());
  }
}

// From the host, while a sized run is in flight: what it wrote into its
// workspace is not in the directory the host (and every neighbour) sees at
// that path, and the host's mount table has no mount there. On the old
// code the gate refused the run; acknowledged, its file sat in the shared
// base.
Test(process_tier, a_sized_workspace_is_out_of_the_hosts_sight_while_it_runs) {
  CORRAL_SKIP_UNLESS_ROOT();
  Harness h;
  TempDir meet;
  chmod(meet.path().c_str(), 0777);
  Request r = req(Tier::os_process, {"/bin/sh", "-c",
                                     "dd if=/dev/zero of=mine bs=1M count=6 2>/dev/null && pwd > \"$0/where.tmp\" && "
                                     "mv \"$0/where.tmp\" \"$0/where\" && sleep 5",
                                     meet.path()});
  r.limits.set(Limit::workspace_bytes, 8ull << 20);
  Result res;
  RunCallbacks cb;
  cb.on_result = [&](const Result& got) { res = got; };
  auto handle = h.sup->submit(std::move(r), std::move(cb));
  cr_assert(handle.ok(), "%s", handle.ok() ? "" : handle.error().message().c_str());
  const std::string where = meet / "where";
  auto t0 = std::chrono::steady_clock::now();
  while (access(where.c_str(), F_OK) != 0 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10))
    cr_assert(h.sup->run_once(0.01).ok());
  std::string dir = corral_test::read_file(where);
  if (!dir.empty() && dir.back() == '\n') dir.pop_back();
  cr_assert(!dir.empty(), "the run never said where its workspace is: %s", res.detail.c_str());
  // The host's view of that directory, and of its mounts, with the run alive.
  std::size_t entries = 0;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) entries += std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, "..");
    closedir(d);
  }
  const bool mounted_here = corral_test::contains(corral_test::read_file("/proc/self/mountinfo"), " " + dir + " ");
  handle->cancel();
  cr_assert(h.sup->run_until_idle().ok());
  cr_expect_eq(entries, 0u, "the host sees %zu entries in %s while the run is in flight", entries, dir.c_str());
  cr_expect(!mounted_here, "the run's tmpfs is mounted at %s in the host's namespace", dir.c_str());
}

// A tmpfs's size counts file content only: empty files cost inodes (~1 KiB
// of kernel memory each) and no size, and the kernel's default allows
// millions whatever the size. Every tmpfs a process-tier run gets (its
// workspace, mounted on the host or in its own namespace, and the private
// /dev/shm of --confine-writes) allows one inode per 4 KiB of its size
// plus 1024. On the old code each of these 4 MiB tmpfs took all 20,000
// empty files (and would have taken millions).
Test(process_tier, empty_files_in_a_runs_tmpfs_stop_at_its_inode_bound) {
  CORRAL_SKIP_UNLESS_ROOT();
  constexpr std::uint64_t kBytes = 4ull << 20;
  constexpr unsigned long kBound = kBytes / 4096 + 1024;  // root, home and tmp are three of them
  auto flood = [](Supervisor& sup, Request r, const std::string& dir) {
    r.limits.set(Limit::workspace_bytes, kBytes);
    auto res = sup.run(r);
    cr_assert(res.ok(), "%s", res.ok() ? "" : res.error().message().c_str());
    cr_assert_eq(res->outcome, Outcome::exited, "%s", res->detail.c_str());
    auto made = corral_test::empty_files_made(res->stdout_capture.text);
    cr_assert(made.count(dir), "%s: %s", dir.c_str(), res->stdout_capture.text.c_str());
    cr_expect(made[dir] < kBound && made[dir] + 8 > kBound, "%s of %llu bytes took %lu empty files (bound %lu)",
              dir.c_str(), static_cast<unsigned long long>(kBytes), made[dir], kBound);
  };
  const std::string script = corral_test::empty_files_until_refused({"."}, 20000);
  {
    // corral's own base: the tmpfs is mounted over the directory on the host.
    unsetenv("TMPDIR");
    auto sup = Supervisor::create();
    cr_assert(sup.ok(), "%s", sup.ok() ? "" : sup.error().message().c_str());
    flood(**sup, req(Tier::os_process, {"/bin/sh", "-c", script}), ".");
  }
  Harness h;  // a base the test chose: the tmpfs is mounted in the run's own namespace
  flood(*h.sup, req(Tier::os_process, {"/bin/sh", "-c", script}), ".");
  Request shm = req(Tier::os_process, {"/bin/sh", "-c", corral_test::empty_files_until_refused({"/dev/shm"}, 20000)});
  shm.confine_writes = true;
  shm.limits.set(Limit::shm_bytes, kBytes);
  shm.acknowledged.insert("shm_bytes");
  flood(*h.sup, shm, "/dev/shm");
}

// A run that fills its workspace with files costs the supervisor's loop no
// walk at its end: the tmpfs is unmounted and its mount point removed
// there, and the emptying and the last close, in which the kernel tears the
// filesystem down, run on the background thread. Shown with that thread
// held busy by the test: the Result is in, the workspace gone from the
// host, and not one of the run's 10,000 files has been deleted yet
// (inotify on the workspace's root, set while the run is in flight; fewer
// than its queue's 16,384 events, so the unmount's still fits). The
// old code unlinked all of them on the loop first (1.1 s for 263,000).
// Let go, the thread empties and drops the tmpfs (IN_UNMOUNT: its memory
// is back).
Test(process_tier, a_workspace_full_of_files_is_emptied_off_the_supervisors_loop) {
  CORRAL_SKIP_UNLESS_ROOT();
  unsetenv("TMPDIR");  // corral's own base: the workspace is a tmpfs mounted on the host
  auto sup = Supervisor::create();
  cr_assert(sup.ok(), "%s", sup.ok() ? "" : sup.error().message().c_str());
  TempDir meet;
  chmod(meet.path().c_str(), 0777);
  Request r = req(Tier::os_process,
                  {"/bin/sh", "-c",
                   corral_test::empty_files_until_refused({"."}, 10000) +
                       "pwd > \"$0/where.tmp\" && mv \"$0/where.tmp\" \"$0/where\" && "
                       "while [ ! -e \"$0/go\" ]; do sleep 0.05; done",
                   meet.path()});
  r.limits.set(Limit::wall_seconds, 30);
  Result res;
  RunCallbacks cb;
  cb.on_result = [&](const Result& got) { res = got; };
  auto handle = (*sup)->submit(std::move(r), std::move(cb));
  cr_assert(handle.ok(), "%s", handle.ok() ? "" : handle.error().message().c_str());
  const std::string where = meet / "where";
  auto t0 = std::chrono::steady_clock::now();
  while (access(where.c_str(), F_OK) != 0 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20))
    cr_assert((*sup)->run_once(0.01).ok());
  std::string dir = corral_test::read_file(where);
  if (!dir.empty() && dir.back() == '\n') dir.pop_back();
  cr_assert(!dir.empty(), "the run never said where its workspace is");
  UniqueFd watch(inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  cr_assert(watch && inotify_add_watch(watch.get(), dir.c_str(), IN_DELETE) >= 0, "inotify on %s: %s", dir.c_str(),
            strerror(errno));
  auto events = [&watch] {
    std::size_t deleted = 0;
    bool overflow = false, unmounted = false;
    alignas(inotify_event) char buf[65536];
    for (ssize_t n; (n = read(watch.get(), buf, sizeof buf)) > 0;)
      for (char* p = buf; p < buf + n;) {
        auto* e = reinterpret_cast<inotify_event*>(p);
        deleted += (e->mask & IN_DELETE) && !(e->mask & IN_ISDIR);  // home/ and tmp/ go by rmdir first
        overflow |= (e->mask & IN_Q_OVERFLOW) != 0;
        unmounted |= (e->mask & IN_UNMOUNT) != 0;
        p += sizeof(inotify_event) + e->len;
      }
    return std::tuple{deleted, overflow, unmounted};
  };
  // The background thread, held until the test lets go.
  std::promise<void> let_go;
  std::shared_future<void> released = let_go.get_future().share();
  detail::run_in_background([released] { released.wait(); });
  corral_test::write_file(meet / "go", "");
  cr_assert((*sup)->run_until_idle().ok());
  cr_assert_eq(res.outcome, Outcome::exited, "%s", res.detail.c_str());
  cr_expect(!corral_test::contains(corral_test::read_file("/proc/self/mountinfo"), " " + dir + " "),
            "%s is still mounted after its run", dir.c_str());
  cr_expect_neq(access(dir.c_str(), F_OK), 0, "%s outlived its run", dir.c_str());
  auto [deleted, overflow, unmounted] = events();
  let_go.set_value();
  cr_expect(deleted == 0 && !overflow,
            "the supervisor's loop unlinked the workspace's files one by one (%zu deletes seen%s)", deleted,
            overflow ? ", and the event queue overflowed" : "");
  detail::wait_for_background_work();
  auto [later_deleted, later_overflow, later_unmounted] = events();
  cr_expect(later_deleted > 0 || later_overflow, "the background thread never emptied the workspace");
  cr_expect(later_unmounted || unmounted, "the workspace's tmpfs was not torn down once its last fd was closed");
}
