// corral enforcement [--tier T] [--json]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "corral/enforcement.hpp"
#include "options.hpp"
#include "output.hpp"

namespace corral::cli {

int enforcement_main(int argc, char** argv) {
  bool json = false;
  std::vector<Tier> tiers;
  static const option kOptions[] = {{"help", no_argument, nullptr, 'h'},
                                    {"tier", required_argument, nullptr, 't'},
                                    {"json", no_argument, nullptr, 'j'},
                                    {nullptr, 0, nullptr, 0}};
  int operands = argc;
  int rc = parse_options(argc, argv, "enforcement", "ht:j", kOptions, [&](int opt, const char* v) -> int {
    switch (opt) {
      case 'j': json = true; return -1;
      case 't': {
        auto t = parse_tier(v);
        if (!t) return say("--tier: %s", t.error().message().c_str()), 2;
        tiers.push_back(*t);
        return -1;
      }
      case 'h':
        write_all_fd(1,
                     "usage: corral enforcement [-t none|process|container] [-j]\n"
                     "What enforces each limit and guarantee on this host, per tier, from live probes.\n"
                     "\n"
                     "  -t, --tier T   a tier to report (repeatable; default: process)\n"
                     "  -j, --json     one JSON object: {host: {fact: value}, tiers: {tier: {name:\n"
                     "                 {how, note}}}} (default: aligned text)\n");
        return 0;
    }
    return 2;
  }, operands);
  if (rc >= 0) return rc;
  if (operands < argc) return say("enforcement: unexpected argument '%s'", argv[operands]), 2;
  if (tiers.empty()) tiers = {Tier::os_process};
  HostFacts host = probe_host();
  if (const char* base = std::getenv("CORRAL_WORKSPACE_BASE"); base && *base) set_workspace_facts(host, base);
  if (json) {
    nlohmann::json j;
    for (auto& [k, v] : host_fact_lines(host)) j["host"][k] = v;
    for (Tier t : tiers)
      for (auto& e : enforcement_map(host, t))
        j["tiers"][std::string(to_string(t))][e.name] = {{"how", e.how}, {"note", e.note}};
    write_all_fd(1, j.dump(2) + "\n");
    return 0;
  }
  std::string out;
  for (auto& [k, v] : host_fact_lines(host)) out += "host  " + k + std::string(k.size() < 22 ? 22 - k.size() : 1, ' ') + v + "\n";
  for (Tier t : tiers) {
    out += "\ntier " + std::string(to_string(t)) + "\n";
    for (auto& e : enforcement_map(host, t)) {
      char line[512];
      std::snprintf(line, sizeof line, "  %-22s %-30s %s\n", e.name.c_str(), e.how.c_str(), e.note.c_str());
      out += line;
    }
  }
  write_all_fd(1, out);
  return 0;
}

}  // namespace corral::cli
