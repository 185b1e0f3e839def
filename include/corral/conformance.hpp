// conformance: probes that attack a tier's sandboxes through their public
// surface, as maf's conformance suites attack a backend: files-out (a
// symlink planted in the work dir, a symlinked parent, a hard link to a
// host file), files-in (byte fidelity, overwrite replaces, implicit
// parents, write-path confinement), exec (exit-code fidelity, argv
// quoting, the working directory, the timeout bound), files-delete (a link
// removed never followed, also inside a recursive removal; recursive only
// when said; the work dir refused). The layouts are planted by the
// workload itself (an exec), never by the host.
//
// Sessions (session.hpp) are what is attacked, so only tier container has
// something to attack: another tier is refused, never reported green.
#pragma once

#include <string>
#include <vector>

#include "corral/request.hpp"
#include "corral/status.hpp"

namespace corral {

struct ProbeResult {
  enum class Status { passed, failed, skipped };
  std::string suite;   // files-out, files-in, exec, files-delete
  std::string name;
  Status status = Status::failed;
  std::string why;     // failed: what happened; skipped: the capability not declared
};

// Opens a session of its own (a fresh key), runs every probe, disposes it.
// An Error: the tier has nothing to attack, or no session could be made.
Expected<std::vector<ProbeResult>> run_conformance(Tier tier);

// "passed files-out/symlink_planted", "failed exec/argv_quoting: ...".
std::string describe(const ProbeResult& probe);

}  // namespace corral
