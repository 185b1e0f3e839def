// tier_limits: the one table of which mechanism enforces each limit in each
// tier, and the places that used to write the rule themselves agreeing with
// it: the child's rlimits, the enforcement map, the tiers' declarations.
#include <criterion/criterion.h>

#include <set>
#include <string>

#include "corral/enforcement.hpp"
#include "corral/host_probe.hpp"
#include "corral/isolation.hpp"
#include "corral/rlimits.hpp"
#include "corral/tier_limits.hpp"

using namespace corral;

namespace {

constexpr Tier kTiers[] = {Tier::none, Tier::os_process, Tier::container};

Limits every_limit() {
  Limits l;
  for (const auto& info : all_limits()) l.set(info.limit, 1000);
  return l;
}

}  // namespace

Test(tier_limits, memory_and_processes_per_tier) {
  cr_assert(limit_mechanism(Limit::memory_bytes, Tier::none) == LimitMechanism::rlimit);
  cr_assert(limit_mechanism(Limit::memory_bytes, Tier::os_process) == LimitMechanism::rlimit);
  cr_assert(limit_mechanism(Limit::memory_bytes, Tier::container) == LimitMechanism::cgroup);
  cr_assert(limit_mechanism(Limit::process_count, Tier::os_process) == LimitMechanism::rlimit);
  cr_assert(limit_mechanism(Limit::process_count, Tier::container) == LimitMechanism::cgroup);
  cr_assert(limit_mechanism(Limit::tmp_bytes, Tier::os_process) == LimitMechanism::none);
  cr_assert(limit_mechanism(Limit::tmp_bytes, Tier::container) == LimitMechanism::tmpfs);
  cr_assert(limit_mechanism(Limit::wall_seconds, Tier::container) == LimitMechanism::supervisor);
}

// The child's rlimits carry exactly the rlimit-mechanism limits: no
// RLIMIT_AS or RLIMIT_NPROC in a container (the cgroup holds those), both in
// the process tiers.
Test(tier_limits, the_childs_rlimits_follow_the_table) {
  const Limits all = every_limit();
  for (Tier tier : kTiers) {
    Limits carried = rlimit_limits(all, tier);
    for (const auto& info : all_limits())
      cr_assert_eq(carried.has(info.limit), limit_mechanism(info.limit, tier) == LimitMechanism::rlimit,
                   "%s in tier %s", std::string(info.name).c_str(), std::string(to_string(tier)).c_str());
    auto set = rlimits_from_limits(carried);
    cr_assert(set, "%s", set ? "" : set.error().message().c_str());
    const bool container = tier == Tier::container;
    cr_assert_eq(set->find(RLIMIT_AS) != nullptr, !container);
    cr_assert_eq(set->find(RLIMIT_NPROC) != nullptr, !container);
    cr_assert(set->find(RLIMIT_FSIZE) != nullptr);
  }
}

// The enforcement map names, for every limit, a "how" the table's mechanism
// can give on this host.
Test(tier_limits, the_enforcement_map_follows_the_table) {
  const HostFacts host = probe_host(true);
  const std::set<std::string> rlimit_hows = {"hard", "hard_per_process", "hard_per_run", "hard_per_user",
                                             "hard_unless_raised", "unsupported"};
  for (Tier tier : kTiers) {
    auto summary = enforcement_summary(host, tier);
    for (const auto& info : all_limits()) {
      const std::string name(info.name);
      cr_assert(summary.count(name), "%s missing", name.c_str());
      const std::string& how = summary[name];
      const std::string tier_name(to_string(tier));
      const char* tname = tier_name.c_str();
      switch (limit_mechanism(info.limit, tier)) {
        case LimitMechanism::rlimit:
          cr_assert(rlimit_hows.count(how), "%s in %s: %s", name.c_str(), tname, how.c_str());
          break;
        case LimitMechanism::cgroup:
          cr_assert(how == "cgroup" || how == "unsupported", "%s in %s: %s", name.c_str(), tname, how.c_str());
          break;
        case LimitMechanism::supervisor:
          cr_assert_eq(how, "supervisor", "%s in %s: %s", name.c_str(), tname, how.c_str());
          break;
        case LimitMechanism::tmpfs:
          cr_assert(how == "hard" || (info.limit == Limit::workspace_bytes && how == "unsupported"), "%s in %s: %s",
                    name.c_str(), tname, how.c_str());
          break;
        case LimitMechanism::none:
          cr_assert_eq(how, "unsupported", "%s in %s: %s", name.c_str(), tname, how.c_str());
          break;
      }
    }
  }
}

// A tier claims one memory ceiling for the tree exactly where the table
// says memory_bytes is the cgroup's, and its notes say the same.
Test(tier_limits, the_tier_declarations_follow_the_table) {
  for (Tier tier : kTiers) {
    auto caps = tier_capabilities(to_string(tier));
    cr_assert(caps, "%s", caps ? "" : caps.error().message().c_str());
    cr_assert_eq(caps->enforces_memory, tier_enforces_memory(tier));
  }
  for (const auto& d : corral_tiers()) {
    auto tier = parse_tier(d.name);
    cr_assert(tier);
    const std::string text = limit_mechanism_text(Limit::memory_bytes, *tier);
    cr_assert(std::string(d.notes).find(text) != std::string::npos, "%s: %s", std::string(d.name).c_str(),
              std::string(d.notes).c_str());
  }
}
