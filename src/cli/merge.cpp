// corral merge --jobs FILE [-o OUT] [--summary FILE] RESULTS...
//
// Joins the result files of `corral batch --shard I/N` runs; the checks
// and the join are the library's (corral/shard.hpp).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "corral/fd.hpp"
#include "corral/shard.hpp"
#include "options.hpp"
#include "output.hpp"

namespace corral::cli {
namespace {

const char kMergeHelp[] =
    "usage: corral merge --jobs FILE [-o OUT] [--summary SUMMARY] RESULTS...\n"
    "\n"
    "Join the results of the shards I/N of a corral batch of the job FILE (see\n"
    "corral batch --help) into the results one corral batch of FILE writes: one\n"
    "line per job, in FILE's order, without the shard fields. Refused (exit 1, each problem named, nothing written)\n"
    "unless every shard 0/N .. N-1/N is there and finished (its {\"shard_end\"} line),\n"
    "all ran on FILE (its SHA-256), and every job line of FILE has exactly one\n"
    "result with the job's id. A RESULTS file may hold several shards, a shard may\n"
    "be in several files: where a shard ran more than once, the run that finished\n"
    "last is taken (a rerun replaces the old one; an unfinished run never counts).\n"
    "\n"
    "  -J, --jobs FILE          the job file the shards ran (required)\n"
    "  -o, --output OUT         write the results to OUT (through OUT.tmp, renamed\n"
    "                           when complete; default: stdout)\n"
    "      --summary SUMMARY    write {\"jobs\", \"shards\", \"jobs_sha256\", \"outcomes\":\n"
    "                           {OUTCOME: count}} to SUMMARY\n"
    "\n"
    "stderr: one line with the counts per outcome, and a line for each shard whose\n"
    "rerun replaced an earlier run.\n"
    "Exit: 0 merged; 1 the shards do not add up to the job file (or a write failed);\n"
    "2 usage error.\n";

enum : int { kSummary = 256 };

const option kMergeOptions[] = {
    {"help", no_argument, nullptr, 'h'},       {"jobs", required_argument, nullptr, 'J'},
    {"output", required_argument, nullptr, 'o'}, {"summary", required_argument, nullptr, kSummary},
    {nullptr, 0, nullptr, 0},
};

bool write_file(const std::string& path, const std::string& text) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd) return false;
  for (std::size_t done = 0; done < text.size();) {
    ssize_t n = ::write(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace

int merge_main(int argc, char** argv) {
  std::string jobs, output, summary;
  int operands = argc;
  int rc = parse_options(argc, argv, "merge", "hJ:o:", kMergeOptions, [&](int opt, const char* v) -> int {
    switch (opt) {
      case 'h': write_all_fd(1, kMergeHelp); return 0;
      case 'J': jobs = v; return -1;
      case 'o': output = v; return -1;
      case kSummary: summary = v; return -1;
    }
    return 2;
  }, operands);
  if (rc >= 0) return rc;
  if (jobs.empty()) return say("merge: --jobs FILE (the job file the shards ran) is required"), 2;
  std::vector<std::string> results(argv + operands, argv + argc);
  if (results.empty()) return say("merge: no RESULTS files given"), 2;

  int out_fd = 1;
  UniqueFd out;
  std::string tmp = output + ".tmp";
  if (!output.empty()) {
    out.reset(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!out) return say("merge: open %s: %s", tmp.c_str(), std::strerror(errno)), 1;
    out_fd = out.get();
  }
  auto merged = merge_shards(jobs, results, out_fd);
  bool ok = merged && merged->problems.empty();
  if (!merged) say("merge: %s", merged.error().message().c_str());
  else {
    for (const auto& note : merged->notes) say("merge: %s", note.c_str());
    for (const auto& problem : merged->problems) say("merge: %s", problem.c_str());
  }
  if (!output.empty()) {
    if (ok && (fsync(out_fd) != 0 || rename(tmp.c_str(), output.c_str()) != 0)) {
      say("merge: writing %s: %s", output.c_str(), std::strerror(errno));
      ok = false;
    }
    if (!ok) unlink(tmp.c_str());
  }
  if (!ok) {
    if (merged && !merged->problems.empty()) say("merge: nothing written: the shards do not add up to %s", jobs.c_str());
    return 1;
  }
  std::string counts;
  for (const auto& [outcome, n] : merged->outcomes)
    counts += (counts.empty() ? "" : ", ") + outcome + " " + std::to_string(n);
  say("merge: %zu jobs from %u shards%s%s", merged->jobs, merged->shards, counts.empty() ? "" : ": ", counts.c_str());
  if (!summary.empty() && !write_file(summary, merged->summary_json() + "\n")) {
    say("merge: writing %s: %s", summary.c_str(), std::strerror(errno));
    return 1;
  }
  return 0;
}

}  // namespace corral::cli
