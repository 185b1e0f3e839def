// A run without a memory ceiling of its own that the kernel's OOM killer
// ends: the host ran out, or a memory cgroup that holds the supervisor and
// its runs did (a systemd unit's MemoryMax, a Kubernetes pod's limit). Its
// processes are the first victims (oom_score_adj 1000), and its Result must
// say killed_oom, with no resource, from the kernel's own record of the kill
// (kernel_oom_log.hpp), not `signaled`. A run that kills itself with SIGKILL
// stays `signaled`: after another run's OOM kill, with the uid or pid an
// OOM-killed process had, and with kill records it forged into the log.
//
// The enclosing limit is a memory cgroup of the test's own (64 MiB) with the
// test process, and so its supervisor and every run, inside it.
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include <fstream>
#include <sstream>

#include "container_support.hpp"
#include "corral/host_probe.hpp"
#include "corral/kernel_oom_log.hpp"

using namespace corral;
using namespace container_test;

namespace {

constexpr std::uint64_t kEnclosure = 64ull << 20;

// The memory cgroup of the test's own, with the test process moved into it,
// and the one it came from.
struct Enclosure {
  std::string dir;
  std::string home;  // the test process's cgroup before: where it goes back
};
Enclosure g_enclosure;

// The test process's cgroup in the hierarchy `line_has` picks out of
// /proc/self/cgroup ("memory" on v1, "" for v2's "0::").
std::string own_cgroup(bool v1) {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    std::string ctrls = line.substr(a + 1, b - a - 1);
    bool ours = v1 ? ("," + ctrls + ",").find(",memory,") != std::string::npos : line.rfind("0::", 0) == 0;
    if (ours) return line.substr(b + 1);
  }
  return "";
}

bool write_text(const std::string& path, const std::string& text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}

