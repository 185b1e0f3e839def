// How runs that meet memory_bytes end (issue 14). In the container tier a run
// its memory cgroup's ceiling ends is killed_oom every time, and a run that
// stayed under the ceiling never is: many runs in flight through one
// Supervisor, as a batch would have them. On cgroup v1 the supervisor kills a
// run as soon as the OOM eventfd fires, which is before the kernel's OOM
// killer picks (and counts) a victim, so the cgroup's oom_kill counter alone
// missed some of them. In tier process memory_bytes is RLIMIT_AS: an
// allocation past it fails in the program, which is never an OOM kill. The
// programs are tests/helpers/memhog.c (and python3 now and then).
#include <functional>

#include "container_support.hpp"

using namespace corral;
using namespace container_test;

namespace {

// Small, so that a run reaches it in a few ms; python3 starts in less than that.
constexpr std::uint64_t kCeiling = 24ull << 20;

Request hog(std::vector<std::string> argv) {
  Request r = boxed(std::move(argv));
  r.limits.set(Limit::memory_bytes, kCeiling);
  r.limits.set(Limit::wall_seconds, 60);  // a run that never ends fails the test, not the suite
  return r;
}

std::string describe(const Result& r) {
  return std::string(to_string(r.outcome)) + " signal " + std::to_string(r.signal) + " exit " +
         std::to_string(r.exit_code) + " peak " + std::to_string(r.max_rss_bytes) + ": " + r.detail +
         "\nstdout: " + r.stdout_capture.text + "\nstderr: " + r.stderr_capture.text;
}

// Runs make(0..total-1) through h's supervisor with up to `in_flight` at a
// time; check(i, result) for each; returns how many checks failed, with the
// first few failures in *why.
int run_many(Harness& h, int total, int in_flight, const std::function<Request(int)>& make,
             const std::function<std::string(int, const Result&)>& check, std::string* why) {
  int submitted = 0, finished = 0, failed = 0;
  while (finished < total) {
    while (submitted < total && submitted - finished < in_flight) {
      const int i = submitted++;
      RunCallbacks cb;
      cb.on_result = [&, i](const Result& r) {
        ++finished;
        std::string bad = check(i, r);
        if (bad.empty()) return;
        if (++failed <= 5) *why += "run " + std::to_string(i) + ": " + bad + "\n";
      };
      auto handle = h.sup->submit(make(i), cb);
      cr_assert(handle.ok(), "submit %d: %s", i, handle.ok() ? "" : handle.error().message().c_str());
      handle->detach();
    }
    auto more = h.sup->run_once(1.0);
    cr_assert(more.ok(), "run_once: %s", more.ok() ? "" : more.error().message().c_str());
  }
  return failed;
}

std::string expect_oom(const Result& r) {
  if (r.outcome != Outcome::killed_oom || r.signal != SIGKILL || r.resource != "memory_bytes")
    return "want killed_oom by SIGKILL under memory_bytes, got " + describe(r);
  // The cgroup's high-water mark: the run did reach its ceiling.
  if (r.max_rss_bytes + (2ull << 20) < kCeiling || r.max_rss_bytes > kCeiling + (1ull << 20))
    return "peak not at the ceiling: " + describe(r);
  if (cli_exit_code(r) != 137) return "CLI exit code " + std::to_string(cli_exit_code(r));
  return "";
}

}  // namespace

Test(container_oom, two_hundred_oom_runs_in_flight_are_all_killed_oom, .timeout = 240) {
  SKIP_UNLESS_CONTAINER();
  SKIP_UNLESS_CGROUP(memory);
  Harness h;
  // Mostly the C hog; every 25th a python3 bytearray, every 25th a fork
  // bomb whose children all touch memory.
  auto make = [](int i) {
    if (i % 25 == 7) return hog({"python3", "-c", "b = bytearray(1 << 30)"});
    if (i % 25 == 13) return hog({"/helpers/memhog", "fork-grow", "6"});
    return hog({"/helpers/memhog", "grow"});
  };
  std::string why;
  int failed = run_many(h, 200, 8, make, [](int, const Result& r) { return expect_oom(r); }, &why);
  cr_assert_eq(failed, 0, "%d of 200 OOM runs were not reported killed_oom:\n%s", failed, why.c_str());
  cr_assert_eq(my_run_cgroups(), 0u, "run cgroups left behind");
  cr_assert_eq(h.leftovers(), 0u, "workspaces left behind");
}

Test(container_oom, runs_under_the_ceiling_are_never_killed_oom_next_to_runs_that_hit_it, .timeout = 120) {
  SKIP_UNLESS_CONTAINER();
  SKIP_UNLESS_CGROUP(memory);
  Harness h;
  // Half the ceiling and a clean exit; half the ceiling and a SIGKILL the
  // program sends itself; and, in the same batch, runs that do hit it.
  const std::string half = std::to_string(kCeiling / 2);
  auto make = [&](int i) {
    switch (i % 3) {
      case 0: return hog({"/helpers/memhog", "touch", half});
      case 1: return hog({"/helpers/memhog", "touch-kill", half});
      default: return hog({"/helpers/memhog", "grow"});
    }
  };
  auto check = [](int i, const Result& r) -> std::string {
    switch (i % 3) {
      case 0:
        if (r.outcome != Outcome::exited || r.exit_code != 0 || r.stdout_capture.text != "touched\n")
          return "want exited 0, got " + describe(r);
        if (r.max_rss_bytes < kCeiling / 2 || r.max_rss_bytes >= kCeiling) return "peak: " + describe(r);
        return "";
      case 1:
        if (r.outcome != Outcome::signaled || r.signal != SIGKILL || r.stdout_capture.text != "touched\n")
          return "want signaled by SIGKILL, got " + describe(r);
        if (contains(r.detail, "OOM")) return "an OOM mentioned for a run under its ceiling: " + r.detail;
        return "";
      default:
        return expect_oom(r);
    }
  };
  std::string why;
  int failed = run_many(h, 48, 8, make, check, &why);
  cr_assert_eq(failed, 0, "%d of 48 runs misclassified:\n%s", failed, why.c_str());
  cr_assert_eq(my_run_cgroups(), 0u, "run cgroups left behind");
}

