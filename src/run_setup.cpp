// The first half of a run (run_setup.hpp): a Request becomes a PreparedRun
// (validated, secrets resolved, uid leased, workspace made and staged, the
// environment, the tier's mechanisms prepared into the child plan). The
// second half, a finished run becoming a Result, is run_result.cpp.
#include "corral/run_setup.hpp"

#include <fcntl.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "corral/capabilities.hpp"
#include "corral/container.hpp"
#include "corral/host_probe.hpp"
#include "corral/session_join.hpp"
#include "corral/landlock.hpp"
#include "corral/names.hpp"
#include "corral/rlimits.hpp"
#include "corral/seccomp.hpp"
#include "corral/tier_limits.hpp"

extern char** environ;

namespace corral {
namespace {

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

const char* find_env(const char* name) {
  std::size_t len = std::strlen(name);
  for (char** e = environ; e && *e; ++e)
    if (std::strncmp(*e, name, len) == 0 && (*e)[len] == '=') return *e + len + 1;
  return nullptr;
}

// execvp semantics, decided in the parent: a name with a slash is used as
// is; otherwise every PATH entry of the CHILD's environment is a candidate,
// tried in order by the child (ENOENT and ENOTDIR go on to the next, as in
// execvp). An empty entry means the cwd for execvp; a sandbox does not
// search it. With `existing`, entries where nothing by that name exists are
// dropped: the child would only collect EACCES from directories its uid
// cannot search and report that instead of the truth, ENOENT. Without it
// (the process tiers, where it cost a stat per PATH entry per run, most of
// them after the entry the program is found in) that check is made only
// when the exec failed (exec_failure_detail).
std::vector<std::string> exec_candidates(const std::string& program, const std::string& child_path, bool existing) {
  if (program.find('/') != std::string::npos) return {program};
  std::vector<std::string> out;
  std::string_view rest = child_path.empty() ? std::string_view("/usr/local/bin:/usr/bin:/bin") : child_path;
  while (true) {
    auto colon = rest.find(':');
    std::string_view dir = rest.substr(0, colon);
    if (!dir.empty()) {
      std::string candidate = std::string(dir) + "/" + program;
      struct stat st;
      if (!existing || ::stat(candidate.c_str(), &st) == 0 || errno != ENOENT) out.push_back(std::move(candidate));
    }
    if (colon == std::string_view::npos) break;
    rest.remove_prefix(colon + 1);
  }
  if (out.empty()) out.push_back(program);  // execve then fails with ENOENT, as it should
  return out;
}

// The first candidate that opens (the file execve would run), for the
// 32-bit check: opened in PATH order, as the search would find it.
std::string first_existing(const std::vector<std::string>& candidates) {
  for (const auto& c : candidates)
    if (::access(c.c_str(), F_OK) == 0) return c;
  return candidates.front();
}

// The tiers' seccomp filters are for x86_64 (seccomp.hpp): a 32-bit program
// (i386, or x32, which is ELFCLASS32 too) would die of SIGSYS at its first
// system call. Refused here, before anything runs, with the reason. Only a
// path the host can read is looked at (a container's /workspace or rootfs
// is not); a file that is not ELF is the kernel's to judge.
Status refuse_32bit_program(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  unsigned char ident[5] = {0};
  if (!fd || ::read(fd.get(), ident, sizeof ident) != static_cast<ssize_t>(sizeof ident)) return {};
  if (std::memcmp(ident, "\x7f" "ELF", 4) != 0 || ident[4] != 1 /* ELFCLASS32 */) return {};
  return Error(ENOEXEC, "could not start: '" + path +
                            "' is a 32-bit program; the tier's seccomp filter covers x86_64 system calls only and "
                            "would kill it (SIGSYS) at its first one (use --tier none, or a 64-bit build)");
}

// USER and LOGNAME for the clean environment (getpass.getuser(), many
// shells and tools read them before any passwd lookup). The container's is
// the name its generated /etc/passwd gives the run's uid; a run on a uid of
// its own (tier process as root) has no passwd entry on the host, so the
// name says which uid it is; otherwise the program runs as us, under our
// name (our USER, else our passwd entry, looked up once per process).
std::string run_user_name(bool container, const std::optional<WorkspaceOwner>& owner, bool own_uid) {
  if (container) return EtcIdentity{}.user;
  if (owner && own_uid) return "corral-" + std::to_string(owner->uid);
  static const std::string ours = [] {
    if (const char* v = find_env("USER"); v && *v) return std::string(v);
    struct passwd pw, *found = nullptr;
    char buf[4096];
    if (::getpwuid_r(::geteuid(), &pw, buf, sizeof buf, &found) == 0 && found) return std::string(found->pw_name);
    return std::to_string(::geteuid());
  }();
  if (owner) {
    struct passwd pw, *found = nullptr;
    char buf[4096];
    if (::getpwuid_r(owner->uid, &pw, buf, sizeof buf, &found) == 0 && found) return found->pw_name;
    return std::to_string(owner->uid);
  }
  return ours;
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

// The tier's filter: `default` plus the network profile whose socket
// families the run's network policy allows (seccomp.hpp): `no-network`
// when the network is closed, `tcp-only` when it is closed but for an
// allow-list of ports, `inet-only` in a container (IP reaches only the
// namespace's lo; a namespace does not isolate vsock, so the families still
// need the allow-list), `host-network` on the host's network. A container in
// the template's shared namespace, where lo is down, gets `inet-only` too: a
// program's socket(AF_INET) succeeds and the network answers as one with no
// interface up (connect and sendto: ENETUNREACH), so
// a program sees "no network", not a refusal it cannot explain. A port bound
// on 0.0.0.0 there occupies it for the other runs of the template, but no
// packet can pass between them.
//
// `notify`: the socket refusals go to the supervisor (SECCOMP_RET_USER_NOTIF),
// which answers with the same EACCES and counts them for the Result. Where
// this host cannot (no user notification in the kernel or libseccomp), the
// plain filter, cached under the same key, so that is found out once.
Expected<std::shared_ptr<const SeccompProgram>> seccomp_for(const Request& req, MechanismCache* cache,
                                                            bool notify = false) {
  const char* net = "host-network";
  if (req.tier == Tier::container)
    net = "inet-only";
  else if (req.net == NetworkAccess::none)
    net = req.tcp_connect_ports.empty() ? "no-network" : "tcp-only";
  std::string key = std::string("default,") + net + (notify ? "+notify" : "");
  if (cache)
    if (auto it = cache->seccomp.find(key); it != cache->seccomp.end()) return it->second;
  SeccompSpec spec;
  spec.profile("default");
  spec.profile(net);
  spec.notify_socket_refusals(notify);
  auto program = prepare(spec);
  if (!program && notify) return seccomp_for(req, cache, false);
  if (!program) return std::move(program).error();
  auto shared = std::make_shared<const SeccompProgram>(std::move(*program));
  if (cache) cache->seccomp[key] = shared;
  return shared;
}

bool beneath(const std::string& path, std::string_view dir) {
  return path.size() >= dir.size() && path.compare(0, dir.size(), dir) == 0 &&
         (path.size() == dir.size() || path[dir.size()] == '/');
}

// Confined writes in tier process: /dev/shm (POSIX semaphores and shared
// memory: Python's multiprocessing locks, ProcessPoolExecutor,
// compileall -j) is the run's own, a tmpfs of shm_bytes (default 256 MiB,
// the container's) over the host's in a mount namespace of the run's own,
// in the write set: what the run leaves there dies with it, no other run
// and not the host sees it. Needs root (fsopen, mount namespaces); without,
// the host's /dev/shm stays outside the write set (`corral enforcement`
// says so). Not when the run names the host's (a write path, its cwd, its
// workspace or its program under /dev/shm): that covers it with its own.
Status add_private_shm(PreparedRun& run, const HostFacts& host, LandlockSpec& spec) {
  constexpr std::string_view kShm = "/dev/shm";
  if (!host.root || !host.cap_sys_admin || ::access(kShm.data(), F_OK) != 0) return {};
  const Request& req = run.request;
  ChildPlan& plan = *run.plan;
  std::vector<std::string> named = req.write_paths;
  named.push_back(run.workspace->path());
  named.push_back(plan.cwd);
  named.insert(named.end(), plan.exec_paths.begin(), plan.exec_paths.end());
  for (const auto& path : named)
    if (beneath(path, kShm)) return {};
  auto shm = PrivateTmpfs::prepare(std::string(kShm), run.limits.get(Limit::shm_bytes).value_or(kContainerShmBytes));
  if (!shm) return std::move(shm).error();
  plan.private_shm.emplace(std::move(*shm));
  plan.clone_namespaces |= CLONE_NEWNS;
  spec.allow_writes_beneath(plan.private_shm->fd(), "/dev/shm (the run's own tmpfs)");
  return {};
}

Status add_tier_mechanisms(PreparedRun& run, const HostFacts& host, const std::optional<WorkspaceOwner>& owner,
                           MechanismCache* cache) {
  const Request& req = run.request;
  ChildPlan& plan = *run.plan;
  if (req.tier == Tier::none) return {};
  // Namespaces, mount tree, cgroup, seccomp; the host id is the run's own
  // uid when root, ours when rootless.
  if (req.tier == Tier::container) {
    // A session exec's container part was made with its workspace (prepare_session_exec).
    auto st = run.container ? Status{}
              : owner       ? prepare_container(run, host, owner->uid, owner->gid)
                            : prepare_container(run, host, geteuid(), getegid());
    if (!st) return st;
    // `default` (io_uring, namespace creation, mount and the other host-wide
    // calls denied) and `inet-only`, in the template's namespace too.
    auto program = seccomp_for(req, cache);
    if (!program) return std::move(program).error();
    run.plan->seccomp = std::move(*program);
    return {};
  }

  // Not root: there is nothing to drop and the bounding set cannot shrink;
  // no_new_privs (set by the seccomp and Landlock steps) keeps exec from
  // gaining anything through it.
  if (host.root) {
    if (cache && cache->capabilities) {
      plan.capabilities = cache->capabilities;
    } else {
      auto caps = prepare_capability_drop();
      if (!caps) return std::move(caps).error();
      plan.capabilities.emplace(std::move(*caps));
      if (cache) cache->capabilities = plan.capabilities;
    }
  }

  // SysV IPC and POSIX message queues of the run's own: nothing it makes
  // there outlives it or is seen by another run, and it sees none of the
  // host's. The namespace needs CAP_SYS_ADMIN (without it the map says
  // `ipc shared`); the kernel frees it from a workqueue once its last
  // process is gone, off the supervisor's path. Cost measured in README.
  if (host.root && host.cap_sys_admin) plan.clone_namespaces |= CLONE_NEWIPC;

  if (owner) {
    // Our ids, maps and capabilities, read once per supervisor (ten system
    // calls and two /proc reads a run otherwise).
    if (cache && !cache->privilege) cache->privilege = read_privilege_facts();
    auto drop = cache ? prepare_privilege_drop(owner->uid, owner->gid, *cache->privilege)
                      : prepare_privilege_drop(owner->uid, owner->gid);
    if (!drop) return std::move(drop).error();
    plan.privilege.emplace(std::move(*drop));
    plan.reap_uid_first = run.uid_lease && run.uid_lease->first_process_reaps();
  }

  // An egress allow-list (tcp_connect_ports) is seccomp's tcp-only profile
  // plus Landlock connect rules; without ABI 4 Landlock's prepare refuses it.
  const bool allow_tcp = req.net == NetworkAccess::none && !req.tcp_connect_ports.empty();
  // --net none: the refused socket calls are counted (the supervisor answers
  // them), so a program's EACCES can be told to be corral's. Not with the
  // host's network, whose refusals (packet, vsock, ...) no flag lifts: a
  // listener per run would cost every run for them.
  const bool notify = req.net == NetworkAccess::none;
  auto program = seccomp_for(req, cache, notify);
  if (!program) return std::move(program).error();
  if ((*program)->notifies()) {
    auto plain = seccomp_for(req, cache);
    if (!plain) return std::move(plain).error();
    plan.seccomp_fallback = std::move(*plain);
  }
  plan.seccomp = std::move(*program);

  bool confine = req.confine_writes || !req.write_paths.empty();
  bool tcp = req.net == NetworkAccess::none && (host.landlock_abi >= 4 || allow_tcp);
  if (confine || tcp) {
    LandlockSpec spec;
    if (confine) {
      spec.confine_writes(true);
      spec.allow_writes(run.workspace->path());
      spec.allow_writes("/dev/null");
      // Pseudo-terminals are not the host's files to protect: opening
      // /dev/ptmx makes a new pty, and its slave under /dev/pts belongs to
      // the run's uid (another uid's terminal stays closed to it by its
      // 0620 mode). Shells, `script`, expect and REPL drivers need them.
      // /dev/tty is the caller's controlling terminal: a run has none (its
      // own session) unless it made a pty its terminal.
      for (const char* pty : {"/dev/ptmx", "/dev/pts", "/dev/tty"})
        if (::access(pty, F_OK) == 0) spec.allow_writes(pty);
      if (req.cwd) spec.allow_writes(*req.cwd);
      for (const auto& p : req.write_paths) spec.allow_writes(p);
      if (auto st = add_private_shm(run, host, spec); !st) return st;
    } else {
      // A LandlockSpec confines writes by default (to an empty set): a
      // ruleset made only for the TCP rules must leave the filesystem alone.
      spec.confine_writes(false);
    }
    if (tcp) spec.restrict_tcp(true);
    if (allow_tcp)
      for (auto port : req.tcp_connect_ports) spec.tcp_connect_allow(port);
    auto ruleset = prepare(spec);
    if (!ruleset) return std::move(ruleset).error();
    plan.landlock.emplace(std::move(*ruleset));
  }
  return {};
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

// The program a spawn tried: the path execve(2) was given, or every
// candidate of the PATH search ("a, b") when there were several.
static std::string tried_program(const ChildPlan& plan) {
  std::string out;
  for (const auto& p : plan.exec_paths) out += (out.empty() ? "" : ", ") + p;
  if (out.empty() && !plan.argv_storage.empty()) out = plan.argv_storage.front();
  return out;
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
  auto who = [&](const Error& e) { return e.context("run " + (req.id.empty() ? run.run_id : quote_input(req.id))); };

  if (req.argv.empty() && !req.payload) return who(Error::invalid("argv is empty"));
  // Includes check_run_user: a run is never root.
  if (Status st = validate_request(req); !st) return who(st.error());
  const bool container = req.tier == Tier::container;
  if (!container && (req.rootfs || !req.binds.empty() || !req.tmpfs.empty() || !req.dev_binds.empty()))
    return who(Error::invalid("rootfs, binds, tmpfs and dev_binds need tier container (tier " +
                              std::string(to_string(req.tier)) + ")"));
  if (req.payload && req.payload->interpreter.empty())
    return who(Error::invalid("program payload needs an interpreter argv (e.g. [\"python3\"])"));
  // The ports narrow a closed network; with the host's network they would
  // read as an allow-list that allows everything.
  if (!req.tcp_connect_ports.empty() && req.net != NetworkAccess::none)
    return who(Error::invalid("tcp_connect_ports need net none (they open ports in a closed network)"));
  if (req.artifact_root)
    if (auto st = check_artifact_root(*req.artifact_root); !st) return who(st.error());

  Limits defaults = default_limits();
  run.limits = defaults;
  run.limits.merge(req.limits);
  if (auto st = policy.check(host, req, defaults, run.warnings); !st) return who(st.error());

  // Secrets are resolved now and live only in the child's environment and
  // the masker; the Result never carries them.
  std::vector<std::string> secret_values;
  std::vector<std::pair<std::string, std::string>> secret_env;
  for (const auto& ref : req.secrets) {
    std::string value;
    if (!ref.from_file.empty()) {
      auto read = read_secret_file(ref.from_file);
      if (!read) return who(read.error().context("secret " + ref.name));
      value = std::move(*read);
    } else {
      const std::string& var = ref.from_env.empty() ? ref.name : ref.from_env;
      const char* v = find_env(var.c_str());
      if (!v) return who(Error::invalid("secret " + ref.name + ": variable " + var + " is not set"));
      value = v;
    }
    if (value.empty()) return who(Error::invalid("secret " + ref.name + " is empty; an empty value cannot be masked"));
    secret_values.push_back(value);
    secret_env.emplace_back(ref.name, std::move(value));
  }
  run.secrets = std::make_shared<const SecretSet>(std::move(secret_values));

  // One uid per run in flight when we can: RLIMIT_NPROC then binds per run
  // and runs cannot signal or read each other.
  std::optional<WorkspaceOwner> owner;
  // A session exec (session.hpp) runs as the session's uid, in its workspace.
  const bool session = !req.session.empty();
  if (session && !container) return who(Error::invalid("session " + req.session + ": an exec is tier container"));
  if (container && host.root && !session) {
    // The host id the sandbox's uid maps to (request.user is the inside uid).
    if (!ctx.uids) return who(Error::invalid("tier container as root needs a uid pool for the runs' host ids"));
    auto lease = ctx.uids->acquire();
    if (!lease) return who(std::move(lease).error());
    owner = WorkspaceOwner{lease->uid(), lease->gid()};
    run.uid_lease.emplace(std::move(*lease));
  } else if (req.tier == Tier::os_process && host.root) {
    if (req.user) {
      owner = WorkspaceOwner{*req.user, *req.user};
    } else if (ctx.uids) {
      // The program is the uid's first process here: it reaps what a dead
      // holder of the uid left (spawn.cpp), saving a helper process a run.
      auto lease = ctx.uids->acquire(UidPool::Reap::by_first_process);
      if (!lease) return who(std::move(lease).error());
      owner = WorkspaceOwner{lease->uid(), lease->gid()};
      run.uid_lease.emplace(std::move(*lease));
    }
  }

  WorkspaceOptions wopts;
  wopts.base_dir = ctx.workspace_base;
  wopts.base = ctx.base;
  wopts.name_tag = ctx.workspace_tag;
  wopts.owner = owner;
  wopts.make_tmp = !container;
  if (container && container_workspace_on_tmpfs(host)) {
    // The run's own tmpfs (container.hpp, kContainerWorkspaceBytes); the
    // size is in the result's limits whether asked for or not.
    if (!run.limits.has(Limit::workspace_bytes)) run.limits.set(Limit::workspace_bytes, kContainerWorkspaceBytes);
    wopts.tmpfs_bytes = run.limits.get(Limit::workspace_bytes);
  }
  if (session) {
    // The session's /workspace; inputs, outputs and a payload are refused there.
    if (!ctx.session || ctx.session->id != req.session)
      return who(Error::invalid("session " + req.session +
                                ": no live session given to the run (RunContext::session; submit the exec to a "
                                "Supervisor)"));
    if (auto st = prepare_session_exec(run, host, *ctx.session); !st) return who(st.error());
  } else {
    auto ws = Workspace::create(wopts);
    if (!ws) return who(std::move(ws).error());
    run.workspace.emplace(std::move(*ws));
  }
  Workspace* wp = run.workspace ? &*run.workspace : nullptr;

  // A directory input has the caps of outputs (artifact_*).
  Workspace::TreeCaps caps;
  caps.file_bytes = run.limits.get(Limit::artifact_bytes).value_or(UINT64_MAX);
  caps.total_bytes = run.limits.get(Limit::artifact_total_bytes).value_or(UINT64_MAX);
  caps.count = run.limits.get(Limit::artifact_count).value_or(UINT64_MAX);
  std::vector<std::string> skipped;
  for (const auto& in : req.inputs) {
    Workspace& w = *wp;
    Status st = in.bytes ? w.stage_bytes(in.name, *in.bytes, in.mode)
                         : (in.host_path ? w.stage_path(*in.host_path, in.name, in.resolved, caps, skipped)
                                         : Status(Error::invalid("input " + in.name + ": needs bytes or a host path")));
    if (!st) return who(st.error());
  }
  for (const auto& s : skipped) run.warnings.push_back("input " + s + ": skipped (inputs copy files, never links)");

  ChildPlan& plan = *run.plan;
  plan.argv_storage.clear();
  if (req.payload) {
    if (auto st = wp->stage_bytes(req.payload->filename, req.payload->source, 0644); !st) return who(st.error());
    plan.argv_storage = req.payload->interpreter;
    plan.argv_storage.push_back(req.payload->filename);
  }
  plan.argv_storage.insert(plan.argv_storage.end(), req.argv.begin(), req.argv.end());

  // The environment: the passthrough names, then what the request names,
  // HOME/TMPDIR in the workspace, then the secrets. Nothing else of ours.
  std::map<std::string, std::string> env;
  for (const auto& name : req.pass_env)
    if (const char* v = find_env(name.c_str())) env[name] = v;
  // In a container the workspace is at /workspace and /tmp is a private tmpfs.
  env["HOME"] = container ? std::string(kContainerWorkspace) + "/home" : wp->home();
  env["TMPDIR"] = container ? std::string("/tmp") : wp->tmp();
  env["USER"] = env["LOGNAME"] = run_user_name(container, owner, run.uid_lease.has_value());
  // The host's PATH names the host's directories (~/.pyenv/shims, ...):
  // a container gets its own unless the request sets PATH.
  if (container) env["PATH"] = std::string(kContainerPath);
  for (const auto& [k, v] : req.env) env[k] = v;
  for (auto& [k, v] : secret_env) env[k] = v;
  for (const auto& [k, v] : env) {
    if (k.empty() || k.find('=') != std::string::npos)
      return who(Error::invalid("environment variable name '" + k + "' is invalid"));
    plan.env_storage.push_back(k + "=" + v);
  }
  auto path_it = env.find("PATH");
  run.env_path = path_it == env.end() ? "" : path_it->second;
  plan.exec_paths = exec_candidates(plan.argv_storage.front(), run.env_path, /*existing=*/container);
  if (!container && plan.argv_storage.front().find('/') == std::string::npos)
    run.searched_name = plan.argv_storage.front();  // run.program is found if the exec fails
  else
    run.program = tried_program(plan);  // the plan's strings are released after the spawn
  // A session exec runs the session's files, not the host's: not checked here.
  if (!session && req.tier != Tier::none && !req.rootfs && !(container && plan.exec_paths.front().rfind("/workspace/", 0) == 0))
    if (auto st = refuse_32bit_program(first_existing(plan.exec_paths)); !st) return who(st.error());
  // container: the mount tree's chdir
  if (!session) plan.cwd = container ? "" : req.chdir ? *req.chdir : req.cwd ? *req.cwd : wp->path();
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
  auto rl = rlimits_from_limits(rlimit_limits(run.limits, req.tier));
  if (!rl) return who(std::move(rl).error());
  // rlimits_from_limits checked each entry it set against what this
  // process may set (check_rlimits_allowed); the one it adds, RLIMIT_CORE
  // 0, only lowers. Not checked twice: two getrlimit calls per entry a run.
  plan.rlimits.emplace(*rl);

  if (auto st = add_tier_mechanisms(run, host, owner, ctx.cache); !st) return who(st.error());
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
