// uid_sweep: what a tier process run leaves in the host's shared writable
// directories is gone before its uid is another run's: two runs forced onto
// one uid (a pool of one), the first plants (tests/helpers/uid_plant.c), the
// second looks, and the host checks from outside what went and what stayed.
#include <criterion/criterion.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "corral/privilege.hpp"
#include "corral/supervisor.hpp"
#include "corral/uid_sweep.hpp"
#include "support.hpp"
#include "supervisor_harness.hpp"

using namespace corral;
using corral_test::Harness;
using corral_test::req;

namespace {

constexpr uid_t kOtherUid = 299798;  // a host user's files the sweep must leave

struct Plot {
  std::string tag = std::to_string(getpid());
  std::string other = "/tmp/cs-" + tag + "-other";    // 1777, owned by 65534
  std::string target = "/tmp/cs-" + tag + "-target";  // the planted symlink's target (root's)
  std::string others = "/tmp/cs-" + tag + "-others";  // kOtherUid's 0600 file
  Plot() {
    cleanup();
    cr_assert_eq(mkdir(other.c_str(), 0755), 0);
    cr_assert_eq(chown(other.c_str(), 65534, 65534), 0);
    cr_assert_eq(chmod(other.c_str(), 01777), 0);
    corral_test::write_file(target, "host\n");
    corral_test::write_file(others, "others\n");
    cr_assert_eq(chown(others.c_str(), kOtherUid, kOtherUid), 0);
    cr_assert_eq(chmod(others.c_str(), 0600), 0);
  }
  ~Plot() { cleanup(); }
  void cleanup() {
    std::string cmd = "chmod -R u+rwx /tmp/cs-" + tag + "-* 2>/dev/null; rm -rf /tmp/cs-" + tag + "-* /var/tmp/cs-" +
                      tag + "-* /dev/shm/cs-" + tag + "-* /run/lock/cs-" + tag + "-*";
    (void)!system(cmd.c_str());
  }
  std::vector<std::string> planted() const {
    std::vector<std::string> p;
    for (const char* n : {"secret", "fifo", "sock", "link", "wide", "deep", "locked"}) p.push_back("/tmp/cs-" + tag + "-" + n);
    p.push_back("/var/tmp/cs-" + tag + "-d");
    p.push_back("/dev/shm/cs-" + tag + "-y");
    p.push_back("/run/lock/cs-" + tag + "-lock");
    p.push_back(other + "/cs-" + tag + "-planted");
    p.push_back(other + "/cs-" + tag + "-dir");
    return p;
  }
  Request plant(long depth) const {
    return req(Tier::os_process, {"sh", "-c", "id -u; exec \"$0\" plant \"$1\" \"$2\" \"$3\"",
                                  corral_test::helper("uid_plant"), tag, other, std::to_string(depth)});
  }
  Request look() const {
    return req(Tier::os_process,
               {"sh", "-c", "id -u; exec \"$0\" look \"$1\" \"$2\"", corral_test::helper("uid_plant"), tag, other});
  }
  // From outside: nothing planted is left; the symlink's target, the other
  // user's file and directory are as they were.
  void check_host() const {
    struct stat st;
    for (const auto& p : planted()) cr_expect_neq(lstat(p.c_str(), &st), 0, "%s is still on the host", p.c_str());
    cr_expect_eq(corral_test::read_file(target), "host\n", "the symlink's target changed");
    cr_expect_eq(corral_test::read_file(others), "others\n", "another uid's file changed");
    cr_expect(lstat(others.c_str(), &st) == 0 && st.st_uid == kOtherUid);
    cr_expect(lstat(other.c_str(), &st) == 0 && st.st_uid == 65534 && (st.st_mode & 07777) == 01777,
              "the other user's 1777 directory changed");
  }
};

SupervisorOptions one_uid(uid_t uid) {
  SupervisorOptions o;
  o.uid_range_first = uid;
  o.uid_range_count = 1;
  return o;
}

void need_root() {
  if (!is_root_capable()) cr_skip_test("needs root: tier process runs as a uid of the pool only as root");
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

}  // namespace

Test(uid_sweep, a_runs_files_in_the_shared_directories_are_gone_before_its_uid_runs_again, .timeout = 600) {
  need_root();
  Plot plot;
  Harness h(one_uid(299710));
  Result a = h.run(plot.plant(100));
  cr_assert_eq(a.outcome, Outcome::exited, "%s", a.detail.c_str());
  cr_assert(corral_test::contains(a.stdout_capture.text, "planted"), "plant: %s %s", a.stdout_capture.text.c_str(),
            a.stderr_capture.text.c_str());
  Result b = h.run(plot.look());
  cr_assert_eq(b.outcome, Outcome::exited, "%s", b.detail.c_str());
  cr_assert_eq(first_line(a.stdout_capture.text), first_line(b.stdout_capture.text), "not the same uid: %s / %s",
               a.stdout_capture.text.c_str(), b.stdout_capture.text.c_str());
  cr_expect(corral_test::contains(b.stdout_capture.text, "\nnone\n"), "the next run of uid %s found: %s",
            first_line(a.stdout_capture.text).c_str(), b.stdout_capture.text.c_str());
  plot.check_host();
}

// 5,000 nested directories: swept without a stack or an fd per level (an fd
// a level would pass the run's 1024), in the arena's level records (~300
// bytes a level). 5,000, not 30,000: on a disk /tmp (ext4 with discard) the
// 30,000 took the test over 100 s, and the depth proves the same.
Test(uid_sweep, a_5000_deep_tree_is_swept_in_bounded_memory, .timeout = 600) {
  need_root();
  Plot plot;
  Harness h(one_uid(299740));
  Result a = h.run(req(Tier::os_process, {corral_test::helper("uid_plant"), "deep", plot.tag, "5000"}));
  cr_assert_eq(a.outcome, Outcome::exited, "%s %s", a.detail.c_str(), a.stderr_capture.text.c_str());
  cr_assert(corral_test::contains(a.stdout_capture.text, "planted"), "plant: %s %s", a.stdout_capture.text.c_str(),
            a.stderr_capture.text.c_str());
  const long before = std::stol(corral_test::proc_status_field("self", "VmRSS"));
  Result b = h.run(plot.look());
  const long after = std::stol(corral_test::proc_status_field("self", "VmRSS"));
  cr_assert_eq(b.outcome, Outcome::exited, "%s", b.detail.c_str());
  cr_expect(corral_test::contains(b.stdout_capture.text, "\nnone\n"), "found: %s", b.stdout_capture.text.c_str());
  cr_expect_lt(after - before, 64 * 1024, "the sweep grew us by %ld kB", after - before);
  struct stat st;
  cr_expect_neq(lstat(("/tmp/cs-" + plot.tag + "-deep").c_str(), &st), 0, "the tree is still on the host");
}

// The supervisor dies mid-run (SIGKILL): its guardian kills the run and the
// kernel drops the lock, the byte saying dirty. The next holder of the uid,
// in another process, finds the files gone too.
Test(uid_sweep, a_dead_supervisors_run_leaves_no_files_to_the_next_holder, .timeout = 120) {
  need_root();
  Plot plot;
  corral_test::TempDir base;
  chmod(base.path().c_str(), 0755);
  int started[2];
  cr_assert_eq(pipe(started), 0);
  pid_t p = fork();
  cr_assert_geq(p, 0);
  if (p == 0) {
    close(started[0]);
    SupervisorOptions o = one_uid(299720);
    o.workspace_base = base.path();
    auto sup = Supervisor::create(o);
    if (!sup.ok()) _exit(1);
    Request r = plot.plant(100);
    r.argv[2] = "\"$0\" plant \"$1\" \"$2\" \"$3\"; sleep 100";
    RunCallbacks cb;
    cb.on_output = [&](StreamId, std::string_view d) { (void)!write(started[1], d.data(), d.size()); };
    auto h = (*sup)->submit(std::move(r), cb);
    if (!h.ok()) _exit(2);
    (void)(*sup)->run_until_idle();
    _exit(0);
  }
  close(started[1]);
  std::string seen;
  char buf[256];
  while (!corral_test::contains(seen, "planted")) {
    ssize_t n = read(started[0], buf, sizeof buf);
    cr_assert_gt(n, 0, "the planting run ended early: %s", seen.c_str());
    seen.append(buf, static_cast<std::size_t>(n));
  }
  kill(p, SIGKILL);
  waitpid(p, nullptr, 0);
  close(started[0]);
  Harness h(one_uid(299720));
  // The guardian holds the lock until it killed the run: until then EAGAIN.
  Expected<Result> b = Error::invalid("not run");
  for (int i = 0; i < 250; ++i) {
    b = h.sup->run(plot.look());
    if (b.ok() || b.error().code() != EAGAIN) break;
    usleep(20000);
  }
  cr_assert(b.ok(), "%s", b.ok() ? "" : b.error().message().c_str());
  cr_assert_eq(first_line(b->stdout_capture.text), "299720");
  cr_expect(corral_test::contains(b->stdout_capture.text, "\nnone\n"), "the next holder of uid 299720 found: %s",
            b->stdout_capture.text.c_str());
  plot.check_host();
}

// With --confine-writes nothing reaches the host's shared directories at
// all (Landlock; /dev/shm is the run's own), so there is nothing to sweep.
Test(uid_sweep, confined_writes_leave_nothing_in_the_shared_directories) {
  need_root();
  Plot plot;
  Harness h(one_uid(299730));
  const std::string t = plot.tag;
  Request r = req(Tier::os_process,
                  {"sh", "-c",
                   "for p in /tmp/cs-" + t + "-c /var/tmp/cs-" + t + "-c /dev/shm/cs-" + t + "-c /run/lock/cs-" + t +
                       "-c " + plot.other + "/cs-" + t + "-c; do echo x > $p && echo wrote $p; done; true"});
  r.confine_writes = true;
  Result a = h.run(std::move(r));
  cr_assert_eq(a.outcome, Outcome::exited, "%s", a.detail.c_str());
  // /dev/shm is the run's private tmpfs: it may write there, the host sees none.
  cr_expect(!corral_test::contains(a.stdout_capture.text, "wrote /tmp") &&
                !corral_test::contains(a.stdout_capture.text, "wrote /var") &&
                !corral_test::contains(a.stdout_capture.text, "wrote /run"),
            "%s", a.stdout_capture.text.c_str());
  struct stat st;
  for (const std::string& p : {"/tmp/cs-" + t + "-c", "/var/tmp/cs-" + t + "-c", "/dev/shm/cs-" + t + "-c",
                               "/run/lock/cs-" + t + "-c", plot.other + "/cs-" + t + "-c"})
    cr_expect_neq(lstat(p.c_str(), &st), 0, "%s is on the host", p.c_str());
}

// A busy /tmp: another user's searchable trees made and removed while the
// sweep walks them. A directory removed while the walk was inside it read
// ENOENT, and the whole walk failed: 27 of 300 walks here on the old code,
// and a pool whose sweeps fail retires its uids (a one-shot pool of 4 had
// none left to hand out). Now the root is walked again; none fails.
Test(uid_sweep, a_tree_removed_while_the_walk_is_in_it_does_not_fail_the_sweep, .timeout = 120) {
  need_root();
  const std::string prefix = "/tmp/corral-churn-" + std::to_string(getpid()) + "-";
  pid_t churn = fork();
  cr_assert_geq(churn, 0);
  if (churn == 0) {
    // Root's directories, 0755 (the sweep enters them), six deep.
    for (long i = 0;; ++i) {
      std::string d = prefix + std::to_string(i % 8), p = d;
      (void)mkdir(d.c_str(), 0755);
      for (int k = 0; k < 6; ++k) (void)mkdir((p += "/d").c_str(), 0755);
      for (int k = 0; k < 6; ++k, p.resize(p.size() - 2)) (void)rmdir(p.c_str());
      (void)rmdir(d.c_str());
    }
  }
  auto arena = SweepArena::allocate();
  cr_assert(arena.ok());
  int failed = 0, first_error = 0;
  for (int i = 0; i < 300; ++i) {
    SweepCount count;
    std::vector<char> found(1);
    find_uids_with_files({299999}, *arena, found, &count);
    if (count.first_error && !failed++) first_error = count.first_error;
  }
  kill(churn, SIGKILL);
  waitpid(churn, nullptr, 0);
  (void)!system(("rm -rf " + prefix + "*").c_str());
  cr_assert_eq(failed, 0, "%d of 300 walks failed (first: %s)", failed, strerror(first_error));
}

namespace {

// As `uid` (a child that becomes it): `fn`, which returns 0 on success.
template <typename Fn>
bool as_uid(uid_t uid, Fn fn) {
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    if (setresgid(uid, uid, uid) != 0 || setresuid(uid, uid, uid) != 0) _exit(99);
    _exit(fn());
  }
  int st = 0;
  return waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

// A quiet directory of `files` root-owned files, owned by `owner`, 1777 (any
// pool uid may write into it), old enough for a walk to remember.
struct QuietDir {
  std::string path = "/tmp/csc-" + std::to_string(getpid());
  QuietDir(uid_t owner, int files) {
    (void)!system(("rm -rf " + path).c_str());
    cr_assert_eq(mkdir(path.c_str(), 0755), 0);
    for (int i = 0; i < files; ++i) corral_test::write_file(path + "/f" + std::to_string(i), "x");
    cr_assert_eq(chown(path.c_str(), owner, owner), 0);
    cr_assert_eq(chmod(path.c_str(), 01777), 0);
    // Its ctime a whole second older than the walk's start, at second
    // granularity (kSweepCacheSettleSeconds).
    usleep(2'200'000);
  }
  ~QuietDir() { (void)!system(("rm -rf " + path).c_str()); }
};

}  // namespace

// A finding walk with a cache does not look at the files of a directory
// unchanged since the walk before (a /tmp of quiet trees walked at every
// batch of runs), and still sees one changed.
//
// The walk's counts are of everything under the sweep roots, so the test
// walks roots of its own: an empty tmpfs at each, in a mount namespace of
// its own. On the host's, the other tests of this binary (run two at a
// time) add and remove files in /tmp between the two walks (CI: 16 more
// entries at the second walk than the count allows).
Test(uid_sweep, a_cached_walk_skips_the_files_of_a_quiet_directory, .timeout = 60) {
  need_root();
  corral_test::enter_own_mount_namespace();
  for (const char* root : kSweepRoots) {
    struct stat st;
    if (::stat(root, &st) != 0) continue;  // /dev/mqueue when not mounted, as the walk does
    cr_assert(::mount("corral-test", root, "tmpfs", 0, "mode=1777") == 0, "tmpfs at %s: %s", root, strerror(errno));
  }
  constexpr uid_t kFirst = 299900, kRun = 299901;
  QuietDir quiet(0, 200);
  auto arena = SweepArena::allocate();
  cr_assert(arena.ok());
  SweepDirCache cache(kFirst, 64);
  std::vector<char> found(1);
  SweepCount first, second;
  find_uids_with_files({kRun}, *arena, found, &first, &cache);
  find_uids_with_files({kRun}, *arena, found, &second, &cache);
  cr_expect_geq(first.entries, 200, "the first walk looked at %ld entries", first.entries);
  cr_expect_eq(first.skipped, 0);
  cr_expect_geq(second.skipped, 200, "the second walk skipped %ld files", second.skipped);
  cr_expect_leq(second.entries, first.entries - 200, "the second walk looked at %ld entries (first: %ld)",
                second.entries, first.entries);
  cr_expect_eq(first.entries, 201, "the first walk looked at %ld entries: the directory and its 200 files",
               first.entries);
  cr_expect(!found[0]);
}

// Hostile: a neighbour run owns a 1777 directory the last walk remembered;
// this run's uid leaves a secret in it, and the neighbour puts the
// directory's mtime back where it was (utimensat: an owner may). The walk
// still finds the secret (the cache goes by ctime, which no user sets), so
// the uid is not handed on with it.
Test(uid_sweep, a_directory_whose_mtime_was_put_back_still_has_its_new_file_found, .timeout = 60) {
  need_root();
  constexpr uid_t kFirst = 299900, kRun = 299901, kNeighbour = 299902;
  QuietDir quiet(kNeighbour, 20);
  struct stat before;
  cr_assert_eq(stat(quiet.path.c_str(), &before), 0);
  auto arena = SweepArena::allocate();
  cr_assert(arena.ok());
  SweepDirCache cache(kFirst, 64);
  std::vector<char> found(1);
  SweepCount first;
  find_uids_with_files({kRun}, *arena, found, &first, &cache);
  cr_assert(!found[0]);
  const std::string secret = quiet.path + "/secret";
  cr_assert(as_uid(kRun, [&] {
    int fd = open(secret.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
    return fd >= 0 && write(fd, "s", 1) == 1 ? 0 : 1;
  }));
  cr_assert(as_uid(kNeighbour, [&] {
    const struct timespec times[2] = {before.st_atim, before.st_mtim};
    return utimensat(AT_FDCWD, quiet.path.c_str(), times, 0) == 0 ? 0 : 1;
  }));
  struct stat after;
  cr_assert_eq(stat(quiet.path.c_str(), &after), 0);
  cr_assert(after.st_mtim.tv_sec == before.st_mtim.tv_sec && after.st_mtim.tv_nsec == before.st_mtim.tv_nsec,
            "the mtime was not put back");
  SweepCount second;
  find_uids_with_files({kRun}, *arena, found, &second, &cache);
  cr_expect(found[0], "the run's secret in a directory whose mtime was put back was not found");
}

// The same neighbour, end to end through a host-wide pool of one uid (its
// sweep remembers the quiet directory at the first release): the run's
// secret left in the neighbour's directory, its mtime put back, is gone
// from the host before the uid is handed out again.
Test(uid_sweep, a_pool_hands_its_uid_on_only_with_a_secret_in_a_remembered_directory_gone, .timeout = 60) {
  need_root();
  constexpr uid_t kRun = 299910, kNeighbour = 299911;
  QuietDir quiet(kNeighbour, 20);
  struct stat before;
  cr_assert_eq(stat(quiet.path.c_str(), &before), 0);
  corral_test::TempDir dir;
  UidPool pool(kRun, 1);
  pool.lock_host_wide(dir / "uids.lock");
  {
    auto first = pool.acquire();
    cr_assert(first.ok(), "%s", first.ok() ? "" : first.error().message().c_str());
    first->leaves_host_files();
  }  // released: swept (a walk that remembers the quiet directory)
  const std::string secret = quiet.path + "/secret";
  {
    auto second = pool.acquire();
    cr_assert(second.ok(), "%s", second.ok() ? "" : second.error().message().c_str());
    cr_assert_eq(second->uid(), kRun);
    second->leaves_host_files();
    cr_assert(as_uid(kRun, [&] {
      int fd = open(secret.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
      return fd >= 0 && write(fd, "s", 1) == 1 ? 0 : 1;
    }));
    cr_assert(as_uid(kNeighbour, [&] {
      const struct timespec times[2] = {before.st_atim, before.st_mtim};
      return utimensat(AT_FDCWD, quiet.path.c_str(), times, 0) == 0 ? 0 : 1;
    }));
  }
  auto third = pool.acquire();
  cr_assert(third.ok(), "%s", third.ok() ? "" : third.error().message().c_str());
  cr_assert_eq(third->uid(), kRun);
  struct stat st;
  cr_expect_neq(lstat(secret.c_str(), &st), 0, "uid %u was handed out again with its secret still in %s", kRun,
                quiet.path.c_str());
}
