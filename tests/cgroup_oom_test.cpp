// How a run's OOM is told from the cgroup (issue 14): CgroupStats::ceiling_oom
// on fake v1 and v2 run directories, read by read_stats and classified by
// classify_outcome — what finish_run does with the container runner's
// facts, on v2 files this host cannot produce — and, on the real kernel
// (v1), the race it exists for: a kill on the OOM eventfd beats the
// kernel's OOM killer to its victim.
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include <filesystem>

#include "corral/cgroup.hpp"
#include "corral/run_setup.hpp"
#include "support.hpp"

using namespace corral;
using corral_test::TempDir;

namespace {

CgroupStats v2_stats(const std::string& memory_events) {
  TempDir t;
  corral_test::write_file(t / "memory.events", memory_events);
  auto st = cgroupfs::read_stats(CgroupVersion::v2, {t.path(), t.path(), t.path()});
  cr_assert(st.ok(), "%s", st.error().message().c_str());
  return *st;
}

// A v1 memory directory: memory.oom_control, and the memory (and, when
// memsw_peak is given, memory+swap) high-water marks under a 16 MiB ceiling.
constexpr std::uint64_t kLimit = 16 << 20;
constexpr std::uint64_t kPage = 4096;

CgroupStats v1_stats(const std::string& oom_control, std::uint64_t peak,
                     std::optional<std::uint64_t> memsw_peak = std::nullopt, std::uint64_t limit = kLimit) {
  TempDir t;
  corral_test::write_file(t / "memory.oom_control", oom_control);
  corral_test::write_file(t / "memory.max_usage_in_bytes", std::to_string(peak) + "\n");
  corral_test::write_file(t / "memory.limit_in_bytes", std::to_string(limit) + "\n");
  corral_test::write_file(t / "memory.failcnt", "0\n");  // as 6.18 leaves it through an OOM
  if (memsw_peak) {
    corral_test::write_file(t / "memory.memsw.max_usage_in_bytes", std::to_string(*memsw_peak) + "\n");
    corral_test::write_file(t / "memory.memsw.limit_in_bytes", std::to_string(limit) + "\n");
    corral_test::write_file(t / "memory.memsw.failcnt", "0\n");
  }
  auto st = cgroupfs::read_stats(CgroupVersion::v1, {t.path(), "", ""});
  cr_assert(st.ok(), "%s", st.error().message().c_str());
  return *st;
}

ExitStatus killed_by(int sig) {
  ExitStatus s;
  s.signal = sig;
  return s;
}

ExitStatus exited_with(int code) {
  ExitStatus s;
  s.exited = true;
  s.exit_code = code;
  return s;
}

// How a run that ended with `status` is classified with `st` as its cgroup's
// evidence, as finish_run does it with finish_container's facts.
Result classify_with(const CgroupStats& st, bool notified, ExitStatus status, bool timed_out = false) {
  RunEnd end;
  end.status = status;
  end.timed_out = timed_out;
  end.oom_notified = notified;
  end.oom_killed = st.ceiling_oom(notified);
  Result r;
  classify_outcome(end, Limits{}, r);
  return r;
}

}  // namespace

// ---------------------------------------------------------------- v2, fake run directories

Test(cgroup_oom, v2_a_ceiling_oom_kill_is_killed_oom) {
  // memory.oom.group killed the group at its own ceiling.
  CgroupStats st = v2_stats("low 0\nhigh 0\nmax 9\noom 1\noom_kill 2\noom_group_kill 1\n");
  cr_assert(st.hit_ceiling);
  cr_assert_eq(st.oom_group_kills, 1u);
  cr_assert(st.ceiling_oom());
  Result r = classify_with(st, false, killed_by(SIGKILL));
  cr_assert_eq(r.outcome, Outcome::killed_oom);
  cr_assert_eq(r.resource, "memory_bytes");
  // A kernel without oom_group_kill (< 5.17) still counts the kill.
  cr_assert(v2_stats("max 3\noom 1\noom_kill 1\n").ceiling_oom());
}

Test(cgroup_oom, v2_never_for_a_group_that_stayed_under_its_ceiling) {
  // The host's OOM killer took a process of the run: oom_kill counts it, the
  // group's own `oom` does not.
  CgroupStats host_oom = v2_stats("low 0\nhigh 0\nmax 0\noom 0\noom_kill 1\noom_group_kill 0\n");
  cr_assert(host_oom.oom_killed() && !host_oom.ceiling_oom());
  cr_assert_eq(classify_with(host_oom, false, killed_by(SIGKILL)).outcome, Outcome::signaled);
  // At the ceiling the OOM path ran, but memory freed meanwhile let the
  // charge through: nothing was killed; the program then SIGKILLed itself.
  CgroupStats near = v2_stats("max 12\noom 1\noom_kill 0\noom_group_kill 0\n");
  cr_assert(!near.ceiling_oom());
  cr_assert_eq(classify_with(near, false, killed_by(SIGKILL)).outcome, Outcome::signaled);
  // Reclaim kept it under: `max` only.
  cr_assert(!v2_stats("max 40\noom 0\noom_kill 0\n").ceiling_oom());
}

// ---------------------------------------------------------------- v1, fake run directories

