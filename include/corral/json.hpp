// JSON forms of a Request (a batch job line) and a Result (`--json`, batch
// output, audit). The field names are the CLI contract.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "corral/door.hpp"
#include "corral/request.hpp"
#include "corral/result.hpp"
#include "corral/status.hpp"

namespace corral {

// One JSON object → Request. Every key is a field of the field table
// (request_fields.hpp: the same parser and reason text as the flag and the
// routes key); unknown fields, wrong types and invalid values are refused
// with a message naming the field ("field 'limits.wall_seconds': ...",
// "field 'argv[2]': ..."). A line that is not JSON is refused with the byte
// offset of the fault. `route` and `provenance` are refused here: they ask
// something of the door.
Expected<Request> request_from_json(std::string_view text);

// What a job line asks as far as it can be read, for a refusal of the line
// to name and mask (its id, argv, route, the secrets it names): each field
// that parses applied, one that does not left out; nullopt when the line
// is not a JSON object. Not a job to run (job_from_json says why not).
std::optional<Job> job_as_read(std::string_view text);

// A batch job: the Request, plus what it asks of the door (door.hpp):
// "route" (a route's name; needs corral batch --routes), "provenance"
// ("trusted" or "untrusted"), and the route-owned fields it gave (tier,
// net, pass_env).
Expected<Job> job_from_json(std::string_view text);

// The error job_from_json gives a line that is not JSON or that gives a
// key twice in one object (which our parser and another reader could take
// differently: each keeps a different one), for a caller that reads a
// field out of the line itself before job_from_json sees it.
Status refuse_duplicate_keys(std::string_view text);

// How deep a JSON text corral reads may nest objects and arrays. A job
// line needs 3 (limits, inputs' objects); the values are walked and
// written again recursively, so 20,000 brackets in one 40 KB line
// overflowed the stack and ended a whole batch.
inline constexpr int kMaxJsonDepth = 64;

// Refuses a text nested deeper than kMaxJsonDepth, naming the byte where
// it got too deep. A scan of the bytes (strings skipped), no parse: every
// reader of JSON lines calls it before parsing.
Status check_json_depth(std::string_view text);

// The Result as one line of JSON (no trailing newline), every key present
// (schema/result.schema.json; "schema_version": kResultSchemaVersion): a key
// that does not apply to the outcome is null, an empty list []. Captured
// output is made valid UTF-8 (bad bytes become U+FFFD). `line` > 0 (a batch
// job's line number) sets "line"; "error" is the reason a job could not
// start (spawn_failed), as in error_to_json.
std::string result_to_json(const Result& result, long line = 0);

// The same text made a part at a time, so that writing a Result costs a
// part, not the text: a stdout of 16 MiB of NUL bytes is ~96 MiB of JSON
// (each NUL is \u0000), which the old result_to_json built whole and then
// copied. The captured streams are made valid UTF-8 and escaped as each
// part is asked for (64 KiB of a stream at a time, cut where no character
// spans); everything else is one small skeleton. The parts, joined, are
// result_to_json's text byte for byte.
class ResultJson {
 public:
  // `borrow`: the streams are read from `result`, which must outlive this;
  // otherwise they are copied (a batch writes a line after its Result is
  // gone). `tag`, when given, rewrites the skeleton first (a shard's fields
  // spliced in: tag_shard_result), keeping its `"stdout":""` places.
  ResultJson(const Result& result, long line, bool borrow = false,
             const std::function<std::string(std::string_view)>& tag = {});
  // The next part (at most ~400 KiB); empty once everything was given.
  std::string next();
  // The length of the whole text, in bytes (a pass over the streams, made
  // as next() makes them, without keeping any).
  std::uint64_t size() const;

 private:
  struct Slot {
    std::size_t at;     // where in skeleton_ the value's text goes
    int stream;         // 0 stdout, 1 stderr
    bool base64;        // stdout_b64/stderr_b64
  };
  // The text of `slot` from `from` on: one part, and where the next starts.
  std::string part(const Slot& slot, std::size_t from, std::size_t& next_from) const;

  std::string skeleton_;
  std::vector<Slot> slots_;
  std::string owned_[2];
  std::string_view text_[2];
  std::size_t skeleton_pos_ = 0, slot_ = 0, text_pos_ = 0;
};

// Standard base64 (RFC 4648, '+' '/', '=' padding): stdin_b64 in a job,
// stdout_b64/stderr_b64 in a Result. Decoding refuses anything else,
// naming the offending byte.
std::string base64_encode(std::string_view bytes);
Expected<std::string> base64_decode(std::string_view text);

// The "id" of a job line (string or integer), or "" when the line is not a
// JSON object with one: names the job in the error result of a refused line.
std::string job_id_of(std::string_view text);

// An error result for a job corral could not run: {"schema_version", "id",
// "line", "outcome": "error", "error"} (schema/result.schema.json, its
// error form).
std::string error_to_json(std::string_view id, long line, std::string_view message);

}  // namespace corral
