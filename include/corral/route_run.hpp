// route_run: running through a built Route. A Route (route.hpp, checked by
// the gate) becomes a Request whose limits, tier, network, environment,
// secrets and declared outputs are the route's; a caller may tighten the
// limits, never loosen them. After the run, the route's declared outputs go
// from the workspace through transfer() (outputs.hpp) to a FilesystemSink.
//
// Parent-side. The output collection runs inside finish_run through the
// Request's on_workspace hook, so it sees the workspace after the program
// ended or was killed and before it is removed, on every path.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "corral/outputs.hpp"
#include "corral/request.hpp"
#include "corral/result.hpp"
#include "corral/route.hpp"
#include "corral/status.hpp"
#include "corral/workspace.hpp"

namespace corral {

// What a caller says about a route's run beyond `base` (route-owned fields
// whose Request defaults cannot tell "not said" from a choice). Unset means
// "as the route says".
struct RouteOverrides {
  std::optional<Tier> tier;           // must be the route's tier
  std::optional<NetworkAccess> net;   // none closes the route's egress; host is refused unless the route has it
  std::vector<std::string> pass_env;  // each must be in the route's env_passthrough
  // Resolves a secret's value by name; default: corral's environment
  // variable of the same name.
  std::function<std::string(const std::string&)> resolve_secret;
};

// The Request for running `route`. From `base` come argv, env, inputs,
// payload, stdin, cwd, merge_output, confine_writes, write_paths, user,
// grace_seconds, artifact_root and id; the rest is the route's:
//   on_output_limit kill when the route says so (base may ask for kill)
//   tier            the route's (RouteOverrides::tier must agree)
//   limits          the route's, each tightened by base.limits: a value
//                   above the route's (or, where the route sets none, above
//                   corral's default) is refused, naming the limit and the
//                   route's value
//   net             none unless the tier cannot close the network (tier
//                   none, acknowledged by the gate); an egress_allow on
//                   os_process becomes tcp_connect_ports
//   pass_env        the route's env_passthrough
//   secrets         the route's names; base.secrets may only name them
//   acknowledged    the route's acknowledged_unenforced (base's must be empty)
//   outputs         the route's declared outputs, collected by on_workspace
//                   (base.outputs must be empty); landing outputs need
//                   base.artifact_root
//   route, provenance  for the audit line
// Errors start "route 'NAME': ".
Expected<Request> request_for_route(const Route& route, Request base, const RouteOverrides& overrides = {});

// A finished run's workspace as an OutputSource. Every open is an openat2
// beneath the workspace fd with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
// RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV: a planted symlink or mount
// cannot lead out.
//   list(glob)  regular files matching the glob segment by segment
//               (fnmatch(3) per segment, a leading '.' matched too, no `**`);
//               symlinks and other non-regular entries are never listed
//   stat(name)  the size of a regular file; std::nullopt for anything else
//               (a symlink, fifo, device, socket, directory); an Error
//               with ENOENT when absent; a hard link (st_nlink > 1) is
//               refused with EPERM, as collection does (it may be a host
//               file the program could not read)
//   read(...)   through the fd that was checked, at most `at_most` bytes
// Borrows the workspace, which must outlive the source.
class WorkspaceOutputSource final : public OutputSource {
 public:
  explicit WorkspaceOutputSource(const Workspace& workspace, std::uint64_t max_walk_entries = 100000)
      : workspace_(workspace), max_walk_entries_(max_walk_entries) {}

  Expected<std::vector<std::string>> list(std::string_view glob) override;
  Expected<std::optional<std::uint64_t>> stat(std::string_view name) override;
  Expected<std::string> read(std::string_view name, std::uint64_t at_most) override;

 private:
  const Workspace& workspace_;
  std::uint64_t max_walk_entries_;
};

// Transfers `outputs` out of a finished workspace and records them in the
// Result: each delivered output becomes an artifact (with the path it
// landed at, for `land`); a refusal becomes one artifact note "outputs
// refused (KIND): MESSAGE" and delivers nothing. Landing outputs go to a
// FilesystemSink rooted at <artifact_root>/<run_id>/ (created here; removed
// again when nothing landed). A file a landing glob lists whose name holds
// one of `secrets` is withheld (not read, not landed) with a note naming
// it; the caller masks the note (finish_run does). A file a glob lists whose
// name fails the lexical rules (names.hpp), or would be one file at the
// destination with another output (differing only by case, say), is skipped
// with a note "outputs: ...; not delivered" (transfer() judges each match on
// its own), and the other outputs are delivered.
void collect_route_outputs(const std::vector<DeclaredOutput>& outputs, const TransferLimits& limits,
                           const std::optional<std::string>& artifact_root, const Workspace& workspace,
                           Result& result, const SecretSet* secrets = nullptr);

}  // namespace corral
