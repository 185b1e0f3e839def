// corral conformance [--tier T]: the conformance probes (conformance.hpp)
// against this host, one line per probe; exit 1 when one failed.
#include <string>

#include "cli.hpp"
#include "corral/conformance.hpp"
#include "options.hpp"
#include "output.hpp"

namespace corral::cli {

int conformance_main(int argc, char** argv) {
  Tier tier = Tier::container;
  static const option opts[] = {{"help", no_argument, nullptr, 'h'},
                                {"tier", required_argument, nullptr, 't'},
                                {nullptr, 0, nullptr, 0}};
  int i = argc;
  int rc = parse_options(argc, argv, "conformance", "ht:", opts, [&](int opt, const char* v) -> int {
    if (opt == 'h') {
      write_all_fd(1, "usage: corral conformance [--tier container]\n"
                      "Attacks a session of the tier through its public surface (files-out, files-in,\n"
                      "exec, files-delete) and prints one line per probe: passed, failed with why, or\n"
                      "skipped. A tier with nothing to attack is refused (exit 2). Root only.\n");
      return 0;
    }
    auto t = parse_tier(v);
    if (!t) return say("--tier: %s", t.error().message().c_str()), 2;
    tier = *t;
    return -1;
  }, i);
  if (rc >= 0) return rc;
  if (i < argc) return say("conformance: unexpected operand '%s'", argv[i]), 2;
  auto probes = run_conformance(tier);
  if (!probes) {
    say("%s", probes.error().message().c_str());
    return probes.error().code() == EINVAL ? 2 : exit_code_for_error(probes.error().code());
  }
  std::string out;
  bool failed = false;
  for (const auto& p : *probes) {
    out += describe(p) + "\n";
    failed |= p.status == ProbeResult::Status::failed;
  }
  write_all_fd(1, out);
  return failed ? 1 : 0;
}

}  // namespace corral::cli
