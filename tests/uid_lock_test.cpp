// uid_lock and the host-wide UidPool: a uid is one run's on the whole host,
// is not handed out while a process of it lives, and its lock goes with a
// dead holder. Observed from outside: other processes, /proc.
#include <criterion/criterion.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "corral/privilege.hpp"
#include "corral/supervisor.hpp"
#include "corral/uid_lock.hpp"
#include "support.hpp"

using namespace corral;
using corral_test::TempDir;
using corral_test::alive;

namespace {

void need_root() {
  if (!is_root_capable()) cr_skip_test("needs root (setresuid for the uid kill)");
}

// Until `pid` runs as `uid`: a loaded host may take longer than any fixed
// sleep, and a kill of the uid sent before that would miss it.
void wait_for_uid(pid_t pid, uid_t uid) {
  const std::string want = std::to_string(uid) + "\t";
  for (int i = 0; i < 500; ++i) {
    if (corral_test::proc_status_field(std::to_string(pid), "Uid").rfind(want, 0) == 0) return;
    usleep(10000);
  }
}

// A process of `uid` that outlives its parent: fork, become uid, setsid
// (an escapee of any group), pause. Returns its pid; reaped by us.
pid_t start_as_uid(uid_t uid) {
  pid_t p = fork();
  cr_assert_geq(p, 0);
  if (p == 0) {
    setsid();
    if (setresgid(uid, uid, uid) != 0 || setresuid(uid, uid, uid) != 0) _exit(99);
    for (;;) pause();
  }
  wait_for_uid(p, uid);
  return p;
}


bool gone_within(pid_t pid, int ms) {
  for (int i = 0; i < ms / 10; ++i) {
    if (!alive(pid)) return true;
    usleep(10000);
  }
  return !alive(pid);
}

}  // namespace

// The lock file's directory is made when it is missing (the first start on
// a boot), and an existing one is used as it is.
Test(uid_lock, the_lock_files_directory_is_made_when_missing) {
  TempDir dir;
  const std::string sub = dir / "run-corral";
  auto made = UidLockFile::open(sub + "/uids.lock");
  cr_assert(made.ok(), "%s", made.ok() ? "" : made.error().message().c_str());
  struct stat st {};
  cr_assert_eq(::stat(sub.c_str(), &st), 0, "the directory was not made");
  cr_assert(S_ISDIR(st.st_mode));
  auto again = UidLockFile::open(sub + "/uids.lock");
  cr_assert(again.ok(), "%s", again.ok() ? "" : again.error().message().c_str());
}

Test(uid_lock, one_byte_per_uid_excludes_other_descriptions_and_goes_with_them) {
  TempDir dir;
  auto a = UidLockFile::open(dir / "uids.lock");
  auto b = UidLockFile::open(dir / "uids.lock");
  cr_assert(a.ok() && b.ok());
  cr_assert(*a->try_lock(300001));
  cr_assert(*a->try_lock(300001), "the holder may lock again");
  cr_assert(!*b->try_lock(300001), "another open file description is refused");
  cr_assert(*b->try_lock(300002), "a neighbouring uid is a byte of its own");
  cr_assert(*b->held_elsewhere(300001));
  a->unlock(300001);
  cr_assert(*b->try_lock(300001));
  b->unlock(300001);
  // A holder that dies without unlocking: the kernel drops its lock.
  pid_t p = fork();
  if (p == 0) {
    auto c = UidLockFile::open(dir / "uids.lock");
    _exit(c.ok() && *c->try_lock(300003) ? 0 : 1);
  }
  int status = 0;
  waitpid(p, &status, 0);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  cr_assert(!*a->held_elsewhere(300003));
  cr_assert(*a->try_lock(300003));
}

