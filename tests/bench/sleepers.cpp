// bench sleepers: N concurrent `sleep S` children on one supervisor (tier
// none): how long launching them takes, the supervisor's own CPU per child
// (getrusage RUSAGE_SELF: children excluded) from the first submit to the
// last result, and its RSS growth per child with all of them alive. The
// baseline does the same with bare posix_spawn + waitpid in a forked
// process of its own (so neither side's memory or CPU shows in the other).
//
//   sleepers [N=5000] [S=5]
//
// Diagnostics: SLEEPERS_PHASES=1 prints the submit phase's CPU and heap per
// child on stderr; SLEEPERS_NO_SUBREAPER=1 runs the supervisor without
// become_subreaper (no orphan scans) to show what they cost.
#include <malloc.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "corral/supervisor.hpp"

extern char** environ;

namespace {

struct Figures {
  double launch_ms = 0;
  double cpu_us_per_child = 0;
  double rss_kib_per_child = 0;
  long ok = 0;
  long peak = 0;  // children alive at once (all of them unless launching outlasted the sleep)
};

long rss_kib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  return 0;
}

double cpu_us() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

Figures bare(int n, const std::string& secs) {
  Figures f;
  std::vector<pid_t> pids;
  pids.reserve(static_cast<std::size_t>(n));
  char* argv[] = {const_cast<char*>("sleep"), const_cast<char*>(secs.c_str()), nullptr};
  long rss0 = rss_kib();
  double cpu0 = cpu_us();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    pid_t pid;
    if (posix_spawnp(&pid, "sleep", nullptr, nullptr, argv, environ) != 0) break;
    pids.push_back(pid);
  }
  f.launch_ms = ms_since(t0);
  f.rss_kib_per_child = static_cast<double>(rss_kib() - rss0) / n;
  for (pid_t pid : pids) {
    int st;
    if (waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0) ++f.ok;
  }
  f.cpu_us_per_child = (cpu_us() - cpu0) / n;
  return f;
}

// The baseline in a process of its own; its figures come back through a pipe.
Figures bare_in_child(int n, const std::string& secs) {
  int p[2];
  if (pipe(p) != 0) std::abort();
  pid_t pid = fork();
  if (pid == 0) {
    Figures f = bare(n, secs);
    (void)!write(p[1], &f, sizeof f);
    _exit(0);
  }
  close(p[1]);
  Figures f;
  if (read(p[0], &f, sizeof f) != static_cast<ssize_t>(sizeof f)) f.ok = -1;
  close(p[0]);
  waitpid(pid, nullptr, 0);
  return f;
}

Figures corral_side(int n, const std::string& secs) {
  Figures f;
  corral::SupervisorOptions sopts;
  if (std::getenv("SLEEPERS_NO_SUBREAPER")) sopts.become_subreaper = false;
  auto sup = corral::Supervisor::create(sopts);
  if (!sup) {
    std::fprintf(stderr, "bench sleepers: %s\n", sup.error().message().c_str());
    std::exit(1);
  }
  if ((*sup)->capacity() < static_cast<std::size_t>(n))
    std::fprintf(stderr, "bench sleepers: the fd limit allows %zu runs, fewer than %d\n", (*sup)->capacity(), n);
  // Warm up: what the first run allocates once (probes, libraries) is not per child.
  for (int i = 0; i < 3; ++i) {
    corral::Request r;
    r.tier = corral::Tier::none;
    r.argv = {"true"};
    (void)(*sup)->run(std::move(r));
  }
  std::string first_error;
  long rss0 = rss_kib();
  std::size_t heap0 = mallinfo2().uordblks;
  double cpu0 = cpu_us();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    corral::Request r;
    r.tier = corral::Tier::none;
    r.argv = {"sleep", secs};
    corral::RunCallbacks cb;
    cb.on_result = [&f, &first_error](const corral::Result& res) {
      if (res.outcome == corral::Outcome::exited && res.exit_code == 0) ++f.ok;
      else if (first_error.empty()) first_error = res.detail;
    };
    auto h = (*sup)->submit(std::move(r), std::move(cb));
    if (!h) {
      std::fprintf(stderr, "bench sleepers: submit %d: %s\n", i, h.error().message().c_str());
      break;
    }
    h->detach();
    f.peak = std::max(f.peak, static_cast<long>((*sup)->in_flight()));
  }
  f.launch_ms = ms_since(t0);
  f.rss_kib_per_child = static_cast<double>(rss_kib() - rss0) / static_cast<double>(std::max(f.peak, 1L));
  if (std::getenv("SLEEPERS_PHASES"))
    std::fprintf(stderr, "# submit phase: %.1f us cpu per child; heap in use %.0f bytes per child\n",
                 (cpu_us() - cpu0) / n, static_cast<double>(mallinfo2().uordblks - heap0) / n);
  if (auto st = (*sup)->run_until_idle(); !st) std::fprintf(stderr, "bench sleepers: %s\n", st.error().message().c_str());
  f.cpu_us_per_child = (cpu_us() - cpu0) / n;
  if (!first_error.empty()) std::fprintf(stderr, "bench sleepers: a run failed: %s\n", first_error.c_str());
  return f;
}

void row(const char* name, double corral, double baseline, const char* unit) {
  std::printf("bench %s corral=%.2f baseline=%.2f ratio=%.2f unit=%s\n", name, corral, baseline,
              baseline > 0 ? corral / baseline : 0.0, unit);
}

}  // namespace

int main(int argc, char** argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 5000;
  std::string secs = argc > 2 ? argv[2] : "5";
  Figures b = bare_in_child(n, secs);
  Figures c = corral_side(n, secs);
  row("sleepers_launch", c.launch_ms, b.launch_ms, "ms_to_launch_all");
  row("sleepers_cpu", c.cpu_us_per_child, b.cpu_us_per_child, "us_supervisor_cpu_per_child");
  row("sleepers_rss", c.rss_kib_per_child, b.rss_kib_per_child, "KiB_supervisor_rss_per_child");
  std::printf("# sleepers: %d children, %ld alive at once; results exited 0: corral %ld, baseline %ld; "
              "goals: cpu <= 100 us (%s), rss <= 4 KiB (%s)\n",
              n, c.peak, c.ok, b.ok, c.cpu_us_per_child <= 100 ? "met" : "missed",
              c.rss_kib_per_child <= 4 ? "met" : "missed");
  return c.ok == n ? 0 : 1;
}
