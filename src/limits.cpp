#include "corral/limits.hpp"

#include <sys/resource.h>

namespace corral {
namespace {

constexpr std::array<LimitInfo, kLimitCount> kLimits{{
    {Limit::cpu_seconds, "cpu_seconds", "seconds", RLIMIT_CPU, false, kMaxLimitSeconds},
    {Limit::memory_bytes, "memory_bytes", "bytes", RLIMIT_AS, false, kMaxLimitValue},
    {Limit::process_count, "process_count", "count", RLIMIT_NPROC, false, kMaxLimitValue},
    {Limit::file_bytes, "file_bytes", "bytes", RLIMIT_FSIZE, true, kMaxLimitValue},
    {Limit::open_files, "open_files", "count", RLIMIT_NOFILE, false, kMaxLimitValue},
    {Limit::wall_seconds, "wall_seconds", "seconds", -1, false, kMaxLimitSeconds},
    {Limit::stdout_bytes, "stdout_bytes", "bytes", -1, true, kMaxLimitValue},
    {Limit::stderr_bytes, "stderr_bytes", "bytes", -1, true, kMaxLimitValue},
    {Limit::artifact_bytes, "artifact_bytes", "bytes", -1, true, kMaxLimitValue},
    {Limit::artifact_total_bytes, "artifact_total_bytes", "bytes", -1, true, kMaxLimitValue},
    {Limit::artifact_count, "artifact_count", "count", -1, true, kMaxLimitValue},
    {Limit::workspace_bytes, "workspace_bytes", "bytes", -1, false, kMaxLimitValue},
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
  std::string who = "limit " + std::string(name);
  if (text.empty()) return Error::invalid(who + ": empty value");
  if (text.front() == '-') return Error::invalid(who + ": negative value '" + std::string(text) + "' refused");
  if (text.front() == '_' || text.back() == '_')
    return Error::invalid(who + ": '_' must sit between digits in '" + std::string(text) + "'");
  constexpr std::uint64_t kMax = std::uint64_t{1} << 63;
  std::uint64_t value = 0;
  char prev = 0;
  for (char c : text) {
    if (c == '_') {
      if (prev == '_') return Error::invalid(who + ": doubled '_' in '" + std::string(text) + "'");
    } else if (c >= '0' && c <= '9') {
      std::uint64_t digit = static_cast<std::uint64_t>(c - '0');
      if (value > (kMax - 1 - digit) / 10)
        return Error(ERANGE, who + ": value '" + std::string(text) + "' is too large (max 2^63-1)");
      value = value * 10 + digit;
    } else {
      return Error::invalid(who + ": '" + std::string(text) + "' is not a non-negative integer");
    }
    prev = c;
  }
  return value;
}

std::string limit_too_large(const LimitInfo& info, std::string_view value) {
  return "limit " + std::string(info.name) + ": " + std::string(value) + " is more than the maximum " +
         std::to_string(info.max) + " (" + std::string(info.unit) + ")";
}

Expected<std::pair<Limit, std::uint64_t>> parse_limit_assignment(std::string_view text) {
  auto eq = text.find('=');
  if (eq == std::string_view::npos)
    return Error::invalid("limit '" + std::string(text) + "': expected NAME=VALUE");
  std::string_view name = trim(text.substr(0, eq));
  std::string_view value = trim(text.substr(eq + 1));
  auto limit = limit_from_name(name);
  if (!limit) {
    std::string known;
    for (const auto& info : kLimits) {
      if (!known.empty()) known += ", ";
      known += info.name;
    }
    return Error::invalid("unknown limit '" + std::string(name) + "' (known: " + known + ")");
  }
  auto parsed = parse_limit_value(name, value);
  if (!parsed) return std::move(parsed).error();
  if (*parsed == 0 && !limit_info(*limit).zero_allowed)
    return Error::invalid("limit " + std::string(name) + ": must be at least 1");
  if (*parsed > limit_info(*limit).max) return Error(ERANGE, limit_too_large(limit_info(*limit), value));
  return std::pair{*limit, *parsed};
}

Status Limits::set_checked(Limit limit, std::uint64_t value) {
  const auto& info = limit_info(limit);
  if (value == 0 && !info.zero_allowed)
    return Error::invalid("limit " + std::string(info.name) + ": must be at least 1");
  if (value > info.max) return Error(ERANGE, limit_too_large(info, std::to_string(value)));
  set(limit, value);
  return {};
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
    out += std::to_string(*values_[i]);
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
    limits.set(parsed->first, parsed->second);
  }
  return limits;
}

}  // namespace corral