// Depth first: corral leaves its own parent group (corral/) in the cgroup
// it runs in.
void remove_cgroup_tree(const std::string& dir) {
  std::error_code ec;
  std::vector<std::string> dirs;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec); !ec && it != decltype(it)(); it.increment(ec))
    if (it->is_directory(ec)) dirs.push_back(it->path());
  std::sort(dirs.begin(), dirs.end(), [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  for (const auto& d : dirs) ::rmdir(d.c_str());
  ::rmdir(dir.c_str());
}

void leave_enclosure() {
  if (g_enclosure.dir.empty()) return;
  (void)write_text(g_enclosure.home + "/cgroup.procs", "0");
  remove_cgroup_tree(g_enclosure.dir);
  g_enclosure = {};
}

// "" once the test process is inside a memory cgroup of kEnclosure bytes
// (swap included), else why it cannot be.
std::string enter_enclosure() {
  if (geteuid() != 0) return "a memory cgroup of the test's own needs root";
  if (auto log = KernelOomLog::open(); !log) return "the kernel log cannot be read: " + log.error().message();
  const std::string name = "corral-test-enclosure-" + std::to_string(getpid());
  const std::string bytes = std::to_string(kEnclosure);
  if (::access("/sys/fs/cgroup/memory/memory.limit_in_bytes", F_OK) == 0) {
    g_enclosure.home = "/sys/fs/cgroup/memory" + own_cgroup(true);
    g_enclosure.dir = "/sys/fs/cgroup/memory/" + name;
    if (::mkdir(g_enclosure.dir.c_str(), 0755) != 0) return "mkdir " + g_enclosure.dir + ": " + strerror(errno);
    if (!write_text(g_enclosure.dir + "/memory.limit_in_bytes", bytes)) return "memory.limit_in_bytes refused";
    // Without swap accounting there is no memsw file; a host with swap then
    // swaps before it kills.
    (void)write_text(g_enclosure.dir + "/memory.memsw.limit_in_bytes", bytes);
  } else {
    const std::string root = "/sys/fs/cgroup";
    if (corral_test::read_file(root + "/cgroup.subtree_control").find("memory") == std::string::npos)
      return "no v1 memory hierarchy, and the v2 root does not hand the memory controller down";
    g_enclosure.home = root + own_cgroup(false);
    g_enclosure.dir = root + "/" + name;
    if (::mkdir(g_enclosure.dir.c_str(), 0755) != 0) return "mkdir " + g_enclosure.dir + ": " + strerror(errno);
    if (!write_text(g_enclosure.dir + "/memory.max", bytes)) return "memory.max refused";
    (void)write_text(g_enclosure.dir + "/memory.swap.max", "0");
  }
  if (!write_text(g_enclosure.dir + "/cgroup.procs", "0")) return "joining " + g_enclosure.dir + " refused";
  return "";
}

#define ENTER_ENCLOSURE()                                     \
  do {                                                        \
    std::string why = enter_enclosure();                      \
    if (!why.empty()) {                                       \
      leave_enclosure();                                      \
      cr_skip_test("%s", why.c_str());                        \
    }                                                         \
  } while (0)

std::string describe(const Result& r) {
  return std::string(to_string(r.outcome)) + " signal " + std::to_string(r.signal) + " exit " +
         std::to_string(r.exit_code) + " resource '" + r.resource + "': " + r.detail +
         "\nstdout: " + r.stdout_capture.text + "\nstderr: " + r.stderr_capture.text;
}

// The OOM kills the enclosure's own cgroup has counted, read from the host
// side (v1 memory.oom_control, v2 memory.events); -1 when unreadable.
long enclosure_oom_kills() {
  const bool v1 = ::access((g_enclosure.dir + "/memory.oom_control").c_str(), F_OK) == 0;
  std::istringstream in(corral_test::read_file(g_enclosure.dir + (v1 ? "/memory.oom_control" : "/memory.events")));
  std::string key;
  for (long n; in >> key >> n;)
    if (key == "oom_kill") return n;
  return -1;
}

Request unbounded(Tier tier, std::vector<std::string> argv) {
  Request r = tier == Tier::container ? boxed(std::move(argv)) : corral_test::req(tier, std::move(argv));
  r.limits.set(Limit::wall_seconds, 60);  // a run that never ends fails the test, not the suite
  return r;
}

std::string memhog(Tier tier) { return tier == Tier::container ? "/helpers/memhog" : corral_test::helper("memhog"); }

// A run of `tier` that grows until the enclosure's OOM killer ends it.
void enclosing_oom_ends_the_run(Tier tier) {
  ENTER_ENCLOSURE();
  corral_test::Harness h;
  Result r = h.run(unbounded(tier, {memhog(tier), "grow"}));
  cr_assert_eq(r.outcome, Outcome::killed_oom, "want killed_oom, got %s", describe(r).c_str());
  cr_assert_eq(r.signal, SIGKILL, "%s", describe(r).c_str());
  cr_assert(r.resource.empty(), "no limit of the run's ended it: %s", describe(r).c_str());
  cr_assert(contains(r.detail, "the kernel's OOM killer took 'memhog' (pid "), "%s", describe(r).c_str());
  cr_assert(contains(r.detail, "a memory cgroup that holds the run reached its limit"), "%s", describe(r).c_str());
  cr_assert_eq(cli_exit_code(r), 137);
  const std::string j = result_to_json(r);
  cr_assert(contains(j, "\"outcome\":\"killed_oom\"") && contains(j, "\"resource\":null"), "%s", j.c_str());
}

}  // namespace

TestSuite(host_oom, .fini = leave_enclosure);

Test(host_oom, tier_none_a_run_the_enclosing_cgroups_oom_killer_ends_is_killed_oom, .timeout = 90) {
  enclosing_oom_ends_the_run(Tier::none);
}

Test(host_oom, tier_process_a_run_the_enclosing_cgroups_oom_killer_ends_is_killed_oom, .timeout = 90) {
  enclosing_oom_ends_the_run(Tier::os_process);
}

Test(host_oom, tier_container_a_run_the_enclosing_cgroups_oom_killer_ends_is_killed_oom, .timeout = 90) {
  SKIP_UNLESS_CONTAINER();
  enclosing_oom_ends_the_run(Tier::container);
}

