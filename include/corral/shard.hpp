// One job file split over N machines, and N shards' results joined again.
//
// corral does not schedule across machines; Slurm job arrays and
// Kubernetes Indexed Jobs do. What corral owns is that the split is
// deterministic and the join is checked: `corral batch --shard I/N` runs
// the jobs of shard I, `corral merge` turns N shard result files into what
// one `corral batch` of the whole file would have written, refusing unless
// every job of the file has exactly one result.
//
// Which shard a job is in: its place in the job file. The k-th job (0-based,
// counting every non-blank line, a line over the --max-line-bytes cap too)
// is in shard k mod N. Not a hash of its id, because
//  - a malformed line may have no id, or one that cannot be read, and must
//    still be reported by exactly one shard;
//  - ids may repeat in a job file, and one batch runs both lines;
//  - the shards are N equal slices (sizes differ by at most one), where a
//    hash of a few hundred ids leaves some shards visibly heavier;
//  - a shard decides without parsing the lines it skips.
// What a hash would buy (a job keeps its shard when the file is edited)
// is moot: every result carries the job file's SHA-256, and merge refuses
// shards of different files.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "corral/status.hpp"

namespace corral {

struct Shard {
  unsigned index = 0;  // 0-based: shards 0/N .. (N-1)/N
  unsigned count = 1;
  bool owns(std::size_t job_ordinal) const { return job_ordinal % count == index; }
  std::string name() const { return std::to_string(index) + "/" + std::to_string(count); }
};

constexpr unsigned kMaxShards = 100000;

// "I/N", or "auto" / "auto/N": the index (and count) from the environment
// (`env` looks a name up; nullptr when unset):
//  - Slurm job array task: SLURM_ARRAY_TASK_ID is the index and
//    SLURM_ARRAY_TASK_COUNT the count; the array must be 0-(N-1) (a task
//    id is a shard index, so a rerun of one task, `--array=2`, needs the
//    count given: auto/N);
//  - Kubernetes Indexed Job pod: JOB_COMPLETION_INDEX is the index; the
//    pod has no count in its environment, so auto/N (N = completions).
// Refused, with what was missing, when neither or both are there.
Expected<Shard> parse_shard(std::string_view text,
                            const std::function<const char*(const char*)>& env);

// A line of a job file that holds no job (skipped by batch, not counted).
bool blank_job_line(std::string_view line);

// SHA-256 (lowercase hex) of everything in a regular file (pread: the
// read position is left where it is). The fingerprint every shard result
// carries.
Expected<std::string> job_file_sha256(int fd);

// A shard's result line: `result_line` (a JSON object) with "shard" and
// "jobs_sha256" added in front.
std::string tag_shard_result(std::string_view result_line, const Shard& shard, std::string_view jobs_sha256);

// The last line of a shard that ran to its end: {"schema_version": 1,
// "shard_end": "I/N",
// "jobs_sha256", "jobs" (results written), "max_line_bytes",
// "finished_at" (unix seconds)}. A stream without it did not finish
// (killed, cancelled, a lost result) and merge will not take it.
std::string shard_end_record(const Shard& shard, std::string_view jobs_sha256, std::size_t jobs,
                             std::size_t max_line_bytes);

struct MergeSummary {
  std::size_t jobs = 0;
  unsigned shards = 0;
  std::string jobs_sha256;
  std::map<std::string, std::size_t> outcomes;  // outcome -> results
  std::vector<std::string> notes;               // a rerun taking an older stream's place, ...
  std::vector<std::string> problems;            // non-empty: nothing was written
  std::string summary_json() const;             // {"jobs","shards","jobs_sha256","outcomes"}
};

// Joins shard result files (each one or more shard streams, in any order)
// against the job file: all shards of one N and of this file's SHA-256,
// every shard present and finished, every job line with exactly one result
// (its id the job's), no result that is not a job. Where one shard has more
// than one finished stream (a rerun), the one that finished last is taken.
// On success writes the results to out_fd in job-file order, without the
// shard fields: the lines one `corral batch` of the file would have written.
// Problems (each naming the shard, file and line) come back in
// MergeSummary::problems with nothing written; an Error is corral's own
// failure (a file it cannot read or write).
Expected<MergeSummary> merge_shards(const std::string& jobs_file, const std::vector<std::string>& result_files,
                                    int out_fd);

}  // namespace corral
