// Declared outputs: what a route may take out of a run, and the transfer
// that takes it, in phases that make a half-done delivery impossible.
//
// The transfer works over an abstract OutputSource (the run's workspace in
// production, a map in tests) and an optional Sink. Phases, in order:
//   1. declaration: names valid, landing names distinct at the destination,
//      a sink present when any output lands;
//   2. stat: every declared output found (or skipped when optional), its
//      size known, per-file, total and count caps checked;
//   3. read: every file read, its size checked again, and streamed as it
//      is read (a fixed 64 KiB buffer, whatever the file's size) into the
//      SHA-256 and into the sink's writer (SinkWriter: a temporary file for
//      FilesystemSink), where nothing shows under a landing name yet;
//   4. deliver: each writer committed (renamed into place), in declaration
//      order.
// Every refusal the policy can make happens in phases 1-3; the sink can
// fail in phase 3 (writing) with nothing delivered, and in phase 4, and
// then the error lists what was delivered. corral's memory for a transfer
// is the buffer and the names, not the files: a 1 GiB artifact costs no
// more than a small one (a `consume` output's bytes excepted, when the
// caller keeps them: Consumed::content).
// A file is judged on its own, as `corral run --output` judges each file:
// a glob's match whose name no destination may hold, or that would be the
// same file at the destination as an output already planned (a declared
// literal, or an earlier match), and any file the source will not give (a
// hard link), whose size cannot be known (not a regular file), that is
// gone or that changed size between stat and read, is skipped with a note
// (TransferResult::skipped()) and the others are delivered. The run chose
// those files; the route's declaration did not. Only a literal output the
// route requires refuses the transfer when its file is not deliverable,
// and a required glob when every match was skipped. The caps are the
// route's: a file over one refuses the transfer.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "corral/sink.hpp"
#include "corral/names.hpp"
#include "corral/status.hpp"

namespace corral {

enum class Disposition : std::uint8_t {
  land,     // delivered to the sink under its landing name
  consume,  // returned to the caller in memory; no sink involved
};
std::string_view to_string(Disposition disposition);
Expected<Disposition> parse_disposition(std::string_view text);

struct DeclaredOutput {
  // A path relative to the workspace, or a glob (any of `*?[`) when the
  // tier declares files_list.
  std::string path;
  std::string media_type;  // declared, never sniffed
  bool required = false;   // absence is an error only when true
  // Landing name; empty means `path`. For a glob, a non-empty name is a
  // directory: each match lands as name/<basename of the match>.
  std::string name;
  Disposition disposition = Disposition::land;

