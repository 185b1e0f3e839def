// bench container: per-run time of `corral run --tier container -- /bin/true`
// (the CLI, process start included) against bubblewrap's
//   bwrap --unshare-all --ro-bind /usr /usr --symlink usr/lib /lib
//         --symlink usr/lib64 /lib64 --symlink usr/bin /bin --proc /proc --dev /dev /bin/true
// interleaved in rounds so drift hits both sides. A third series runs the
// same corral command with TMPDIR=/dev/shm: as root a container run's
// workspace is a tmpfs of its own whatever the base, so the two series
// should agree (rootless, the workspace is a directory under the base, and
// on a host whose /tmp is a busy ext4 that directory is a large share).
// Then where corral's time goes: the same run in-process through one
// Supervisor, split by the Result's timings.
//
// A fourth series is the floor of goal 5 (issue 16): util-linux's
// `unshare --pid --fork --mount --ipc --uts --cgroup /bin/true` (with
// `--user --map-root-user` when not root), the namespaces a container run
// gets made by a launcher that does nothing else: no root of its own, no
// cgroup, no workspace, no seccomp, no capabilities dropped, no capture.
// What a container run may cost against bubblewrap cannot go below it.
//
// CPU is user + system of every process of a run, counted when it is
// reaped (RUSAGE_CHILDREN). bubblewrap's own process exits as soon as its
// sandbox's pid 1 reports the program's status, before that pid 1 (which
// made the mounts and forked the program) has exited; that pid 1 and the
// program were then reparented to init and never counted. The bench is a
// child subreaper, so they come back to it and each series reaps them
// before it reads the clock of CPU (not the wall clock: bubblewrap's wall
// still ends when its own process does). container_cpu also prints what
// bubblewrap's own process alone used, the figure the row showed before.
//
//   container_bench CORRAL_BIN [PER_ROUND [ROUNDS]]
#include <fcntl.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "corral/supervisor.hpp"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

std::vector<char*> g_env;  // environ, or environ with TMPDIR replaced