Test(uid_lock, signal_uid_reaches_a_setsid_escapee_of_the_uid_and_nothing_else) {
  need_root();
  auto stack = ChildStack::allocate(64 * 1024);
  cr_assert(stack.ok());
  pid_t mine = start_as_uid(299001), other = start_as_uid(299002);
  auto sent = signal_uid(299001, SIGKILL, *stack);
  cr_assert(sent.ok(), "%s", sent.ok() ? "" : sent.error().message().c_str());
  cr_assert(gone_within(mine, 1000), "the uid's process outlived signal_uid");
  cr_assert(alive(other), "another uid's process was killed");
  cr_assert(signal_uid(299001, SIGKILL, *stack).ok(), "nothing of the uid left: still fine");
  kill(other, SIGKILL);
  waitpid(other, nullptr, 0);
  cr_assert(!signal_uid(0, SIGKILL, *stack).ok(), "uid 0 is refused");
}

// A kill helper's kill(-1) reaches every process whose real or saved uid
// is its real or effective one. When every helper had the same real uid,
// one pool's helper killed any other helper alive at that moment: two
// pools reaping at once (two corral processes, or tests side by side) lost
// helpers, and a long sweep lost 20 in a row and retired its uid. Here a
// process takes a helper's credentials for uid A the way every helper does
// (a kill of signal 0, then it waits), and helpers for uid B kill(-1) as
// usual: the old code killed it on the first one.
Test(uid_lock, a_kill_helper_of_one_uid_never_kills_another_uids_helper) {
  need_root();
  auto stack = ChildStack::allocate(64 * 1024);
  cr_assert(stack.ok());
  int ready[2];
  cr_assert_eq(pipe(ready), 0);
  pid_t helper_a = fork();
  cr_assert_geq(helper_a, 0);
  if (helper_a == 0) {
    int setuid_error = 0;
    int kill_error = kill_uid_in_child(299021, 0, &setuid_error);
    char c = setuid_error ? 'u' : (kill_error && kill_error != ESRCH) ? 'k' : 'y';
    (void)!write(ready[1], &c, 1);
    for (;;) pause();
  }
  close(ready[1]);
  char c = 0;
  cr_assert_eq(read(ready[0], &c, 1), 1);
  close(ready[0]);
  cr_assert_eq(c, 'y', "the stand-in helper could not become uid 299021's helper (%c)", c);
  // Its credentials are a helper's: effective uid A, real and saved uid the
  // band's, no other process's.
  const std::string uids = corral_test::proc_status_field(std::to_string(helper_a), "Uid");
  const std::string own = std::to_string(reaper_uid_of_pid(helper_a));
  cr_expect_eq(uids, own + "\t299021\t" + own + "\t299021", "Uid: %s", uids.c_str());
  pid_t b = start_as_uid(299022);
  for (int i = 0; i < 20; ++i) {
    auto sent = signal_uid(299022, SIGKILL, *stack);
    cr_assert(sent.ok(), "%s", sent.ok() ? "" : sent.error().message().c_str());
  }
  cr_expect(gone_within(b, 1000), "uid 299022's process outlived its helpers");
  waitpid(b, nullptr, 0);
  const bool survived = alive(helper_a);  // reaps it when it died
  if (survived) {
    kill(helper_a, SIGKILL);
    waitpid(helper_a, nullptr, 0);
  }
  cr_assert(survived, "uid 299022's kill helper killed uid 299021's helper");
}

// Two processes, each with a pool over the same two uids: on the old
// per-process pools both got the first one.
Test(uid_lock, pools_of_two_processes_never_hold_the_same_uid) {
  need_root();
  TempDir dir;
  const std::string lock = dir / "uids.lock";
  int ready[2], done[2];
  cr_assert_eq(pipe(ready), 0);
  cr_assert_eq(pipe(done), 0);
  pid_t p = fork();
  if (p == 0) {
    UidPool pool(299100, 2);
    pool.lock_host_wide(lock);
    auto lease = pool.acquire();
    uid_t got = lease.ok() ? lease->uid() : 0;
    (void)!write(ready[1], &got, sizeof got);
    char c;
    (void)!read(done[0], &c, 1);  // hold it until the parent has its own
    _exit(0);
  }
  uid_t theirs = 0;
  cr_assert_eq(read(ready[0], &theirs, sizeof theirs), (ssize_t)sizeof theirs);
  cr_assert(theirs == 299100 || theirs == 299101, "child got %u", theirs);
  UidPool pool(299100, 2);
  pool.lock_host_wide(lock);
  auto mine = pool.acquire();
  cr_assert(mine.ok(), "%s", mine.ok() ? "" : mine.error().message().c_str());
  cr_assert_neq(mine->uid(), theirs, "both processes hold uid %u", theirs);
  auto third = pool.acquire();
  cr_assert(!third.ok(), "the range has two uids, both held");
  cr_assert_eq(third.error().code(), EAGAIN);
  (void)!write(done[1], "x", 1);
  waitpid(p, nullptr, 0);
  // The child is gone, and its lock with it.
  auto freed = pool.acquire();
  cr_assert(freed.ok() && freed->uid() == theirs);
}

