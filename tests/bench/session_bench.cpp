// bench session: warm sandboxes (session.hpp), four rows.
//   session_exec     warm exec of /bin/true through the library (one
//                    Supervisor, Supervisor::run of a session exec) against
//                    a bare posix_spawn + waitpid of /bin/true; goal <= 1.5
//   session_exec_cli `corral session exec ID -- /bin/true` against a cold
//                    `corral run --tier container -- /bin/true`; goal <= 0.3
//   session_acquire  acquire_session of a live session (ms); goal <= 0.2 ms
//   session_memory   an idle session's host-side memory: the keeper's,
//                    pid 1's and the idle program's private dirty pages
//                    (KiB; clean private pages and PSS shown apart); goal
//                    <= 1024 KiB
// Medians of rounds, interleaved so drift hits both sides. Root only.
//
//   session_bench CORRAL_BIN [PER_ROUND [ROUNDS]]
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "corral/session.hpp"
#include "corral/supervisor.hpp"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

bool run_cmd(const std::vector<std::string>& args) {
  std::vector<char*> a;
  for (const auto& s : args) a.push_back(const_cast<char*>(s.c_str()));
  a.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid;
  int rc = posix_spawn(&pid, a[0], &fa, nullptr, a.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return false;
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

template <class F>
double per_op_us(int n, F f) {
  auto t0 = Clock::now();
  for (int i = 0; i < n; ++i)
    if (!f()) return -1;
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / n;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// One field of /proc/<pid>/smaps_rollup, KiB.
long smaps_kib(pid_t pid, const std::string& field) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/smaps_rollup");
  std::string key, line;
  long v = 0;
  while (std::getline(f, line)) {
    std::istringstream in(line);
    if (in >> key >> v && key == field + ":") return v;
  }
  return 0;
}

std::vector<pid_t> children_of(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  std::vector<pid_t> out;
  for (pid_t c; f >> c;) out.push_back(c);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return std::fprintf(stderr, "usage: session_bench CORRAL_BIN [PER_ROUND [ROUNDS]]\n"), 2;
  const std::string corral = argv[1];
  const int per_round = argc > 2 ? std::atoi(argv[2]) : 50;
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 5;
  if (geteuid() != 0) return std::printf("bench session: skipped (needs root)\n"), 0;

  corral::SessionSpec spec;
  spec.base.tier = corral::Tier::container;
  const corral::SessionKey key{"corral-bench-" + std::to_string(getpid()), "bench", ""};
  auto session = corral::acquire_session(key, spec);
  if (!session) return std::printf("bench session: failed (%s)\n", session.error().message().c_str()), 0;
  auto sup = corral::Supervisor::create();
  if (!sup) return std::printf("bench session: failed (%s)\n", sup.error().message().c_str()), 0;
  const std::string id = session->id;

  auto warm = [&] {
    corral::Request r;
    r.argv = {"/bin/true"};
    auto res = (*sup)->run(corral::session_exec_request(id, r));
    return res && res->outcome == corral::Outcome::exited && res->exit_code == 0;
  };
  auto bare = [] { return run_cmd({"/bin/true"}); };
  auto cli_exec = [&] { return run_cmd({corral, "session", "exec", id, "--", "/bin/true"}); };
  auto cold = [&] { return run_cmd({corral, "run", "--tier", "container", "--", "/bin/true"}); };
  auto acquire = [&] { return static_cast<bool>(corral::acquire_session(key, spec)); };

  std::vector<double> w, b, ce, co, aq;
  for (int r = 0; r < rounds; ++r) {
    w.push_back(per_op_us(per_round, warm));
    b.push_back(per_op_us(per_round, bare));
    ce.push_back(per_op_us(std::max(1, per_round / 5), cli_exec));
    co.push_back(per_op_us(std::max(1, per_round / 5), cold));
    aq.push_back(per_op_us(per_round, acquire));
  }
  auto row = [](const char* name, double c, double base, const char* unit) {
    std::printf("bench %s corral=%.1f baseline=%.1f ratio=%.3f unit=%s\n", name, c, base, base > 0 ? c / base : 0, unit);
  };
  row("session_exec", median(w), median(b), "us/exec");
  row("session_exec_cli", median(ce), median(co), "us/exec");
  std::printf("bench session_acquire corral=%.3f unit=ms/acquire\n", median(aq) / 1000);

  // Idle memory: after the execs, a second of quiet.
  sleep(1);
  // What the session costs the host in memory of its own: private dirty
  // (anonymous, written) pages of the keeper, pid 1 and the idle program.
  // Clean private pages are file pages only these processes map (the
  // binary's text once the opener has exited), shown apart; PSS too.
  std::vector<pid_t> procs{session->keeper, session->pid1};
  for (pid_t c : children_of(session->pid1)) procs.push_back(c);
  long dirty = 0, clean = 0, pss = 0;
  std::string each;
  for (pid_t p : procs) {
    long d = smaps_kib(p, "Private_Dirty");
    dirty += d;
    clean += smaps_kib(p, "Private_Clean");
    pss += smaps_kib(p, "Pss");
    each += " " + std::to_string(p) + ":" + std::to_string(d);
  }
  std::printf("bench session_memory corral=%ld unit=KiB_private_dirty private_clean=%ld pss=%ld per_process=%s\n",
              dirty, clean, pss, each.c_str() + 1);
  (void)corral::dispose_session(id);
  return 0;
}
