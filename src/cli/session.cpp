// corral session open|exec|put|get|ls|rm|close|list — warm sandboxes
// (session.hpp), daemonless: `open` leaves a keeper process behind that
// outlives this one; every other verb finds the session from host state.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "cli.hpp"
#include "corral/container.hpp"
#include "corral/door.hpp"
#include "corral/request_fields.hpp"
#include "corral/session.hpp"
#include "options.hpp"
#include "output.hpp"

namespace corral::cli {

int run_main_in_session(int argc, char** argv, const std::string& session);  // run.cpp

namespace {

const char kSessionHelp[] =
    "usage: corral session open --scope S --thread T [--agent A] [options]\n"
    "       corral session exec ID [run options] [--] PROGRAM [ARGS...]\n"
    "       corral session put ID PATH [--from HOSTFILE | --text TEXT] [--mode OCTAL]\n"
    "       corral session get ID PATH\n"
    "       corral session ls ID [GLOB] [--json]\n"
    "       corral session rm ID PATH [-r|--recursive]\n"
    "       corral session close ID | --scope S [--thread T] [--json]\n"
    "       corral session list [--json]\n"
    "\n"
    "A session is a container-tier sandbox whose pid 1 stays alive between execs,\n"
    "with a persistent /workspace. open prints its id (the same key gives the same\n"
    "id while it lives; another spec under a live key is refused). Its keeper\n"
    "process outlives this command; close, the idle timeout or the maximum lifetime\n"
    "end it. exec takes `corral run`'s options and exit codes (--json too); PATHs\n"
    "are relative to /workspace. Root only.\n"
    "\n"
    "open options: -l, --limit NAME=VALUE (memory_bytes, process_count,\n"
    "workspace_bytes are the session's ceilings), --ro-bind/--bind SRC[:DST],\n"
    "--rootfs DIR, --user UID, --idle SECONDS (default 900, 0: none),\n"
    "--max-lifetime SECONDS (default 14400), --max-sessions N (default 64).\n";

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') out += '\\', out += static_cast<char>(c);
    else if (c == '\n') out += "\\n";
    else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else out += static_cast<char>(c);
  }
  return out + "\"";
}

// parse_options, with options allowed between and after the operands
// (`put ID PATH --text T`): -1 and the operands, or an exit code.
int parse_interleaved(int argc, char** argv, const char* verb, const char* shortopts, const option* longopts,
                      const std::function<int(int, const char*)>& on, std::vector<std::string>& operands) {
  int start = 0;
  for (;;) {
    int i = argc;
    int rc = parse_options(argc - start, argv + start, verb, shortopts, longopts, on, i);
    if (rc >= 0) return rc;
    i += start;
    if (i >= argc) return -1;
    if (std::strcmp(argv[i - 1], "--") == 0) {
      for (; i < argc; ++i) operands.push_back(argv[i]);
      return -1;
    }
    operands.push_back(argv[i]);
    start = i;  // the operand stands in for argv[0] of the next round
  }
}

int fail(const Error& e) {
  say("%s", e.message().c_str());
  return exit_code_for_error(e.code());
}

bool parse_seconds(const char* v, double& out) {
  char* end = nullptr;
  double d = std::strtod(v, &end);
  if (end == v || *end != '\0' || !(d >= 0 && d <= 1e9)) return false;
  out = d;
  return true;
}

enum : int { kScope = 256, kThread, kAgent, kIdle, kMaxLifetime, kMaxSessions, kRoBind, kBind, kRootfs, kUser,
             kFrom, kText, kMode };