// A holder that died with an escapee of its uid alive: the uid is reaped
// before it is handed out again.
Test(uid_lock, a_dead_holders_escapee_dies_before_its_uid_is_handed_out) {
  need_root();
  TempDir dir;
  const std::string lock = dir / "uids.lock";
  int out[2];
  cr_assert_eq(pipe(out), 0);
  pid_t holder = fork();
  if (holder == 0) {
    UidPool pool(299200, 1);
    pool.lock_host_wide(lock);
    auto lease = pool.acquire();
    if (!lease.ok()) _exit(1);
    pid_t e = fork();
    if (e == 0) {
      // As a run's escapee: exec'd, so none of corral's fds (the lock file's
      // among them) is held.
      close_range(3, ~0u, 0);
      setsid();
      if (setresuid(299200, 299200, 299200) != 0) _exit(99);
      for (;;) pause();
    }
    (void)!write(out[1], &e, sizeof e);
    usleep(20000);
    _exit(0);  // dies holding the lease: no release, no kill
  }
  pid_t escapee = 0;
  cr_assert_eq(read(out[0], &escapee, sizeof escapee), (ssize_t)sizeof escapee);
  waitpid(holder, nullptr, 0);
  wait_for_uid(escapee, 299200);
  cr_assert(alive(escapee), "the escapee should have outlived its holder");
  UidPool pool(299200, 1);
  pool.lock_host_wide(lock);
  auto lease = pool.acquire();
  cr_assert(lease.ok(), "%s", lease.ok() ? "" : lease.error().message().c_str());
  cr_assert_eq(lease->uid(), 299200u);
  cr_assert(gone_within(escapee, 1000), "uid 299200 was handed out while its escapee lived");
}

// Within one pool: a lease released while an escapee of its uid lives
// kills it first (a batch's next job got the uid of the last one's escapee).
Test(uid_lock, a_released_lease_takes_its_escapees_with_it) {
  need_root();
  TempDir dir;
  UidPool pool(299300, 1);
  pool.lock_host_wide(dir / "uids.lock");
  auto lease = pool.acquire();
  cr_assert(lease.ok());
  pid_t escapee = start_as_uid(lease->uid());
  cr_assert(alive(escapee));
  lease->release();
  cr_assert(gone_within(escapee, 1000), "released with its escapee alive");
  auto again = pool.acquire();
  cr_assert(again.ok() && again->uid() == 299300u);
}

Test(uid_lock, local_pools_stay_bookkeeping_only) {
  UidPool pool(299400, 1);
  cr_assert(!pool.host_wide());
  auto lease = pool.acquire();
  cr_assert(lease.ok());
  cr_assert(!lease->host_wide());
  cr_assert_eq(lease->signal_processes(SIGKILL).error().code(), ENOTSUP);
}

