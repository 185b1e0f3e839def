// Integration tests of tier process's confinement through the supervisor,
// as root: a uid of the run's own, no capabilities, no_new_privs, the
// seccomp filter, an IPC namespace of the run's own. Helpers from
// tests/helpers/hostile.c.
#include <mqueue.h>
#include <sys/msg.h>
#include <sys/shm.h>
#include <sys/stat.h>

#include <chrono>
#include <sstream>

#include "corral/supervisor.hpp"
#include "support.hpp"
#include "supervisor_harness.hpp"

using namespace corral;
using corral_test::Harness;
using corral_test::helper;
using corral_test::TempDir;

namespace {

Request req(Tier tier, std::vector<std::string> argv) {
  Request r;
  r.tier = tier;
  r.argv = std::move(argv);
  return r;
}

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