// After an OOM kill of a neighbour (the kernel's count and log moved), and
// of a child of the run's own that the run outlived, runs that SIGKILL
// themselves are `signaled`: also one with the uid the OOM-killed child had
// (tier process hands a freed uid out again), and one that writes kill
// records naming itself into the kernel log first.
Test(host_oom, a_run_that_kills_itself_is_signaled_next_to_oom_kills_and_forged_records, .timeout = 120) {
  ENTER_ENCLOSURE();
  for (Tier tier : {Tier::none, Tier::os_process}) {
    // Tier process over a range of one uid: every run has the uid the
    // OOM-killed processes had.
    SupervisorOptions o;
    o.uid_range_first = 299731;
    o.uid_range_count = 1;
    corral_test::Harness h(o);
    // A child of the run's the OOM killer takes: the run ends as its
    // program does, and in tier process, whose uid is the run's alone, the
    // kill is named (in tier none the kernel's record names a pid and a uid
    // that are not the run's alone).
    Result outlived = h.run(unbounded(tier, {"sh", "-c", memhog(tier) + " grow; echo survived $?; id -u"}));
    cr_assert_eq(outlived.outcome, Outcome::exited, "%s", describe(outlived).c_str());
    cr_assert(contains(outlived.stdout_capture.text, "survived 137\n"), "%s", describe(outlived).c_str());
    cr_assert_eq(contains(outlived.detail, "the kernel's OOM killer took 'memhog' (pid "), tier == Tier::os_process,
                 "%s", describe(outlived).c_str());
    const std::string oom_uid = outlived.stdout_capture.text.substr(outlived.stdout_capture.text.find('\n') + 1);

    Result neighbour = h.run(unbounded(tier, {memhog(tier), "grow"}));
    cr_assert_eq(neighbour.outcome, Outcome::killed_oom, "%s", describe(neighbour).c_str());
    for (int i = 0; i < 3; ++i) {
      Result self = h.run(unbounded(tier, {"sh", "-c", "id -u; kill -9 $$"}));
      cr_assert_eq(self.outcome, Outcome::signaled, "%s: %s", to_string(tier).data(), describe(self).c_str());
      cr_assert(!contains(self.detail, "OOM"), "%s", describe(self).c_str());
      if (tier == Tier::os_process)
        cr_assert_eq(self.stdout_capture.text, oom_uid, "not the OOM-killed child's uid: %s", describe(self).c_str());
    }
  }
  corral_test::Harness h;
  // Root may write /dev/kmsg: as the kernel's own text, and asking for
  // facility 0 (LOG_KERN), which the kernel turns into LOG_USER.
  const std::string forged =
      "Out of memory: Killed process $$ (sh) total-vm:1kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB, UID:0 "
      "pgtables:1kB oom_score_adj:1000";
  Result self = h.run(unbounded(Tier::none, {"sh", "-c",
                                             "echo \"" + forged + "\" > /dev/kmsg; echo \"<0>" + forged +
                                                 "\" > /dev/kmsg; echo \"<3>" + forged + "\" > /dev/kmsg; kill -9 $$"}));
  cr_assert_eq(self.outcome, Outcome::signaled, "a forged record counted: %s", describe(self).c_str());
  cr_assert(self.stderr_capture.text.empty(), "the forgery was not written: %s", describe(self).c_str());
}