// Two supervisors in two processes over a range of one uid: while one has
// a run in flight the other's submit is refused, never run as the same uid
// (each process's pool used to start at the range's first uid).
Test(uid_lock, supervisors_in_two_processes_never_run_as_the_same_uid) {
  need_root();
  TempDir base;
  chmod(base.path().c_str(), 0755);
  SupervisorOptions o;
  o.workspace_base = base.path();
  o.uid_range_first = 299500;
  o.uid_range_count = 1;
  int started[2];
  cr_assert_eq(pipe(started), 0);
  pid_t p = fork();
  if (p == 0) {
    auto sup = Supervisor::create(o);
    if (!sup.ok()) _exit(1);
    Request r;
    r.tier = Tier::os_process;
    r.argv = {"sh", "-c", "id -u; sleep 2"};
    RunCallbacks cb;
    cb.on_output = [&](StreamId, std::string_view d) { (void)!write(started[1], d.data(), d.size()); };
    auto h = (*sup)->submit(std::move(r), cb);
    if (!h.ok()) _exit(2);
    (void)(*sup)->run_until_idle();
    _exit(0);
  }
  char buf[32] = {};
  cr_assert_gt(read(started[0], buf, sizeof buf - 1), 0);
  cr_assert_str_eq(buf, "299500\n");
  auto sup = Supervisor::create(o);
  cr_assert(sup.ok());
  Request r;
  r.tier = Tier::os_process;
  r.argv = {"id", "-u"};
  auto second = (*sup)->run(std::move(r));
  cr_assert(!second.ok(), "ran as %s while another process's run held uid 299500",
            second.ok() ? second->stdout_capture.text.c_str() : "");
  cr_assert_eq(second.error().code(), EAGAIN, "%s", second.error().message().c_str());
  int status = 0;
  waitpid(p, &status, 0);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  // The first one is done: its uid is free again once its guardian (which
  // shares the lock until it has made sure nothing of the uid lives) is gone.
  Expected<Result> third = Error::invalid("not run");
  for (int i = 0; i < 100; ++i) {
    Request again;
    again.tier = Tier::os_process;
    again.argv = {"id", "-u"};
    third = (*sup)->run(std::move(again));
    if (third.ok() || third.error().code() != EAGAIN) break;
    usleep(20000);
  }
  cr_assert(third.ok(), "%s", third.ok() ? "" : third.error().message().c_str());
  cr_assert_str_eq(third->stdout_capture.text.c_str(), "299500\n");
}

// The mark that spares a fresh holder its reap (a helper process per
// one-shot run): dirty while held, clean only when a holder let go of the
// uid knowing nothing of it lives; a holder that dies leaves it dirty and
// the next holder reaps its escapee.
Test(uid_lock, a_uid_is_marked_clean_only_when_let_go_with_nothing_of_it_alive) {
  need_root();
  TempDir dir;
  const std::string lock = dir / "uids.lock";
  constexpr uid_t kUid = 299600;
  int ready[2], go[2];
  cr_assert_eq(pipe(ready), 0);
  cr_assert_eq(pipe(go), 0);
  // 1. A holder with an escapee, released (the escapee killed), then the
  //    pool gone: clean.
  pid_t p = fork();
  if (p == 0) {
    {
      UidPool pool(kUid, 1);
      pool.lock_host_wide(lock);
      auto lease = pool.acquire();
      if (!lease.ok()) _exit(1);
      pid_t e = fork();
      if (e == 0) {
        setsid();
        if (setresuid(kUid, kUid, kUid) != 0) _exit(99);
        for (;;) pause();
      }
      wait_for_uid(e, kUid);
      char c = 1;
      (void)!write(ready[1], &c, 1);
      (void)!read(go[0], &c, 1);
      lease->release();
      waitpid(e, nullptr, 0);
    }
    _exit(0);
  }
  char c;
  cr_assert_eq(read(ready[0], &c, 1), 1);
  cr_assert_eq(corral_test::uid_lock_byte(lock, kUid), kUidDirty, "a held uid must read dirty");
  (void)!write(go[1], "x", 1);
  int status = 0;
  waitpid(p, &status, 0);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  cr_assert_eq(corral_test::uid_lock_byte(lock, kUid), kUidClean, "let go with its escapee reaped: clean");
  // 2. A holder that dies holding it, with an escapee: dirty, and the next
  //    holder reaps.
  int out[2];
  cr_assert_eq(pipe(out), 0);
  pid_t holder = fork();
  if (holder == 0) {
    UidPool pool(kUid, 1);
    pool.lock_host_wide(lock);
    auto lease = pool.acquire();
    if (!lease.ok()) _exit(1);
    pid_t e = fork();
    if (e == 0) {
      close_range(3, ~0u, 0);
      setsid();
      if (setresuid(kUid, kUid, kUid) != 0) _exit(99);
      for (;;) pause();
    }
    (void)!write(out[1], &e, sizeof e);
    usleep(20000);
    _exit(0);  // dies holding the lease
  }
  pid_t escapee = 0;
  cr_assert_eq(read(out[0], &escapee, sizeof escapee), (ssize_t)sizeof escapee);
  waitpid(holder, nullptr, 0);
  wait_for_uid(escapee, kUid);
  cr_assert_eq(corral_test::uid_lock_byte(lock, kUid), kUidDirty, "a holder that died must leave the uid dirty");
  cr_assert(alive(escapee));
  {
    UidPool pool(kUid, 1);
    pool.lock_host_wide(lock);
    auto lease = pool.acquire();
    cr_assert(lease.ok(), "%s", lease.ok() ? "" : lease.error().message().c_str());
    cr_assert(gone_within(escapee, 1000), "a dirty uid was handed out with its escapee alive");
  }
  // The lease was clean (reaped at acquire, nothing started since) but never
  // released by a kill: release() reaps it, then the pool marks it clean.
  cr_assert_eq(corral_test::uid_lock_byte(lock, kUid), kUidClean);
}

