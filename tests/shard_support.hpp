// Job files of mixed jobs for the shard and Slurm tests, and the per-job
// view of a results file that a sharded run must share with one batch.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <tuple>

#include "support.hpp"

namespace corral_test {

// `n` jobs, some of each kind a shard must carry: exits 0-4 (process
// tier), timeouts (wall_seconds 1), container-tier jobs (when `container`),
// a line that is not JSON, a job the door refuses (unknown field), and
// blank lines that are not jobs.
inline std::string mixed_jobs(int n, bool container) {
  using nlohmann::json;
  std::string out;
  for (int k = 0; k < n; ++k) {
    if (k % 50 == 10) out += "\n   \n";  // blank lines: skipped, not counted
    std::string id = "job-" + std::to_string(k);
    json j{{"id", id}};
    if (k == 42) {
      out += "{\"id\": \"broken-42\", \"argv\": [\n";  // malformed: one shard reports it
      continue;
    }
    if (k == 77) {
      out += R"({"id":"refused-77","argv":["true"],"no_such_field":1})" "\n";
      continue;
    }
    if (k % 25 == 3) {
      j["argv"] = {"/bin/sleep", "30"};
      j["limits"] = {{"wall_seconds", 1}};
      j["grace_seconds"] = 0;
    } else if (container && k % 10 == 7) {
      j["tier"] = "container";
      j["argv"] = {"/bin/sh", "-c", "echo box-" + std::to_string(k) + "; exit " + std::to_string(k % 3)};
    } else {
      j["tier"] = k % 2 ? "process" : "none";
      j["argv"] = {"/bin/sh", "-c", "echo out-" + std::to_string(k) + "; exit " + std::to_string(k % 5)};
    }
    out += j.dump() + "\n";
  }
  return out;
}

// What one job's result must be, however the batch was split: the line it
// came from, its id, outcome, exit code and a SHA-256 of its stdout.
using JobView = std::tuple<std::string, std::string, int, std::string>;  // id, outcome, exit, stdout_sha256

// line -> view, of every result line (end records and blanks skipped);
// `dups` counts lines with a second result.
inline std::map<long, JobView> job_views(const std::string& text, int* dups = nullptr) {
  using nlohmann::json;
  std::map<long, JobView> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || j.contains("shard_end")) continue;
    // Keys are always there; null where they do not apply (an error line's
    // exit code, a job without an id).
    auto text_of = [&](const char* key) { return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : ""; };
    JobView v{text_of("id"), text_of("outcome"), j["exit_code"].is_number() ? j["exit_code"].get<int>() : -1,
              text_of("stdout_sha256")};
    if (!out.emplace(j["line"].is_number() ? j["line"].get<long>() : 0L, v).second && dups) ++*dups;
  }
  return out;
}

// The first difference between two views, "" when none.
inline std::string view_difference(const std::map<long, JobView>& want, const std::map<long, JobView>& got) {
  if (want.size() != got.size())
    return "results: " + std::to_string(got.size()) + ", want " + std::to_string(want.size());
  for (const auto& [line, v] : want) {
    auto it = got.find(line);
    if (it == got.end()) return "line " + std::to_string(line) + ": no result";
    if (it->second != v)
      return "line " + std::to_string(line) + ": got " + std::get<0>(it->second) + " " + std::get<1>(it->second) +
             " " + std::to_string(std::get<2>(it->second)) + " " + std::get<3>(it->second) + ", want " +
             std::get<0>(v) + " " + std::get<1>(v) + " " + std::to_string(std::get<2>(v)) + " " + std::get<3>(v);
  }
  return "";
}

}  // namespace corral_test
