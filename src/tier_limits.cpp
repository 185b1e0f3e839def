// Which mechanism enforces each limit in each tier (tier_limits.hpp).
#include "corral/tier_limits.hpp"

#include "corral/rlimits.hpp"

namespace corral {

std::string_view to_string(LimitMechanism mechanism) {
  switch (mechanism) {
    case LimitMechanism::rlimit: return "rlimit";
    case LimitMechanism::cgroup: return "cgroup";
    case LimitMechanism::supervisor: return "supervisor";
    case LimitMechanism::tmpfs: return "tmpfs";
    case LimitMechanism::none: return "none";
  }
  return "?";
}

Limits rlimit_limits(const Limits& limits, Tier tier) {
  Limits out;
  for (const auto& info : all_limits())
    if (limit_mechanism(info.limit, tier) == LimitMechanism::rlimit)
      if (auto raw = limits.raw(info.limit)) out.set_raw(info.limit, *raw);
  return out;
}

std::string limit_mechanism_text(Limit limit, Tier tier) {
  const LimitInfo& info = limit_info(limit);
  switch (limit_mechanism(limit, tier)) {
    case LimitMechanism::rlimit: {
      std::string out = rlimit_resource_name(info.rlimit_resource);
      if (limit == Limit::memory_bytes) out += " per process, not a tree ceiling";
      if (limit == Limit::process_count) out += " per uid";
      return out;
    }
    case LimitMechanism::cgroup:
      if (limit == Limit::memory_bytes) return "the run's memory cgroup: one ceiling for the tree";
      if (limit == Limit::process_count) return "the run's pids cgroup (pids.max): one ceiling for the tree";
      return "the run's cgroup";
    case LimitMechanism::supervisor: return "the supervisor";
    case LimitMechanism::tmpfs: return "the size of the run's tmpfs";
    case LimitMechanism::none: return "nothing in this tier";
  }
  return "?";
}

}  // namespace corral
