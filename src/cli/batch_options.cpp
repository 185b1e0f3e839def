// corral batch's options and --help (the job loop is batch.cpp).
#include "batch_options.hpp"

#include <getopt.h>

#include <cstdlib>
#include <string>

#include "cli.hpp"
#include "corral/limits.hpp"
#include "corral/request_fields.hpp"
#include "options.hpp"
#include "output.hpp"

namespace corral::cli {
namespace {

const char kBatchHelp[] =
    "usage: corral batch [options] [FILE]\n"
    "\n"
    "Run one job per line of FILE (default: stdin; '-' is stdin). A job is a JSON\n"
    "object (schema/job.schema.json) of the request fields, each parsed as corral\n"
    "run's option of the same field is (\"route\" names a route of --routes FILE;\n"
    "\"provenance\" \"untrusted\" is refused below tier container). Blank lines are\n"
    "skipped. The fields:\n"
    "\n";

// Then the job fields (the field table's: request_fields.hpp), then this.
const char kBatchOptionsHelp[] =
    "\n"
    "  -p, --parallel N         runs in flight at once (default: CPUs x 4, and of\n"
    "                           the jobs with a cpu_seconds limit at most CPUs at\n"
    "                           once, so none waits out its wall_seconds queued\n"
    "                           for a CPU; at most what the fd limit allows). A\n"
    "                           given N applies to every job as it is\n"
    "      --routes FILE        the routes a job may name with \"route\" (it then runs\n"
    "                           under that route's tier, limits, network, env, secrets\n"
    "                           and outputs, and is refused where the route refuses)\n"
    "      --allow-host-path P  jobs may name host paths (inputs' host_path, binds,\n"
    "                           ro_binds, dev_binds, rootfs, artifact_root,\n"
    "                           write_paths, cwd, chdir) that\n"
    "                           resolve under P (repeatable; default: none; a route's\n"
    "                           allow_host_paths add to it)\n"
    "      --allow-user UID     jobs in tier process or none may run as host uid UID\n"
    "                           with \"user\" (repeatable; default: none; in tier\n"
    "                           container \"user\" is a uid inside and always allowed)\n"
    "      --min-tier T         refuse jobs in a tier below T (none|process|container;\n"
    "                           default: none)\n"
    "      --untrusted          every job is untrusted (refused below container)\n"
    "      --audit FILE         append one JSON audit line per job line to FILE, refused\n"
    "                           or not (outcome error, with the reason; never a secret)\n"
    "      --keep-sessions      keep the sessions that jobs with \"session\": {\"scope\",\n"
    "                           \"thread\"[, \"agent\"]} opened (a job with it runs in that\n"
    "                           warm session, its jobs one at a time in order; default:\n"
    "                           disposed at the end of the batch)\n"
    "      --allow-session-scope S\n"
    "                           jobs may name sessions of scope S (repeatable;\n"
    "                           default: none): a session key joins the live\n"
    "                           session of that key, whoever opened it\n"
    "  -j, --json               accepted for symmetry: the output is always JSON lines\n"
    "      --max-line-bytes N   longest job line read (default: 16 MiB, at most 4 GiB);\n"
    "                           a longer line is an error result naming its line\n"
    "                           number and the cap, its bytes skipped unread into\n"
    "                           memory, and the batch goes on\n"
    "      --shard I/N|auto[/N] run only shard I (0-based) of N: the k-th job of FILE\n"
    "                           (blank lines not counted) is in shard k mod N. auto:\n"
    "                           I and N from a Slurm array task (SLURM_ARRAY_TASK_ID,\n"
    "                           SLURM_ARRAY_TASK_COUNT) or I from a Kubernetes Indexed\n"
    "                           Job pod (JOB_COMPLETION_INDEX; N given: auto/N).\n"
    "                           Needs FILE. Each result gets \"shard\" and \"jobs_sha256\"\n"
    "                           (FILE's SHA-256); a last {\"shard_end\": ...} line says\n"
    "                           the shard finished. corral merge joins the shards.\n"
    "\n"
    "Output: one JSON line per job on stdout as it finishes: the Result with its\n"
    "\"id\" and \"line\", or {\"id\", \"line\", \"outcome\": \"error\", \"error\"} for a line\n"
    "corral refused (malformed JSON, unknown field, invalid limit, a host path not\n"
    "allowed, a gate refusal, ...). On stderr: on a terminal a progress bar (done,\n"
    "rate, ETA, in flight, failed); otherwise one summary line at the end:\n"
    "\"corral: batch: N jobs in S s (R jobs/s): exited A, killed_timeout B, ...\".\n"
    "A wall kill of a run that waited a quarter of its wall_seconds or more for a\n"
    "CPU has \"cpu_starved\": true (the host, not the program, used up the time).\n"
    "\n"
    "Exit: 0 when every job's result was written (whatever the jobs' outcomes); 1 when\n"
    "some could not be (each named on stderr by job id and line); 2 usage error; 130/143 on SIGINT/SIGTERM (runs in flight are\n"
    "cancelled and their results written as \"cancelled\"; jobs read but not started, e.g. waiting for\n"
    "their session or a CPU, as errors \"cancelled before it started\"; a second signal gives up the\n"
    "results not written yet).\n";

// --max-line-bytes at most.
constexpr unsigned long long kMaxLineBytesCeiling = 1ull << 32;  // 4 GiB

enum : int {
  kRoutes = 256, kAllowHostPath, kAllowUser, kMinTier, kUntrusted, kAudit, kMaxLineBytes, kShard, kKeepSessions, kAllowSessionScope
};

const option kBatchOptions[] = {
    {"help", no_argument, nullptr, 'h'},
    {"parallel", required_argument, nullptr, 'p'},
    {"json", no_argument, nullptr, 'j'},
    {"routes", required_argument, nullptr, kRoutes},
    {"allow-host-path", required_argument, nullptr, kAllowHostPath},
    {"allow-user", required_argument, nullptr, kAllowUser},
    {"min-tier", required_argument, nullptr, kMinTier},
    {"untrusted", no_argument, nullptr, kUntrusted},
    {"audit", required_argument, nullptr, kAudit},
    {"max-line-bytes", required_argument, nullptr, kMaxLineBytes},
    {"shard", required_argument, nullptr, kShard},
    {"keep-sessions", no_argument, nullptr, kKeepSessions},
    {"allow-session-scope", required_argument, nullptr, kAllowSessionScope},
    {nullptr, 0, nullptr, 0},
};

// Returns -1 to go on, or an exit code.
}  // namespace

int parse_batch_options(int argc, char** argv, BatchOptions& o) {
  int operands = argc;
  int rc = parse_options(argc, argv, "batch", "hp:j", kBatchOptions, [&](int opt, const char* v) -> int {
    switch (opt) {
      case 'h': write_all_fd(1, std::string(kBatchHelp) + field_names(kJobField) + "\n" + kBatchOptionsHelp); return 0;
      case 'j': return -1;
      case 'p': {
        auto n = parse_limit_value("--parallel", v);
        if (!n || *n == 0 || *n > 1000000) return say("--parallel: '%s' is not a number from 1 to 1000000", v), 2;
        o.parallel = static_cast<std::size_t>(*n);
        return -1;
      }
      case kRoutes: o.routes = v; return -1;
      case kAllowHostPath:
        if (v[0] != '/') return say("--allow-host-path: '%s' is not an absolute path", v), 2;
        o.policy.allow_host_paths.push_back(v);
        return -1;
      case kAllowUser: {
        auto uid = parse_run_user(v);
        if (!uid) return say("--allow-user: %s", uid.error().message().c_str()), 2;
        o.policy.allow_users.push_back(*uid);
        return -1;
      }
      case kMinTier: {
        auto t = parse_tier(v);
        if (!t) return say("--min-tier: %s", t.error().message().c_str()), 2;
        o.policy.min_tier = *t;
        return -1;
      }
      case kUntrusted: o.untrusted = true; return -1;
      case kKeepSessions: o.keep_sessions = true; return -1;
      case kAllowSessionScope: o.policy.allow_session_scopes.push_back(v); return -1;
      case kAudit: o.audit = v; return -1;
      case kMaxLineBytes: {
        auto n = parse_limit_value("--max-line-bytes", v);
        if (!n || *n == 0 || *n > kMaxLineBytesCeiling)
          return say("--max-line-bytes: '%s' is not a number from 1 to %llu", v, kMaxLineBytesCeiling), 2;
        o.max_line_bytes = static_cast<std::size_t>(*n);
        return -1;
      }
      case kShard: {
        auto shard = parse_shard(v, [](const char* name) -> const char* { return std::getenv(name); });
        if (!shard) return say("%s", shard.error().message().c_str()), 2;
        o.shard = *shard;
        return -1;
      }
    }
    return 2;
  }, operands);
  if (rc >= 0) return rc;
  for (int i = operands; i < argc; ++i) {
    if (!o.file.empty()) return say("more than one FILE given (%s)", argv[i]), 2;
    o.file = argv[i];
  }
  // Every shard must read the same bytes, and merge checks them again.
  if (o.shard && (o.file.empty() || o.file == "-"))
    return say("batch: --shard needs the job FILE (every shard reads the same file), not stdin"), 2;
  return -1;
}

}  // namespace corral::cli