// A pool can say its idle uids are clean before it ends (a CLI ends with
// _exit, and its pool's end never runs): the byte reads clean while the pool
// still holds the uid, and dirty again as soon as the uid is handed out.
Test(uid_lock, idle_uids_are_marked_clean_while_held_and_dirty_again_when_reused) {
  need_root();
  TempDir dir;
  const std::string lock = dir / "uids.lock";
  constexpr uid_t kUid = 299601;
  UidPool pool(kUid, 1);
  pool.lock_host_wide(lock);
  cr_assert_eq(pool.mark_idle_clean(), 0u, "nothing is idle before the first lease");
  auto lease = pool.acquire();
  cr_assert(lease.ok(), "%s", lease.ok() ? "" : lease.error().message().c_str());
  cr_assert_eq(pool.mark_idle_clean(), 0u, "a leased uid is not idle");
  cr_assert_eq(corral_test::uid_lock_byte(lock, kUid), kUidDirty);
  lease->release();  // reaped (a SIGKILL to the uid): idle and clean
  cr_assert_eq(corral_test::uid_lock_byte(lock, kUid), kUidDirty, "idle but not yet said: dirty");
  cr_assert_eq(pool.mark_idle_clean(), 1u);
  cr_assert_eq(corral_test::uid_lock_byte(lock, kUid), kUidClean);
  auto other = UidLockFile::open(lock);
  cr_assert(other.ok());
  auto held = other->held_elsewhere(kUid);
  cr_assert(held.ok() && *held, "marking clean must not let go of the uid");
  auto again = pool.acquire();
  cr_assert(again.ok(), "%s", again.ok() ? "" : again.error().message().c_str());
  cr_assert_eq(again->uid(), kUid);
  cr_assert_eq(corral_test::uid_lock_byte(lock, kUid), kUidDirty, "a uid handed out again must read dirty");
}

// The one-shot CLI's end: Supervisor::close(), then _exit. The uid of its run
// reads clean afterwards, so the next `corral run` that takes it kills
// nothing (the first process's kill(-1), which walks every process on the
// host). Before, only the pool's destructor wrote it, which _exit skips.
Test(uid_lock, a_supervisor_closed_then_exited_at_once_leaves_its_uid_clean) {
  need_root();
  TempDir base;
  chmod(base.path().c_str(), 0755);
  constexpr uid_t kUid = 299602;
  SupervisorOptions o;
  o.workspace_base = base.path();
  o.uid_range_first = kUid;
  o.uid_range_count = 1;
  pid_t p = fork();
  cr_assert_geq(p, 0);
  if (p == 0) {
    auto sup = Supervisor::create(o);
    if (!sup.ok()) _exit(1);
    Request r;
    r.tier = Tier::os_process;
    r.argv = {"/bin/true"};
    auto res = (*sup)->run(std::move(r));
    if (!res.ok() || res->outcome != Outcome::exited) _exit(2);
    (*sup)->close();
    _exit(0);
  }
  int status = 0;
  waitpid(p, &status, 0);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
  cr_assert_eq(corral_test::uid_lock_byte(std::string(kUidLockPath), kUid), kUidClean,
               "a run reaped clean, its supervisor closed: the uid must read clean");
}
