// The conformance probes (conformance.hpp) against sessions on this host:
// every probe must pass, and a tier with nothing to attack is refused.
#include <criterion/criterion.h>

#include "container_support.hpp"
#include "corral/conformance.hpp"

using namespace corral;
using namespace container_test;

TestSuite(conformance, .timeout = 180);

Test(conformance, every_probe_holds_on_sessions) {
  CORRAL_SKIP_UNLESS_ROOT();
  SKIP_UNLESS_CONTAINER();
  if (host().cgroups.backend != CgroupVersion::v1 || !host().cgroup_memory)
    cr_skip_test("sessions need cgroup v1 memory here: %s", host().cgroup_summary.c_str());
  auto probes = run_conformance(Tier::container);
  cr_assert(probes, "%s", probes ? "" : probes.error().message().c_str());
  cr_expect_geq(probes->size(), 15u, "a suite went missing");
  for (const auto& p : *probes)
    cr_expect(p.status == ProbeResult::Status::passed, "%s", describe(p).c_str());
}

Test(conformance, a_tier_without_sessions_is_refused_not_green) {
  for (Tier t : {Tier::none, Tier::os_process}) {
    auto probes = run_conformance(t);
    cr_expect(!probes, "tier %s reported probes", std::string(to_string(t)).c_str());
  }
}
