#include "corral/limits.hpp"

#include <sys/resource.h>

#include <charconv>
#include <cmath>
#include <span>

#include "corral/names.hpp"

namespace corral {
namespace {

constexpr std::array<LimitInfo, kLimitCount> kLimits{{
    {Limit::cpu_seconds, "cpu_seconds", "seconds", RLIMIT_CPU, false, kMaxLimitSeconds, 1000},
    {Limit::memory_bytes, "memory_bytes", "bytes", RLIMIT_AS, false, kMaxLimitValue, 1},
    {Limit::process_count, "process_count", "count", RLIMIT_NPROC, false, kMaxLimitValue, 1},
    {Limit::file_bytes, "file_bytes", "bytes", RLIMIT_FSIZE, true, kMaxLimitValue, 1},
    {Limit::open_files, "open_files", "count", RLIMIT_NOFILE, false, kMaxLimitValue, 1},
    {Limit::wall_seconds, "wall_seconds", "seconds", -1, false, kMaxLimitSeconds, 1000},
    {Limit::stdout_bytes, "stdout_bytes", "bytes", -1, true, kMaxLimitValue, 1},
    {Limit::stderr_bytes, "stderr_bytes", "bytes", -1, true, kMaxLimitValue, 1},
    {Limit::artifact_bytes, "artifact_bytes", "bytes", -1, true, kMaxLimitValue, 1},
    {Limit::artifact_total_bytes, "artifact_total_bytes", "bytes", -1, true, kMaxLimitValue, 1},
    {Limit::artifact_count, "artifact_count", "count", -1, true, kMaxLimitValue, 1},
    {Limit::workspace_bytes, "workspace_bytes", "bytes", -1, false, kMaxLimitValue, 1},
    {Limit::tmp_bytes, "tmp_bytes", "bytes", -1, false, kMaxLimitValue, 1},
    {Limit::shm_bytes, "shm_bytes", "bytes", -1, false, kMaxLimitValue, 1},
}};

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

const std::array<LimitInfo, kLimitCount>& all_limits() { return kLimits; }

const LimitInfo& limit_info(Limit limit) { return kLimits[static_cast<std::size_t>(limit)]; }

std::string_view limit_name(Limit limit) { return limit_info(limit).name; }

std::optional<Limit> limit_from_name(std::string_view name) {
  for (const auto& info : kLimits)
    if (info.name == name) return info.limit;
  return std::nullopt;
}

Expected<std::uint64_t> parse_limit_value(std::string_view name, std::string_view text) {
  std::string who = "limit " + printable_name(name);
  std::string shown = quote_input(text);
  if (text.empty()) return Error::invalid(who + ": empty value");
  if (text.front() == '-') return Error::invalid(who + ": negative value " + shown + " refused");
  if (text.front() == '_' || text.back() == '_')
    return Error::invalid(who + ": '_' must sit between digits in " + shown);
  constexpr std::uint64_t kMax = std::uint64_t{1} << 63;
  std::uint64_t value = 0;
  char prev = 0;
  for (char c : text) {
    if (c == '_') {
      if (prev == '_') return Error::invalid(who + ": doubled '_' in " + shown);
    } else if (c >= '0' && c <= '9') {
      std::uint64_t digit = static_cast<std::uint64_t>(c - '0');
      if (value > (kMax - 1 - digit) / 10)
        return Error(ERANGE, who + ": value " + shown + " is too large (max 2^63-1)");
      value = value * 10 + digit;
    } else {
      return Error::invalid(who + ": " + shown + " is not a non-negative integer");
    }
    prev = c;
  }
  return value;
}

namespace {

struct Unit {
  std::string_view suffix;
  std::uint64_t multiplier;  // stored units per 1 of the number
};

// Bytes: SI (powers of 1000) for K M G T, IEC (powers of 1024) for Ki Mi Gi
// Ti — the units' own meanings, so "512M" is what a disk vendor or a
// judge's statement in MB means, "512MiB" what `free -m` shows.
constexpr Unit kByteUnits[] = {
    {"", 1},          {"B", 1},
    {"K", 1000},      {"k", 1000},      {"KB", 1000},       {"kB", 1000},
    {"M", 1000000},   {"MB", 1000000},  {"G", 1000000000},  {"GB", 1000000000},
    {"T", 1000000000000}, {"TB", 1000000000000},
    {"Ki", 1ull << 10}, {"KiB", 1ull << 10}, {"Mi", 1ull << 20}, {"MiB", 1ull << 20},
    {"Gi", 1ull << 30}, {"GiB", 1ull << 30}, {"Ti", 1ull << 40}, {"TiB", 1ull << 40},
};
// Seconds limits are stored in milliseconds.
constexpr Unit kSecondUnits[] = {{"", 1000}, {"s", 1000}, {"ms", 1}};
constexpr Unit kCountUnits[] = {{"", 1}};

std::span<const Unit> units_of(const LimitInfo& info) {
  if (info.unit == "seconds") return kSecondUnits;
  if (info.unit == "bytes") return kByteUnits;
  return kCountUnits;
}

std::string_view units_hint(const LimitInfo& info) {
  if (info.unit == "seconds") return "seconds take a decimal with up to 3 fractional digits, optionally 's' or 'ms'";
  if (info.unit == "bytes")
    return "bytes take K, M, G, T (powers of 1000; KB, MB, ... the same) or Ki, Mi, Gi, Ti (KiB, MiB, ...: powers of "
           "1024)";
  return "a count is a whole number";
}

}  // namespace

Expected<std::uint64_t> parse_limit_quantity(const LimitInfo& info, std::string_view text) {
  const std::string who = "limit " + std::string(info.name) + ": " + quote_input(text);
  if (text.empty()) return Error::invalid("limit " + std::string(info.name) + ": empty value");
  if (text.front() == '-') return Error::invalid(who + ": negative value refused");
  // The number: digits with '_' between them, then optionally '.' and digits.
  std::size_t end = 0;
  while (end < text.size() && ((text[end] >= '0' && text[end] <= '9') || text[end] == '_' || text[end] == '.')) ++end;
  std::string_view number = text.substr(0, end), suffix = text.substr(end);
  auto dot = number.find('.');
  std::string_view whole = number.substr(0, dot);
  std::string_view frac = dot == std::string_view::npos ? std::string_view{} : number.substr(dot + 1);
  if (whole.empty() || (dot != std::string_view::npos && frac.empty()) || frac.find('.') != std::string_view::npos)
    return Error::invalid(who + " is not a number (" + std::string(units_hint(info)) + ")");
  auto whole_value = parse_limit_value(info.name, whole);
  if (!whole_value) {
    if (whole_value.error().code() == ERANGE) return Error(ERANGE, limit_too_large(info, text));
    return std::move(whole_value).error();  // names the limit and the digits
  }
  if (frac.find('_') != std::string_view::npos || frac.size() > 18)
    return Error::invalid(who + ": the fraction must be plain digits (at most 18)");
  const Unit* unit = nullptr;
  for (const Unit& u : units_of(info))
    if (u.suffix == suffix) unit = &u;
  if (unit == nullptr)
    return Error::invalid(who + ": unknown unit " + quote_input(suffix) + " (" + std::string(units_hint(info)) + ")");
  // Exact arithmetic: whole * m + frac * m / 10^digits, which must come out
  // whole (a millisecond, a byte); 128 bits hold every step.
  using u128 = unsigned __int128;
  u128 pow10 = 1, frac_value = 0;
  for (char c : frac) {
    pow10 *= 10;
    frac_value = frac_value * 10 + static_cast<unsigned>(c - '0');
  }
  u128 frac_scaled = frac_value * unit->multiplier;
  if (frac_scaled % pow10 != 0) {
    if (info.unit == "seconds") return Error::invalid(who + ": finer than a millisecond (at most 3 fractional digits)");
    if (info.unit == "bytes") return Error::invalid(who + " is not a whole number of bytes");
    return Error::invalid(who + ": " + std::string(units_hint(info)));
  }
  u128 total = static_cast<u128>(*whole_value) * unit->multiplier + frac_scaled / pow10;
  if (total > static_cast<u128>(kMaxLimitValue)) return Error(ERANGE, limit_too_large(info, text));
  return static_cast<std::uint64_t>(total);
}

Expected<std::uint64_t> parse_limit_number(const LimitInfo& info, double value) {
  if (!std::isfinite(value)) return Error::invalid("limit " + std::string(info.name) + ": not a finite number");
  char buf[64];
  // Shortest text that reads back as the same double: 0.1 is "0.1", not
  // "0.10000000000000001"; 1e21 is written out as digits (fixed).
  auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, value, std::chars_format::fixed);
  if (ec != std::errc()) return Error(ERANGE, "limit " + std::string(info.name) + ": value out of range");
  return parse_limit_quantity(info, std::string_view(buf, static_cast<std::size_t>(ptr - buf)));
}

std::string limit_value_text(const LimitInfo& info, std::uint64_t raw) {
  std::string out = std::to_string(raw / info.scale);
  std::uint64_t rest = raw % info.scale;
  if (rest == 0) return out;
  std::string frac = std::to_string(rest);
  std::size_t digits = info.scale == 1000 ? 3 : std::to_string(info.scale).size() - 1;
  frac.insert(0, digits - frac.size(), '0');
  while (!frac.empty() && frac.back() == '0') frac.pop_back();
  return out + "." + frac;
}

std::string limit_too_large(const LimitInfo& info, std::string_view value) {
  return "limit " + std::string(info.name) + ": " + quote_input(value) + " is more than the maximum " +
         std::to_string(info.max) + " (" + std::string(info.unit) + ")";
}

namespace {

// The checks every stored value passes: 0 where it means nothing, the max.
Status check_raw(const LimitInfo& info, std::uint64_t raw, std::string_view shown) {
  if (raw == 0 && !info.zero_allowed)
    return Error::invalid("limit " + std::string(info.name) + ": must be at least " +
                          (info.scale == 1 ? std::string("1") : limit_value_text(info, 1)));
  if (raw > info.max * info.scale)  // no wrap: scale > 1 only for seconds (max 10^9)
    return Error(ERANGE, limit_too_large(info, shown));
  return {};
}

}  // namespace

Expected<LimitAssignment> parse_limit_assignment(std::string_view text) {
  auto eq = text.find('=');
  if (eq == std::string_view::npos)
    return Error::invalid("limit " + quote_input(text) + ": expected NAME=VALUE");
  std::string_view name = trim(text.substr(0, eq));
  std::string_view value = trim(text.substr(eq + 1));
  auto limit = limit_from_name(name);
  if (!limit) {
    std::string known;
    for (const auto& info : kLimits) {
      if (!known.empty()) known += ", ";
      known += info.name;
    }
    return Error::invalid("unknown limit " + quote_input(name) + " (known: " + known + ")");
  }
  const LimitInfo& info = limit_info(*limit);
  auto parsed = parse_limit_quantity(info, value);
  if (!parsed) return std::move(parsed).error();
  if (auto st = check_raw(info, *parsed, value); !st) return std::move(st).error();
  return LimitAssignment{*limit, *parsed};
}

Status Limits::set_checked(Limit limit, std::uint64_t value) {
  const auto& info = limit_info(limit);
  if (value > info.max) return Error(ERANGE, limit_too_large(info, std::to_string(value)));
  return set_raw_checked(limit, value * info.scale);
}

Status Limits::set_raw_checked(Limit limit, std::uint64_t raw) {
  const auto& info = limit_info(limit);
  if (auto st = check_raw(info, raw, limit_value_text(info, raw)); !st) return st;
  set_raw(limit, raw);
  return {};
}

std::string Limits::text(Limit limit) const {
  auto v = raw(limit);
  return v ? limit_value_text(limit_info(limit), *v) : std::string();
}

Limits& Limits::merge(const Limits& over) {
  for (std::size_t i = 0; i < kLimitCount; ++i)
    if (over.values_[i]) values_[i] = over.values_[i];
  return *this;
}

bool Limits::empty() const {
  for (const auto& v : values_)
    if (v) return false;
  return true;
}

std::string Limits::describe() const {
  std::string out;
  for (std::size_t i = 0; i < kLimitCount; ++i) {
    if (!values_[i]) continue;
    if (!out.empty()) out += ", ";
    out += kLimits[i].name;
    out += '=';
    out += limit_value_text(kLimits[i], *values_[i]);
  }
  return out;
}

Expected<Limits> parse_limit_list(std::string_view text) {
  Limits limits;
  while (!text.empty()) {
    auto comma = text.find(',');
    std::string_view item = trim(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    if (item.empty()) continue;
    auto parsed = parse_limit_assignment(item);
    if (!parsed) return std::move(parsed).error();
    limits.set_raw(parsed->limit, parsed->raw);
  }
  return limits;
}

}  // namespace corral
