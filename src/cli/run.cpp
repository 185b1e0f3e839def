// corral run [options] [--] PROGRAM [ARGS...]
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "cli.hpp"
#include "corral/audit.hpp"
#include "corral/container.hpp"
#include "corral/door.hpp"
#include "corral/json.hpp"
#include "corral/request_fields.hpp"
#include "corral/route_run.hpp"
#include "corral/routes_file.hpp"
#include "corral/run_setup.hpp"
#include "corral/session.hpp"
#include "corral/supervisor.hpp"
#include "options.hpp"
#include "output.hpp"
#include "stdin_pump.hpp"

namespace corral::cli {

int run_main_in_session(int argc, char** argv, const std::string& session);

namespace {

// The usage, then the options: the request fields' (request_fields.hpp:
// their help text is the table's) and corral run's own (kRunOwnOptions),
// then the limit table (built from all_limits() and default_limits() so
// units and defaults cannot drift), then kRunHelpTail. man/corral.1 mirrors
// this text: change both.
const char kRunHelp[] =
    "usage: corral run [options] [--] PROGRAM [ARGS...]\n"
    "\n"
    "Run PROGRAM (looked up in PATH like execvp when it has no slash; never a shell\n"
    "string) in a fresh 0700 workspace that is its cwd, HOME and TMPDIR, with a clean\n"
    "environment, the limits below, and stdin from /dev/null: corral's own stdin\n"
    "is NOT passed on unless --stdin - says so. Flags are off unless\n"
    "given; options marked (repeatable) may be given more than once. Options take\n"
    "--opt=value or --opt value; the first operand is PROGRAM ('--' before it is\n"
    "optional, and needed when PROGRAM starts with '-').\n"
    "\n";

// corral run's options that are not request fields: how the CLI feeds,
// prints and records the run.
enum : int { kRoutes = 256, kAudit, kStdin, kStdinMax, kFieldBase = 512 };

struct OwnOption {
  option opt;
  const char* shown;  // the option with its value, as --help shows it
  const char* help;
};

const OwnOption kRunOwnOptions[] = {
    {{"stdin", required_argument, nullptr, kStdin}, "--stdin FILE|-",
     "stream FILE, or corral's own stdin (-), to the\nprogram's stdin through a pipe, bytes as they\n"
     "are (default: /dev/null)"},
    {{"stdin-max-bytes", required_argument, nullptr, kStdinMax}, "--stdin-max-bytes N",
     "--stdin passes at most N bytes (units as for\nbytes limits: 64MiB, 1G; default: 1 GiB), then\n"
     "the program's stdin ends and corral says so"},
    {{"json", no_argument, nullptr, 'j'}, "-j, --json", "print the Result as one JSON object on stdout"},
    {{"routes", required_argument, nullptr, kRoutes}, "--routes FILE", "the routes file --route NAME names"},
    {{"audit", required_argument, nullptr, kAudit}, "--audit FILE", "append one JSON line about the run to FILE\n(or about its refusal: outcome error)"},
};

// "  -t, --tier VALUE" padded to the help column, then the help's lines.
void help_row(std::string& out, std::string shown, std::string_view help) {
  constexpr std::size_t kColumn = 33;
  shown = "  " + shown;
  out += shown.size() + 2 <= kColumn ? shown + std::string(kColumn - shown.size(), ' ') : shown + "  ";
  for (std::size_t start = 0; start <= help.size();) {
    auto end = help.find('\n', start);
    if (end == std::string_view::npos) end = help.size();
    if (start > 0) out += std::string(kColumn, ' ');
    out += std::string(help.substr(start, end - start)) + "\n";
    start = end + 1;
  }
}

const char kRunHelpTail[] =
    "\n"
    "Environment: CORRAL_LIMITS=a=1,b=2 sets limits that --limit overrides;\n"
    "CORRAL_QUIET=1 silences the 'not enforced' lines; CORRAL_WORKSPACE_BASE holds the\n"
    "workspaces (else $TMPDIR, else a tmpfs: root's own at /run/corral/workspaces,\n"
    "$XDG_RUNTIME_DIR or /dev/shm; else /tmp). `corral enforcement` names it.\n"
    "\n"
    "Exit: the program's own; 128+signal (a resource kill too: 137, 152, 153); 124\n"
    "timeout; 125 corral could not run it, or (--json) could not write its Result;\n"
    "130 cancelled; 2 usage error or a refused limit.\n";

// "16 MiB" for whole MiB/GiB byte counts, else the number.
std::string human_value(std::uint64_t v, std::string_view unit) {
  if (unit == "bytes" && v != 0) {
    if (v % (1ull << 30) == 0) return std::to_string(v >> 30) + " GiB";
    if (v % (1ull << 20) == 0) return std::to_string(v >> 20) + " MiB";
  }
  return std::to_string(v);
}

std::string run_help() {
  std::string text = kRunHelp;
  for (const RequestField& f : request_fields()) {
    if (!f.accepts(kFlag) || f.flag.empty()) continue;
    std::string shown = (f.short_flag ? std::string("-") + f.short_flag + ", " : "") + "--" + std::string(f.flag);
    if (f.flag_takes_value()) shown += " " + std::string(f.value_name);
    help_row(text, shown, f.help);
  }
  for (const OwnOption& o : kRunOwnOptions) help_row(text, o.shown, o.help);
  text +=
      "\nLimit values, the same in --limit, CORRAL_LIMITS, a batch job's \"limits\" and a\n"
      "routes file: seconds take a decimal, millisecond precision, optionally 's' or\n"
      "'ms' (1.5, 0.25, 250ms); bytes take K M G T (powers of 1000; KB, MB, ...) or\n"
      "Ki Mi Gi Ti (KiB, MiB, ...: powers of 1024): 512M = 512000000, 512MiB = 536870912;\n"
      "counts are integers; '_' may separate digits; no negatives.\n"
      "\nlimits (--limit NAME=VALUE):\n";
  const Limits defaults = default_limits();
  for (const LimitInfo& info : all_limits()) {
    auto d = defaults.get(info.limit);
    char line[160];
    std::string shown = d ? human_value(*d, info.unit) : "none";
    if (info.limit == Limit::workspace_bytes)
      shown = human_value(kContainerWorkspaceBytes, info.unit) +
              " (tiers container and process as root; process in a base you chose: when set or confined)";
    if (info.limit == Limit::tmp_bytes) shown = "1 GiB, at most memory_bytes (tier container)";
    if (info.limit == Limit::shm_bytes) shown = human_value(kContainerShmBytes, info.unit) + " (tier container)";
    std::snprintf(line, sizeof line, "  %-22s %-8s default: %s\n", std::string(info.name).c_str(),
                  std::string(info.unit).c_str(), shown.c_str());
    text += line;
  }
  return text + kRunHelpTail;
}

struct Options {
  Request request;
  bool json = false;
  std::string stdin_file;                  // --stdin FILE or "-"
  std::uint64_t stdin_max = 1ull << 30;    // --stdin-max-bytes
  std::string routes_file, audit_path;
  Ask ask;  // --untrusted, --route NAME, and the route-owned flags given
};

// getopt_long's table: corral run's own options, then a flag per request
// field (val kFieldBase + its index, or its short letter).
const std::vector<option>& run_options(std::string& shortopts) {
  static std::vector<option> table;
  static std::string shorts = "hj";
  if (table.empty()) {
    table.push_back({"help", no_argument, nullptr, 'h'});
    for (const OwnOption& o : kRunOwnOptions) table.push_back(o.opt);
    auto fields = request_fields();
    for (std::size_t i = 0; i < fields.size(); ++i) {
      const RequestField& f = fields[i];
      if (!f.accepts(kFlag) || f.flag.empty()) continue;
      int has_arg = f.flag_takes_value() ? required_argument : no_argument;
      // The table's flags are string literals: NUL-terminated.
      table.push_back({f.flag.data(), has_arg, nullptr, f.short_flag ? f.short_flag : kFieldBase + static_cast<int>(i)});
      // The old spelling (request_fields.hpp: alias), the same option.
      if (f.alias_at & kFlag)
        table.push_back({f.alias.data(), has_arg, nullptr, f.short_flag ? f.short_flag : kFieldBase + static_cast<int>(i)});
      if (f.short_flag) shorts += std::string(1, f.short_flag) + (has_arg == required_argument ? ":" : "");
    }
    table.push_back({nullptr, 0, nullptr, 0});
  }
  shortopts = shorts;
  return table;
}

const RequestField* field_for_option(int opt) {
  auto fields = request_fields();
  if (opt >= kFieldBase && static_cast<std::size_t>(opt - kFieldBase) < fields.size()) return &fields[opt - kFieldBase];
  for (const RequestField& f : fields)
    if (f.short_flag && f.short_flag == opt && f.accepts(kFlag)) return &f;
  return nullptr;
}

// One option; -1 to go on, or an exit code.
int option_value(Options& o, Job& job, int opt, const char* v) {
  switch (opt) {
    case 'h': write_all_fd(1, run_help()); return 0;
    case 'j': o.json = true; return -1;
    case kRoutes: o.routes_file = v; return -1;
    case kAudit: o.audit_path = v; return -1;
    case kStdin:
      if (v[0] == '\0') return say("--stdin: give a FILE or - (corral's own stdin)"), 2;
      o.stdin_file = v;
      return -1;
    case kStdinMax: {
      LimitInfo bytes = limit_info(Limit::stdout_bytes);  // the bytes units
      bytes.name = "--stdin-max-bytes";
      auto n = parse_limit_quantity(bytes, v);
      if (!n) return say("%s", n.error().message().c_str()), 2;
      o.stdin_max = *n;
      return -1;
    }
  }
  const RequestField* field = field_for_option(opt);
  if (!field) return 2;
  if (Status st = apply_flag(*field, job, v); !st) return say("%s", st.error().message().c_str()), 2;
  return -1;
}

// Returns -1 to go on, or an exit code.
int parse(int argc, char** argv, Options& o) {
  Job job;
  if (const char* env = std::getenv("CORRAL_LIMITS")) {
    auto parsed = parse_limit_list(env);
    if (!parsed) {
      say("CORRAL_LIMITS: %s", parsed.error().message().c_str());
      return 2;
    }
    job.request.limits = *parsed;  // --limit sets over them
  }
  int i = argc;
  std::string shortopts;
  const auto& options = run_options(shortopts);
  int rc = parse_options(argc, argv, "run", shortopts.c_str(), options.data(),
                         [&](int opt, const char* v) { return option_value(o, job, opt, v); }, i);
  if (rc >= 0) return rc;
  if (i >= argc) {
    say("no PROGRAM given (usage: corral run [options] [--] PROGRAM [ARGS...])");
    return 2;
  }
  const RequestField& program = *field_named("argv");
  for (; i < argc; ++i)
    if (Status st = program.apply(job, FieldValue::of_text(argv[i]), ""); !st)
      return say("PROGRAM [ARGS...]: %s", st.error().message().c_str()), 2;
  if (!o.stdin_file.empty() && job.request.stdin_text)
    return say("--stdin and --stdin-text both name the program's stdin: give one"), 2;
  if (Status st = finish_job(job); !st) return say("%s", st.error().message().c_str()), 2;
  o.request = std::move(job.request);
  o.ask = std::move(job.ask);
  return -1;
}

// What was passed on of one stream (what the Result kept: the library's
// output callback stops at the cap too) and what was cut.
struct PassThrough {
  std::uint64_t cap = UINT64_MAX;
  std::uint64_t passed = 0, cut = 0;
  static PassThrough of(const CapturedStream& c, std::optional<std::uint64_t> cap) {
    PassThrough p{cap.value_or(UINT64_MAX), c.text.size(), 0};
    if (c.truncated) p.cut = c.bytes > c.text.size() ? c.bytes - c.text.size() : 1;
    return p;
  }
};

void report_cut(const char* stream, const PassThrough& p, const char* limit) {
  if (p.cut == 0) return;
  say("%s cut at %llu bytes (%s=%llu): %llu more bytes not shown", stream, static_cast<unsigned long long>(p.passed),
      limit, static_cast<unsigned long long>(p.cap), static_cast<unsigned long long>(p.cut));
}

// Pass-through output a write error lost; a reader that went away (EPIPE,
// `| head`) is the reader's choice and not worth a line.
void report_lost(const char* what, const RingWriter& w) {
  if (w.error() == 0 || w.error() == EPIPE) return;
  say("writing %s: %s; %llu bytes lost", what, std::strerror(w.error()), static_cast<unsigned long long>(w.lost()));
}

// `printf 'a\nb\n' | corral run -- wc -l` printed 0 with no word why: a
// pipe or file on corral's stdin with bytes waiting, and no --stdin, gets
// one line saying they are not passed on. (A terminal or /dev/null: no
// line; nothing is read either way.) Asked once the run has ended, not
// before it starts: a writer upstream of the pipe starts with corral, and
// a corral that reached this first saw an empty pipe and said nothing.
void hint_unpassed_stdin() {
  struct stat st {};
  if (fstat(0, &st) != 0 || !(S_ISFIFO(st.st_mode) || (S_ISREG(st.st_mode) && st.st_size > 0))) return;
  pollfd p{0, POLLIN, 0};
  if (S_ISFIFO(st.st_mode) && (poll(&p, 1, 0) != 1 || !(p.revents & POLLIN))) return;
  say("note: corral's stdin is not passed to the program (its stdin is /dev/null); use --stdin - to pass it");
}

void report_end(const Result& r) {
  if (std::getenv("CORRAL_QUIET") == nullptr || std::strcmp(std::getenv("CORRAL_QUIET"), "1") != 0)
    for (const auto& w : r.warnings) say("not enforced: %s", w.c_str());
  // Each note names its own subject ("outputs: ...", "outputs refused (...)").
  for (const auto& note : r.artifact_notes) say("%s", note.c_str());
  if (r.outcome != Outcome::exited) say("%s", r.detail.c_str());
}

// A program's "Permission denied" from socket() does not say who refused
// it: the count the supervisor kept does (tier process, --net none), with
// what would allow the socket. Plain mode; --json carries refused_syscalls.
void report_refusals(const Result& r) {
  auto net = r.enforcement.find("network");
  const std::string network = net == r.enforcement.end() ? "" : net->second;
  for (const auto& [name, count] : r.refused_syscalls) {
    const char* why = network == "tcp_allowlist"
                          ? "--net none with TCP ports allowed: AF_UNIX and TCP sockets only"
                          : "--net none: AF_UNIX sockets only";
    say("%llu %s() call%s refused (%s; the default --net host allows them, --tier container --loopback gives a "
        "network of the run's own)",
        static_cast<unsigned long long>(count), name.c_str(), count == 1 ? "" : "s", why);
  }
}

// One run per process: a block malloc maps of its own (anything over 128
// KiB: the supervisor's 256 KiB read scratch) costs an mmap, a munmap and
// its TLB flush, which a VM makes dear; from the heap it costs none of
// them. The heap grows 1 MiB a step (fewer brk calls; pages never touched
// cost nothing) and is not trimmed: the process ends soon.
void malloc_for_one_run() {
  mallopt(M_MMAP_THRESHOLD, 8 << 20);
  mallopt(M_TOP_PAD, 1 << 20);
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
}

}  // namespace

int run_main(int argc, char** argv) { return run_main_in_session(argc, argv, ""); }

// `corral session exec ID ...` (session.cpp): the same run, in a live session.
int run_main_in_session(int argc, char** argv, const std::string& session) {
  malloc_for_one_run();
  Options o;
  if (int rc = parse(argc, argv, o); rc >= 0) return rc;
  if (!session.empty()) o.request = session_exec_request(session, std::move(o.request));
  // From here every way out without a Result is a refusal: said, and
  // recorded in the audit (what was asked, why), its secrets masked in both.
  std::shared_ptr<AuditSink> audit;
  if (!o.audit_path.empty()) {
    auto opened = FileAuditSink::open(o.audit_path);
    if (!opened) return say("%s", opened.error().message().c_str()), exit_code_for_error(opened.error().code());
    audit = std::make_shared<FileAuditSink>(std::move(*opened));
  }
  std::vector<std::string> secrets;
  std::optional<AuditRecord> asked;
  auto refuse = [&](const std::string& why, int code) {
    const std::string reason = scrub_secrets(why, secrets);
    say("%s", reason.c_str());
    if (audit) {
      AuditRecord record = asked ? std::move(*asked) : audit_refusal("", &o.request, &o.ask);
      asked.reset();
      record.error = reason;
      if (Status st = audit->record(std::move(record), secrets); !st) say("%s", st.error().message().c_str());
    }
    return code;
  };
  // The operator's own paths; the gate (provenance, route, network) is the door's.
  DoorPolicy policy;
  policy.operator_paths = true;
  secrets = secret_values(secrets_named(o.request, o.ask, policy));
  if (o.routes_file.empty() != o.ask.route.empty()) return refuse("--routes FILE and --route NAME go together", 2);
  if (!o.routes_file.empty()) {
    auto router = load_router(o.routes_file, probe_host());
    if (!router) return refuse(router.error().message(), 2);
    policy.routes = std::move(*router);
    policy.routes_file = o.routes_file;
    secrets = secret_values(secrets_named(o.request, o.ask, policy));  // and the route's
  }
  if (audit) asked = audit_refusal("", &o.request, &o.ask);  // admit takes the request
  auto admitted = admit(std::move(o.request), o.ask, policy);
  if (!admitted) return refuse(admitted.error().message(), exit_code_for_error(admitted.error().code()));
  o.request = std::move(*admitted);
  if (audit) asked = audit_refusal("", &o.request, &o.ask);  // as admitted: its route's limits, tier
  signal(SIGPIPE, SIG_IGN);
  // --stdin FILE: opened before anything runs, so a missing file is a
  // usage error naming it.
  UniqueFd stdin_file;
  int stdin_source = -1;
  if (o.stdin_file == "-") {
    stdin_source = 0;
  } else if (!o.stdin_file.empty()) {
    stdin_file.reset(::open(o.stdin_file.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
    if (!stdin_file) return refuse("--stdin: open " + o.stdin_file + ": " + std::strerror(errno), 2);
    stdin_source = stdin_file.get();
  }
  const bool stdin_unpassed = stdin_source < 0 && !o.request.stdin_text;
  // Destroyed after the supervisor (declared first): a write of the pump's
  // that the ring still holds reads the pump's buffer until the ring is gone.
  std::unique_ptr<StdinPump> pump;
  SupervisorOptions sopts;
  if (const char* base = std::getenv("CORRAL_WORKSPACE_BASE")) sopts.workspace_base = base;
  // One run needs a handful of ring entries; the default 4096 (sized for a
  // batch) costs ~0.1 ms of ring mapping in a one-run process.
  sopts.ring_entries = 32;
  // An exec into a live session takes no uid and no workspace: none of the
  // supervisor's host-wide set-up (session.hpp).
  sopts.session_execs_only = !session.empty();
  sopts.audit = audit;
  sopts.owns_every_child = true;  // one run per process: whatever else is our child is a leftover of it
  auto sup = Supervisor::create(sopts);
  if (!sup) return refuse(sup.error().message(), 125);
  Supervisor& s = **sup;
  if (stdin_source >= 0) {
    auto made = StdinPump::create(s, stdin_source, o.stdin_max);
    if (!made) return refuse(made.error().message(), 125);
    pump = std::move(*made);
    o.request.stdin_fd = pump->program_end();
  }
  int got_signal = 0;
  (void)s.watch_signals({SIGINT, SIGTERM, SIGHUP}, [&](int sig) {
    got_signal = sig;
    s.cancel_all();
  });

  // Output is passed on (plain mode) or the Result printed (--json) through
  // ring writes: nothing corral writes blocks the loop, so the deadline and
  // a cancel keep their timing whatever the reader does. While a queue is
  // over its high water the run's pipes are not read: the program waits in
  // its own write(2), as it would writing to the reader directly, and no
  // byte is dropped.
  constexpr std::size_t kQueueBytes = 1u << 20;
  RingWriter out(s, 1, kQueueBytes), err(s, 2, kQueueBytes);
  Limits limits = default_limits();
  limits.merge(o.request.limits);
  RunHandle handle;
  std::optional<Result> result;
  RunCallbacks cb;
  if (!o.json)
    cb.on_output = [&](StreamId id, std::string_view data) {
      bool is_out = id == StreamId::stdout_stream;
      (is_out ? out : err).write(data);  // within the cap: the library passes on what it keeps
      if (out.over() || err.over()) handle.pause_output(true);
    };
  out.on_drained = err.on_drained = [&] {
    if (!out.over() && !err.over()) handle.pause_output(false);
  };
  cb.on_result = [&](const Result& r) { result = r; };
  auto submitted = s.submit(std::move(o.request), std::move(cb));
  audit.reset();  // from here the supervisor audits: the run, or (already) its refusal
  if (!submitted) return refuse(submitted.error().message(), exit_code_for_error(submitted.error().code()));
  asked.reset();
  handle = std::move(*submitted);
  if (pump)
    if (auto st = pump->start(); !st) say("%s", st.error().message().c_str());
  while (!result) {
    auto more = s.run_once(-1);
    if (!more) {
      say("%s", more.error().message().c_str());
      return 125;
    }
    if (!*more && !result) {
      say("the run ended without a result");
      return 125;
    }
  }
  const Result& r = *result;
  if (pump) {
    pump->stop();
    if (pump->cut())
      say("stdin cut at %llu bytes (--stdin-max-bytes): the program's stdin ended there",
          static_cast<unsigned long long>(pump->passed()));
    if (pump->error()) say("--stdin: reading %s: %s", o.stdin_file.c_str(), std::strerror(pump->error()));
  }
  if (o.json) write_result_json(out, r, &got_signal);
  bool out_ok = out.flush(&got_signal);
  err.flush(&got_signal);
  // Both modes passed on what the Result kept; what was cut is said the same way.
  report_cut("stdout", PassThrough::of(r.stdout_capture, limits.get(Limit::stdout_bytes)), "stdout_bytes");
  report_cut("stderr", PassThrough::of(r.stderr_capture, limits.get(Limit::stderr_bytes)), "stderr_bytes");
  if (!o.json) {
    report_lost("the program's stdout", out);
    report_lost("the program's stderr", err);
  }
  if (stdin_unpassed) hint_unpassed_stdin();
  report_end(r);
  if (!o.json) report_refusals(r);
  int code = got_signal ? 128 + got_signal : cli_exit_code(r);
  if (o.json && !out_ok && !got_signal) {
    // The one thing --json promises is the Result on stdout: not written,
    // the run's exit status would say nothing about it.
    say("the Result of run %s was not written to stdout: %s (exit 125)", r.run_id.c_str(),
        out.error() ? std::strerror(out.error()) : "interrupted");
    code = 125;
  }
  // One run per process: the cleanup the host sees, explicitly, then exit
  // without tearing down memory the exit frees anyway (end_process).
  s.close();
  end_process(code);
}

}  // namespace corral::cli
