// corral run [options] -- PROGRAM [ARGS...]
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "cli.hpp"
#include "corral/container.hpp"
#include "corral/json.hpp"
#include "corral/supervisor.hpp"
#include "output.hpp"

namespace corral::cli {
namespace {

const char kRunHelp[] =
    "usage: corral run [options] -- PROGRAM [ARGS...]\n"
    "\n"
    "Run PROGRAM (looked up in PATH like execvp when it has no slash; never a shell\n"
    "string) in a fresh 0700 workspace that is its cwd, HOME and TMPDIR, with a clean\n"
    "environment, stdin from /dev/null, and the limits below.\n"
    "\n"
    "  --tier none|process|container  isolation tier (default: process)\n"
    "      none: a plain child with the ceilings; process: + uid drop (root), no\n"
    "      capabilities, no_new_privs, seccomp 'default', Landlock when asked;\n"
    "      container: + user/pid/net/mount/ipc/uts/cgroup namespaces, a fresh\n"
    "      read-only root with the workspace at /workspace, no network, a cgroup\n"
    "      for memory_bytes and process_count, a non-root uid inside\n"
    "  --untrusted                    the program is untrusted: refused below container\n"
    "  --limit NAME=VALUE             repeatable; integers, '_' separators allowed:\n"
    "      cpu_seconds (s), memory_bytes, process_count, file_bytes, open_files (default\n"
    "      1024), wall_seconds (s, default 600), stdout_bytes, stderr_bytes (default\n"
    "      16 MiB each), artifact_bytes (64 MiB), artifact_total_bytes (256 MiB),\n"
    "      artifact_count (1000). CORRAL_LIMITS=a=1,b=2 sets defaults --limit overrides\n"
    "  --acknowledge NAME             run even though NAME (a limit or guarantee) is not\n"
    "                                 enforceable here (see corral enforcement)\n"
    "  --confine-writes               Landlock: writes only to the workspace, --cwd and\n"
    "                                 --write-path directories\n"
    "  --write-path P                 add P to the write set (implies --confine-writes)\n"
    "  --net none|host                none: no sockets but AF_UNIX (default: host)\n"
    "  --env K=V                      set a variable (repeatable)\n"
    "  --pass-env K                   pass corral's K through (default: PATH only)\n"
    "  --secret-env K                 pass corral's K and mask its value as *** in output\n"
    "  --input HOSTPATH[:NAME]        copy a host file into the workspace\n"
    "  --output GLOB                  collect matching workspace files after the run\n"
    "  --artifact-root DIR            copy collected files to DIR/<run-id>/\n"
    "  --cwd DIR                      run in DIR instead of the workspace\n"
    "  --user UID                     run as UID (root only; default: a uid per run\n"
    "                                 from 200000-265535 when root); tier container:\n"
    "                                 the uid inside (default 65534, never 0)\n"
    "  --rootfs DIR                   tier container: DIR's entries (read-only) instead\n"
    "                                 of the host's /usr, /bin, /lib* and a minimal /etc\n"
    "  --ro-bind SRC[:DST]            tier container: bind host SRC read-only at DST\n"
    "  --bind SRC[:DST]               tier container: bind host SRC read-write at DST\n"
    "  --grace SECONDS                SIGTERM to SIGKILL after the deadline (default 2)\n"
    "  --stdin-text TEXT              the program's stdin (default /dev/null)\n"
    "  --merge-output                 stderr goes to the stdout pipe (fd level)\n"
    "  --json                         print the Result as one JSON object on stdout\n"
    "\n"
    "Exit: the program's own; 128+signal (a resource kill too: 137, 152, 153); 124\n"
    "timeout; 125 corral could not run it; 2 usage error or a refused limit.\n";

struct Options {
  Request request;
  bool json = false;
  bool untrusted = false;
  bool net_host_given = false;
};

bool split_kv(const std::string& text, std::string& k, std::string& v) {
  auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0) return false;
  k = text.substr(0, eq);
  v = text.substr(eq + 1);
  return true;
}

// Returns -1 to go on, or an exit code.
int parse(int argc, char** argv, Options& o) {
  Limits from_env;
  if (const char* env = std::getenv("CORRAL_LIMITS")) {
    auto parsed = parse_limit_list(env);
    if (!parsed) {
      say("CORRAL_LIMITS: %s", parsed.error().message().c_str());
      return 2;
    }
    from_env = *parsed;
  }
  Limits from_flags;
  int i = 1;
  auto value = [&](const char* flag) -> const char* {
    if (i + 1 >= argc) {
      say("%s needs a value (see corral run --help)", flag);
      return nullptr;
    }
    return argv[++i];
  };
  for (; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a == "--help" || a == "-h") {
      write_all_fd(1, kRunHelp);
      return 0;
    }
    if (a.rfind("--", 0) != 0) break;  // PROGRAM without "--"
    const char* v = nullptr;
    if (a == "--json") o.json = true;
    else if (a == "--untrusted") o.untrusted = true;
    else if (a == "--confine-writes") o.request.confine_writes = true;
    else if (a == "--merge-output") o.request.merge_output = true;
    else if (!(v = value(a.c_str()))) return 2;
    else if (a == "--tier") {
      auto t = parse_tier(v);
      if (!t) return say("--tier: %s", t.error().message().c_str()), 2;
      o.request.tier = *t;
    } else if (a == "--limit") {
      auto l = parse_limit_assignment(v);
      if (!l) return say("--limit: %s", l.error().message().c_str()), 2;
      from_flags.set(l->first, l->second);
    } else if (a == "--acknowledge") o.request.acknowledged.insert(v);
    else if (a == "--write-path") o.request.write_paths.push_back(v);
    else if (a == "--net") {
      if (std::strcmp(v, "none") == 0) o.request.net = NetworkAccess::none;
      else if (std::strcmp(v, "host") == 0) {
        o.request.net = NetworkAccess::host;
        o.net_host_given = true;
      }
      else return say("--net: '%s' is neither none nor host", v), 2;
    } else if (a == "--env") {
      std::string k, val;
      if (!split_kv(v, k, val)) return say("--env: expected K=V, got '%s'", v), 2;
      o.request.env[k] = val;
    } else if (a == "--pass-env") o.request.pass_env.push_back(v);
    else if (a == "--secret-env") o.request.secrets.push_back(SecretRef{v, v, {}});
    else if (a == "--input") {
      std::string spec = v;
      auto colon = spec.rfind(':');
      Input in;
      in.host_path = colon == std::string::npos ? spec : spec.substr(0, colon);
      std::string name = colon == std::string::npos ? spec : spec.substr(colon + 1);
      auto slash = name.rfind('/');
      in.name = (colon == std::string::npos && slash != std::string::npos) ? name.substr(slash + 1) : name;
      o.request.inputs.push_back(std::move(in));
    } else if (a == "--rootfs") o.request.rootfs = v;
    else if (a == "--ro-bind" || a == "--bind") {
      auto b = parse_bind_spec(v, a == "--bind");
      if (!b) return say("%s: %s", a.c_str(), b.error().message().c_str()), 2;
      o.request.binds.push_back(std::move(*b));
    } else if (a == "--output") o.request.outputs.push_back(v);
    else if (a == "--artifact-root") o.request.artifact_root = v;
    else if (a == "--cwd") o.request.cwd = v;
    else if (a == "--stdin-text") o.request.stdin_text = v;
    else if (a == "--user") {
      auto uid = parse_limit_value("--user", v);
      if (!uid || *uid >= 4294967295ull) return say("--user: '%s' is not a uid", v), 2;
      o.request.user = static_cast<uid_t>(*uid);
    } else if (a == "--grace") {
      char* end = nullptr;
      double g = std::strtod(v, &end);
      if (end == v || *end != '\0' || !(g >= 0 && g <= 3600)) return say("--grace: '%s' is not 0..3600 seconds", v), 2;
      o.request.grace_seconds = g;
    } else {
      say("unknown option %s (see corral run --help)", a.c_str());
      return 2;
    }
  }
  if (i >= argc) {
    say("no PROGRAM given (usage: corral run [options] -- PROGRAM [ARGS...])");
    return 2;
  }
  for (; i < argc; ++i) o.request.argv.push_back(argv[i]);
  o.request.limits = from_env;
  o.request.limits.merge(from_flags);
  return -1;
}