Test(container_oom, a_deadline_before_the_ceiling_stays_a_timeout) {
  SKIP_UNLESS_CONTAINER();
  SKIP_UNLESS_CGROUP(memory);
  Harness h;
  // Touches a little and sleeps: the deadline ends it, the ceiling never does.
  Request r = hog({"sh", "-c", "/helpers/memhog touch 4194304; sleep 30"});
  r.limits.set(Limit::wall_seconds, 1);
  r.grace_seconds = 0.2;
  Result res = h.run(std::move(r));
  cr_assert_eq(res.outcome, Outcome::killed_timeout, "%s", describe(res).c_str());
  cr_assert(!contains(res.detail, "OOM"), "%s", res.detail.c_str());
}

// ---- the supervisor outlives every OOM of a run ---------------------------------------
// In a namespace template pid 1 used to run on the supervisor's own memory
// and sit in the run's memory cgroup. When the run's memory was page cache
// or tmpfs, or spread over small processes, pid 1's mm (ours) was the
// largest in the group: the OOM killer chose it, and killing it kills every
// process sharing that mm, this test process included (issue: one job of a
// batch ended the batch). These fail on that code as a crash of the test.

namespace {

// A container request with nothing bound: as root it enters the template.
Request unbound(std::vector<std::string> argv) {
  Request r;
  r.tier = Tier::container;
  r.argv = std::move(argv);
  r.limits.set(Limit::wall_seconds, 60);
  return r;
}

// A neighbour with no ceiling in flight beside run 1, which meets its own.
void neighbour_survives_an_oom(const std::string& script) {
  if (geteuid() != 0 || host().landlock_abi < 6)
    cr_skip_test("runs enter a namespace template only as root with Landlock ABI >= 6");
  Harness h;
  auto make = [&](int i) {
    if (i == 0) return unbound({"sh", "-c", "sleep 1; echo finished"});
    Request r = unbound({"sh", "-c", script});
    r.limits.set(Limit::memory_bytes, kCeiling);
    return r;
  };
  auto check = [](int i, const Result& r) -> std::string {
    // The template's network is the only one without a loopback.
    if (r.enforcement.at("network") != "empty_namespace") return "not in the template: " + describe(r);
    if (i == 1) return r.outcome == Outcome::killed_oom ? "" : "want killed_oom, got " + describe(r);
    if (r.outcome != Outcome::exited || r.stdout_capture.text != "finished\n")
      return "the neighbour: want exited with 'finished', got " + describe(r);
    return "";
  };
  std::string why;
  int failed = run_many(h, 2, 2, make, check, &why);
  cr_assert_eq(failed, 0, "%s", why.c_str());
  cr_assert_eq(my_run_cgroups(), 0u, "run cgroups left behind");
}

}  // namespace

Test(container_oom, a_run_whose_memory_is_tmpfs_ends_killed_oom_and_the_supervisor_lives_on, .timeout = 60) {
  SKIP_UNLESS_CONTAINER();
  SKIP_UNLESS_CGROUP(memory);
  // /tmp is a tmpfs charged to the run: no process of the run holds the pages.
  neighbour_survives_an_oom("head -c 104857600 /dev/zero > /tmp/fill");
}

Test(container_oom, a_run_whose_memory_is_spread_over_small_processes_ends_killed_oom, .timeout = 60) {
  SKIP_UNLESS_CONTAINER();
  SKIP_UNLESS_CGROUP(memory);
  // 40 shells holding 2 MB each: every one smaller than the supervisor.
  neighbour_survives_an_oom("for i in $(seq 40); do sh -c 'x=$(head -c 2000000 /dev/zero | tr \"\\0\" a); "
                           "sleep 30' & done; wait");
}

// ---- tier process: RLIMIT_AS, no OOM killer -------------------------------------------

Test(process_oom, an_allocation_past_rlimit_as_is_the_programs_own_end) {
  Harness h;
  Request c;
  c.tier = Tier::os_process;
  c.argv = {corral_test::helper("memhog"), "touch", std::to_string(64ull << 20)};
  c.limits.set(Limit::memory_bytes, 32ull << 20);
  Result res = h.run(std::move(c));
  cr_assert_eq(res.outcome, Outcome::exited, "%s", describe(res).c_str());
  cr_assert_eq(res.exit_code, 3, "%s", describe(res).c_str());
  cr_assert_eq(res.stdout_capture.text, "malloc failed\n");
  Request py;
  py.tier = Tier::os_process;
  py.argv = {"python3", "-c", "b = bytearray(1 << 30)"};
  py.limits.set(Limit::memory_bytes, 200ull << 20);
  res = h.run(std::move(py));
  cr_assert_eq(res.outcome, Outcome::exited, "%s", describe(res).c_str());
  cr_assert_eq(res.exit_code, 1, "%s", describe(res).c_str());
  cr_assert(contains(res.stderr_capture.text, "MemoryError"), "%s", describe(res).c_str());
}