// A supervisor that cannot read the kernel log (not root: reading it needs
// CAP_SYSLOG while kernel.dmesg_restrict is 1, Debian's default) has no
// record of the kill. Its run the enclosure's OOM killer ends then says
// `signaled`, and `corral enforcement`'s oom_kill_record line, read by the
// same user, says so; with a log the run reads killed_oom and the line
// names the log. Whichever the host gives nobody, the line, an open of
// /dev/kmsg made here and the run's outcome must agree. Before that, the
// same supervisor not yet dumpable (it changed its uid without an exec, as
// a daemon that drops root does) cannot start a run, and must say why.
Test(host_oom, a_supervisor_without_the_kernel_log_says_signaled_and_its_enforcement_line_says_why, .timeout = 90) {
  ENTER_ENCLOSURE();
  constexpr uid_t kNobody = 65534;
  char base[] = "/dev/shm/corral-test-rootless-XXXXXX";
  cr_assert(::mkdtemp(base) != nullptr, "mkdtemp: %s", strerror(errno));
  cr_assert_eq(::chown(base, kNobody, kNobody), 0, "chown: %s", strerror(errno));
  int fds[2];
  cr_assert_eq(::pipe2(fds, O_CLOEXEC), 0);
  const std::string hog = memhog(Tier::none);
  const long kills_before = enclosure_oom_kills();
  const pid_t child = ::fork();
  cr_assert(child >= 0, "fork: %s", strerror(errno));
  if (child == 0) {
    // As nobody, with no capability left: the supervisor a user runs.
    ::close(fds[0]);
    std::string out;
    if (::setgroups(0, nullptr) != 0 || ::setresgid(kNobody, kNobody, kNobody) != 0 ||
        ::setresuid(kNobody, kNobody, kNobody) != 0) {
      out = "drop to nobody failed";
    } else {
      const int kmsg = ::open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
      out += kmsg >= 0 ? "readable" : "unreadable";
      out += '\x1f';
      for (const auto& [name, value] : host_fact_lines(probe_host(false, false)))
        if (name == "oom_kill_record") out += value;
      out += '\x1f';
      SupervisorOptions o;
      o.workspace_base = base;
      auto sup = Supervisor::create(o);
      if (!sup) {
        out += "supervisor: " + sup.error().message();
      } else {
        // Not dumpable (the uid changed without an exec): /proc/self is
        // root's, and a run cannot start. A user's own process is dumpable.
        auto r = (*sup)->run(unbounded(Tier::none, {"/bin/true"}));
        out += (r ? describe(*r) : "run: " + r.error().message()) + '\x1f';
        ::prctl(PR_SET_DUMPABLE, 1);
        r = (*sup)->run(unbounded(Tier::none, {hog, "grow"}));
        out += r ? describe(*r) : "run: " + r.error().message();
      }
    }
    (void)!::write(fds[1], out.data(), out.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string got;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) got.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  ::rmdir(base);
  const long kills_after = enclosure_oom_kills();
  std::vector<std::string> said;
  for (std::size_t at = 0;;) {
    const auto end = got.find('\x1f', at);
    said.push_back(got.substr(at, end == std::string::npos ? std::string::npos : end - at));
    if (end == std::string::npos) break;
    at = end + 1;
  }
  cr_assert_eq(said.size(), 4u, "the child said: %s", got.c_str());
  const std::string &kmsg = said[0], &line = said[1], &undumpable = said[2], &run = said[3];
  cr_assert(undumpable.rfind("spawn_failed ", 0) == 0 && contains(undumpable, "oom_score: EACCES") &&
                contains(undumpable, "this process is not dumpable (it changed its uid without an exec)") &&
                contains(undumpable, "prctl(PR_SET_DUMPABLE, 1)"),
            "a run of a process that is not dumpable: %s", undumpable.c_str());
  if (kmsg == "unreadable") {
    cr_assert(line.rfind("none (", 0) == 0 && contains(line, "says signaled (SIGKILL)"),
              "the log cannot be read, but the line says: %s", line.c_str());
    cr_assert(contains(line, "Operation not permitted"), "the line does not say why: %s", line.c_str());
    cr_assert(run.rfind("signaled signal 9 ", 0) == 0, "want signaled by SIGKILL, got %s", run.c_str());
    cr_assert(!contains(run, "OOM"), "an OOM kill claimed without its record: %s", run.c_str());
    // The SIGKILL was the OOM killer's: the enclosure counted it.
    cr_assert(kills_before >= 0 && kills_after > kills_before, "the enclosure counted no OOM kill (%ld, then %ld): %s",
              kills_before, kills_after, run.c_str());
  } else {
    cr_assert(line.rfind("the kernel log (/dev/kmsg)", 0) == 0, "the log can be read, but the line says: %s",
              line.c_str());
    cr_assert(run.rfind("killed_oom signal 9 ", 0) == 0, "want killed_oom, got %s", run.c_str());
  }
}

// ---- the log itself -------------------------------------------------------------

Test(kernel_oom_log, reads_the_kernels_kill_records_and_nothing_else) {
  auto kill = parse_oom_kill_record(
      "3,8812,69074529369,-;Memory cgroup out of memory: Killed process 22124 (memhog) total-vm:35372kB, "
      "anon-rss:32384kB, file-rss:860kB, shmem-rss:0kB, UID:200119 pgtables:104kB oom_score_adj:1000\n"
      " SUBSYSTEM=memory\n");
  cr_assert(kill.has_value());
  cr_assert_eq(kill->seq, 8812u);
  cr_assert_eq(kill->pid, 22124);
  cr_assert_eq(kill->comm, "memhog");
  cr_assert_eq(kill->uid.value_or(0), 200119u);
  cr_assert_eq(kill->constraint, "Memory cgroup out of memory");
  // The host's, before Linux 5.3 (no UID), and a comm the program chose to
  // look like the kernel's text.
  kill = parse_oom_kill_record("3,5,1,c;Out of memory: Killed process 7 (a) total-vm:9 (b) total-vm:1kB, anon-rss:1kB");
  cr_assert(kill.has_value());
  cr_assert_eq(kill->pid, 7);
  cr_assert_eq(kill->comm, "a) total-vm:9 (b");
  cr_assert(!kill->uid.has_value());
  kill = parse_oom_kill_record("4,9,1,-;Out of memory (oom_kill_allocating_task): Killed process 12 (x y) "
                               "total-vm:1kB, UID:5 pgtables:1kB");
  cr_assert(kill.has_value() && kill->comm == "x y" && kill->uid == 5u);
  // Not kills: userspace's facilities (LOG_USER = 1, LOG_DAEMON = 3), the
  // kernel's other OOM lines, and malformed ones.
  for (const char* line : {
           "12,10,1,-;Out of memory: Killed process 7 (a) total-vm:1kB, UID:0",
           "30,10,1,-;Out of memory: Killed process 7 (a) total-vm:1kB, UID:0",
           "6,10,1,-;oom-kill:constraint=CONSTRAINT_MEMCG,task=a,pid=7,uid=0",
           "6,10,1,-;oom_reaper: reaped process 7 (a), now anon-rss:0kB",
           "6,10,1,-;Something else: Killed process 7 (a) total-vm:1kB",
           "3,10,1,-;Out of memory: Killed process x (a) total-vm:1kB",
           "3,10,1,-;Out of memory: Killed process 7 (a total-vm:1kB",
           "3,10;Out of memory: Killed process 7 (a) total-vm:1kB",
           "Out of memory: Killed process 7 (a) total-vm:1kB",
       })
    cr_assert(!parse_oom_kill_record(line).has_value(), "taken for a kill: %s", line);
}

// A process (not a run) the enclosure's OOM killer takes: its kill is found
// after a mark taken before it, never after a mark taken after it (the pid
// may be a later run's by then).
Test(kernel_oom_log, a_kill_logged_before_the_mark_is_never_taken, .timeout = 60) {
  ENTER_ENCLOSURE();
  auto log = KernelOomLog::open();
  cr_assert(log.ok(), "%s", log.ok() ? "" : log.error().message().c_str());
  const std::uint64_t before = log->mark();
  pid_t pid = fork();
  if (pid == 0) {
    (void)write_text("/proc/self/oom_score_adj", "1000");
    execl(corral_test::helper("memhog").c_str(), "memhog", "grow", nullptr);
    _exit(127);
  }
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "status %d", status);
  const std::uint64_t after = log->mark();
  cr_assert(log->take_kills(after, pid, std::nullopt, true).empty(), "a kill before the mark was taken");
  auto kills = log->take_kills(before, pid, std::nullopt, true);
  cr_assert_eq(kills.size(), 1u, "the kill was not found after the earlier mark");
  cr_assert_eq(kills[0].comm, "memhog");
  cr_assert(kills[0].seq >= before && kills[0].seq < after);
  cr_assert(log->take_kills(before, pid, std::nullopt).empty(), "taken twice");
  // By uid the same. The victim has a uid of its own: root's would also
  // match the tier none memhogs of the host_oom tests, which run beside
  // this one (two at a time) and are OOM-killed in their enclosures too.
  constexpr uid_t kVictimUid = 299779;
  pid = fork();
  if (pid == 0) {
    (void)write_text("/proc/self/oom_score_adj", "1000");
    if (setresgid(kVictimUid, kVictimUid, kVictimUid) != 0 || setresuid(kVictimUid, kVictimUid, kVictimUid) != 0)
      _exit(126);
    execl(corral_test::helper("memhog").c_str(), "memhog", "grow", nullptr);
    _exit(127);
  }
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "status %d", status);
  const std::uint64_t later = log->mark();
  cr_assert(log->take_kills(later, -1, kVictimUid, true).empty(), "a kill of the uid before the mark was taken");
  kills = log->take_kills(after, -1, kVictimUid, true);
  cr_assert_eq(kills.size(), 1u, "the kill of the uid was not found after the earlier mark");
  cr_assert_eq(kills[0].pid, pid);
}
