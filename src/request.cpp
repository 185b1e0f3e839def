#include "corral/request.hpp"

#include "corral/names.hpp"
#include "corral/output_collect.hpp"
#include "corral/outputs.hpp"
#include "corral/result.hpp"
#include "corral/uid_lock.hpp"

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
  return Error::invalid("unknown tier " + quote_input(text) + " (tiers: none, process, container)");
}

Status check_run_user(std::uint64_t uid) {
  if (uid == 0)
    return Error::invalid("user 0 is root (uid 0, gid 0): a run is never root; name an unprivileged uid");
  if (uid >= 4294967295ull)
    return Error::invalid("user " + std::to_string(uid) + " is out of range (a uid is 1..4294967294)");
  if (is_reaper_uid(uid))
    return Error::invalid("user " + std::to_string(uid) + " is corral's own (" + std::to_string(kReaperUidFirst) +
                          ".." + std::to_string(kReaperUidFirst + (kReaperUidCount - 1)) +
                          " are its kill helpers' uids, which no process of a run may have)");
  return {};
}

Expected<uid_t> parse_run_user(std::string_view text) {
  std::uint64_t uid = 0;
  bool digits = !text.empty() && text.size() <= 10;
  for (char c : text) {
    if (c < '0' || c > '9') digits = false;
    if (digits) uid = uid * 10 + static_cast<unsigned>(c - '0');
  }
  if (!digits) return Error::invalid("user " + quote_input(text) + " is not a uid (decimal digits, 1..4294967294)");
  if (auto st = check_run_user(uid); !st) return std::move(st).error();
  return static_cast<uid_t>(uid);
}

namespace {

std::string q(std::string_view s) { return quote_input(s); }

bool has_nul(std::string_view s) { return s.find('\0') != std::string_view::npos; }

// A string the kernel or the environment block will see: no NUL.
Status text(std::string_view field, std::string_view value) {
  if (has_nul(value)) return Error::invalid("field " + q(field) + ": contains a NUL byte");
  return {};
}

Status path(std::string_view field, std::string_view value) {
  if (value.empty()) return Error::invalid("field " + q(field) + ": empty path");
  return text(field, value);
}

Status texts(std::string_view field, const std::vector<std::string>& values) {
  for (std::size_t i = 0; i < values.size(); ++i)
    if (has_nul(values[i]))
      return Error::invalid("field " + q(field) + ": item " + std::to_string(i + 1) + " contains a NUL byte");
  return {};
}

}  // namespace

std::string variable_name_problem(std::string_view name) {
  if (name.empty()) return "an empty name is not a variable name";
  for (char c : name)
    if (c == '=' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      return quote_input(name) + " is not a variable name (no '=', NUL or control character)";
  return "";
}

std::string net_host_in_container() {
  return "net host: tier container always runs in an empty network namespace (use tier process with net host)";
}

Status validate_request(const Request& r) {
  Status st;
  auto check = [&](Status s) {
    if (st && !s) st = std::move(s);
  };
  check(text("id", r.id));
  if (r.user) check(check_run_user(*r.user));
  check(texts("argv", r.argv));
  if (!r.argv.empty() && r.argv.front().empty() && !r.payload) check(Error::invalid("field 'argv': the program name is empty"));
  auto variable = [&](std::string_view field, const std::string& name) {
    if (auto problem = variable_name_problem(name); !problem.empty())
      check(Error::invalid("field " + q(field) + ": " + problem));
  };
  for (const auto& [k, v] : r.env) {
    variable("env", k);
    if (has_nul(v)) check(Error::invalid("field " + q("env." + k) + ": the value contains a NUL byte"));
  }
  for (const auto& p : r.pass_env) variable("pass_env", p);
  for (const auto& s : r.secrets) {
    variable("secret_env", s.name);
    // from_env empty means "the same name"; with from_file it is not read.
    if (!s.from_env.empty() && s.from_file.empty()) variable("secret_env", s.from_env);
    if (has_nul(s.from_file)) check(Error::invalid("secret " + q(s.name) + ": from_file contains a NUL byte"));
  }
  for (const auto& in : r.inputs) {
    check(path("inputs", in.name));
    if (in.host_path) check(path("input " + in.name + " host_path", *in.host_path));
  }
  check(texts("outputs", r.outputs));
  // The collector's own rules (names, landing names, collisions), here so
  // that an output it would refuse stops the request before the program
  // runs, not after: a run whose outputs could never be delivered is a
  // wasted run, and its refusal is the caller's mistake (exit 2).
  if (st && (!r.outputs.empty() || !r.declared_outputs.empty()))
    if (Status declared = validate_declaration(outputs_of(r), true); !declared)
      check(Error::invalid("field 'outputs': " + declared.error().message()));
  if (r.payload) {
    check(texts("interpreter", r.payload->interpreter));
    check(path("source", r.payload->filename));
  }
  if (r.cwd) check(path("cwd", *r.cwd));
  if (r.chdir) check(path("chdir", *r.chdir));
  if (r.cwd && r.chdir) check(Error::invalid("fields 'cwd' and 'chdir': give one (cwd binds DIR and works there, chdir only works there)"));
  for (const auto& t : r.tmpfs) check(path("tmpfs", t.path));
  for (const auto& d : r.dev_binds) check(path("dev_binds", d));
  for (const auto& p : r.write_paths) check(path("write_paths", p));
  if (r.rootfs) check(path("rootfs", *r.rootfs));
  for (const auto& b : r.binds) {
    check(path(b.writable ? "binds" : "ro_binds", b.source));
    check(path(b.writable ? "binds" : "ro_binds", b.target));
  }
  if (r.artifact_root) check(path("artifact_root", *r.artifact_root));
  for (const auto& a : r.acknowledged) check(text("acknowledge", a));
  // SIGTERM to SIGKILL: a timer armed from a double (NaN, infinities and
  // huge values do not convert to a timespec).
  if (!(r.grace_seconds >= 0 && r.grace_seconds <= 3600))
    check(Error::invalid("field 'grace_seconds': must be between 0 and 3600 seconds"));  // the parser's reason (field_parsers.cpp)
  for (const auto& info : all_limits())
    if (auto v = r.limits.raw(info.limit); v && *v > info.max * info.scale)  // no wrap: scale > 1 only below 2^40
      check(Error(ERANGE, limit_too_large(info, limit_value_text(info, *v))));
  return st;
}

Limits default_limits() {
  // Why these: a judge or CI step finishes well inside ten minutes; 16 MiB
  // of captured output is more than a reader wants and bounds our memory per
  // run. file_bytes and open_files by measurement (`make compat`, README
  // "Defaults"): CPython's suite writes sparse files past 2 GiB (test_io's
  // large-file ops, test_largefile's 2.5 GB), which 1 GiB refused with EFBIG,
  // and passes whole at open_files=256, so 4 GiB and 1024 leave it room while
  // still stopping a runaway writer or fd leak.
  Limits l;
  l.set(Limit::wall_seconds, 600)
      .set(Limit::stdout_bytes, 16 << 20)
      .set(Limit::stderr_bytes, 16 << 20)
      .set(Limit::file_bytes, 4ull << 30)
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
  return Error::invalid(quote_input(text) + " is neither truncate nor kill");
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
