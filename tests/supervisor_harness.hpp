// A Supervisor per test with its workspaces under a private base, for the
// integration tests that drive real runs (run, soak, route_run, tier_claims,
// the container tests): a test can check that nothing is left behind.
#pragma once

#include <dirent.h>
#include <sys/stat.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "corral/supervisor.hpp"
#include "support.hpp"

namespace corral_test {

// A supervisor with `o` and its workspaces under `base`. The base gets mode
// 0755: a run's dropped (or mapped host) uid must reach its workspace.
inline std::unique_ptr<corral::Supervisor> supervisor_over(const TempDir& base, corral::SupervisorOptions o = {}) {
  chmod(base.path().c_str(), 0755);
  o.workspace_base = base.path();
  auto s = corral::Supervisor::create(std::move(o));
  cr_assert(s.ok(), "supervisor: %s", s.ok() ? "" : s.error().message().c_str());
  return std::move(*s);
}

// A request for `argv` in `tier`, every other field at its default.
inline corral::Request req(corral::Tier tier, std::vector<std::string> argv) {
  corral::Request r;
  r.tier = tier;
  r.argv = std::move(argv);
  return r;
}

struct Harness {
  TempDir base;  // declared before sup: created first, removed last
  std::unique_ptr<corral::Supervisor> sup;
  explicit Harness(corral::SupervisorOptions o = {}) : sup(supervisor_over(base, std::move(o))) {}
  corral::Result run(corral::Request r) {
    auto res = sup->run(std::move(r));
    cr_assert(res.ok(), "run refused: %s", res.ok() ? "" : res.error().message().c_str());
    return std::move(*res);
  }
  // Entries left in the workspace base.
  std::size_t leftovers() const {
    std::size_t n = 0;
    DIR* d = opendir(base.path().c_str());
    while (dirent* e = d ? readdir(d) : nullptr) n += std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, "..");
    if (d) closedir(d);
    return n;
  }
};

}  // namespace corral_test
