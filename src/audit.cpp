#include "corral/audit.hpp"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <nlohmann/json.hpp>

namespace corral {
namespace {

using Json = nlohmann::ordered_json;

// The outcome of a request that got no run (a batch error line's too).
constexpr const char* kNoRun = "error";

std::string now_rfc3339() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  tm utc{};
  gmtime_r(&ts.tv_sec, &utc);
  char buf[40];
  std::size_t n = strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &utc);
  snprintf(buf + n, sizeof buf - n, ".%03ldZ", ts.tv_nsec / 1000000);
  return buf;
}

// Every string in `value`, object keys included, scrubbed.
Json scrubbed(const Json& value, std::span<const std::string> secrets) {
  if (value.is_string()) return scrub_secrets(value.get_ref<const std::string&>(), secrets);
  if (value.is_array()) {
    Json out = Json::array();
    for (const auto& item : value) out.push_back(scrubbed(item, secrets));
    return out;
  }
  if (value.is_object()) {
    Json out = Json::object();
    for (const auto& [key, item] : value.items()) out[scrub_secrets(key, secrets)] = scrubbed(item, secrets);
    return out;
  }
  return value;
}

Json to_json(const AuditRecord& record) {
  Json limits = Json::object();
  for (const auto& info : all_limits())
    if (auto value = record.limits.raw(info.limit)) {
      if (*value % info.scale == 0) limits[std::string(info.name)] = *value / info.scale;  // as in a Result
      else limits[std::string(info.name)] = *record.limits.seconds(info.limit);
    }
  Json enforcement = Json::object();
  for (const auto& [name, how] : record.enforcement) enforcement[name] = how;
  const bool ran = record.outcome != kNoRun;
  Json timings = Json::object();
  if (ran) {
    for (const auto& [name, seconds] : record.timings) timings[name] = seconds;
    if (!timings.contains("exec")) timings["exec"] = nullptr;  // tier container: not measured (fixed keys)
  } else {
    // Nothing ran: every phase of a run, null (the same fixed keys).
    for (const auto& [name, seconds] : timing_fields(SetupTimings{.exec = 0.0})) timings[name] = nullptr;
  }
  Json artifacts = Json::array();
  for (const auto& a : record.artifacts)
    artifacts.push_back(Json{{"name", a.name}, {"bytes", a.bytes}, {"sha256", a.sha256}});

  Json line = Json::object();
  line["schema_version"] = kAuditSchemaVersion;
  line["time"] = record.time;
  line["run_id"] = record.run_id;
  line["id"] = record.id;
  line["line"] = record.line > 0 ? Json(record.line) : Json();
  line["argv"] = record.argv;
  line["route"] = record.route;
  line["provenance"] = record.provenance ? Json(std::string(to_string(*record.provenance))) : Json();
  line["tier"] = record.tier.empty() ? Json() : Json(record.tier);
  line["limits"] = std::move(limits);
  line["enforcement"] = std::move(enforcement);
  line["outcome"] = record.outcome;
  line["error"] = record.error.empty() ? Json() : Json(record.error);
  line["exit_code"] = record.exit_code;
  line["signal"] = record.signal;
  line["wall_seconds"] = record.wall_seconds;
  line["cpu_seconds"] = record.cpu_seconds;
  line["timings"] = std::move(timings);
  line["stdout_sha256"] = record.stdout_sha256;
  line["stderr_sha256"] = record.stderr_sha256;
  line["artifacts"] = std::move(artifacts);
  return line;
}

}  // namespace

AuditRecord audit_record(const Request& request, const Result& result) {
  AuditRecord record;
  record.run_id = result.run_id;
  record.id = request.id;
  // What was exec'd: prepare_run puts a payload's interpreter and file first.
  if (request.payload) {
    record.argv = request.payload->interpreter;
    record.argv.push_back(request.payload->filename);
  }
  record.argv.insert(record.argv.end(), request.argv.begin(), request.argv.end());
  record.route = request.route;
  if (auto provenance = parse_provenance(request.provenance)) record.provenance = *provenance;
  record.tier = result.tier;
  record.limits = result.limits;
  record.enforcement = result.enforcement;
  record.outcome = std::string(to_string(result.outcome));
  record.exit_code = result.exit_code;
  record.signal = result.signal;
  record.wall_seconds = result.wall_seconds;
  record.cpu_seconds = result.cpu_seconds;
  for (auto& [name, seconds] : timing_fields(result.timings)) record.timings[name] = seconds;
  record.stdout_sha256 = result.stdout_capture.sha256;
  record.stderr_sha256 = result.stderr_capture.sha256;
  for (const auto& a : result.artifacts) record.artifacts.push_back({a.name, a.bytes, a.sha256});
  // What failed before exec, as the Result's "error" says it.
  if (result.outcome == Outcome::spawn_failed) record.error = result.detail.substr(0, result.detail.find("; "));
  return record;
}

AuditRecord audit_refusal(std::string reason, const Request* asked, const Ask* ask, long line) {
  AuditRecord record;
  record.outcome = kNoRun;
  record.error = std::move(reason);
  record.line = line;
  if (asked) {
    record.id = asked->id;
    if (asked->payload) {
      record.argv = asked->payload->interpreter;
      record.argv.push_back(asked->payload->filename);
    }
    record.argv.insert(record.argv.end(), asked->argv.begin(), asked->argv.end());
    record.tier = std::string(to_string(asked->tier));
    record.limits = asked->limits;
    record.route = asked->route;
    if (auto provenance = parse_provenance(asked->provenance)) record.provenance = *provenance;
  }
  if (ask) {
    if (!ask->route.empty()) record.route = ask->route;
    if (ask->provenance) record.provenance = *ask->provenance;
  }
  return record;
}

std::string audit_json_line(const AuditRecord& record, std::span<const std::string> secrets) {
  // error_handler_t::replace: a string that is not UTF-8 (an artifact name
  // made of raw bytes) becomes U+FFFD instead of throwing out of dump().
  return scrubbed(to_json(record), secrets).dump(-1, ' ', false, Json::error_handler_t::replace);
}

Status AuditSink::record(AuditRecord record, std::span<const std::string> secrets) {
  if (record.time.empty()) record.time = now_rfc3339();
  std::string line = audit_json_line(record, secrets);
  line += '\n';
  return append_line(line);
}

Expected<FileAuditSink> FileAuditSink::open(const std::string& path) {
  if (path.empty()) return Error::invalid("audit: path is empty");
  int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return Error::from_errno(errno, "audit: open '" + path + "'");
  return FileAuditSink(path, UniqueFd(fd));
}

Status FileAuditSink::append_line(const std::string& line) {
  for (;;) {
    ssize_t n = ::write(fd_.get(), line.data(), line.size());
    if (n < 0 && errno == EINTR) continue;  // nothing was written: retry the whole line
    if (n < 0) return Error::from_errno(errno, "audit: append to '" + path_ + "'");
    if (static_cast<std::size_t>(n) != line.size())
      return Error(EIO, "audit: append to '" + path_ + "': short write (" + std::to_string(n) +
                            " of " + std::to_string(line.size()) + " bytes); the line is torn");
    return {};
  }
}

std::vector<std::string> MemoryAuditSink::lines() const {
  std::lock_guard lock(mutex_);
  return lines_;
}

Status MemoryAuditSink::append_line(const std::string& line) {
  std::lock_guard lock(mutex_);
  lines_.push_back(line);
  return {};
}

}  // namespace corral
