// A routes file: routes written down in TOML, parsed into RouteSpecs and
// built through the Router against corral's real tier declarations and the
// host's real enforcement map. `corral check --routes FILE` and
// `corral run --routes FILE --route NAME` read it.
//
//   [host]                      # optional: the host's floors (raise only)
//   floor = "os_process"        # raises the floor for every route
//
//   [[route]]
//   name = "grader"
//   provenance = "trusted"      # no default
//   tier = "os_process"         # none | os_process (or process) | container
//   min_isolation = "os_process"
//   requires = ["exec", "files_out"]
//   egress_allow = ["*:443"]    # empty or absent: no network
//   env_passthrough = ["PATH"]  # absent: ["PATH"], as for every run
//   secrets = ["GRADER_TOKEN"]  # names; values come from corral's environment
//   acknowledge_network_egress = false
//   acknowledged_unenforced = ["process_count"]
//   allow_host_paths = ["/srv/data"]  # host paths a job on this route may name (door.hpp)
//   limits = { cpu_seconds = 10, wall_seconds = 60 }
//   transfer = { max_bytes_per_file = 1_048_576, max_total_bytes = 4_194_304, max_files = 8 }
//   [[route.outputs]]
//   path = "report.json"
//   media_type = "application/json"   # required: declared, never sniffed
//   required = true
//   name = "grader/report.json"
//   disposition = "land"              # land | consume
//
// Parsing refuses what it does not understand, with the file, the line and
// the key: "routes.toml:9: route 'grader': unknown key 'limits.cpu_secs'
// (known: cpu_seconds, ...)". Everything the gate decides (provenance, the
// floor, capabilities, enforcement, egress, outputs) is left to the Router,
// whose refusals get the same "FILE:LINE: " prefix.
//
// Parent-side and pure apart from reading the file; toml++ (header-only,
// confined to routes_file.cpp) does the TOML.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "corral/enforcement.hpp"
#include "corral/route.hpp"
#include "corral/status.hpp"

namespace corral {

struct RoutesFile {
  std::string path;              // as given; starts every message
  HostPolicy policy;             // from [host]; the defaults otherwise
  std::vector<RouteSpec> routes; // in file order
  std::vector<int> lines;        // the line of each route's [[route]] header
};

// Parses TOML text; `path` names it in messages. A file with no [[route]]
// is refused (an empty routes file is more likely a mistake than a policy).
Expected<RoutesFile> parse_routes(std::string_view text, std::string_view path);
// Reads and parses a file. The error names the path.
Expected<RoutesFile> load_routes_file(const std::string& path);

// The EnforcementView of the real enforcement map: for each of corral's
// tiers, how enforcement_map(host, tier) says each limit is enforced here.
// A tier name that is not one of corral's run tiers is "" (unknown), which
// the gate treats as unsupported.
class HostEnforcementView final : public EnforcementView {
 public:
  explicit HostEnforcementView(const HostFacts& host);
  std::string_view how(std::string_view tier, Limit limit) const override;
  // The note behind an entry ("RLIMIT_AS: address space of each process"),
  // "" when unknown.
  std::string_view note(std::string_view tier, Limit limit) const;

 private:
  struct Entry {
    std::string how, note;
  };
  std::map<std::string, std::map<Limit, Entry>, std::less<>> table_;
};

// corral's declaration of `tier`, narrowed to what this host can give: the
// os_process egress allow-list needs Landlock ABI 4 (TCP rules) and seccomp;
// with seccomp but an older Landlock the tier can only close the network,
// without seccomp it cannot even do that.
Expected<TierCapabilities> host_tier_capabilities(std::string_view tier, const HostFacts& host);

// Builds every route of `file`, in order, through a Router with the file's
// policy, the host-narrowed tier declarations and a HostEnforcementView.
// `on_route` sees each route as it passes (corral check prints it). The
// first refusal stops the build; its message starts "FILE:LINE: ".
Expected<Router> build_routes(const RoutesFile& file, const HostFacts& host,
                              const std::function<void(const Route&)>& on_route = {});

// load + build, and the route named `name` out of it. "no route 'x' in
// FILE (routes: a, b)" when there is none.
Expected<Route> load_route(const std::string& path, std::string_view name, const HostFacts& host);

}  // namespace corral
