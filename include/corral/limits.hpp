// The limit vocabulary of a run: names, units, parsing, and which facility
// enforces each. The names are the CLI's and the JSON's: `--limit NAME=VALUE`,
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
  memory_bytes,          // RLIMIT_AS in the process tiers; the cgroup ceiling in `container`
  process_count,         // RLIMIT_NPROC (per uid); pids.max in `container`
  file_bytes,            // RLIMIT_FSIZE: SIGXFSZ on a write past it
  open_files,            // RLIMIT_NOFILE
  wall_seconds,          // supervisor deadline: SIGTERM, grace, SIGKILL
  stdout_bytes,          // capture cap per stream; the rest is counted, not kept
  stderr_bytes,
  artifact_bytes,        // per collected output file
  artifact_total_bytes,  // all collected outputs together
  artifact_count,        // number of collected outputs; a glob over it collects nothing
  workspace_bytes,       // `container` as root: the size of the run's tmpfs workspace
};

inline constexpr std::size_t kLimitCount = 12;

struct LimitInfo {
  Limit limit;
  std::string_view name;
  std::string_view unit;   // "seconds", "bytes", "count"
  int rlimit_resource;     // RLIMIT_* or -1 when no rlimit backs it
  bool zero_allowed;       // 0 is a meaningful value (e.g. "no output kept")
  // The largest value the mechanism behind it holds without wrapping:
  // seconds become a double and then a timespec (exact up to 2^53) or an
  // rlim_t; bytes and counts an rlim_t or a uint64 counter. Larger values
  // are refused by name, never wrapped.
  std::uint64_t max;
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
// values of 2^63 or more; the message names `name`.
Expected<std::uint64_t> parse_limit_value(std::string_view name, std::string_view text);

// "limit NAME: VALUE is more than the maximum MAX (UNIT)".
std::string limit_too_large(const LimitInfo& info, std::string_view value);

// "NAME=VALUE" -> (limit, value); unknown names are refused by name, and
// values above the limit's max (LimitInfo::max) too.
Expected<std::pair<Limit, std::uint64_t>> parse_limit_assignment(std::string_view text);

// A set of optional limits.
class Limits {
 public:
  std::optional<std::uint64_t> get(Limit limit) const {
    return values_[static_cast<std::size_t>(limit)];
  }
  bool has(Limit limit) const { return get(limit).has_value(); }
  Limits& set(Limit limit, std::uint64_t value) {
    values_[static_cast<std::size_t>(limit)] = value;
    return *this;
  }
  Limits& clear(Limit limit) {
    values_[static_cast<std::size_t>(limit)].reset();
    return *this;
  }
  // Validates the value against the limit (0 where not allowed).
  Status set_checked(Limit limit, std::uint64_t value);

  // Values present in `over` replace ours.
  Limits& merge(const Limits& over);
  bool empty() const;
  // "cpu_seconds=2, wall_seconds=10" in enum order; "" when empty.
  std::string describe() const;

  bool operator==(const Limits&) const = default;

 private:
  std::array<std::optional<std::uint64_t>, kLimitCount> values_{};
};

// "a=1,b=2" (the CORRAL_LIMITS form); spaces around items are ignored, an
// empty string is an empty set; a later duplicate wins.
Expected<Limits> parse_limit_list(std::string_view text);

}  // namespace corral