int open_main(int argc, char** argv) {
  SessionKey key;
  SessionSpec spec;
  static const option opts[] = {
      {"help", no_argument, nullptr, 'h'},     {"scope", required_argument, nullptr, kScope},
      {"thread", required_argument, nullptr, kThread}, {"agent", required_argument, nullptr, kAgent},
      {"limit", required_argument, nullptr, 'l'}, {"idle", required_argument, nullptr, kIdle},
      {"max-lifetime", required_argument, nullptr, kMaxLifetime},
      {"max-sessions", required_argument, nullptr, kMaxSessions},
      {"ro-bind", required_argument, nullptr, kRoBind}, {"bind", required_argument, nullptr, kBind},
      {"rootfs", required_argument, nullptr, kRootfs}, {"user", required_argument, nullptr, kUser},
      {nullptr, 0, nullptr, 0},
  };
  // The request fields take their flags' parsers from the one table
  // (request_fields.hpp), as corral run's do.
  Job job;
  job.request.tier = Tier::container;
  auto flag = [&](std::string_view name, const char* v) {
    Status st = apply_flag(*field_by_flag(name), job, v);
    return st ? -1 : (say("%s", st.error().message().c_str()), 2);
  };
  int i = argc;
  int rc = parse_options(argc, argv, "session open", "hl:", opts, [&](int opt, const char* v) -> int {
    switch (opt) {
      case 'h': write_all_fd(1, kSessionHelp); return 0;
      case kScope: key.scope = v; return -1;
      case kThread: key.thread = v; return -1;
      case kAgent: key.agent = v; return -1;
      case 'l': return flag("limit", v);
      case kIdle: return parse_seconds(v, spec.idle_seconds) ? -1 : (say("--idle: '%s' is not seconds", v), 2);
      case kMaxLifetime:
        return parse_seconds(v, spec.max_lifetime_seconds) ? -1 : (say("--max-lifetime: '%s' is not seconds", v), 2);
      case kMaxSessions: {
        double n = 0;
        if (!parse_seconds(v, n) || n < 1) return say("--max-sessions: '%s' is not a count", v), 2;
        spec.max_sessions = static_cast<std::size_t>(n);
        return -1;
      }
      case kRoBind: return flag("ro-bind", v);
      case kBind: return flag("bind", v);
      case kRootfs: return flag("rootfs", v);
      case kUser: return flag("user", v);
    }
    return 2;
  }, i);
  if (rc >= 0) return rc;
  if (i < argc) return say("session open: unexpected operand '%s'", argv[i]), 2;
  if (key.scope.empty() || key.thread.empty()) return say("session open: --scope and --thread are required"), 2;
  spec.base = std::move(job.request);
  // The operator's own paths; the sandbox is the untrusted tier's.
  spec.base.argv = {"sleep", "infinity"};
  DoorPolicy policy;
  policy.operator_paths = true;
  Ask ask;
  ask.provenance = Provenance::untrusted;
  auto admitted = admit(spec.base, ask, policy);
  if (!admitted) return fail(admitted.error());
  spec.base = std::move(*admitted);
  auto s = acquire_session(key, spec);
  if (!s) return fail(s.error());
  write_all_fd(1, s->id + "\n");
  return 0;
}

int put_main(int argc, char** argv) {
  std::optional<std::string> from, text;
  unsigned mode = 0644;
  static const option opts[] = {{"from", required_argument, nullptr, kFrom},
                                {"text", required_argument, nullptr, kText},
                                {"mode", required_argument, nullptr, kMode},
                                {nullptr, 0, nullptr, 0}};
  std::vector<std::string> ops;
  int rc = parse_interleaved(argc, argv, "session put", "", opts, [&](int opt, const char* v) -> int {
    if (opt == kFrom) from = v;
    else if (opt == kText) text = v;
    else if (opt == kMode) {
      char* end = nullptr;
      unsigned long m = std::strtoul(v, &end, 8);
      if (end == v || *end || m > 0777) return say("--mode: '%s' is not an octal mode", v), 2;
      mode = static_cast<unsigned>(m);
    } else return 2;
    return -1;
  }, ops);
  if (rc >= 0) return rc;
  if (ops.size() != 2) return say("usage: corral session put ID PATH [--from HOSTFILE | --text TEXT]"), 2;
  if (from && text) return say("session put: --from and --text exclude each other"), 2;
  std::string bytes;
  if (text) {
    bytes = *text;
  } else {
    int fd = from ? ::open(from->c_str(), O_RDONLY | O_CLOEXEC) : 0;
    if (fd < 0) return say("session put: open '%s': %s", from->c_str(), std::strerror(errno)), 2;
    char buf[65536];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0) bytes.append(buf, static_cast<std::size_t>(n));
    if (from) ::close(fd);
  }
  if (auto st = session_put(ops[0], ops[1], bytes, mode); !st) return fail(st.error());
  return 0;
}

int ls_main(int argc, char** argv) {
  bool json = false;
  static const option opts[] = {{"json", no_argument, nullptr, 'j'}, {nullptr, 0, nullptr, 0}};
  std::vector<std::string> ops;
  int rc = parse_interleaved(argc, argv, "session ls", "j", opts, [&](int, const char*) { return json = true, -1; }, ops);
  if (rc >= 0) return rc;
  if (ops.empty() || ops.size() > 2) return say("usage: corral session ls ID [GLOB] [--json]"), 2;
  auto ls = session_list(ops[0], ops.size() == 2 ? ops[1] : "");
  if (!ls) return fail(ls.error());
  std::string out;
  for (const auto& e : *ls) {
    if (json)
      out += "{\"path\":" + json_string(e.path) + ",\"type\":\"" + e.type + "\",\"bytes\":" + std::to_string(e.bytes) + "}\n";
    else
      out += std::string(1, e.type) + " " + std::to_string(e.bytes) + " " + e.path + "\n";
  }
  write_all_fd(1, out);
  return 0;
}

