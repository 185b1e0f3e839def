// corral batch's command line: its options, --help and the parsed result.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "corral/door.hpp"
#include "corral/shard.hpp"

namespace corral::cli {

// The default cap on one job line. A job carries its program's argv, env,
// stdin and inline input bytes; 16 MiB is the default stdout_bytes cap too,
// so a job can hand a program as much as it may print. Reading, parsing and
// copying one line costs about four times its size at its peak (the line,
// the JSON tree, the Request), so the cap bounds a batch's memory for input
// at ~64 MiB however its input was made. Larger payloads belong in a file
// named by an input's host_path; --max-line-bytes raises the cap.
inline constexpr std::size_t kDefaultMaxLineBytes = 16u << 20;

struct BatchOptions {
  std::size_t max_line_bytes = kDefaultMaxLineBytes;
  std::size_t parallel = 0;  // 0: CPUs x 4, and CPU-limited jobs at most CPUs at once
  std::string file;          // "" or "-": stdin
  std::string audit;         // --audit FILE: one line per job
  std::string routes;        // --routes FILE
  bool untrusted = false;
  bool keep_sessions = false;
  DoorPolicy policy;
  std::optional<Shard> shard;  // --shard: only this slice of FILE
  std::string jobs_sha256;     // FILE's fingerprint, with --shard
};

// Returns -1 to go on, or the exit code (0 after --help, 2 for a usage error).
int parse_batch_options(int argc, char** argv, BatchOptions& o);

}  // namespace corral::cli
