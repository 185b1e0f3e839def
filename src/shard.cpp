// Shard specs, the job file's fingerprint and the shard fields of a
// result stream. The merge is in shard_merge.cpp.
#include "corral/shard.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <optional>

#include "corral/capture.hpp"

namespace corral {
namespace {

std::optional<unsigned long> number(std::string_view s) {
  unsigned long v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

Expected<unsigned> count_of(std::string_view text, std::string_view spec) {
  auto n = number(text);
  if (!n || *n == 0 || *n > kMaxShards)
    return Error::invalid("--shard '" + std::string(spec) + "': the count must be a number from 1 to " +
                          std::to_string(kMaxShards));
  return static_cast<unsigned>(*n);
}

// --shard auto[/N] from the array engine's environment.
Expected<Shard> from_environment(std::string_view spec, std::optional<unsigned> given_count,
                                 const std::function<const char*(const char*)>& env) {
  const char* slurm = env("SLURM_ARRAY_TASK_ID");
  const char* k8s = env("JOB_COMPLETION_INDEX");
  std::string what = "--shard " + std::string(spec);
  if (slurm && k8s)
    return Error::invalid(what + ": both SLURM_ARRAY_TASK_ID and JOB_COMPLETION_INDEX are set; give --shard I/N");
  if (!slurm && !k8s)
    return Error::invalid(what +
                          ": neither SLURM_ARRAY_TASK_ID (a Slurm job array task) nor JOB_COMPLETION_INDEX "
                          "(a Kubernetes Indexed Job pod) is set; give --shard I/N");
  const char* name = slurm ? "SLURM_ARRAY_TASK_ID" : "JOB_COMPLETION_INDEX";
  auto index = number(slurm ? slurm : k8s);
  if (!index) return Error::invalid(what + ": " + name + "='" + (slurm ? slurm : k8s) + "' is not a number");
  Shard s;
  s.index = static_cast<unsigned>(std::min<unsigned long>(*index, kMaxShards));
  if (given_count) {
    s.count = *given_count;
  } else if (k8s) {
    return Error::invalid(what +
                          ": a Kubernetes pod's environment has JOB_COMPLETION_INDEX but not the count; give "
                          "--shard auto/N with N the Job's completions");
  } else {
    // A task id is a shard index, so the array must be exactly 0-(N-1):
    // a rerun of one task (--array=2) or an array 1-4 would otherwise take
    // the wrong slice without a word.
    const char* count = env("SLURM_ARRAY_TASK_COUNT");
    auto n = count ? number(count) : std::nullopt;
    if (!n || *n == 0 || *n > kMaxShards)
      return Error::invalid(what + ": SLURM_ARRAY_TASK_COUNT is not set to a count; give --shard auto/N");
    s.count = static_cast<unsigned>(*n);
    const char* min = env("SLURM_ARRAY_TASK_MIN");
    const char* max = env("SLURM_ARRAY_TASK_MAX");
    const char* step = env("SLURM_ARRAY_TASK_STEP");
    bool contiguous = (!min || number(min) == 0ul) && (!max || number(max) == *n - 1) &&
                      (!step || number(step) == 1ul);
    if (!contiguous)
      return Error::invalid(what + ": the job array is not 0-" + std::to_string(*n - 1) + " (SLURM_ARRAY_TASK_MIN=" +
                            (min ? min : "") + ", MAX=" + (max ? max : "") + ", STEP=" + (step ? step : "") +
                            ", COUNT=" + count +
                            "); a task id is the shard index: submit --array=0-(N-1), or give --shard auto/N "
                            "(a rerun of one task)");
  }
  if (s.index >= s.count)
    return Error::invalid(what + ": " + name + "=" + std::to_string(*index) + " is not below the count " +
                          std::to_string(s.count) + " (shards are 0/" + std::to_string(s.count) + " to " +
                          std::to_string(s.count - 1) + "/" + std::to_string(s.count) + ")");
  return s;
}

std::string json_string(std::string_view s) {
  // The values put here are digits, '/' and hex: no escaping needed, but
  // keep it correct for anything.
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace

Expected<Shard> parse_shard(std::string_view text, const std::function<const char*(const char*)>& env) {
  auto slash = text.find('/');
  std::string_view head = text.substr(0, slash);
  std::optional<unsigned> count;
  if (slash != std::string_view::npos) {
    auto n = count_of(text.substr(slash + 1), text);
    if (!n) return std::move(n).error();
    count = *n;
  }
  if (head == "auto") return from_environment(text, count, env);
  auto index = number(head);
  if (!index || !count)
    return Error::invalid("--shard '" + std::string(text) + "': expected I/N (0-based: 0/4 .. 3/4), auto or auto/N");
  if (*index >= *count)
    return Error::invalid("--shard '" + std::string(text) + "': the index must be below the count (0/" +
                          std::to_string(*count) + " .. " + std::to_string(*count - 1) + "/" +
                          std::to_string(*count) + ")");
  return Shard{static_cast<unsigned>(*index), *count};
}

bool blank_job_line(std::string_view line) { return line.find_first_not_of(" \t\r") == std::string_view::npos; }

Expected<std::string> job_file_sha256(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return Error::from_errno(errno, "fstat the job file");
  if (!S_ISREG(st.st_mode)) return Error::invalid("the job file is not a regular file");
  Sha256 hash;
  char buf[64 * 1024];
  off_t off = 0;
  for (;;) {
    ssize_t n = pread(fd, buf, sizeof buf, off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error::from_errno(errno, "read the job file");
    if (n == 0) break;
    hash.update(std::string_view(buf, static_cast<std::size_t>(n)));
    off += n;
  }
  std::string hex = hash.hex_digest();
  if (hex.empty()) return Error::invalid("SHA-256 of the job file: libcrypto failed");
  return hex;
}

std::string tag_shard_result(std::string_view result_line, const Shard& shard, std::string_view jobs_sha256) {
  // Spliced after the '{' of a line corral wrote itself: cheaper than a
  // parse and a dump of a result that may hold 16 MiB of output, and merge
  // takes the fields out again.
  std::string out = "{\"shard\":" + json_string(shard.name()) + ",\"jobs_sha256\":" + json_string(jobs_sha256);
  std::string_view rest = result_line.substr(result_line.find('{') + 1);
  if (rest.find_first_not_of(" ") != std::string_view::npos && rest[rest.find_first_not_of(" ")] != '}') out += ',';
  out += rest;
  return out;
}

std::string shard_end_record(const Shard& shard, std::string_view jobs_sha256, std::size_t jobs,
                             std::size_t max_line_bytes) {
  double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  char at[64];
  std::snprintf(at, sizeof at, "%.6f", now);
  return "{\"schema_version\":1,\"shard_end\":" + json_string(shard.name()) + ",\"jobs_sha256\":" + json_string(jobs_sha256) +
         ",\"jobs\":" + std::to_string(jobs) + ",\"max_line_bytes\":" + std::to_string(max_line_bytes) +
         ",\"finished_at\":" + at + "}";
}

}  // namespace corral