// Plain: the count of sessions disposed, one line (0 when a scope had
// none; an ID that could not be closed is an error, exit code by its errno).
// --json: {"closed":N,"ids":[...],"problems":[...]}; problems are also said on
// stderr, and a session that could not be disposed is not counted.
int close_main(int argc, char** argv) {
  std::optional<std::string> scope, thread;
  bool json = false;
  static const option opts[] = {{"scope", required_argument, nullptr, kScope},
                                {"thread", required_argument, nullptr, kThread},
                                {"json", no_argument, nullptr, 'j'},
                                {nullptr, 0, nullptr, 0}};
  std::vector<std::string> ops;
  int rc = parse_interleaved(argc, argv, "session close", "j", opts, [&](int opt, const char* v) {
    if (opt == 'j') json = true;
    else (opt == kScope ? scope : thread) = v;
    return -1;
  }, ops);
  if (rc >= 0) return rc;
  std::vector<std::string> closed, problems;
  if (scope) {
    if (!ops.empty()) return say("session close: an ID or --scope, not both"), 2;
    dispose_scope(*scope, thread ? std::optional<std::string_view>(*thread) : std::nullopt, std::string(kSessionsDir),
                  &problems, &closed);
    for (const auto& p : problems) say("%s", p.c_str());
  } else {
    if (ops.size() != 1 || thread) return say("usage: corral session close ID | --scope S [--thread T] [--json]"), 2;
    if (auto st = dispose_session(ops[0]); !st) return fail(st.error());
    closed.push_back(ops[0]);
  }
  if (!json) {
    write_all_fd(1, std::to_string(closed.size()) + "\n");
    return 0;
  }
  auto array = [](const std::vector<std::string>& v) {
    std::string a = "[";
    for (const auto& x : v) a += (a.size() > 1 ? "," : "") + json_string(x);
    return a + "]";
  };
  write_all_fd(1, "{\"closed\":" + std::to_string(closed.size()) + ",\"ids\":" + array(closed) +
                      ",\"problems\":" + array(problems) + "}\n");
  return 0;
}

int list_main(int argc, char** argv) {
  bool json = argc > 1 && (std::strcmp(argv[1], "--json") == 0 || std::strcmp(argv[1], "-j") == 0);
  if (argc > (json ? 2 : 1)) return say("usage: corral session list [--json]"), 2;
  std::string out;
  for (const auto& s : list_sessions()) {
    if (json)
      out += "{\"id\":\"" + s.id + "\",\"scope\":" + json_string(s.key.scope) + ",\"thread\":" +
             json_string(s.key.thread) + ",\"agent\":" + json_string(s.key.agent) + ",\"alive\":" +
             (s.alive ? "true" : "false") + ",\"keeper\":" + std::to_string(s.keeper) + ",\"uid\":" +
             std::to_string(s.outside_uid) + ",\"created\":" + std::to_string(s.created) + ",\"last_used\":" +
             std::to_string(s.last_used) + "}\n";
    else
      out += s.id + " " + (s.alive ? "live" : "dead") + " scope=" + s.key.scope + " thread=" + s.key.thread +
             (s.key.agent.empty() ? "" : " agent=" + s.key.agent) + "\n";
  }
  write_all_fd(1, out);
  return 0;
}

}  // namespace

int session_main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    write_all_fd(argc < 2 ? 2 : 1, kSessionHelp);
    return argc < 2 ? 2 : 0;
  }
  std::string verb = argv[1];
  --argc, ++argv;  // argv[0] is now the sub-verb
  if (verb == "open") return open_main(argc, argv);
  // Internal: the keeper acquire_session starts (session.hpp), not for people.
  if (verb == "keep" && argc == 2) return session_keeper_main(argv[1]);
  if (verb == "exec") {
    if (argc < 2) return say("usage: corral session exec ID [options] [--] PROGRAM [ARGS...]"), 2;
    std::string id = argv[1];
    argv[1] = argv[0];
    return run_main_in_session(argc - 1, argv + 1, id);
  }
  if (verb == "put") return put_main(argc, argv);
  if (verb == "get") {
    if (argc != 3) return say("usage: corral session get ID PATH"), 2;
    auto got = session_get(argv[1], argv[2]);
    if (!got) return fail(got.error());
    write_all_fd(1, *got);
    return 0;
  }
  if (verb == "ls") return ls_main(argc, argv);
  if (verb == "rm") {
    bool recursive = false;
    static const option opts[] = {{"recursive", no_argument, nullptr, 'r'}, {nullptr, 0, nullptr, 0}};
    std::vector<std::string> ops;
    int rc = parse_interleaved(argc, argv, "session rm", "r", opts, [&](int, const char*) { return recursive = true, -1; }, ops);
    if (rc >= 0) return rc;
    if (ops.size() != 2) return say("usage: corral session rm ID PATH [-r|--recursive]"), 2;
    if (auto st = session_remove(ops[0], ops[1], recursive); !st) return fail(st.error());
    return 0;
  }
  if (verb == "close") return close_main(argc, argv);
  if (verb == "list") return list_main(argc, argv);
  say("session: unknown verb '%s' (open, exec, put, get, ls, rm, close, list)", verb.c_str());
  return 2;
}

}  // namespace corral::cli
