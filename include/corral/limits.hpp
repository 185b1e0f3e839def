// The limit vocabulary of a run: names, units, parsing, and the rlimit that
// backs each where an rlimit is the mechanism (which mechanism a tier uses
// for a limit is tier_limits.hpp's). The names are the CLI's and the JSON's: `--limit NAME=VALUE`,
// `CORRAL_LIMITS=a=1,b=2`, and the `limits` object of a Request and Result.
//
// Pure data and parsing; nothing here touches the kernel. rlimits.hpp turns
// the rlimit-backed entries into setrlimit calls; the supervisor and the
// workspace enforce the rest.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "corral/status.hpp"

namespace corral {

enum class Limit : std::uint8_t {
  cpu_seconds,           // RLIMIT_CPU: SIGXCPU at soft, SIGKILL at hard
  memory_bytes,          // address space or a tree ceiling: per tier, tier_limits.hpp says which
  process_count,         // processes of the uid or of the tree: per tier, tier_limits.hpp
  file_bytes,            // RLIMIT_FSIZE: SIGXFSZ on a write past it
  open_files,            // RLIMIT_NOFILE
  wall_seconds,          // supervisor deadline: SIGTERM, grace, SIGKILL
  stdout_bytes,          // capture cap per stream; the rest is counted, not kept
  stderr_bytes,
  artifact_bytes,        // per collected output file; every artifact cap refuses the
                         // whole collection when a run goes over it (one note)
  artifact_total_bytes,  // all collected outputs together
  artifact_count,        // number of collected outputs
  workspace_bytes,       // as root: the size of the run's tmpfs workspace (container; process when set)
  tmp_bytes,             // `container`: the size of its /tmp tmpfs (and of a --tmpfs without a size)
  shm_bytes,             // `container`: the size of its /dev/shm tmpfs
};

inline constexpr std::size_t kLimitCount = 14;

struct LimitInfo {
  Limit limit;
  std::string_view name;
  std::string_view unit;   // "seconds", "bytes", "count"
  int rlimit_resource;     // RLIMIT_* where a tier uses an rlimit for it, or -1
  bool zero_allowed;       // 0 is a meaningful value (e.g. "no output kept")
  // The largest value the mechanism behind it holds without wrapping, in
  // whole units: seconds become a double and then a timespec (exact up to
  // 2^53) or an rlim_t; bytes and counts an rlim_t or a uint64 counter.
  // Larger values are refused by name, never wrapped.
  std::uint64_t max;
  // Stored units per unit: seconds limits are kept in milliseconds (1000),
  // everything else as is (1). Limits::raw() is in stored units.
  std::uint64_t scale;
};

// Seconds limits: 10^9 s (~31 years) is beyond any run and exact as a
// double, a timespec and an rlim_t.
inline constexpr std::uint64_t kMaxLimitSeconds = 1'000'000'000;
// Bytes and counts: what an rlim_t (RLIM_INFINITY excluded) and an int64
// hold.
inline constexpr std::uint64_t kMaxLimitValue = (std::uint64_t{1} << 63) - 1;

// Every limit, in enum order.
const std::array<LimitInfo, kLimitCount>& all_limits();
const LimitInfo& limit_info(Limit limit);
std::string_view limit_name(Limit limit);
std::optional<Limit> limit_from_name(std::string_view name);

// Parse a non-negative integer with optional '_' separators ("1_000_000").
// Refuses a sign, an empty string, other characters, misplaced '_' and
// values of 2^63 or more; the message names `name`. (Plain counts such as
// --parallel; a limit's value goes through parse_limit_quantity.)
Expected<std::uint64_t> parse_limit_value(std::string_view name, std::string_view text);

// The one parser of a limit's value, whoever wrote it (--limit,
// CORRAL_LIMITS, a batch job's "limits", a routes file's [limits]):
//   seconds  a decimal with at most 3 fractional digits ("1.5", "0.25",
//            "2"), optionally followed by "s" or "ms" ("250ms", "1.5s");
//            millisecond precision, so at least 0.001
//   bytes    an integer or a decimal with a unit: K M G T are powers of
//            1000 (SI: "512M" = 512,000,000; "KB", "MB", ... the same),
//            Ki Mi Gi Ti (or KiB MiB GiB TiB) powers of 1024 ("512MiB" =
//            536,870,912); "B" or no unit: bytes. The result must be a
//            whole number of bytes ("1.5K" = 1500 is; "1.0005K" is not)
//   count    an integer
// '_' may separate digits. Returns the value in stored units (milliseconds
// for seconds limits; LimitInfo::scale). Errors name the limit and the text.
Expected<std::uint64_t> parse_limit_quantity(const LimitInfo& info, std::string_view text);
// A number from JSON or TOML: written out in its shortest round-trip form
// ("0.1", "1.5", "3") and parsed as text, so 0.25 and "0.25" mean the same.
Expected<std::uint64_t> parse_limit_number(const LimitInfo& info, double value);

// A stored value as text in the limit's unit: "1.5", "0.25", "600" for
// seconds; the integer for bytes and counts.
std::string limit_value_text(const LimitInfo& info, std::uint64_t raw);

// "limit NAME: VALUE is more than the maximum MAX (UNIT)".
std::string limit_too_large(const LimitInfo& info, std::string_view value);

// "NAME=VALUE" -> the limit and its value in stored units (raw: seconds
// limits in milliseconds); unknown names are refused by name, and values
// above the limit's max (LimitInfo::max) too.
struct LimitAssignment {
  Limit limit;
  std::uint64_t raw;
};
Expected<LimitAssignment> parse_limit_assignment(std::string_view text);

// A set of optional limits. Values are kept in stored units (raw():
// milliseconds for the seconds limits, LimitInfo::scale); get() and set()
// speak whole units, seconds() the exact value.
class Limits {
 public:
  // Whole units; a fractional seconds value is rounded UP (cpu_seconds=0.25
  // is 1 here): for a facility that counts whole units only (RLIMIT_CPU),
  // as a backstop behind an exact enforcer. Exact consumers use raw() or
  // seconds().
  std::optional<std::uint64_t> get(Limit limit) const {
    auto raw = values_[static_cast<std::size_t>(limit)];
    if (!raw) return std::nullopt;
    std::uint64_t scale = limit_info(limit).scale;
    return *raw / scale + (*raw % scale != 0);
  }
  // The exact value in the limit's unit (seconds for the seconds limits).
  std::optional<double> seconds(Limit limit) const {
    auto raw = values_[static_cast<std::size_t>(limit)];
    if (!raw) return std::nullopt;
    return static_cast<double>(*raw) / static_cast<double>(limit_info(limit).scale);
  }
  std::optional<std::uint64_t> raw(Limit limit) const { return values_[static_cast<std::size_t>(limit)]; }
  // Whether a seconds value has a fraction (e.g. cpu_seconds=0.25).
  bool fractional(Limit limit) const {
    auto raw = values_[static_cast<std::size_t>(limit)];
    return raw && *raw % limit_info(limit).scale != 0;
  }
  bool has(Limit limit) const { return raw(limit).has_value(); }
  // Whole units.
  Limits& set(Limit limit, std::uint64_t value) {
    // Saturates: a value past the max stays past it (set_checked and
    // validate_request refuse it by name) instead of wrapping.
    std::uint64_t scale = limit_info(limit).scale;
    values_[static_cast<std::size_t>(limit)] = value > UINT64_MAX / scale ? UINT64_MAX : value * scale;
    return *this;
  }
  // Stored units (milliseconds for seconds limits).
  Limits& set_raw(Limit limit, std::uint64_t raw) {
    values_[static_cast<std::size_t>(limit)] = raw;
    return *this;
  }
  // The value as text in the limit's unit ("0.25"); "" when unset.
  std::string text(Limit limit) const;
  Limits& clear(Limit limit) {
    values_[static_cast<std::size_t>(limit)].reset();
    return *this;
  }
  // Validates the value (whole units) against the limit (0 where not allowed).
  Status set_checked(Limit limit, std::uint64_t value);
  // The same in stored units.
  Status set_raw_checked(Limit limit, std::uint64_t raw);

  // Values present in `over` replace ours.
  Limits& merge(const Limits& over);
  bool empty() const;
  // "cpu_seconds=0.25, wall_seconds=10" in enum order; "" when empty.
  std::string describe() const;

  bool operator==(const Limits&) const = default;

 private:
  std::array<std::optional<std::uint64_t>, kLimitCount> values_{};
};

// "a=1,b=2" (the CORRAL_LIMITS form); spaces around items are ignored, an
// empty string is an empty set; a later duplicate wins.
Expected<Limits> parse_limit_list(std::string_view text);

}  // namespace corral