void report_end(const Result& r) {
  if (std::getenv("CORRAL_QUIET") == nullptr || std::strcmp(std::getenv("CORRAL_QUIET"), "1") != 0)
    for (const auto& w : r.warnings) say("not enforced: %s", w.c_str());
  for (const auto& note : r.artifact_notes) say("output %s", note.c_str());
  if (r.outcome != Outcome::exited) say("%s", r.detail.c_str());
}

}  // namespace

int run_main(int argc, char** argv) {
  Options o;
  if (int rc = parse(argc, argv, o); rc >= 0) return rc;
  if (o.untrusted && o.request.tier != Tier::container) {
    say("--untrusted needs tier container or above; tier %s is below it (use --tier container)",
        std::string(to_string(o.request.tier)).c_str());
    return 2;
  }
  if (o.net_host_given && o.request.tier == Tier::container) {
    say("--net host: tier container always runs in an empty network namespace (use --tier process --net host)");
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  SupervisorOptions sopts;
  auto sup = Supervisor::create(sopts);
  if (!sup) {
    say("%s", sup.error().message().c_str());
    return 125;
  }
  Supervisor& s = **sup;
  int got_signal = 0;
  (void)s.watch_signals({SIGINT, SIGTERM, SIGHUP}, [&](int sig) {
    got_signal = sig;
    s.cancel_all();
  });

  auto stream = s.stream(std::move(o.request));
  if (!stream) {
    say("%s", stream.error().message().c_str());
    return exit_code_for_error(stream.error().code());
  }
  for (;;) {
    auto ev = stream->next();
    if (!ev) {
      say("%s", ev.error().message().c_str());
      return 125;
    }
    if (!ev->has_value()) {
      say("the run ended without a result");
      return 125;
    }
    RunEvent& e = **ev;
    if (e.kind == RunEvent::output) {
      if (!o.json) write_all_fd(e.stream == StreamId::stdout_stream ? 1 : 2, e.data);
      continue;
    }
    const Result& r = *e.final;
    if (o.json) write_all_fd(1, result_to_json(r) + "\n");
    report_end(r);
    if (got_signal) return 128 + got_signal;
    return cli_exit_code(r);
  }
}

}  // namespace corral::cli
