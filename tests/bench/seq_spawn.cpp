// bench seq_spawn: per-run time of /bin/true through the library (tier none
// and tier process) against a bare posix_spawn + waitpid loop, measured in
// the same process, interleaved in rounds so drift hits both sides.
// SEQ_SPAWN_NET=none runs the tier-process row with --net none (the
// seccomp filter whose socket refusals the supervisor answers).
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "corral/supervisor.hpp"

extern char** environ;

namespace {

double bare_us(int n) {
  char* argv[] = {const_cast<char*>("/bin/true"), nullptr};
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    pid_t pid;
    if (posix_spawn(&pid, "/bin/true", nullptr, nullptr, argv, environ) != 0) std::abort();
    int st;
    waitpid(pid, &st, 0);
  }
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / n;
}

bool g_net_none = false;

double corral_us(corral::Supervisor& sup, corral::Tier tier, int n) {
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    corral::Request r;
    r.tier = tier;
    r.argv = {"/bin/true"};
    if (g_net_none && tier == corral::Tier::os_process) r.net = corral::NetworkAccess::none;
    auto res = sup.run(std::move(r));
    if (!res || res->outcome != corral::Outcome::exited) {
      std::fprintf(stderr, "bench: run failed: %s\n", res ? res->detail.c_str() : res.error().message().c_str());
      std::exit(1);
    }
  }
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / n;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int per_round = argc > 1 ? std::atoi(argv[1]) : 200;
  int rounds = argc > 2 ? std::atoi(argv[2]) : 7;
  corral::SupervisorOptions options;
  const char* base = std::getenv("CORRAL_WORKSPACE_BASE");
  if (base) options.workspace_base = base;
  const char* label = std::getenv("SEQ_SPAWN_LABEL");
  const char* net = std::getenv("SEQ_SPAWN_NET");
  g_net_none = net && std::string(net) == "none";
  std::string suffix = label ? std::string("_") + label : "";
  auto sup = corral::Supervisor::create(options);
  if (!sup) {
    std::fprintf(stderr, "bench: %s\n", sup.error().message().c_str());
    return 1;
  }
  std::vector<double> bare, none, process;
  bare_us(50);
  corral_us(**sup, corral::Tier::none, 50);
  for (int r = 0; r < rounds; ++r) {
    bare.push_back(bare_us(per_round));
    none.push_back(corral_us(**sup, corral::Tier::none, per_round));
    process.push_back(corral_us(**sup, corral::Tier::os_process, per_round));
  }
  double b = median(bare), n = median(none), p = median(process);
  std::printf("bench seq_spawn_none%s corral=%.1f baseline=%.1f ratio=%.2f unit=us_per_run\n", suffix.c_str(), n, b, n / b);
  std::printf("bench seq_spawn_process%s corral=%.1f baseline=%.1f ratio=%.2f unit=us_per_run\n", suffix.c_str(), p, b,
              p / b);
  return 0;
}
