// The one output collector: a finished run's workspace through transfer()
// (outputs.hpp) into the Result. Every output a run has is collected here,
// by finish_run (run_result.cpp) after the program ended or was killed and
// before the workspace is removed: `corral run --output GLOB`, a job's
// "outputs", a library Request's `outputs` and a route's declared outputs
// (Request::declared_outputs) alike. One set of rules for all of them:
//   - every open is an openat2 beneath the workspace fd that follows no
//     symlink, magic link or mount (WorkspaceOutputSource);
//   - a file the run chose and corral will not take (a symlink, a hard
//     link, a fifo or device, a name no destination may hold, two names
//     that are one file at the destination) is skipped with a note
//     "outputs: output 'GLOB': ...; not delivered" and the rest delivered;
//   - the caps (output_caps) refuse the transfer: nothing is delivered and
//     one note "outputs refused (cap_exceeded): ..." says which file and cap;
//   - a landing file whose name holds a secret's value is withheld;
//   - landing outputs go to <artifact_root>/<run_id>/, made fresh here.
// Parent side; everything below the workspace is hostile by then.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "corral/capture.hpp"
#include "corral/limits.hpp"
#include "corral/outputs.hpp"
#include "corral/request.hpp"
#include "corral/result.hpp"
#include "corral/status.hpp"
#include "corral/workspace.hpp"

namespace corral {

// A finished run's workspace as an OutputSource. Every open is an openat2
// beneath the workspace fd with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
// RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV: a planted symlink or mount
// cannot lead out.
//   list(glob)  entries other than directories matching the glob (glob.hpp,
//               the one dialect: `*` within a segment, `**` any depth, a
//               leading '.' matched too); home/ and tmp/ (the run's HOME
//               and TMPDIR) only when the glob's first segment names them
//   stat(name)  the size of a regular file; std::nullopt for a fifo,
//               device, socket or directory; an Error with ENOENT when
//               absent; EPERM for a symlink (never followed) and for a hard
//               link (st_nlink > 1: it may be a host file the program could
//               not read)
//   open(name)  the fd that was checked (a regular file, one link), read
//               by the transfer a buffer at a time
// The walk behind list() gives up (E2BIG) past max_walk_entries directory
// entries, and does not enter a directory more than kMaxWalkDepth levels
// below the root: it says so once per glob in notes() and lists the rest.
// Borrows the workspace, which must outlive the source.
class WorkspaceOutputSource final : public OutputSource {
 public:
  // The walk holds one directory fd per level, so this is also the most
  // fds it holds at once (plus the root's). 256 is far deeper than any
  // build's output tree, and with names of 15 bytes a path that deep is
  // PATH_MAX (4096) already, past which stat() cannot open a match anyway.
  // A program's 20,000 nested directories then cost the supervisor neither
  // its stack nor its fd table.
  static constexpr std::size_t kMaxWalkDepth = 256;

  explicit WorkspaceOutputSource(const Workspace& workspace, std::uint64_t max_walk_entries = 100000)
      : workspace_(workspace), max_walk_entries_(max_walk_entries) {}

  Expected<std::vector<std::string>> list(std::string_view glob) override;
  Expected<std::optional<std::uint64_t>> stat(std::string_view name) override;
  Expected<std::unique_ptr<OutputReader>> open(std::string_view name) override;
  // What list() left out and why, e.g. "output '**/x': directories more
  // than 256 levels deep are not searched (...)"; unmasked (the caller
  // masks secrets, as for every artifact note).
  const std::vector<std::string>& notes() const noexcept { return notes_; }

 private:
  const Workspace& workspace_;
  std::uint64_t max_walk_entries_;
  std::vector<std::string> notes_;
};

// The caps a run's outputs are collected under: the run's artifact_bytes,
// artifact_total_bytes and artifact_count (limits.hpp), each lowered to
// Request::output_caps where a route set that (the stricter wins).
TransferLimits output_caps_for(const Request& request, const Limits& limits);

// Everything the request asks collected, as declared outputs: its
// declared_outputs, then one optional glob output per `outputs` entry
// (landing under its own path when there is an artifact root; consumed,
// i.e. listed with its size and hash, when there is none).
std::vector<DeclaredOutput> outputs_of(const Request& request);

// Transfers `outputs` out of a finished workspace and records them in the
// Result: each delivered output becomes an artifact (with the path it
// landed at, for `land`); a refusal becomes one artifact note "outputs
// refused (KIND): MESSAGE". Landing outputs go to a FilesystemSink rooted
// at <artifact_root>/<run_id>/ (created here, never reused; removed again
// when nothing landed). A file a landing glob lists whose name holds one
// of `secrets` is withheld (not read, not landed) with a note naming it;
// the caller masks the note (finish_run does). Skipped files get a note
// "outputs: ...; not delivered" each.
void collect_declared_outputs(const std::vector<DeclaredOutput>& outputs, const TransferLimits& limits,
                              const std::optional<std::string>& artifact_root, const Workspace& workspace,
                              Result& result, const SecretSet* secrets = nullptr);

// finish_run's step: outputs_of(request) under output_caps_for(request,
// limits). Nothing when the request asks for no output.
void collect_run_outputs(const Request& request, const Limits& limits, const Workspace& workspace, Result& result,
                         const SecretSet* secrets);

// Whether a regular file of at least `bytes` bytes is in the workspace
// (home/ and tmp/ included), found by the same walk as list() (openat2
// beneath it, no symlink followed, at most `max_walk_entries` entries and
// kMaxWalkDepth levels). finish_run's evidence that a SIGXFSZ death was the
// file_bytes limit: RLIMIT_FSIZE cuts a write at the limit, so a program
// stopped while writing a file leaves it exactly that long, while a program
// that raised SIGXFSZ itself leaves nothing that size. An error reads as no.
bool workspace_has_file_of(const Workspace& workspace, std::uint64_t bytes,
                           std::uint64_t max_walk_entries = 100000);

}  // namespace corral