// Spawn argv, wait; false when it did not exit 0.
bool run_cmd(const std::vector<const char*>& argv, char** envp = environ) {
  std::vector<char*> a;
  for (const char* s : argv) a.push_back(const_cast<char*>(s));
  a.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  pid_t pid;
  int rc = posix_spawnp(&pid, a[0], &fa, nullptr, a.data(), envp);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return false;
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

// Mean per run over n runs, in ms; wall and CPU (user+sys of the children:
// cpu_ms every process of the runs, own_cpu_ms only those the command's
// own process reaped, itself included).
struct Sample {
  double wall_ms, cpu_ms, own_cpu_ms;
};

double children_cpu_ms() {
  rusage ru;
  getrusage(RUSAGE_CHILDREN, &ru);
  auto ms = [](const timeval& t) { return t.tv_sec * 1e3 + t.tv_usec / 1e3; };
  return ms(ru.ru_utime) + ms(ru.ru_stime);
}

Sample per_run(const std::vector<const char*>& argv, int n, char** envp = environ) {
  double cpu0 = children_cpu_ms();
  auto t0 = Clock::now();
  for (int i = 0; i < n; ++i)
    if (!run_cmd(argv, envp)) {
      std::fprintf(stderr, "bench container: '%s ...' failed\n", argv[0]);
      std::exit(1);
    }
  double wall = std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / n;
  double own = (children_cpu_ms() - cpu0) / n;
  // What the commands left to their subreaper (us): reaped, so counted.
  int st;
  while (waitpid(-1, &st, 0) > 0) {
  }
  return {wall, (children_cpu_ms() - cpu0) / n, own};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// In-process: the library's share, without process start.
void breakdown(int n) {
  auto sup = corral::Supervisor::create();
  if (!sup) {
    std::fprintf(stderr, "bench container: %s\n", sup.error().message().c_str());
    return;
  }
  double wall = 0, plan = 0, clone = 0, setup = 0, run = 0, collect = 0;
  auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) {
    corral::Request r;
    r.tier = corral::Tier::container;
    r.argv = {"/bin/true"};
    auto res = (*sup)->run(std::move(r));
    if (!res || res->outcome != corral::Outcome::exited) {
      std::fprintf(stderr, "bench container: run failed: %s\n", res ? res->detail.c_str() : res.error().message().c_str());
      return;
    }
    wall += res->wall_seconds;
    plan += res->timings.plan;
    clone += res->timings.clone;
    setup += res->timings.child_setup;
    run += res->timings.run;  // no exec phase: nobody waits for a container's exec
    collect += res->timings.collect;
  }
  double loop = std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / n;
  auto ms = [n](double s) { return s * 1e3 / n; };
  std::printf("bench container_inprocess per_run=%.2f result_wall=%.2f plan=%.2f clone=%.2f "
              "child_setup=%.2f run=%.2f collect=%.2f unit=ms\n",
              loop, ms(wall), ms(plan), ms(clone), ms(setup), ms(run), ms(collect));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: container_bench CORRAL_BIN [PER_ROUND [ROUNDS]]\n");
    return 2;
  }
  // Orphans of the commands come to us (see the top): counted when reaped.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  int per_round = argc > 2 ? std::atoi(argv[2]) : 20;
  int rounds = argc > 3 ? std::atoi(argv[3]) : 5;
  std::vector<const char*> corral = {argv[1], "run", "--tier", "container", "--", "/bin/true"};
  std::vector<const char*> bwrap = {"bwrap", "--unshare-all", "--ro-bind", "/usr", "/usr", "--symlink", "usr/lib",
                                    "/lib", "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/bin", "/bin",
                                    "--proc", "/proc", "--dev", "/dev", "/bin/true"};
  std::vector<const char*> help = {argv[1], "--help"};
  std::vector<const char*> floor = {"unshare", "--pid", "--fork", "--mount", "--ipc", "--uts", "--cgroup"};
  if (geteuid() != 0) floor.insert(floor.end(), {"--user", "--map-root-user"});
  floor.push_back("/bin/true");
  static char shm_tmpdir[] = "TMPDIR=/dev/shm";
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "TMPDIR=", 7) != 0) g_env.push_back(*e);
  g_env.push_back(shm_tmpdir);
  g_env.push_back(nullptr);
  bool have_bwrap = run_cmd(bwrap);
  bool have_floor = run_cmd(floor);
  run_cmd(corral);
  for (int st; waitpid(-1, &st, 0) > 0;) {
  }
  std::vector<double> c_wall, c_cpu, b_wall, b_cpu, b_own, h_wall, s_wall, s_cpu, f_wall;
  for (int r = 0; r < rounds; ++r) {
    Sample c = per_run(corral, per_round);
    c_wall.push_back(c.wall_ms);
    c_cpu.push_back(c.cpu_ms);
    if (have_bwrap) {
      Sample b = per_run(bwrap, per_round);
      b_wall.push_back(b.wall_ms);
      b_cpu.push_back(b.cpu_ms);
      b_own.push_back(b.own_cpu_ms);
    }
    Sample shm = per_run(corral, per_round, g_env.data());
    s_wall.push_back(shm.wall_ms);
    s_cpu.push_back(shm.cpu_ms);
    h_wall.push_back(per_run(help, per_round).wall_ms);
    if (have_floor) f_wall.push_back(per_run(floor, per_round).wall_ms);
  }
  if (have_bwrap)
    std::printf("bench container corral=%.2f baseline=%.2f ratio=%.2f unit=ms_per_run (cpu: corral=%.2f bwrap=%.2f)\n",
                median(c_wall), median(b_wall), median(c_wall) / median(b_wall), median(c_cpu), median(b_cpu));
  else
    std::printf("bench container corral=%.2f baseline=none unit=ms_per_run (bwrap not installed)\n", median(c_wall));
  // CPU per run (user + system of the whole run's processes) against
  // bubblewrap's: issue 16 wants corral's at most bubblewrap's.
  if (have_bwrap)
    std::printf("bench container_cpu corral=%.2f baseline=%.2f ratio=%.2f unit=ms_cpu_per_run (bwrap's own "
                "process alone: %.2f)\n",
                median(c_cpu), median(b_cpu), median(c_cpu) / median(b_cpu), median(b_own));
  if (have_bwrap)
    std::printf("bench container_tmpfs_workspace corral=%.2f baseline=%.2f ratio=%.2f unit=ms_per_run (cpu: corral=%.2f)\n",
                median(s_wall), median(b_wall), median(s_wall) / median(b_wall), median(s_cpu));
  std::printf("bench container_cli_start corral_help=%.2f unit=ms_per_run\n", median(h_wall));
  if (have_floor && have_bwrap)
    std::printf("bench container_floor unshare=%.2f baseline=%.2f ratio=%.2f unit=ms_per_run (util-linux unshare "
                "--pid --fork --mount --ipc --uts --cgroup /bin/true against bwrap: the namespaces alone; corral's "
                "container row against it: %.2f)\n",
                median(f_wall), median(b_wall), median(f_wall) / median(b_wall), median(c_wall) / median(f_wall));
  else if (!have_floor)
    std::printf("bench container_floor: util-linux unshare did not run here\n");
  breakdown(per_round * 2);
  return 0;
}
