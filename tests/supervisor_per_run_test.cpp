// What the supervisor does once instead of per run, and the per-run steps it
// leaves out, still keep every promise of the run: the hard limits it
// remembers (OwnHardLimits), end of output seen from the poll alone, fds
// closed through the ring, our pid read once.
#include <sys/resource.h>

#include <linux/capability.h>

#include <string>

#include "corral/capabilities.hpp"
#include "supervisor_harness.hpp"

using namespace corral;

namespace {

Request sh(std::string script) {
  Request r;
  r.tier = Tier::none;
  r.argv = {"/bin/sh", "-c", std::move(script)};
  return r;
}

}  // namespace

// The supervisor checks a run's rlimits against our hard limits as it read
// them once. Lowered since (this test process lowers its own, which it
// cannot undo without CAP_SYS_RESOURCE: Criterion runs each test in a
// process of its own), a run asking above the new one must not run with it
// unenforced: it fails before exec (the child's prlimit64 gets EPERM), and
// the detail names the limit and why.
Test(supervisor_per_run, a_hard_limit_lowered_later_fails_the_run_closed_and_names_it) {
  if (has_effective_capability(CAP_SYS_RESOURCE))
    cr_skip_test("CAP_SYS_RESOURCE is effective: a lowered hard limit can be raised again by the child");
  corral_test::Harness h;
  Request first = sh("exit 0");
  first.limits.set(Limit::file_bytes, 1 << 20);
  Result ok = h.run(std::move(first));
  cr_assert_eq(ok.outcome, Outcome::exited, "%s", ok.detail.c_str());

  struct rlimit fsize {};
  cr_assert_eq(getrlimit(RLIMIT_FSIZE, &fsize), 0);
  fsize.rlim_cur = fsize.rlim_max = 4096;
  cr_assert_eq(setrlimit(RLIMIT_FSIZE, &fsize), 0);

  Request again = sh("echo ran >ran.txt");
  again.limits.set(Limit::file_bytes, 1 << 20);
  auto res = h.sup->run(std::move(again));
  cr_assert(res.ok(), "%s", res.ok() ? "" : res.error().message().c_str());
  cr_expect_eq(res->outcome, Outcome::spawn_failed, "%s", res->detail.c_str());
  cr_expect_eq(res->spawn_stage, "rlimits");
  cr_expect_eq(res->spawn_errno, EPERM);
  cr_expect(res->detail.find("file_bytes=1048576 is above this process's hard RLIMIT_FSIZE (4096)") != std::string::npos,
            "%s", res->detail.c_str());
  cr_expect_eq(h.leftovers(), 0u, "the workspace was left behind");
}

// A pipe whose poll says POLLHUP without POLLIN is at its end: closed without
// a read. Output written right before the exit still arrives whole.
Test(supervisor_per_run, output_up_to_the_end_arrives_whole) {
  corral_test::Harness h;
  for (int round = 0; round < 20; ++round) {
    Result r = h.run(sh("printf 'last words'; printf 'to stderr' >&2"));
    cr_assert_eq(r.outcome, Outcome::exited, "%s", r.detail.c_str());
    cr_assert_eq(r.stdout_capture.text, "last words", "round %d", round);
    cr_assert_eq(r.stderr_capture.text, "to stderr", "round %d", round);
  }
  cr_expect_eq(h.leftovers(), 0u);
}

// A run's fds (pidfd, pipes, our copies of the write ends) are closed
// through the ring (close_later): by the time its result is delivered and
// the loop is idle, none is open any more, one run or many.
Test(supervisor_per_run, a_delivered_run_leaves_no_fd_of_its_own) {
  corral_test::Harness h;
  (void)h.run(sh("exit 0"));  // what the first run opens once (probes, the spawner)
  const std::size_t before = corral_test::open_fd_count();
  Result r = h.run(sh("echo out; echo err >&2"));
  cr_assert_eq(r.stdout_capture.text, "out\n", "%s", r.detail.c_str());
  cr_assert_eq(corral_test::open_fd_count(), before, "run(): fds left open after the result");
  int delivered = 0;
  for (int i = 0; i < 20; ++i) {
    RunCallbacks cb;
    cb.on_result = [&delivered](const Result& res) { delivered += res.outcome == Outcome::exited; };
    auto handle = h.sup->submit(sh("echo $$"), std::move(cb));
    cr_assert(handle.ok(), "%s", handle.ok() ? "" : handle.error().message().c_str());
    handle->detach();
  }
  cr_assert(h.sup->run_until_idle().ok());
  cr_assert_eq(delivered, 20);
  cr_assert_eq(corral_test::open_fd_count(), before, "run_until_idle(): fds left open after 20 results");
  cr_expect_eq(h.leftovers(), 0u);
}

// The pid each child checks its parent against is read once. A process
// forked after that (and a fresh supervisor in it) runs with its own: the
// children of the fork must not find a stale one and stop at parent_death.
Test(supervisor_per_run, a_forked_process_spawns_with_its_own_pid) {
  corral_test::Harness h;
  Result first = h.run(sh("exit 0"));
  cr_assert_eq(first.outcome, Outcome::exited, "%s", first.detail.c_str());
  corral_test::TempDir base;
  cr_assert_eq(chmod(base.path().c_str(), 0755), 0);
  auto end = corral_test::run_in_child([&] {
    SupervisorOptions o;
    o.workspace_base = base.path();
    auto sup = Supervisor::create(o);
    if (!sup) return 2;
    auto r = (*sup)->run(sh("exit 7"));
    if (!r) return 3;
    return r->outcome == Outcome::exited && r->exit_code == 7 ? 0 : 4;
  });
  cr_assert(end.exited && end.code == 0, "the forked supervisor's run: exit %d (4: not exited 7)", end.code);
  Result again = h.run(sh("exit 0"));  // and the parent's own still runs
  cr_assert_eq(again.outcome, Outcome::exited, "%s", again.detail.c_str());
}