  bool is_glob() const;
  const std::string& landing_name() const { return name.empty() ? path : name; }
};

// All three are enforced; the defaults are deliberately modest.
struct TransferLimits {
  std::uint64_t max_bytes_per_file = 16u << 20;
  std::uint64_t max_total_bytes = 64u << 20;
  std::uint64_t max_files = 64;
};


// The key two names share when they are one file at the destination:
// Unicode case folding plus NFC (utf8proc), so "Report.txt", "report.TXT"
// and an NFD spelling of the same letters meet. Invalid UTF-8 is an error.
Expected<std::string> collision_key(std::string_view name);

// Refuses two landing names that are one file at the destination
// (identical, differing only by case, or only by normalization form), and a
// name that is also a parent directory of another ("a" and "A/b"). The
// message names both outputs.
Status check_collisions(const std::vector<std::string>& landing_names);

// Everything the declaration alone decides: each path and landing name
// valid, globs only when `globs_allowed`, no collisions between literal
// landing names. Used by the route gate and by transfer() phase 1.
Status validate_declaration(const std::vector<DeclaredOutput>& outputs, bool globs_allowed);

// One file of an OutputSource, read front to back.
class OutputReader {
 public:
  virtual ~OutputReader() = default;
  // Up to buf.size() bytes into buf; 0 at the end of the file. An Error
  // is the source failing.
  virtual Expected<std::size_t> read(std::span<char> buf) = 0;
};

// What the run's outputs look like from outside. Names are relative paths.
class OutputSource {
 public:
  virtual ~OutputSource() = default;
  // The files matching a glob, as relative paths.
  virtual Expected<std::vector<std::string>> list(std::string_view glob) = 0;
  // The size of a file; std::nullopt when it exists but its size cannot be
  // known in advance (a pipe, a device). An Error with code ENOENT means
  // the file does not exist, EPERM that the source will not give this file
  // (a hard link out of a workspace; the message says why); any other
  // Error is the source failing.
  virtual Expected<std::optional<std::uint64_t>> stat(std::string_view name) = 0;
  // The file opened for reading (the transfer reads one more byte than it
  // expects, to see a file that grew). ENOENT and EPERM as for stat().
  virtual Expected<std::unique_ptr<OutputReader>> open(std::string_view name) = 0;
};

enum class TransferErrorKind : std::uint8_t {
  cap_exceeded,      // a per-file, total or count cap; the message names the cap and the file
  required_missing,  // a required output is absent (or its glob matched nothing)
  size_unknown,      // the source cannot say how big a file is
  name_collision,    // two landing names are one file at the destination
  invalid_name,      // a path, glob match or landing name failed the lexical checks
  no_sink,           // an output lands but no sink was given
  size_changed,      // a file's size changed between stat and read
  source_failed,     // the source's own list/stat/read failed
  delivery_failed,   // the sink failed (phase 4, the only failure after a delivery)
};
std::string_view to_string(TransferErrorKind kind);

// One output that made it.
struct Delivered {
  std::string name;         // landing name
  std::string source_path;  // relative path in the source
  std::string media_type;
  Disposition disposition = Disposition::land;
  std::uint64_t bytes = 0;
  std::string sha256;               // lowercase hex
  std::string content;              // the bytes, for `consume` under Consumed::content only
  std::optional<Landed> landed;     // for `land` only
};

// A file the transfer left out, and why ("output 'logs/*': match
// 'logs/a\b' contains a backslash; not delivered", "output '*.txt':
// 'link.txt' is a hard link (st_nlink=2); …; not delivered").
struct SkippedOutput {
  std::string source_path;  // the file as the source names it
  std::string note;         // names the output, the match and the reason
};

struct TransferError {
  TransferErrorKind kind;
  Error error;  // "output 'x': ..." with an errno-style code
  // Only for delivery_failed: what reached the sink before it failed.
  std::vector<Delivered> delivered_before;
  const std::string& message() const { return error.message(); }
};

// Expected<T> with a typed error: the delivered outputs or why none were.
class [[nodiscard]] TransferResult {
 public:
  TransferResult(std::vector<Delivered> delivered) : v_(std::move(delivered)) {}
  TransferResult(TransferError error) : v_(std::move(error)) {}
  bool ok() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return ok(); }
  std::vector<Delivered>& value() { return std::get<0>(v_); }
  const std::vector<Delivered>& value() const { return std::get<0>(v_); }
  std::vector<Delivered>* operator->() { return &value(); }
  const std::vector<Delivered>* operator->() const { return &value(); }
  std::vector<Delivered>& operator*() { return value(); }
  const std::vector<Delivered>& operator*() const { return value(); }
  const TransferError& error() const { return std::get<1>(v_); }
  // The files left out one by one, in the order met, whether or not
  // the transfer then succeeded (a refusal delivers them no more than the
  // rest).
  const std::vector<SkippedOutput>& skipped() const { return skipped_; }
  void set_skipped(std::vector<SkippedOutput> skipped) { skipped_ = std::move(skipped); }

 private:
  std::variant<std::vector<Delivered>, TransferError> v_;
  std::vector<SkippedOutput> skipped_;
};

// What a `consume` output returns: its bytes in Delivered::content (held
// in memory, up to max_bytes_per_file each), or only its size and SHA-256
// (read through the fixed buffer like a landing output: the collector's
// choice, output_collect.hpp).
enum class Consumed : std::uint8_t { content, digest_only };

// Runs the four phases above. `sink` may be null when no output lands.
TransferResult transfer(const std::vector<DeclaredOutput>& outputs, const TransferLimits& limits,
                        OutputSource& source, Sink* sink, Consumed consumed = Consumed::content);

// Lowercase hex SHA-256 of `bytes` (OpenSSL libcrypto).
std::string sha256_hex(std::string_view bytes);

}  // namespace corral
