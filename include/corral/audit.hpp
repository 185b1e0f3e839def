// Audit: one JSON line per request, appended to an audit sink. For a run
// the record says which route ran, under what provenance, tier, limits and
// enforcement, how it ended, how long it took, and the hashes of what it
// produced. A request that got no run (refused by the door or the
// supervisor, a job line corral could not read) gets a line too:
// audit_refusal(), outcome "error" with the reason.
//
// A secret's value never appears: AuditRecord has no field for one, and
// record() also takes the run's secret values and replaces any occurrence in
// any string of the record (keys too) with "***", in case a secret reached
// an outcome detail, an artifact name or a tier string by accident.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "corral/capture.hpp"  // scrub_secrets
#include "corral/door.hpp"     // Ask
#include "corral/fd.hpp"
#include "corral/isolation.hpp"
#include "corral/limits.hpp"
#include "corral/request.hpp"
#include "corral/result.hpp"
#include "corral/status.hpp"

namespace corral {

struct AuditArtifact {
  std::string name;
  std::uint64_t bytes = 0;
  std::string sha256;
};

// The version of the audit line's JSON shape (schema/audit.schema.json),
// in every line as "schema_version"; same rule as kResultSchemaVersion.
inline constexpr int kAuditSchemaVersion = 1;

struct AuditRecord {
  std::string time;  // RFC 3339 UTC; record() fills it when empty
  std::string run_id;                    // the Result's run_id: ties the line to the run
  std::string id;                        // the request's own label ("" when it had none)
  std::vector<std::string> argv;         // as exec'd (a payload's interpreter and file first); secrets masked
  std::string route;
  std::optional<Provenance> provenance;  // absent for a run without a route
  std::string tier;                      // "" (null in the line): a refused line that named none
  Limits limits;
  std::map<std::string, std::string> enforcement;  // limit or guarantee -> how
  std::string outcome;                              // "exited", "killed_timeout", ..., "error" (no run)
  // Why the request did not run: a refusal's reason (outcome "error"), or
  // the Result's error (spawn_failed: what failed before exec). "" (null)
  // otherwise.
  std::string error;
  long line = 0;  // a refused batch job's line number; 0 (null) otherwise (a run's is in its Result)
  int exit_code = -1;                               // the Result's: -1 when no exit
  int signal = 0;                                   // the Result's: 0 when no signal
  double wall_seconds = 0;
  double cpu_seconds = 0;
  std::map<std::string, double> timings;            // the Result's timings, same names: "plan" -> 0.0001, ...
  std::string stdout_sha256;
  std::string stderr_sha256;
  std::vector<AuditArtifact> artifacts;
};

// The record of a finished run: the result's run_id and the request's id
// and argv, its route and provenance (empty and null for a run without a
// route), the result's tier, limits, enforcement (what was applied to this
// run), outcome, exit code, signal, wall and cpu seconds, timings
// (timing_fields: the Result's names), stream hashes and artifacts. The supervisor appends one for every run
// when SupervisorOptions::audit is set, with the run's secret values to
// scrub.
AuditRecord audit_record(const Request& request, const Result& result);

// The record of a request that got no run: outcome "error", `reason` in
// `error`, run_id "" (no run), the timings null (nothing was measured).
// What was asked, as far as it was read (null `asked` or `ask`: nothing
// was): the id, argv (a payload's interpreter and file first), route,
// provenance, tier and the limits the request gave; `line` the batch job's
// line number (0: none). A front end writes it where it refuses (corral
// run's gate, every batch error line), with the secrets the request names
// (door.hpp secrets_named) to scrub: the record is scrubbed like any other.
AuditRecord audit_refusal(std::string reason, const Request* asked = nullptr, const Ask* ask = nullptr, long line = 0);

// The record as one line of JSON (no trailing newline). Every string (keys
// included) has each occurrence of each non-empty secret replaced by "***";
// bytes that are not UTF-8 become U+FFFD. Numbers are not scrubbed.
std::string audit_json_line(const AuditRecord& record, std::span<const std::string> secrets = {});

class AuditSink {
 public:
  virtual ~AuditSink() = default;
  // Stamps the time when empty, scrubs, serializes, appends one line.
  Status record(AuditRecord record, std::span<const std::string> secrets = {});

 protected:
  // One complete line, newline included.
  virtual Status append_line(const std::string& line) = 0;
};

// Appends to a file opened O_APPEND (created 0600). Each line goes out in
// one write(2): on a local filesystem the kernel serializes O_APPEND writes
// to a regular file, so lines from several processes or threads never
// interleave. A short write is reported, never completed by a second write
// (that could interleave). Not for NFS, where O_APPEND is not atomic.
class FileAuditSink final : public AuditSink {
 public:
  static Expected<FileAuditSink> open(const std::string& path);
  const std::string& path() const { return path_; }

 protected:
  Status append_line(const std::string& line) override;

 private:
  FileAuditSink(std::string path, UniqueFd fd) : path_(std::move(path)), fd_(std::move(fd)) {}
  std::string path_;
  UniqueFd fd_;  // owned; O_WRONLY|O_APPEND|O_CLOEXEC
};

// Keeps lines in memory (tests, and callers that ship them elsewhere).
class MemoryAuditSink final : public AuditSink {
 public:
  std::vector<std::string> lines() const;

 protected:
  Status append_line(const std::string& line) override;

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> lines_;
};

}  // namespace corral
