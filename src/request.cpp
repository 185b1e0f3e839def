#include "corral/request.hpp"

#include "corral/result.hpp"

namespace corral {

std::string_view to_string(Tier tier) {
  switch (tier) {
    case Tier::none: return "none";
    case Tier::os_process: return "os_process";
    case Tier::container: return "container";
  }
  return "unknown";
}

Expected<Tier> parse_tier(std::string_view text) {
  if (text == "none") return Tier::none;
  if (text == "process" || text == "os_process") return Tier::os_process;
  if (text == "container") return Tier::container;
  return Error::invalid("unknown tier '" + std::string(text) + "' (tiers: none, process, container)");
}

Status check_run_user(std::uint64_t uid) {
  if (uid == 0)
    return Error::invalid("user 0 is root (uid 0, gid 0): a run is never root; name an unprivileged uid");
  if (uid >= 4294967295ull)
    return Error::invalid("user " + std::to_string(uid) + " is out of range (a uid is 1..4294967294)");
  return {};
}

Expected<uid_t> parse_run_user(std::string_view text) {
  std::uint64_t uid = 0;
  bool digits = !text.empty() && text.size() <= 10;
  for (char c : text) {
    if (c < '0' || c > '9') digits = false;
    if (digits) uid = uid * 10 + static_cast<unsigned>(c - '0');
  }
  if (!digits) return Error::invalid("user '" + std::string(text) + "' is not a uid (decimal digits, 1..4294967294)");
  if (auto st = check_run_user(uid); !st) return std::move(st).error();
  return static_cast<uid_t>(uid);
}

Limits default_limits() {
  // Why these: a judge or CI step finishes well inside ten minutes; 16 MiB
  // of captured output is more than a reader wants and bounds our memory per
  // run; 1 GiB files and 1024 fds never bother honest programs.
  Limits l;
  l.set(Limit::wall_seconds, 600)
      .set(Limit::stdout_bytes, 16 << 20)
      .set(Limit::stderr_bytes, 16 << 20)
      .set(Limit::file_bytes, 1ull << 30)
      .set(Limit::open_files, 1024)
      .set(Limit::artifact_bytes, 64 << 20)
      .set(Limit::artifact_total_bytes, 256 << 20)
      .set(Limit::artifact_count, 1000);
  return l;
}

std::string_view to_string(Outcome outcome) {
  switch (outcome) {
    case Outcome::exited: return "exited";
    case Outcome::signaled: return "signaled";
    case Outcome::killed_timeout: return "killed_timeout";
    case Outcome::killed_oom: return "killed_oom";
    case Outcome::killed_resource: return "killed_resource";
    case Outcome::spawn_failed: return "spawn_failed";
    case Outcome::cancelled: return "cancelled";
  }
  return "unknown";
}

std::vector<std::pair<std::string, double>> timing_fields(const SetupTimings& t) {
  std::vector<std::pair<std::string, double>> out{{"plan", t.plan}, {"clone", t.clone}, {"child_setup", t.child_setup}};
  if (t.exec) out.emplace_back("exec", *t.exec);
  out.emplace_back("run", t.run);
  out.emplace_back("collect", t.collect);
  return out;
}

std::string_view to_string(OutputLimitPolicy policy) {
  return policy == OutputLimitPolicy::kill ? "kill" : "truncate";
}

Expected<OutputLimitPolicy> parse_output_limit_policy(std::string_view text) {
  if (text == "truncate") return OutputLimitPolicy::truncate;
  if (text == "kill") return OutputLimitPolicy::kill;
  return Error::invalid("on_output_limit: '" + std::string(text) + "' is neither truncate nor kill");
}

int cli_exit_code(const Result& r) {
  switch (r.outcome) {
    case Outcome::exited: return r.exit_code;
    case Outcome::signaled:
    case Outcome::killed_resource:
    case Outcome::killed_oom: return 128 + (r.signal > 0 ? r.signal : 9);
    case Outcome::killed_timeout: return 124;
    case Outcome::spawn_failed: return 125;
    case Outcome::cancelled: return 130;
  }
  return 125;
}

}  // namespace corral