Test(cgroup_oom, v1_the_eventfd_counts_when_the_kill_raced_the_oom_killer) {
  // The supervisor's SIGKILL on the OOM eventfd landed before the kernel
  // chose a victim: oom_kill 0, but the group's usage was at its ceiling and
  // the eventfd fired.
  const char* nothing_counted = "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n";
  CgroupStats raced = v1_stats(nothing_counted, kLimit, kLimit);
  cr_assert(raced.hit_ceiling);
  cr_assert(!raced.ceiling_oom(false));
  cr_assert(raced.ceiling_oom(true));
  cr_assert_eq(classify_with(raced, true, killed_by(SIGKILL)).outcome, Outcome::killed_oom);
  // The kernel's own kill, with no notification seen.
  cr_assert(v1_stats("oom_kill_disable 0\nunder_oom 0\noom_kill 1\n", kLimit).ceiling_oom(false));
  // Caught while a task is in the OOM path.
  cr_assert(v1_stats("oom_kill_disable 0\nunder_oom 1\noom_kill 0\n", kLimit).ceiling_oom(false));
  // Swapped out: memory well under, memory+swap at the ceiling.
  cr_assert(v1_stats(nothing_counted, kLimit / 2, kLimit).ceiling_oom(true));
  // The OOM path runs only for a charge of at most 8 pages that no longer fits.
  cr_assert(v1_stats(nothing_counted, kLimit - 8 * kPage, kLimit - 8 * kPage).ceiling_oom(true));
}

Test(cgroup_oom, v1_never_for_a_group_that_stayed_under_its_ceiling) {
  // An ancestor's OOM signals every descendant's eventfd too, and its killer
  // may pick a process of this group; the group itself stayed far under.
  CgroupStats ancestor = v1_stats("oom_kill_disable 0\nunder_oom 0\noom_kill 1\n", kLimit / 4, kLimit / 4);
  cr_assert(!ancestor.hit_ceiling && !ancestor.ceiling_oom(true));
  cr_assert_eq(classify_with(ancestor, true, killed_by(SIGKILL)).outcome, Outcome::signaled);
  // More than 8 pages short of it.
  cr_assert(!v1_stats("oom_kill_disable 0\nunder_oom 0\noom_kill 0\n", kLimit - 9 * kPage, kLimit - 9 * kPage)
                 .ceiling_oom(true));
  // At the ceiling, reclaimed (page cache), no OOM path, then a plain SIGKILL.
  CgroupStats reclaimed = v1_stats("oom_kill_disable 0\nunder_oom 0\noom_kill 0\n", kLimit, kLimit);
  cr_assert_eq(classify_with(reclaimed, false, killed_by(SIGKILL)).outcome, Outcome::signaled);
  // No ceiling (v1 writes "no limit" as a huge number): nothing to hit.
  cr_assert(!v1_stats("oom_kill_disable 0\nunder_oom 0\noom_kill 1\n", 1ull << 40, std::nullopt,
                      9223372036854771712ull)
                 .ceiling_oom(true));
  // No memory controller: no evidence at all.
  cr_assert(!CgroupStats{}.ceiling_oom(true));
}

Test(cgroup_oom, evidence_needs_a_sigkill_death_that_no_deadline_came_before) {
  CgroupStats st = v2_stats("max 1\noom 1\noom_kill 1\n");
  // The program's child was OOM-killed; the program went on and exited 1.
  Result exited = classify_with(st, false, exited_with(1));
  cr_assert_eq(exited.outcome, Outcome::exited);
  cr_assert_eq(exited.exit_code, 1);
  // The deadline came first.
  cr_assert_eq(classify_with(st, false, killed_by(SIGKILL), true).outcome, Outcome::killed_timeout);
  // Another signal is that signal.
  cr_assert_eq(classify_with(st, false, killed_by(SIGSEGV)).outcome, Outcome::signaled);
}

// ---------------------------------------------------------------- v1, the real kernel

Test(cgroup_oom, v1_a_kill_on_the_oom_eventfd_is_still_a_ceiling_oom) {
  CgroupProbe p = probe_cgroups();
  if (p.backend != CgroupVersion::v1 || !p.has("memory"))
    cr_skip_test("the OOM eventfd needs a v1 memory controller: %s", p.describe().c_str());
  (void)sweep_stale_run_cgroups(p, CgroupSpec{});
  int kernel_counted = 0;
  for (int i = 0; i < 10; ++i) {
    CgroupSpec spec;
    spec.memory_bytes = 16 << 20;
    auto run = create_run_cgroup(p, spec, "oomrace");
    cr_assert(run.ok(), "create_run_cgroup: %s", run.ok() ? "" : run.error().message().c_str());
    auto event = run->oom_notifier();
    cr_assert(event.ok() && event->valid(), "oom_notifier: %s", event.ok() ? "no fd" : event.error().message().c_str());
    pid_t pid = fork();
    if (pid == 0) {
      if (join_cgroup_in_child(*run)) _exit(90);
      const std::size_t bytes = std::size_t{256} << 20;
      void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (m == MAP_FAILED) _exit(91);
      for (std::size_t off = 0; off < bytes; off += 4096) static_cast<volatile char*>(m)[off] = 1;
      _exit(0);
    }
    // Kill on the notification, as the supervisor does.
    struct pollfd pfd {event->get(), POLLIN, 0};
    int ready = poll(&pfd, 1, 10000);
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    cr_assert_eq(ready, 1, "no OOM notification within 10 s (status %#x)", status);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "status %#x", status);
    auto st = run->stats();
    cr_assert(st.ok(), "stats: %s", st.ok() ? "" : st.error().message().c_str());
    kernel_counted += st->oom_killed();
    cr_assert(st->ceiling_oom(true), "run %d: peak %llu, oom_kills %llu", i,
              (unsigned long long)st->memory_peak_bytes.value_or(0), (unsigned long long)st->oom_kills.value_or(0));
    cr_assert(run->remove().ok());
  }
  cr_log_info("the kernel counted an OOM kill of its own in %d of 10 runs", kernel_counted);
}
