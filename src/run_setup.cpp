// The first half of a run (run_setup.hpp): a Request becomes a PreparedRun
// (validated, secrets resolved, uid leased, workspace made and staged, the
// environment, the tier's mechanisms prepared into the child plan). What
// differs between the tiers is asked of the run's runner (tier_runner.hpp).
// The second half, a finished run becoming a Result, is run_result.cpp.
#include "corral/run_setup.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "corral/host_probe.hpp"
#include "corral/names.hpp"
#include "corral/rlimits.hpp"
#include "corral/sha256.hpp"
#include "corral/tier_limits.hpp"
#include "corral/tier_runner.hpp"

namespace corral {
namespace {

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Expected<UniqueFd> stdin_memfd(const std::string& text) {
  UniqueFd fd(memfd_create("corral-stdin", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd) return Error::from_errno(errno, "stdin: memfd_create");
  std::size_t off = 0;
  while (off < text.size()) {
    ssize_t n = write(fd.get(), text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error::from_errno(errno, "stdin: write memfd");
    off += static_cast<std::size_t>(n);
  }
  // Sealed: the program reads exactly the text it was given.
  fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE);
  if (lseek(fd.get(), 0, SEEK_SET) != 0) return Error::from_errno(errno, "stdin: rewind memfd");
  return fd;
}

// The artifact root must be a directory this process can create entries
// in, checked before the program runs: outputs that could land nowhere
// would otherwise be lost after the run did its work. access(2) with the
// effective ids decides "writable" honestly even for root, which bypasses
// mode bits but still gets EROFS on a read-only mount (a read-only bind
// mount included) and EPERM on an immutable directory.
Status check_artifact_root(const std::string& root) {
  const std::string who = "artifact root " + quote_name(root);
  if (root.empty()) return Error::invalid("artifact root is empty");
  struct stat st {};
  if (::stat(root.c_str(), &st) != 0) return Error::invalid(who + ": " + std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) return Error::invalid(who + " is not a directory");
  if (::faccessat(AT_FDCWD, root.c_str(), W_OK | X_OK, AT_EACCESS) != 0)
    return Error::invalid(who + " is not writable: " + std::strerror(errno));
  return {};
}

}  // namespace

Expected<std::string> resolve_secret(const SecretRef& ref) {
  std::string value;
  if (!ref.from_file.empty()) {
    auto read = read_secret_file(ref.from_file);
    if (!read) return read.error().context("secret " + ref.name);
    value = std::move(*read);
  } else {
    const std::string& var = ref.from_env.empty() ? ref.name : ref.from_env;
    const char* v = find_env(var.c_str());
    if (!v) return Error::invalid("secret " + ref.name + ": variable " + var + " is not set");
    value = v;
  }
  if (value.empty()) return Error::invalid("secret " + ref.name + " is empty; an empty value cannot be masked");
  return value;
}

std::vector<std::string> secret_values(const std::vector<SecretRef>& refs) {
  std::vector<std::string> values;
  for (const auto& ref : refs)
    if (auto value = resolve_secret(ref)) values.push_back(std::move(*value));
  return values;
}

void release_workspace_and_uid(PreparedRun& run, std::string& detail) {
  if (run.workspace) {
    // The uid goes back once the workspace is gone: a later run of it could
    // enter a directory workspace (one made in the caller's base) and read
    // what this run left.
    auto lease = std::make_shared<std::optional<UidPool::Lease>>(std::move(run.uid_lease));
    auto removal = run.workspace->remove_or_hand_off([lease] { lease->reset(); });
    if (!removal) detail += "; workspace not fully removed: " + removal.error().message();
    else if (*removal == Workspace::Removal::in_background)
      detail += "; the workspace held more than " + std::to_string(Workspace::kEntriesInCaller) +
                " entries: the rest is removed after this result, off the supervisor's loop (failures there are "
                "not reported)";
    run.workspace.reset();
  }
  run.uid_lease.reset();
}

Result unstarted_result(PreparedRun& run) {
  Result r;
  r.id = run.request.id;
  r.run_id = run.run_id;
  r.tier = std::string(to_string(run.request.tier));
  r.limits = run.limits;
  r.binary_output = run.request.binary_output;
  r.outcome = Outcome::spawn_failed;
  r.spawn_stage = "inputs";
  const Error& why = run.unstaged ? *run.unstaged : Error(EINVAL, "an input could not be staged");
  r.spawn_errno = why.code();
  // Nothing was written: the streams are the empty stream.
  r.stdout_capture.sha256 = r.stderr_capture.sha256 = Sha256::hex_of("");
  r.timings.plan = run.plan_seconds;
  std::string detail = "could not start: " + why.message();
  release_workspace_and_uid(run, detail);
  std::string limits = run.limits.describe();
  if (!limits.empty()) detail += "; limits: " + limits;
  r.warnings = run.warnings;
  r.detail = run.secrets ? scrub_secrets(detail, run.secrets->values()) : detail;
  r.wall_seconds = since(run.started);
  return r;
}

void explain_exec_failure(PreparedRun& run, int& spawn_errno) {
  if (run.searched_name.empty()) return;
  auto existing = exec_candidates(run.searched_name, run.env_path, /*existing=*/true);
  run.program.clear();
  for (const auto& p : existing) run.program += (run.program.empty() ? "" : ", ") + p;
  if (spawn_errno == EACCES && existing.size() == 1 && existing.front() == run.searched_name) spawn_errno = ENOENT;
}

Expected<PreparedRun> prepare_run(Request request, RunContext& ctx, std::string run_id) {
  auto t0 = std::chrono::steady_clock::now();
  HostFacts probed;
  const HostFacts& host = ctx.host ? *ctx.host : (probed = probe_host());
  PreparedRun run;
  const RunPolicy& policy = ctx.policy ? *ctx.policy : default_run_policy();
  run.policy = &policy;
  run.run_id = std::move(run_id);
  run.started = t0;
  run.request = std::move(request);
  run.plan = std::make_unique<ChildPlan>();
  Request& req = run.request;
  // Once the secrets are resolved, no message of ours repeats one: an input
  // or artifact root named with a secret's value in it would otherwise be
  // printed back whole ("input 'nonexist-hunter2' from ...").
  auto who = [&](const Error& e) {
    Error named = e.context("run " + (req.id.empty() ? run.run_id : quote_input(req.id)));
    if (!run.secrets || run.secrets->empty()) return named;
    return Error(named.code(), scrub_secrets(named.message(), run.secrets->values()));
  };

  if (req.argv.empty() && !req.payload) return who(Error::invalid("argv is empty"));
  // Includes check_run_user: a run is never root.
  if (Status st = validate_request(req); !st) return who(st.error());
  // What differs between the tiers is the runner's (tier_runner.hpp).
  const TierRunner& runner = tier_runner(req.tier);
  run.runner = &runner;
  if (Status st = runner.check(req); !st) return who(st.error());

  // Secrets are resolved now and live only in the child's environment and
  // the masker; the Result never carries them.
  std::vector<std::string> secret_values;
  std::vector<std::pair<std::string, std::string>> secret_env;
  for (const auto& ref : req.secrets) {
    auto value = resolve_secret(ref);
    if (!value) return who(std::move(value).error());
    secret_values.push_back(*value);
    secret_env.emplace_back(ref.name, std::move(*value));
  }
  if (secret_values.empty()) {
    // Most runs name none: one empty set for all of them (a SecretSet is
    // a few hundred bytes, allocated and zeroed a run otherwise).
    static const auto kNoSecrets = std::make_shared<const SecretSet>(std::vector<std::string>{});
    run.secrets = kNoSecrets;
  } else {
    run.secrets = std::make_shared<const SecretSet>(std::move(secret_values));
    // The id is echoed (the Result, a batch line's errors, the audit): a
    // secret's value in it is masked from here on, as in every message.
    req.id = scrub_secrets(req.id, run.secrets->values());
  }

  if (req.payload && req.payload->interpreter.empty())
    return who(Error::invalid("program payload needs an interpreter argv (e.g. [\"python3\"])"));
  // The ports narrow a closed network; with the host's network they would
  // read as an allow-list that allows everything.
  if (!req.tcp_connect_ports.empty() && req.net != NetworkAccess::none)
    return who(Error::invalid("tcp_connect_ports need net none (they open ports in a closed network)"));
  if (req.artifact_root)
    if (auto st = check_artifact_root(*req.artifact_root); !st) return who(st.error());
  // What an input asks is checked before anything is made: a name the
  // workspace would refuse is the request's fault (refused, exit 2), not an
  // input that could not be staged (a Result: PreparedRun::unstaged).
  for (const auto& in : req.inputs) {
    if (auto st = validate_relative_name(in.name, "workspace: input"); !st) return who(st.error());
    if (!in.bytes && !in.host_path) return who(Error::invalid("input " + in.name + ": needs bytes or a host path"));
  }
  if (req.payload)
    if (auto st = validate_relative_name(req.payload->filename, "workspace: input"); !st) return who(st.error());

  Limits defaults = default_limits();
  run.limits = defaults;
  run.limits.merge(req.limits);
  if (auto st = policy.check(host, req, defaults, run.warnings); !st) return who(st.error());

  // One uid per run in flight when we can: RLIMIT_NPROC then binds per run
  // and runs cannot signal or read each other.
  auto owner = runner.owner(run, host, ctx);
  if (!owner) return who(std::move(owner).error());

  WorkspaceOptions wopts;
  wopts.base_dir = ctx.workspace_base;
  wopts.base = ctx.base;
  wopts.name_tag = ctx.workspace_tag;
  wopts.owner = *owner;
  // Below a supervisor's shared base the tree is made and removed by name
  // (no fd held from creation to removal: 8 calls a run instead of 14).
  wopts.by_name = true;
  if (auto st = runner.workspace(run, host, ctx, std::move(wopts)); !st) return who(st.error());
  Workspace* wp = run.workspace ? &*run.workspace : nullptr;

  // A directory input has the caps of outputs (artifact_*).
  Workspace::TreeCaps caps;
  caps.file_bytes = run.limits.get(Limit::artifact_bytes).value_or(UINT64_MAX);
  caps.total_bytes = run.limits.get(Limit::artifact_total_bytes).value_or(UINT64_MAX);
  caps.count = run.limits.get(Limit::artifact_count).value_or(UINT64_MAX);
  // An input that cannot be staged ends the preparation with a run that
  // will not start (PreparedRun::unstaged): its Result says why.
  auto unstaged = [&](const Error& e) {
    run.unstaged = Error(e.code(), scrub_secrets(e.message(), run.secrets->values()));
    run.plan_seconds = since(t0);
    return std::move(run);
  };
  std::vector<std::string> skipped;
  for (const auto& in : req.inputs) {
    Workspace& w = *wp;
    Status st = in.bytes ? w.stage_bytes(in.name, *in.bytes, in.mode)
                         : w.stage_path(*in.host_path, in.name, in.resolved, caps, skipped);
    if (!st) return unstaged(st.error());
  }
  // A skipped entry is named as the tree has it: a secret's value masked.
  for (const auto& s : skipped)
    run.warnings.push_back(scrub_secrets("input " + s + ": skipped (inputs copy files, never links)",
                                         run.secrets->values()));

  ChildPlan& plan = *run.plan;
  plan.first_oom_victim = true;
  plan.argv_storage.clear();
  if (req.payload) {
    if (auto st = wp->stage_bytes(req.payload->filename, req.payload->source, 0644); !st) return unstaged(st.error());
    plan.argv_storage = req.payload->interpreter;
    plan.argv_storage.push_back(req.payload->filename);
  }
  plan.argv_storage.insert(plan.argv_storage.end(), req.argv.begin(), req.argv.end());

  // The environment: the passthrough names, then what the request names,
  // HOME/TMPDIR in the workspace, then the secrets. Nothing else of ours.
  std::map<std::string, std::string> env;
  for (const auto& name : req.pass_env)
    if (const char* v = find_env(name.c_str())) env[name] = v;
  runner.environment(run, *owner, env);
  for (const auto& [k, v] : req.env) env[k] = v;
  for (auto& [k, v] : secret_env) env[k] = v;
  for (const auto& [k, v] : env) {
    if (k.empty() || k.find('=') != std::string::npos)
      return who(Error::invalid("environment variable name '" + k + "' is invalid"));
    plan.env_storage.push_back(k + "=" + v);
  }
  auto path_it = env.find("PATH");
  run.env_path = path_it == env.end() ? "" : path_it->second;
  if (auto st = runner.place_program(run); !st) return who(st.error());
  plan.merge_output = req.merge_output;
  if (req.stdin_fd >= 0) {
    UniqueFd fd(fcntl(req.stdin_fd, F_DUPFD_CLOEXEC, 3));
    if (!fd) return who(Error::from_errno(errno, "stdin: duplicate the caller's fd " + std::to_string(req.stdin_fd)));
    plan.stdin_fd = std::move(fd);
  } else if (req.stdin_text) {
    auto fd = stdin_memfd(*req.stdin_text);
    if (!fd) return who(std::move(fd).error());
    plan.stdin_fd = std::move(*fd);
  }

  // Only the limits this tier enforces with an rlimit (tier_limits.hpp).
  auto rl = rlimits_from_limits(rlimit_limits(run.limits, req.tier), ctx.cache ? &ctx.cache->hard_limits : nullptr);
  if (!rl) return who(std::move(rl).error());
  // rlimits_from_limits checked each entry it set against what this
  // process may set (check_rlimits_allowed); the one it adds, RLIMIT_CORE
  // 0, only lowers. Not checked twice: two getrlimit calls per entry a run.
  plan.rlimits.emplace(*rl);

  if (auto st = runner.prepare(run, host, *owner, ctx.cache); !st) return who(st.error());
  plan.finalize();
  using EnforcementMap = std::map<std::string, std::string>;
  if (ctx.cache) {
    auto& shared = ctx.cache->enforcement[req.tier];
    if (!shared) shared = std::make_shared<const EnforcementMap>(policy.host_enforcement(host, req.tier));
    run.enforcement = shared;
  } else {
    run.enforcement = std::make_shared<const EnforcementMap>(policy.host_enforcement(host, req.tier));
  }
  run.plan_seconds = since(t0);
  return run;
}

}  // namespace corral
